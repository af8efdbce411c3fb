"""Harnesses: turn (code, tests) into one sandbox run, and its result into an :class:`Outcome`.

Every harness but :class:`ExecHarness` runs the trusted runner (``runner.py``) in the sandbox,
which keeps the candidate out of the judging process (see its docstring for the threat model).
The host decides the verdict from the runner's records only, and counts a record only when
it carries the seal of the exec's key (``RunRequest.key``, which only the runner receives);
expected values for function and stdin/stdout tests never enter the sandbox at all.

Defended: early exit with status 0 (``sys.exit``, ``os._exit``, ``SystemExit``), lying
``__eq__``/``__hash__`` and subclasses of builtins, printed fake results or verdicts,
monkeypatching builtins, the harness or the test functions, reading or rewriting test files
(there are none), killing the judge. Not defended: a candidate that special-cases the visible
test inputs (a property of the dataset), guessing an expected value, and anything a test lets
through by itself (``assert f(x)`` passes any truthy result).
"""

from __future__ import annotations

import copy
import hmac
import json
import random
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..outcomes import Outcome, OutcomeKind
from ..protocol import ExecResult
from ..sanitize import pattern_bans
from . import runner

PYTHON = "python3"
RUNNER_SOURCE = Path(runner.__file__).read_text()
_START_SLACK = 15.0
"""Seconds added to every run's deadline for interpreter start-up on a loaded machine."""


@dataclass(frozen=True)
class RunRequest:
    argv: list[str]
    stdin: bytes
    timeout: float
    key: bytes = b""
    """The key the runner seals its records with (fresh per request; none without a runner)."""


class Harness(Protocol):
    def request(self, code: str) -> RunRequest: ...

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        """The outcome of ``result``, the run of ``request``."""


def _frames(*objects: object) -> bytes:
    return b"".join(runner.frame(o) for o in objects)


def _runner_request(first: dict[str, Any], job: dict[str, Any], tests: int) -> RunRequest:
    timeout = float(job["timeout"])
    key = secrets.token_bytes(runner.KEY_BYTES)
    return RunRequest(
        argv=[PYTHON, "-I", "-c", RUNNER_SOURCE],
        stdin=key.hex().encode() + b"\n" + _frames(first, job),
        timeout=timeout * runner.WALL_FACTOR * (tests + 2) + _START_SLACK,
        key=key,
    )


@dataclass
class _Records:
    load_error: str | None = None
    load_timeout: bool = False
    tests: dict[int, dict[str, Any]] = field(default_factory=dict)
    done: bool = False
    foreign: bool = False
    """Whether a whole line was not the runner's."""


def _records(result: ExecResult, request: RunRequest) -> _Records:
    """The runner's records: lines sealed with the request's key (whatever else reached the
    stream is ignored)."""
    found = _Records()
    lines = result.stdout.splitlines()
    for i, sealed in enumerate(lines):
        mac, _, line = sealed.partition(" ")
        if not hmac.compare_digest(mac, runner.seal(request.key, line)):
            found.foreign = found.foreign or not (result.truncated and i == len(lines) - 1)
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "load_error" in record:
            found.load_error = str(record["load_error"])
            found.load_timeout = bool(record.get("timeout"))
        elif isinstance(record.get("test"), int):
            found.tests[record["test"]] = record
        elif record.get("done") is True:
            found.done = True
    return found


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _unfinished(result: ExecResult, records: _Records, total: int) -> Outcome | None:
    """The outcome when the runner never got to judge: load failures and killed runs."""
    if records.load_error is not None:
        kind = OutcomeKind.TIMEOUT if records.load_timeout else OutcomeKind.ERROR
        return Outcome(kind, 0, total, records.load_error, result.duration)
    if result.truncated and not records.done and not records.foreign:
        # Only the runner wrote, and its records did not all fit: not the candidate's doing.
        detail = "the test runner's records went past the exec's output cap"
        return Outcome(OutcomeKind.INFRA, 0, total, detail, result.duration)
    if not records.done and not records.tests:
        if result.timed_out:
            return Outcome(OutcomeKind.TIMEOUT, 0, total, "timed out", result.duration)
        detail = _last_line(result.stderr) or f"the test runner exited with {result.returncode}"
        return Outcome(OutcomeKind.ERROR, 0, total, detail, result.duration)
    return None


@dataclass(frozen=True)
class ExecHarness:
    """Pass when the program runs to completion with exit status 0 (no tests).

    Isolated mode (``-I``), as the test runner: the working directory is not on ``sys.path``,
    so a module an earlier completion left there cannot run inside this one."""

    timeout: float = 10.0

    def request(self, code: str) -> RunRequest:
        return RunRequest(
            [
                PYTHON,
                "-I",
                "-c",
                "import sys; exec(compile(sys.stdin.read(), "
                "'<candidate>', 'exec'), {'__name__': '__main__'})",
            ],
            code.encode(),
            self.timeout,
        )

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        if result.timed_out:
            return Outcome(OutcomeKind.TIMEOUT, 0, 0, "timed out", result.duration)
        if result.returncode != 0:
            return Outcome(OutcomeKind.ERROR, 0, 0, _last_line(result.stderr), result.duration)
        return Outcome(OutcomeKind.PASSED, 0, 0, "", result.duration)


@dataclass(frozen=True)
class AssertTests:
    """MBPP/HumanEval-style test snippets run after the code; each snippet counts on its own.

    Snippets run in the judge process with the candidate's functions as proxies (their
    results cross as plain data), after ``setup`` (imports the tests need).
    """

    tests: Sequence[str]
    setup: str = ""
    timeout: float = 5.0
    """Per test (and for loading the code): CPU seconds of the test's process, with a
    wall-clock backstop of ``runner.WALL_FACTOR`` times as many seconds."""

    def request(self, code: str) -> RunRequest:
        job = {"kind": "asserts", "timeout": self.timeout, "tests": list(self.tests)}
        return _runner_request({"code": code, "setup": self.setup}, job, len(self.tests))

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.tests)
        records = _records(result, request)
        early = _unfinished(result, records, total)
        if early is not None:
            return early
        statuses = [records.tests.get(i, {}).get("status", "missing") for i in range(total)]
        passed = statuses.count("passed")
        failures = [
            records.tests[i] for i, s in enumerate(statuses) if s != "passed" and i in records.tests
        ]
        detail = str(failures[0].get("detail", failures[0]["status"])) if failures else ""
        if passed == total:
            kind = OutcomeKind.PASSED
        elif passed == 0 and (result.timed_out or all(s == "timeout" for s in statuses)):
            kind = OutcomeKind.TIMEOUT
        else:
            kind = OutcomeKind.FAILED
        if not detail and passed < total:
            detail = "the test runner was stopped before the end"
        return Outcome(kind, passed, total, detail, result.duration)


def strict_equal(a: Any, b: Any) -> bool:
    """Equal in type and value, recursively: ``1 != 1.0 != True``, ``[1] != (1,)``. Namedtuples
    (whose classes differ on each end) are equal in type when their names and fields are."""
    if type(a) is not type(b):
        named = _namedtuple_type(a)
        same = named is not None and named == _namedtuple_type(b)
        return same and strict_equal(tuple(a), tuple(b))
    if isinstance(a, (list, tuple, deque)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):  # an OrderedDict's order counts, as in ``==``
        return a == b and a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        return a == b and {(type(x), x) for x in a} == {(type(y), y) for y in b}
    return bool(a == b)


def _namedtuple_type(value: Any) -> tuple[str, tuple[str, ...]] | None:
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and type(fields) is tuple:
        return type(value).__name__, fields
    return None


def _returned(record: dict[str, Any], expected: Any) -> bool:
    """Whether a call's record holds the expected value: compared as itself, or (a long value)
    by digest, which strict comparison would also accept only if ``expected`` equals itself
    through the codec (no NaN in it, say)."""
    if "digest" not in record:
        return strict_equal(runner.decode(record.get("value")), expected)
    data = runner.encode(expected)
    return record["digest"] == runner.value_digest(data) and strict_equal(
        runner.decode(data), expected
    )


@dataclass(frozen=True)
class FunctionTests:
    """Call ``func_name`` on each argument tuple; compare with ``expected`` on the host.

    Daytona's rule applies in :meth:`judge`: a load error or any timeout makes the whole
    outcome an error/timeout; otherwise each call passes when its result is strictly equal to
    the expected one (an exception fails that call only).
    """

    func_name: str
    args: Sequence[tuple[Any, ...]]
    expected: Sequence[Any]
    timeout: float = 5.0

    def request(self, code: str) -> RunRequest:
        calls = [[self.func_name, runner.encode(tuple(a))] for a in self.args]
        job = {"kind": "calls", "timeout": self.timeout, "calls": calls}
        return _runner_request({"code": code, "setup": ""}, job, len(calls))

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.args)
        records = _records(result, request)
        early = _unfinished(result, records, total)
        if early is not None:
            return early
        passed = 0
        detail = ""
        for i, expected in enumerate(self.expected):
            record = records.tests.get(i, {"status": "missing"})
            status = record.get("status")
            if status == "timeout" or (status == "missing" and result.timed_out):
                said = f"test {i}: {record.get('detail', 'timed out')}"
                return Outcome(OutcomeKind.TIMEOUT, passed, total, said, result.duration)
            if status == "returned":
                try:
                    ok = _returned(record, expected)
                except runner.CodecError as exc:
                    ok, detail = False, detail or str(exc)
                passed += ok
                if not ok and not detail:
                    detail = f"test {i}: wrong result"
            elif not detail:
                detail = f"test {i}: {record.get('detail', status)}"
        kind = OutcomeKind.PASSED if passed == total else OutcomeKind.FAILED
        return Outcome(kind, passed, total, detail, result.duration)


@dataclass(frozen=True)
class FunctionTask:
    """A Daytona-style task: the prompt the model continues, the function it must write, test
    inputs as expressions (each evaluated, on the host, to one argument; ``random`` is a
    seeded generator there), and a trusted reference implementation.

    ``banned_patterns`` are Daytona's substrings; unless ``derive_bans`` is off, what they name
    (``sorted(``: the name, ``.sort(``: the attribute, ``import m``: the module; see
    :func:`~sandboxkit.sanitize.pattern_bans`) is also banned through the AST check, which sees
    aliases, computed ``getattr`` and ``eval``. ``banned_names``, ``banned_attributes`` and
    ``banned_modules`` name constructs for that check directly."""

    prompt: str
    func_name: str
    tests: Sequence[str]
    reference: Callable[..., Any]
    banned_patterns: Sequence[str] = ()
    seed: int = 0
    banned_names: Sequence[str] = ()
    banned_attributes: Sequence[str] = ()
    banned_modules: Sequence[str] = ()
    derive_bans: bool = True

    def bans(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(names, attributes, modules)`` for the AST check: the explicit ones and derived."""
        derived = pattern_bans(self.banned_patterns) if self.derive_bans else ((), (), ())
        return (
            (*self.banned_names, *derived[0]),
            (*self.banned_attributes, *derived[1]),
            (*self.banned_modules, *derived[2]),
        )

    def harness(self, timeout: float = 5.0) -> FunctionTests:
        rng = random.Random(self.seed)
        args = [(eval(expr, {"random": rng, "__builtins__": __builtins__}),) for expr in self.tests]
        expected = [self.reference(*copy.deepcopy(a)) for a in args]
        return FunctionTests(self.func_name, args, expected, timeout)


@dataclass(frozen=True)
class StdioTests:
    """Competitive-programming tests: the code is a program reading stdin; its stdout must
    match the expected output up to whitespace (line ends, runs of spaces, blank lines), and it
    must exit with status 0, as on a contest judge (any other status, ``sys.exit(3)`` or an
    uncaught exception, is a runtime error whatever it printed).

    Each program ends as ``python3`` ends a script: its non-daemon threads are joined (a
    thread that never ends runs into the time limit), its ``atexit`` handlers run and its
    streams are flushed; the main thread may use a stack of up to ``runner.STACK_BYTES``."""

    cases: Sequence[tuple[str, str]]
    """(input, expected output) pairs; expected outputs stay on the host."""
    timeout: float = 5.0
    output_cap: int = 1 << 20

    def request(self, code: str) -> RunRequest:
        job = {
            "kind": "stdio",
            "timeout": self.timeout,
            "inputs": [i for i, _ in self.cases],
            "output_cap": self.output_cap,
        }
        first = {"code": code, "setup": "", "kind": "stdio"}
        return _runner_request(first, job, len(self.cases))

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.cases)
        records = _records(result, request)
        early = _unfinished(result, records, total)
        if early is not None:
            return early
        passed, timeouts, detail = 0, 0, ""
        scores = []
        for i, (_, expected) in enumerate(self.cases):
            record = records.tests.get(i, {"status": "missing"})
            exited = record.get("status") == "exited"
            ok = (
                exited
                and record.get("exit") == 0
                and record.get("digest") == runner.output_digest(expected)
            )
            scores.append(1.0 if ok else 0.0)
            if record.get("status") == "timeout":
                timeouts += 1
                detail = detail or f"test {i}: {record.get('detail', 'timed out')}"
            elif exited and record.get("exit") != 0:
                status = record.get("exit")
                said = (
                    "no exit status"
                    if not isinstance(status, int)
                    else f"killed by signal {-status}"
                    if status < 0
                    else f"exit status {status}"
                )
                detail = detail or f"test {i}: runtime error ({said})"
            elif ok:
                passed += 1
            else:
                detail = detail or f"test {i}: wrong output"
        if passed == total:
            kind = OutcomeKind.PASSED
        elif passed == 0 and timeouts == total:
            kind = OutcomeKind.TIMEOUT
        else:
            kind = OutcomeKind.FAILED
        return Outcome(kind, passed, total, detail, result.duration, tuple(scores))
