"""Checkers: how a contestant's output is judged against the jury's answer.

A contest problem either has one right output up to whitespace (most of Codeforces and
CodeContests), right outputs up to a float tolerance, up to case (Kattis), or many right outputs
that only a program can tell (a checker, as testlib's). Each is a :class:`Checker`. Where the
comparison is of tokens, the sandbox compares digests (``digest_mode``) and the expected output
never enters it; any other checker needs the program's output back on the host, where it is
compared with the answer, so the answer never enters the candidate's sandbox either.

Tokens are runs of bytes between ASCII whitespace (space, tab, line ends, vertical tab, form
feed), as testlib reads them: line structure, blank lines and trailing spaces do not count.
Case-insensitive comparison folds ASCII letters only, as Kattis's default validator does.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..client import Sandbox
from ..errors import SandboxError
from ..harness.runner import output_bytes, split_tokens
from ..hostdirs import private_directory, state_path
from ..portal import blocking, on_portal
from ..protocol import ExecResult
from ..session import Session

DigestMode = Literal["tokens", "tokens_nocase"]
SPEC_SHAPES = (
    '{"kind": "tokens", "case_sensitive": true}; '
    '{"kind": "floats", "abs_tol": 1e-6, "rel_tol": 1e-6}; '
    '{"kind": "program", "source": "...", "language": "cpp"}'
)
"""Named in every error about a checker spec that is none of them."""


class CheckerError(Exception):
    """The checker failed: it exited 3 (testlib's ``_fail``) or crashed, ran past its time
    limit, gave a score outside [0, 1], did not compile, or (a Python checker) raised. Whose
    failure it is, :func:`check_output` decides: the problem's (an ``infra`` outcome, no
    reward) only where the checker fails on the jury's own answer too."""


class CheckerTimeout(CheckerError):
    """The checker ran past its time limit."""


class Checker(Protocol):
    """Judges one test: ``check(input, output, answer)`` is the output's score in [0, 1] (1.0
    accepted, 0.0 wrong, between: partial credit) or raises :class:`CheckerError`."""

    @property
    def digest_mode(self) -> DigestMode | None:
        """How the sandbox may compare outputs itself, by :func:`tokens_digest`; None: the
        output must come back to the host for :meth:`check`."""

    def check(self, input: str, output: str, answer: str) -> float: ...


@dataclass(frozen=True)
class TokenChecker:
    """Token by token equality (Codeforces' default ``wcmp``; Kattis's ignoring case)."""

    case_sensitive: bool = True

    @property
    def digest_mode(self) -> DigestMode:
        return "tokens" if self.case_sensitive else "tokens_nocase"

    def check(self, input: str, output: str, answer: str) -> float:
        same = split_tokens(output, self.case_sensitive) == split_tokens(
            answer, self.case_sensitive
        )
        return 1.0 if same else 0.0


def tokens(case_sensitive: bool = True) -> TokenChecker:
    """The default checker: outputs equal token by token; ``case_sensitive=False`` is Kattis's
    default (a jury answer ``Ja`` accepts ``ja``)."""
    return TokenChecker(case_sensitive)


_NUMBER = re.compile(
    rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE
)
"""A decimal number as contest outputs print one: digits with an optional point and
exponent, or nan/inf; not Python's other spellings (``1_000``, ``0x1p3``)."""


def _number(token: bytes) -> float | None:
    return float(token) if _NUMBER.fullmatch(token) else None


@dataclass(frozen=True)
class FloatChecker:
    """Tokens compared as numbers where both read as one, else exactly (see :func:`floats`)."""

    abs_tol: float = 1e-6
    rel_tol: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("abs_tol", "rel_tol"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")

    @property
    def digest_mode(self) -> None:
        return None

    def close(self, got: float, want: float) -> bool:
        """testlib's ``doubleCompare``: within ``abs_tol``, or within ``rel_tol`` of the
        answer. A nan answer takes nan, an infinite one the same infinity; neither is close to
        a finite number."""
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        if math.isinf(want) or math.isinf(got):
            return got == want
        diff = abs(got - want)
        return diff <= self.abs_tol or diff <= self.rel_tol * abs(want)

    def check(self, input: str, output: str, answer: str) -> float:
        got, want = split_tokens(output), split_tokens(answer)
        if len(got) != len(want):
            return 0.0
        for g, w in zip(got, want, strict=True):
            if g == w:
                continue
            a, b = _number(g), _number(w)
            if a is None or b is None or not self.close(a, b):
                return 0.0
        return 1.0


def floats(abs_tol: float = 1e-6, rel_tol: float = 1e-6) -> FloatChecker:
    """Numbers within a tolerance: tokens that both read as decimal numbers pass when
    ``|out - ans| <= abs_tol`` or ``|out - ans| <= rel_tol * |ans|`` (testlib's
    ``doubleCompare``); ``nan`` matches only ``nan`` and ``inf`` only the same infinity (any
    case, ``infinity`` too); other tokens must be equal; the token counts must match."""
    return FloatChecker(abs_tol, rel_tol)


def _score(value: object, who: str) -> float:
    """A checker's verdict as a score: True/False, or a number in [0, 1]."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and 0 <= value <= 1:
        return float(value)
    raise CheckerError(f"{who} gave {value!r}: a checker gives a bool or a score in [0, 1]")


@dataclass(frozen=True)
class PythonChecker:
    """A function on the host, ``fn(input, output, answer) -> bool | float``: True or 1.0
    accepts, a float in [0, 1] is partial credit. It is the user's code, so what it raises is
    a :class:`CheckerError` (the problem's bug, never the candidate's 0.0)."""

    fn: Callable[[str, str, str], bool | float]

    @property
    def digest_mode(self) -> None:
        return None

    def check(self, input: str, output: str, answer: str) -> float:
        who = f"checker {getattr(self.fn, '__qualname__', self.fn)!r}"
        try:
            verdict = self.fn(input, output, answer)
        except Exception as exc:
            raise CheckerError(f"{who} raised {type(exc).__name__}: {exc}") from exc
        return _score(verdict, who)


COMPILERS: Mapping[str, tuple[str, ...]] = {
    "cpp": ("g++", "-O2", "-std=gnu++17", "-x", "c++"),
    "c": ("gcc", "-O2", "-std=gnu11", "-x", "c"),
}
"""How a checker program in each language compiles (the source file and ``-o`` follow)."""
COMPILE_TIMEOUT = 120.0
CHECKS_AT_ONCE = 2 * (os.cpu_count() or 1)
"""Checker programs running at once; more wait (more do not finish sooner, and each holds its
test's files on the sandbox's disk)."""
ACCEPTED, WRONG_ANSWER, PRESENTATION_ERROR, FAIL, DIRT, POINTS, UNEXPECTED_EOF = 0, 1, 2, 3, 4, 7, 8
_WRONG = frozenset({WRONG_ANSWER, PRESENTATION_ERROR, DIRT, UNEXPECTED_EOF})
"""testlib's exit statuses that reject the output (4 and 8 are its kinds of format error)."""


def default_cache_dir() -> Path:
    return state_path("sandboxkit-checkers")


def compile_checker(source: str, language: str = "cpp", cache_dir: Path | None = None) -> Path:
    """The binary of a checker program, compiled on the host once per (source, compiler
    command) and kept in ``cache_dir``: by every thread and process, since the compile holds
    a lock file and the binary appears whole (renamed into place). A compile error is kept
    too, and raised again as a :class:`CheckerError` without compiling."""
    if language not in COMPILERS:
        raise ValueError(f"checker language {language!r}: one of {sorted(COMPILERS)}")
    command = COMPILERS[language]
    key = hashlib.sha256(json.dumps([command, source]).encode()).hexdigest()[:32]
    try:
        cache = private_directory(cache_dir or default_cache_dir(), "checker cache")
    except PermissionError as exc:  # it could hold binaries someone else planted
        raise CheckerError(str(exc)) from None
    binary, failed = cache / key, cache / f"{key}.error"
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        if failed.exists():
            raise CheckerError(failed.read_text())
        compiler = shutil.which(command[0])
        if compiler is None:
            raise CheckerError(
                f"{command[0]} is not on PATH: checker programs in {language} compile on this "
                f"machine with it (apt-get install {command[0]})"
            )
        with tempfile.TemporaryDirectory(dir=cache) as work:
            out = Path(work) / "checker"
            (Path(work) / "checker.src").write_text(source)
            try:
                done = subprocess.run(
                    [compiler, *command[1:], "checker.src", "-o", str(out)],
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=COMPILE_TIMEOUT,
                )
            except subprocess.TimeoutExpired:
                raise CheckerError(f"the checker compiled for over {COMPILE_TIMEOUT} s") from None
            if done.returncode != 0:
                failed.write_text(f"the checker does not compile:\n{done.stderr[-4000:]}")
                raise CheckerError(failed.read_text())
            out.chmod(0o755)
            os.replace(out, binary)
    return binary


def _failed(future: asyncio.Future[Any]) -> bool:
    """Whether ``future`` ended without a result (to be made again)."""
    return future.done() and (future.cancelled() or future.exception() is not None)


@dataclass
class _Box:
    """The local sandbox every checker program of this process runs in: each binary installed
    once (``bin/<key>``), and a directory per check in flight (``slot-<n>``), reused rather
    than removed, so a check is one exec: the checker itself."""

    sandbox: Sandbox
    installed: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    free: list[str] = field(default_factory=list)
    slots: int = 0
    running: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CHECKS_AT_ONCE))

    async def install(self, key: str, binary: bytes) -> str:
        """The checker's path in the sandbox, written there on its first check."""
        future = self.installed.get(key)
        if future is None or _failed(future):
            future = self.installed[key] = asyncio.ensure_future(self._install(key, binary))
        await asyncio.shield(future)
        return f"/workspace/bin/{key}"

    async def _install(self, key: str, binary: bytes) -> None:
        await self.sandbox.awrite_file(f"bin/{key}", binary)
        done = await self.sandbox.aexec(["chmod", "500", f"bin/{key}"], timeout=30)
        if not done.ok:
            raise CheckerError(f"could not install the checker: {done.stderr.strip()}")

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[str]:
        """A directory for one check, once fewer than ``CHECKS_AT_ONCE`` are running."""
        async with self.running:
            if self.free:
                name = self.free.pop()
            else:
                name, self.slots = f"slot-{self.slots}", self.slots + 1
            try:
                yield name
            finally:
                self.free.append(name)


class _CheckerSandbox:
    """The process's :class:`_Box`, made on first use (on sandboxkit's event loop) and
    stopped at exit by its session; made again after a call failed in it."""

    def __init__(self) -> None:
        self.made: asyncio.Future[_Box] | None = None
        self.pid = 0

    async def get(self) -> _Box:
        if self.made is None or self.pid != os.getpid() or _failed(self.made):
            self.made, self.pid = asyncio.ensure_future(self._make()), os.getpid()
        return await asyncio.shield(self.made)

    def forget(self, box: _Box) -> None:
        made = self.made
        if made is not None and made.done() and not _failed(made) and made.result() is box:
            self.made = None

    @staticmethod
    async def _make() -> _Box:
        session = Session("subprocess", tags=("sandboxkit-checkers",), handle_signals=False)
        return _Box(await session.asandbox())


_checker_sandbox = _CheckerSandbox()


class ProgramChecker:
    """A testlib-style checker program: run per test as ``checker input output answer`` with
    the three as files. Exit 0 accepts; 1 (wrong answer), 2 (presentation error) and
    testlib's 4 and 8 reject; 7 gives partial credit, the score in [0, 1] as the first token
    of its stdout (or, testlib's ``quitp``, after ``points`` on its stderr); 3 (``_fail``),
    any other status, a crash or running past ``timeout`` seconds is a :class:`CheckerError`.

    It runs in a local sandbox (the ``subprocess`` backend, whatever the reward's backend),
    since the output it reads is hostile. One sandbox per process serves every checker
    program: a check is one exec there (~5 ms); a fresh sandbox per check would cost ~20 ms.
    Compiled on the host (``g++ -O2 -std=gnu++17``; ``language="c"``: gcc) once per source,
    shared by every instance through ``cache_dir`` (see :func:`compile_checker`)."""

    def __init__(
        self,
        source: str,
        language: str = "cpp",
        *,
        timeout: float = 10.0,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if language not in COMPILERS:
            raise ValueError(f"checker language {language!r}: one of {sorted(COMPILERS)}")
        self.source = source
        self.language = language
        self.timeout = timeout
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._binary: tuple[str, bytes] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ProgramChecker {self.language}, {len(self.source)} characters>"

    @property
    def digest_mode(self) -> None:
        return None

    def binary(self) -> tuple[str, bytes]:
        """The compiled checker (compiled on first use) and its cache key."""
        with self._lock:
            if self._binary is None:
                path = compile_checker(self.source, self.language, self.cache_dir)
                self._binary = (path.name, path.read_bytes())
            return self._binary

    async def acheck(self, input: str, output: str, answer: str) -> float:
        """The output's score; see the class."""
        key, binary = await asyncio.to_thread(self.binary)
        return await on_portal(self._run(key, binary, input, output, answer))

    check = blocking(acheck)

    async def _run(self, key: str, binary: bytes, input: str, output: str, answer: str) -> float:
        box = await _checker_sandbox.get()
        try:
            checker = await box.install(key, binary)
            async with box.slot() as slot:
                # Fixed names: nothing of the output reaches the checker's argv.
                files = {"input": input, "output": output, "answer": answer}
                for name, data in files.items():
                    await box.sandbox.awrite_file(f"{slot}/{name}", output_bytes(data))
                result = await box.sandbox.aexec([checker, *files], cwd=slot, timeout=self.timeout)
                for name in files:  # no answer is left on disk (nor a megabyte of output)
                    await box.sandbox.awrite_file(f"{slot}/{name}", b"")
        except SandboxError:
            _checker_sandbox.forget(box)
            raise
        return self._verdict(result)

    def _verdict(self, result: ExecResult) -> float:
        status = result.returncode
        if result.timed_out:
            raise CheckerTimeout(f"{self!r} ran past its {self.timeout} s time limit")
        if status == ACCEPTED:
            return 1.0
        if status in _WRONG:
            return 0.0
        said = result.stderr.strip()[-2000:]
        if status == POINTS:
            return self._points(result.stdout, said)
        what = (
            "failed (exit 3)"
            if status == FAIL
            else f"was killed by signal {status - 128}"
            if status > 128
            else f"exited {status}, not a checker verdict"
        )
        raise CheckerError(f"{self!r} {what}: {said or '(nothing on stderr)'}")

    def _points(self, stdout: str, stderr: str) -> float:
        """The score of an exit 7: the first token of stdout, else testlib's ``points <score>``
        on stderr."""
        words = stdout.split()
        if not words and stderr.startswith("points "):
            words = stderr.split()[1:]
        try:
            return _score(float(words[0]), repr(self))
        except (IndexError, ValueError):
            raise CheckerError(f"{self!r} exited 7 with no score: {stdout[:200]!r}") from None


async def acheck(checker: Checker, input: str, output: str, answer: str) -> float:
    """``checker.check`` from async code (such as a harness judging on sandboxkit's event
    loop, where the blocking twin cannot run): a program checker is awaited, any other runs in
    a thread, so a slow comparison or user function does not hold up the loop."""
    if isinstance(checker, ProgramChecker):
        return await checker.acheck(input, output, answer)
    return await asyncio.to_thread(checker.check, input, output, answer)


@dataclass(frozen=True)
class Checked:
    """A checker's verdict on one output: its score, or why the checker failed on it."""

    score: float
    failure: str = ""
    """What the checker said when this output made it fail (then ``score`` is 0.0)."""
    timed_out: bool = False
    """The checker ran past its time limit on this output."""


def check_output(checker: Checker, input: str, output: str, answer: str) -> Checked:
    """``checker``'s verdict on a participant's ``output``. The output is hostile: where it
    makes the checker fail (raise, exit 3, crash, run past its limit), the checker is run on
    the jury's ``answer`` (once per checker and test, cached). Failing there too, the checker
    or the jury is wrong, whatever the output: :class:`CheckerError` (no reward). Else the
    failure was the output's doing: a score of 0.0, saying so."""
    fresh = False
    try:
        return Checked(_checked(checker, input, output, answer))
    except SandboxError as exc:  # the checkers' sandbox: tried again, on the answer
        failure, timed_out, fresh = f"its sandbox failed: {exc}", False, True
    except Exception as exc:
        failure, timed_out = f"{type(exc).__name__}: {exc}", isinstance(exc, CheckerTimeout)
    jury = _jury_failure(checker, input, answer, fresh=fresh)
    if jury:
        raise CheckerError(f"the checker fails on the jury's own answer: {jury}")
    return Checked(0.0, failure[:500], timed_out)


def _checked(checker: Checker, input: str, output: str, answer: str) -> float:
    score = float(checker.check(input, output, answer))
    if not 0.0 <= score <= 1.0:  # nan too
        raise CheckerError(f"{checker!r} gave a score of {score}, not one in [0, 1]")
    return score


JURY_CACHE = 4096
"""Checks of the jury's answers remembered (per checker and test)."""
_jury: dict[tuple[object, str], str] = {}
_jury_lock = threading.Lock()


def _jury_failure(checker: Checker, input: str, answer: str, *, fresh: bool = False) -> str:
    """How ``checker`` fails on the jury's ``answer`` ("" when it does not), remembered;
    ``fresh``: checked again whatever was remembered. A failure of the checkers' sandbox there
    is raised (no verdict either way); neither it nor running past the time limit (a loaded
    machine, maybe) is remembered."""
    test = hashlib.sha256(json.dumps([input, answer]).encode()).hexdigest()
    try:
        key: tuple[object, str] | None = (_checker_key(checker), test)
        hash(key)
    except TypeError:  # a checker of the user's that cannot be a key: checked every time
        key = None
    with _jury_lock:
        if key is not None and key in _jury and not fresh:
            return _jury[key]
    try:
        _checked(checker, input, answer, answer)
        failure = ""
    except SandboxError:
        raise
    except Exception as exc:
        failure = f"{type(exc).__name__}: {exc}"[:500]
        key = None if isinstance(exc, CheckerTimeout) else key
    if key is not None:
        with _jury_lock:
            if len(_jury) >= JURY_CACHE:
                _jury.pop(next(iter(_jury)))
            _jury[key] = failure
    return failure


def _checker_key(checker: Checker) -> object:
    """What identifies a checker across instances (a row's spec makes one per completion)."""
    if isinstance(checker, ProgramChecker):
        return ("program", checker.source, checker.language, checker.timeout)
    return checker


def checker_from_spec(spec: Mapping[str, Any]) -> Checker:
    """The checker a dataset row describes, in one of the shapes of ``SPEC_SHAPES``."""
    kind = spec.get("kind") if isinstance(spec, Mapping) else None
    if kind == "tokens" and isinstance(spec.get("case_sensitive", True), bool):
        return tokens(spec.get("case_sensitive", True))
    if kind == "floats":
        return floats(spec.get("abs_tol", 1e-6), spec.get("rel_tol", 1e-6))
    if kind == "program" and isinstance(spec.get("source"), str):
        return ProgramChecker(spec["source"], spec.get("language", "cpp"))
    raise ValueError(f"a checker spec is one of {SPEC_SHAPES}, not {spec!r:.200}")
