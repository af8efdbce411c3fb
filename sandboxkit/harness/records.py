"""What every harness shares: the request for one sandbox run, and reading the trusted
runner's sealed records out of its result."""

from __future__ import annotations

import ast
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..outcomes import Outcome, OutcomeKind
from ..protocol import ExecResult
from . import runner

PYTHON = "python3"
Bans = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""What a task bans: names, attributes, modules (as :func:`~sandboxkit.sanitize.find_banned`)."""


def without_notes(source: str) -> str:
    """``source`` with each string that stands alone as a statement (docstrings) made
    ``""``: the same program, in fewer bytes. The runner travels as one command-line argument
    (``-c``; to the warm template JSON-escaped too), and Linux takes at most 128 KiB in one
    (``MAX_ARG_STRLEN``): its explanations stay in this package, not in every exec."""
    text = source.encode()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    notes: list[ast.expr] = []
    blocks: list[ast.AST] = [ast.parse(source)]
    while blocks:  # statements only: no string standing alone is inside an expression
        for node in ast.iter_child_nodes(blocks.pop()):
            if isinstance(node, ast.Expr) and type(getattr(node.value, "value", None)) is str:
                notes.append(node.value)
            elif isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):
                blocks.append(node)
    kept, at = [], 0
    for note in sorted(notes, key=lambda n: (n.lineno, n.col_offset)):
        assert note.end_lineno is not None and note.end_col_offset is not None
        start = starts[note.lineno - 1] + note.col_offset  # offsets in UTF-8 bytes
        kept += [text[at:start], b'""']
        at = starts[note.end_lineno - 1] + note.end_col_offset
    return b"".join([*kept, text[at:]]).decode()


RUNNER_SOURCE = without_notes(Path(runner.__file__).read_text())
START_SLACK = 15.0
"""Seconds added to every run's deadline for interpreter start-up on a loaded machine."""


@dataclass(frozen=True)
class RunRequest:
    argv: list[str]
    stdin: bytes
    timeout: float
    key: bytes = b""
    """The key the runner seals its records with (fresh per request; none without a runner)."""
    allowance: float | None = None
    """Seconds of wall-clock time an honest program within its CPU limits could need (loading,
    every test at its CPU limit, start-up slack); running longer takes sleeping, blocking or a
    starved machine. None: ``timeout``. A batch deadline judges a run by it."""


class Harness(Protocol):
    """What runs a completion and judges its run. A harness whose ``judge`` only reads the
    result (it runs nothing and waits on nothing) says so with a class attribute
    ``judge_waits = False``, and is judged on the event loop; any other in a thread. One that
    knows its run's expected length (its reference's time on the host) says so as
    ``reference_seconds``: a batch starts its longest runs first."""

    def request(self, code: str) -> RunRequest: ...

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        """The outcome of ``result``, the run of ``request``."""


class Unjudgeable(ValueError):
    """A dataset row the runner cannot judge (a test over the frame limit, more tests than
    their records fit the output cap): the row's problem, never a completion's, so its
    outcome is ``unsupported``, saying why."""


def frames(*objects: object) -> bytes:
    return b"".join(runner.frame(o) for o in objects)


def runner_request(
    first: dict[str, Any],
    job: dict[str, Any],
    *,
    extra: tuple[float, float] = (0.0, 0.0),
    bans: Bans = ((), (), ()),
) -> RunRequest:
    """The runner's run of ``job``, whose tests (``runner.ITEMS``) cross one frame each;
    ``extra`` (CPU, wall-clock) seconds on top of the tests' time (a compile). ``bans``
    (names, attributes, modules) are enforced in the candidate's process too. Raises
    :class:`Unjudgeable` where the row's part cannot be sent."""
    if any(bans):
        first = {**first, "bans": dict(zip(runner.BAN_KEYS, map(list, bans), strict=True))}
    items = runner.ITEMS[job["kind"]]
    tests = job[items]
    if len(tests) > runner.MAX_TESTS:
        raise Unjudgeable(
            f"the row has {len(tests)} tests, more than the {runner.MAX_TESTS} whose records"
            " one exec's output can hold"
        )
    sent = []
    for i, test in enumerate([*tests, *job.get("expect", ())]):
        try:  # a test in bytes is its JSON text already (``runner.call_texts``)
            sent.append(runner.framed(test) if type(test) is bytes else runner.frame(test))
        except runner.CodecError as exc:
            what = f"test {i}" if i < len(tests) else f"expected result {i - len(tests)}"
            raise Unjudgeable(f"the row's {what} cannot be sent to the runner: {exc}") from None
    per_test = float(job.get("wall") or float(job["timeout"]) * runner.WALL_FACTOR)
    key = secrets.token_bytes(runner.KEY_BYTES)
    head = {k: v for k, v in job.items() if k not in (items, "expect")}
    head["count"] = len(tests)
    if "expect" in job:
        head["expect"] = True
    try:  # the code is at most a completion's size (a few MB encoded): the rest is the row's
        head_frames = frames(first, head)
    except runner.CodecError as exc:
        raise Unjudgeable(f"the row's setup or prompt cannot be sent: {exc}") from None
    return RunRequest(
        argv=[PYTHON, "-I", "-c", RUNNER_SOURCE],
        stdin=b"".join([key.hex().encode(), b"\n", head_frames, *sent]),
        timeout=per_test * (len(tests) + 2) + START_SLACK + extra[1],
        key=key,
        # Loading may take twice a test's CPU limit, each test its CPU limit.
        allowance=float(job["timeout"]) * (len(tests) + 2) + START_SLACK + extra[0],
    )


@dataclass
class Records:
    load_error: str | None = None
    load_timeout: bool = False
    banned: bool = False
    """Whether loading the code reached something its task bans."""
    build: str = ""
    """Why a program could not be built: ``compile`` (its code), ``toolchain`` or ``sandbox``
    (the sandbox's: no compiler, a full disk; only the runner finds these, before anything of
    the candidate's runs)."""
    tests: dict[int, dict[str, Any]] = field(default_factory=dict)
    cut: bool = False
    """Whether the runner stopped the run at the wall-clock time the host gave it (a batch
    deadline), the program keeping the pace its tests' CPU limits allow."""
    done: bool = False
    foreign: bool = False
    """Whether a whole line was not the runner's."""


def read_records(result: ExecResult, request: RunRequest) -> Records:
    """The runner's records: lines of them, each sealed with the request's key (whatever else
    reached the stream is ignored)."""
    found = Records()
    lines = result.stdout.splitlines()
    for i, sealed in enumerate(lines):
        mac, _, line = sealed.partition(" ")
        if not hmac.compare_digest(mac, runner.seal(request.key, line)):
            found.foreign = found.foreign or not (result.truncated and i == len(lines) - 1)
            continue
        try:
            held = json.loads(line)["records"]
        except (ValueError, TypeError, KeyError):
            continue
        for record in held if isinstance(held, list) else ():
            take_record(found, record)
    return found


def take_record(found: Records, record: Any) -> None:
    """One of the runner's records, into ``found``; one of ``values`` (the calls from
    ``test`` on that returned them, one after another) as a record of each, and one that
    passed ``through`` a later test as one of each test from its own to that one."""
    if isinstance(record, dict):
        if "load_error" in record:
            found.load_error = str(record["load_error"])
            found.load_timeout = bool(record.get("timeout"))
            found.banned = bool(record.get("banned"))
            found.build = str(record.get("build") or "")
        elif isinstance(record.get("test"), int):
            first, values = record["test"], record.get("values")
            through = record.get("through")
            if isinstance(values, list):
                for at, value in enumerate(values, first):
                    found.tests[at] = {"test": at, "status": "returned", "value": value}
            elif isinstance(through, int):
                for at in range(first, min(through, runner.MAX_TESTS) + 1):
                    found.tests[at] = {"test": at, "status": "passed"}
            else:
                found.tests[first] = record
        elif record.get("cut") is True:
            found.cut = True
        elif record.get("done") is True:
            found.done = True


def spent(result: ExecResult, request: RunRequest) -> str | None:
    """Why the sandbox can build no more programs, as the runner found before anything of
    this one ran (its disk is full: files earlier programs there left); None when it can. A
    pool replaces such a sandbox and runs the completion again on another. No process that
    ran candidate code can say this: the runner writes ``build`` itself, and seals it."""
    # A look for the record's text first (json.dumps's spacing, as the runner writes it):
    # the records are read and checked only when it is there.
    if not request.key or '"build": "sandbox"' not in result.stdout:
        return None
    records = read_records(result, request)
    return records.load_error if records.build == "sandbox" else None


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def unfinished(result: ExecResult, records: Records, total: int) -> Outcome | None:
    """The outcome when the runner never got to judge (load failures and killed runs), or when
    the code reached something its task bans, loading or in any test."""
    banned = [r for r in records.tests.values() if r.get("status") == "banned"]
    if records.banned or banned:
        detail = str(banned[0].get("detail", "")) if banned else str(records.load_error)
        return Outcome(OutcomeKind.BANNED, 0, total, detail, result.duration)
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
        detail = last_line(result.stderr) or f"the test runner exited with {result.returncode}"
        return Outcome(OutcomeKind.ERROR, 0, total, detail, result.duration)
    return None


def tests_kind(passed: int, timeouts: int, total: int) -> OutcomeKind:
    """A run judged test by test: passed when all tests pass, a timeout when all ran out of
    time, else failed."""
    if passed == total:
        return OutcomeKind.PASSED
    return OutcomeKind.TIMEOUT if timeouts == total else OutcomeKind.FAILED


def judge_returns(
    result: ExecResult,
    request: RunRequest,
    total: int,
    passes: Callable[[int, dict[str, Any]], bool] | None = None,
) -> Outcome:
    """The outcome of a calls job judged test by test, each scored on its own
    (``test_scores``): a test passes when the runner judged it ``passed`` (it held the
    expected results), or when its call returned and ``passes`` (asked in order, once per
    returned call, with the test's index and record) says so."""
    records = read_records(result, request)
    early = unfinished(result, records, total)
    if early is not None:
        return early
    scores: list[float] = []
    timeouts, detail = 0, ""
    for i in range(total):
        record = records.tests.get(i, {"status": "missing"})
        status = record.get("status")
        ok = status == "passed"
        if status == "returned" and passes is not None:
            try:
                ok = passes(i, record)
            except runner.CodecError as exc:
                detail = detail or f"test {i}: {exc}"
            if not ok:
                detail = detail or f"test {i}: wrong result"
        elif not ok:
            timeouts += status == "timeout" or (status == "missing" and result.timed_out)
            detail = detail or f"test {i}: {record.get('detail', status)}"
        scores.append(1.0 if ok else 0.0)
    passed = scores.count(1.0)
    kind = tests_kind(passed, timeouts, total)
    return Outcome(kind, passed, total, detail, result.duration, tuple(scores))
