"""What one evaluation of model-written code came to, before it becomes a reward."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OutcomeKind(str, enum.Enum):
    PASSED = "passed"
    """Every test passed (or, for a bare run, exit status 0)."""
    FAILED = "failed"
    """It ran; some tests failed (``passed`` of ``total``)."""
    ERROR = "error"
    """The code did not load or crashed as a whole (``detail`` holds the exception line)."""
    TIMEOUT = "timeout"
    """It ran past its time limits; also a run still going at the batch deadline after longer
    than its limits allow an honest program (``RunRequest.allowance``)."""
    BANNED = "banned"
    """A banned construct was found before running, or reached while running (``detail``
    says which)."""
    EMPTY = "empty"
    """Nothing to run: no code, oversized code, NUL bytes."""
    INFRA = "infra"
    """The sandbox provider failed; says nothing about the code."""
    UNSUPPORTED = "unsupported"
    """The row asks for what this judge cannot run yet (a language, a kind of problem): no
    reward, since it says nothing about the code, and no trip of the circuit breaker, since the
    provider did not fail."""
    DEADLINE = "deadline"
    """Still pending when its batch's deadline passed (``batch_timeout``): waiting for a
    sandbox, or running for less than its limits allow. Cut off, no reward: it says nothing
    about the code (its time went to the queue) nor about the provider."""
    INVALID_ROW = "invalid_row"
    """The dataset row cannot be judged (malformed tests, a job too large to send), found
    before any completion of it is looked at: no reward, no trip of the circuit breaker, and
    a logged reason naming the row."""


class Verdict(str, enum.Enum):
    """A contest judge's word on a program (on one test, or its first failing one)."""

    ACCEPTED = "accepted"
    WRONG_ANSWER = "wrong_answer"
    PARTIAL = "partial"
    """A checker gave part of the test's points."""
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    RUNTIME_ERROR = "runtime_error"
    COMPILE_ERROR = "compile_error"
    OUTPUT_LIMIT = "output_limit"


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    passed: int = 0
    total: int = 0
    detail: str = ""
    duration: float = 0.0
    """Seconds spent in the sandbox (0 when the code never ran)."""
    test_scores: tuple[float, ...] = ()
    """Each test's score in [0, 1], in order (1.0 passed, 0.0 not), where the harness judges
    tests one by one and got to judge them; empty otherwise."""
    score: float | None = None
    """The score in [0, 1] a harness with a scoring rule gave (contest scoring: the fraction,
    all or nothing, subtask points); None from a harness without one."""
    verdict: Verdict | None = None
    """A contest harness's verdict: ``accepted``, or that of the first test not accepted."""

    @property
    def fraction(self) -> float:
        """Share of tests passed; a run without tests counts as passed or not."""
        if self.total:
            return self.passed / self.total
        return 1.0 if self.kind is OutcomeKind.PASSED else 0.0

    @property
    def ran(self) -> bool:
        return self.kind in (OutcomeKind.PASSED, OutcomeKind.FAILED)
