"""Contest judging: a whole program per test, fed the test's input, judged on its output.

The runner in the sandbox builds the program once (Python: compiled in its zygote; another
language: its compiler run once), runs it per test in a fresh process under the test's limits,
and reports how each run ended: its exit status, peak memory, the tail of its stderr, and its
output as a digest of its tokens, or, for a checker on the host, the output itself. Expected
outputs never enter the sandbox; verdicts are decided here.
"""

from __future__ import annotations

import base64
import functools
import secrets
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contest.checkers import check_output
from ..contest.languages import Language, language_for
from ..outcomes import Outcome, OutcomeKind, Verdict
from ..protocol import ExecResult
from . import runner
from .records import RunRequest, Unjudgeable, read_records, runner_request, tests_kind, unfinished

if TYPE_CHECKING:
    from ..contest.checkers import Checker

RUNS_DIR = ".sandboxkit"
"""In the sandbox's working directory: each run's directory."""
OUT_OF_MEMORY = (
    "bad_alloc",
    "MemoryError",
    "OutOfMemoryError",
    "out of memory",
    "memory allocation of",
    "Cannot allocate memory",
)
"""What runtimes print when an allocation fails (C++, Python, Java, Go and Node, Rust)."""
STACK_OVERFLOW = (
    "stack overflow",
    "overflowed its stack",
    "StackOverflowError",
    "Maximum call stack size exceeded",
    "RecursionError",
)
"""What runtimes print when the stack runs out (Rust, Go, Java, Node, Python): a runtime
error, though the stack's pages may have brought peak memory near the limit."""
MEMORY_NEAR = 0.9
"""A failed run whose peak memory came this close to its limit ran out of memory."""


@dataclass(frozen=True)
class StdioTests:
    """Competitive-programming tests: the code is a program reading stdin; each test passes
    when it exits with status 0 within the limits and its output matches the expected one
    token by token (or as ``checker`` decides), as on a contest judge (any other status,
    ``sys.exit(3)`` or an uncaught exception, is a runtime error whatever it printed).

    A Python program ends as ``python3`` ends a script: its non-daemon threads are joined (a
    thread that never ends runs into the time limit), its ``atexit`` handlers run and its
    streams are flushed. Every program's main thread may use a stack of
    ``runner.STACK_BYTES``; ``memory_mb`` bounds what it allocates (``RLIMIT_DATA``), and it
    keeps no data outside its process (no file written, no shared memory object:
    ``runner.forbid_storage``)."""

    cases: Sequence[tuple[str, str]]
    """(input, expected output) pairs; expected outputs stay on the host."""
    timeout: float = 5.0
    """CPU seconds per test."""
    output_cap: int = 1 << 20
    """Bytes of output per test: beyond it, ``output_limit``."""
    language: Language | str = "python"
    memory_mb: int = 256
    wall: float | None = None
    """Wall-clock seconds per test (None: ``runner.WALL_FACTOR`` times ``timeout``)."""
    checker: Checker | None = None
    """None: tokens compared exactly."""
    compile_timeout: float = 30.0
    """CPU seconds for the compile, its whole process tree's (a wall-clock backstop of
    ``runner.WALL_FACTOR`` times it ends one that waits)."""
    compile_memory_mb: int = 2048

    @property
    def lang(self) -> Language:
        if isinstance(self.language, Language):
            return self.language
        found = language_for(self.language)
        if found is None:
            raise ValueError(f"no language {self.language!r} in the table (register_language)")
        return found

    @property
    def compare(self) -> str:
        if self.checker is None:
            return "tokens"
        return self.checker.digest_mode or "output"

    @functools.cached_property
    def returned_bytes(self) -> int:
        """Bytes the expected outputs take as the runner sends outputs back for a checker on
        the host (compressed, in a record's field): what a right program's outputs need."""
        return sum(
            len(base64.b64encode(zlib.compress(runner.output_bytes(out), 6))) + 16
            for _, out in self.cases
        )

    def request(self, code: str) -> RunRequest:
        room = runner.spare(len(self.cases))
        if self.compare == "output" and self.returned_bytes > room:
            raise Unjudgeable(
                f"the row's expected outputs take {self.returned_bytes} bytes compressed, more "
                f"than the {room} an exec can send back for its checker beside its "
                f"{len(self.cases)} tests' records"
            )
        job = {
            "kind": "stdio",
            "timeout": self.timeout,
            "wall": self.wall,
            "inputs": [i for i, _ in self.cases],
            "output_cap": self.output_cap,
            "compare": self.compare,
        }
        run_dir = f"{RUNS_DIR}/run-{secrets.token_hex(8)}"
        program: dict[str, Any] = {"memory": self.memory_mb << 20, "stack": runner.STACK_BYTES}
        extra = (0.0, 0.0)
        if self.lang.run:
            stack_mb = runner.STACK_BYTES >> 20
            program["native"] = self.lang.spec(code, memory_mb=self.memory_mb, stack_mb=stack_mb)
            program.update(
                dir=run_dir,
                compile_limits={
                    "wall": self.compile_timeout * runner.WALL_FACTOR,
                    "cpu": self.compile_timeout,
                    "memory": self.compile_memory_mb << 20,
                },
            )
            cpu = self.compile_timeout + (runner.PCH_CPU if self.lang.precompiled_header else 0)
            extra = (cpu, cpu * runner.WALL_FACTOR)
        first = {"code": code, "setup": "", "kind": "stdio", "program": program}
        return runner_request(first, job, extra=extra)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        total = len(self.cases)
        records = read_records(result, request)
        if records.load_error is not None and records.build:
            if records.build in ("toolchain", "sandbox"):
                return Outcome(OutcomeKind.INFRA, 0, total, records.load_error, result.duration)
            return Outcome(
                OutcomeKind.ERROR,
                0,
                total,
                records.load_error,
                result.duration,
                verdict=Verdict.COMPILE_ERROR,
            )
        early = unfinished(result, records, total)
        if early is not None:
            return early
        scores: list[float] = []
        verdicts: list[Verdict] = []
        detail = ""
        checking = [True]  # until a check of this program's output runs past its limit
        for i, (stdin, expected) in enumerate(self.cases):
            record = records.tests.get(i, {"status": "missing"})
            try:
                verdict, score, said = self._verdict(record, stdin, expected, result, checking)
            except Exception as exc:  # the checker fails on the jury's answer: not the program
                said = f"test {i}: the checker failed: {type(exc).__name__}: {exc}"
                return Outcome(OutcomeKind.INFRA, 0, total, said[:500], result.duration)
            scores.append(score)
            verdicts.append(verdict)
            if verdict is not Verdict.ACCEPTED and not detail:
                detail = f"test {i}: {verdict.value.replace('_', ' ')}" + (
                    f" ({said})" if said else ""
                )
        passed = verdicts.count(Verdict.ACCEPTED)
        first = next((v for v in verdicts if v is not Verdict.ACCEPTED), Verdict.ACCEPTED)
        kind = tests_kind(passed, verdicts.count(Verdict.TIME_LIMIT), total)
        return Outcome(kind, passed, total, detail, result.duration, tuple(scores), verdict=first)

    def _verdict(
        self,
        record: dict[str, Any],
        stdin: str,
        expected: str,
        result: ExecResult,
        checking: list[bool],
    ) -> tuple[Verdict, float, str]:
        """One test's verdict, score and what to say about it. ``checking`` turns off once the
        program's output made the checker run past its limit: its later outputs are wrong
        answers unchecked, so that its outputs hold the judge for one checker limit at most."""
        status = record.get("status")
        if status == "timeout" or (status == "missing" and result.timed_out):
            return Verdict.TIME_LIMIT, 0.0, str(record.get("detail", "timed out"))
        if status == "output_limit":
            return Verdict.OUTPUT_LIMIT, 0.0, str(record.get("detail", ""))
        if status != "exited":
            return Verdict.RUNTIME_ERROR, 0.0, str(record.get("detail", status))
        code, stderr = record.get("exit"), str(record.get("stderr", ""))
        if code != 0:
            return self._failure(code, record.get("rss"), stderr)
        rss = record.get("rss")
        allowed = (self.memory_mb + self.lang.runtime_mb) << 20
        if isinstance(rss, int) and rss << 10 > allowed:
            # Judges go by peak memory: RLIMIT_DATA leaves out the stack and shared mappings,
            # a runtime's own flags what it keeps outside its heap.
            return Verdict.MEMORY_LIMIT, 0.0, f"its peak memory was {rss >> 10} MiB"
        if "output" in record:
            assert self.checker is not None
            if not checking[0]:
                return Verdict.WRONG_ANSWER, 0.0, "not checked: an earlier output stalled it"
            checked = check_output(self.checker, stdin, _unpack(record["output"]), expected)
            if checked.failure:
                checking[0] = not checked.timed_out
                return Verdict.WRONG_ANSWER, 0.0, f"the checker failed on it: {checked.failure}"
            score = checked.score
        else:
            case_sensitive = self.compare != "tokens_nocase"
            matched = record.get("digest") == runner.tokens_digest(expected, case_sensitive)
            score = 1.0 if matched else 0.0
        if score == 1.0:
            return Verdict.ACCEPTED, 1.0, ""
        return (Verdict.PARTIAL if score > 0 else Verdict.WRONG_ANSWER), score, ""

    def _failure(self, code: Any, rss: Any, stderr: str) -> tuple[Verdict, float, str]:
        said = (
            "no exit status"
            if not isinstance(code, int)
            else f"killed by signal {-code}"
            if code < 0
            else f"exit status {code}"
        )
        last = stderr.strip().splitlines()[-1][:200] if stderr.strip() else ""
        if last:
            said += f": {last}"
        if any(marker in stderr for marker in STACK_OVERFLOW):
            return Verdict.RUNTIME_ERROR, 0.0, said
        near = isinstance(rss, int) and rss * 1024 >= MEMORY_NEAR * (self.memory_mb << 20)
        if near or any(marker in stderr for marker in OUT_OF_MEMORY):
            return Verdict.MEMORY_LIMIT, 0.0, said
        return Verdict.RUNTIME_ERROR, 0.0, said


def _unpack(packed: Any) -> str:
    """A program's output as the runner sent it (base64 of zlib), as text."""
    data = zlib.decompress(base64.b64decode(str(packed)), bufsize=1 << 16)
    return data.decode("utf-8", "surrogateescape")
