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

import contextlib
import copy
import functools
import io
import random
import re
import time
import tokenize
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..outcomes import Outcome, OutcomeKind
from ..protocol import ExecResult
from ..sanitize import pattern_bans
from . import runner
from .records import (
    PYTHON,
    Bans,
    Harness,
    RunRequest,
    last_line,
    read_records,
    runner_request,
    unfinished,
)

if TYPE_CHECKING:
    from .stdio import StdioTests

__all__ = [
    "AssertTests",
    "ExecHarness",
    "FunctionTask",
    "FunctionTests",
    "Harness",
    "RunRequest",
    "StdioTests",
    "strict_equal",
]


def __getattr__(name: str) -> Any:
    """:class:`StdioTests` on first use: its module imports the contest checkers, which read
    outputs with the runner's tokens (from this package), so that importing it here would
    make every import of the checkers that comes first a cycle."""
    if name == "StdioTests":
        from .stdio import StdioTests

        return StdioTests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ExecHarness:
    """Pass when the program runs to completion with exit status 0 (no tests).

    Isolated mode (``-I``), as the test runner: the working directory is not on ``sys.path``,
    so a module an earlier completion left there cannot run inside this one."""

    judge_waits: ClassVar[bool] = False
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
            return Outcome(OutcomeKind.ERROR, 0, 0, last_line(result.stderr), result.duration)
        return Outcome(OutcomeKind.PASSED, 0, 0, "", result.duration)


@dataclass(frozen=True)
class AssertTests:
    """MBPP/HumanEval-style test snippets run after the code; each snippet counts on its own.

    Snippets run in the judge process with the candidate's functions as proxies (their
    results cross as plain data), after ``setup`` (imports the tests need).
    """

    judge_waits: ClassVar[bool] = False
    tests: Sequence[str]
    setup: str = ""
    timeout: float = 5.0
    """Per test (and, twice over, for loading the code in the test's process): CPU seconds of
    that process, with a wall-clock backstop of ``runner.WALL_FACTOR`` times as many seconds."""
    prompt: str | None = None
    """The code the completions continue (a function-body continuation): the names it defines
    other than the function it leaves open are the prompt's, and the tests take them from it
    (HumanEval/32's ``poly``), never from the candidate."""
    bans: Bans = ((), (), ())
    """Names, attributes and modules the code may not use, enforced as it runs (a test that
    reaches one makes the outcome ``banned``); the AST check before the run is the plan's."""
    stop_at_first_failure: bool = False
    """For all-or-nothing scoring: no test runs after one that did not pass (those left out
    count as failed)."""

    def request(self, code: str) -> RunRequest:
        job: dict[str, Any] = {"kind": "asserts", "timeout": self.timeout}
        job["tests"] = list(self.tests)
        if self.stop_at_first_failure:
            job["stop_at_first_failure"] = True
        if self.prompt is not None:
            job["prompt"] = prompt_definitions(self.prompt)
        return runner_request({"code": code, "setup": self.setup}, job, bans=self.bans)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.tests)
        records = read_records(result, request)
        early = unfinished(result, records, total)
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


@functools.lru_cache(maxsize=256)
def prompt_definitions(prompt: str) -> dict[str, str] | None:
    """What a continuation prompt defines for the tests: its code before the definition the
    completion completes (the last top-level ``def`` or ``class``, with its decorators), found
    by tokens, and that definition's name; None where it defines nothing before it, or is not
    such code."""
    lines = io.StringIO(prompt).readlines()  # as the tokenizer reads them
    starts: list[tuple[int, str]] = []  # each top-level statement's line and first token
    fresh = True
    with contextlib.suppress(tokenize.TokenError, SyntaxError):
        for token in tokenize.generate_tokens(io.StringIO(prompt).readline):
            if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if fresh and token.start[1] == 0 and token.type != tokenize.ENDMARKER:
                starts.append((token.start[0], token.string))
            fresh = token.type == tokenize.NEWLINE
    opened = [i for i, (_, first) in enumerate(starts) if first in ("def", "class", "async")]
    if not opened:
        return None
    at = opened[-1]
    while at and starts[at - 1][1] == "@":
        at -= 1
    name = re.match(
        r"(?:async\s+)?(?:def|class)\s+(\w+)", "".join(lines[starts[opened[-1]][0] - 1 :])
    )
    code = "".join(lines[: starts[at][0] - 1])
    if name is None or not code.strip():
        return None
    try:
        compile(code, "<prompt>", "exec")
    except (SyntaxError, ValueError):
        return None
    return {"code": code, "completes": name.group(1)}


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


def plain_alike(value: Any, expected: Any) -> bool:
    """Whether ``value`` (a record's, as JSON read it) and ``expected`` are of one plain type
    (JSON's own: it decodes as itself), or lists of the same length whose items pairwise
    are: ``==`` then says what :func:`strict_equal` would."""
    plain = runner._PLAIN
    t = type(value)
    if t is not type(expected):
        return False
    if t in plain:
        return True
    if t is not list or len(value) != len(expected):
        return False
    types = list(map(type, value))  # no Python-level step per item: lists may be long
    return types == list(map(type, expected)) and plain.issuperset(types)


def returned(record: dict[str, Any], expected: Any, namedtuples: runner.NamedTuples) -> bool:
    """Whether a call's record holds the expected value: compared as itself, or (a long value)
    by digest, which strict comparison would also accept only if ``expected`` equals itself
    through the codec (no NaN in it, say). ``namedtuples``: the run's own (``runner.decode``)."""
    if "digest" not in record:
        value = record.get("value")
        if plain_alike(value, expected):  # decodes as itself, and == is strict equality here
            return bool(value == expected)
        return strict_equal(runner.decode(value, namedtuples=namedtuples), expected)
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

    judge_waits: ClassVar[bool] = False
    func_name: str
    args: Sequence[tuple[Any, ...]]
    expected: Sequence[Any]
    timeout: float = 5.0
    bans: Bans = ((), (), ())
    """As :attr:`AssertTests.bans`."""
    stop_at_first_failure: bool = False
    """For all-or-nothing scoring: no call is judged after one that did not return a value
    (the runner never sees the expected values, so a wrong value does not stop it; calls sent
    to the process with it are dropped with it); those left out count as failed."""
    reference_seconds: float = 0.0
    """As :attr:`~sandboxkit.harness.inputs.InputTests.reference_seconds`."""

    @functools.cached_property
    def job(self) -> dict[str, Any]:
        """The runner's job, its calls' JSON texts (:func:`runner.call_texts`) made once for
        every completion judged with this harness: a row's thousands of calls are most of the
        host's work on a request."""
        job: dict[str, Any] = {"kind": "calls", "timeout": self.timeout}
        job["calls"] = runner.call_texts(self.func_name, self.args)
        if self.stop_at_first_failure:
            job["stop_at_first_failure"] = True
        return job

    def request(self, code: str) -> RunRequest:
        return runner_request({"code": code, "setup": ""}, self.job, bans=self.bans)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.args)
        records = read_records(result, request)
        early = unfinished(result, records, total)
        if early is not None:
            return early
        passed = 0
        detail = ""
        missing = {"status": "missing"}
        namedtuples = runner.NamedTuples()  # this run's, as every budget its values spend
        for i, expected in enumerate(self.expected):
            record = records.tests.get(i, missing)
            status = record.get("status")
            if status == "timeout" or (status == "missing" and result.timed_out):
                said = f"test {i}: {record.get('detail', 'timed out')}"
                return Outcome(OutcomeKind.TIMEOUT, passed, total, said, result.duration)
            if status == "returned":
                try:
                    ok = returned(record, expected, namedtuples)
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

    def bans(self) -> Bans:
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
        start = time.thread_time()
        expected = [self.reference(*copy.deepcopy(a)) for a in args]
        seconds = time.thread_time() - start
        return FunctionTests(
            self.func_name, args, expected, timeout, self.bans(), reference_seconds=seconds
        )
