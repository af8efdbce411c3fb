"""One evaluation: a completion, sanitized, run under a harness in a pooled sandbox, judged.

Nothing here raises for what the model wrote or for a failing provider: every path ends in an
:class:`Outcome` (``INFRA`` for the provider, ``DEADLINE`` when cut off), so a training loop can
never be stopped by a completion.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .client import Sandbox
from .contest.languages import Language
from .errors import (
    INFRASTRUCTURE_ERRORS,
    DeadlineExceededError,
    SandboxError,
    SandboxLostError,
)
from .harness import Harness
from .harness.records import Unjudgeable, spent
from .outcomes import Outcome, OutcomeKind
from .pool import SandboxPool
from .protocol import ExecResult
from .sanitize import DEFAULT_MAX_BYTES, Completion, ProblemKind, sanitize

logger = logging.getLogger("sandboxkit.evaluation")

_PROBLEM_OUTCOMES = {
    ProblemKind.EMPTY: OutcomeKind.EMPTY,
    ProblemKind.TOO_LARGE: OutcomeKind.EMPTY,
    ProblemKind.NUL_BYTES: OutcomeKind.EMPTY,
    ProblemKind.SYNTAX_ERROR: OutcomeKind.ERROR,
    ProblemKind.BANNED: OutcomeKind.BANNED,
}


@dataclass(frozen=True)
class Plan:
    """What to do with one completion: run ``code`` under ``harness``, or just ``outcome``."""

    code: str = ""
    harness: Harness | None = None
    outcome: Outcome | None = None


def plan(
    completion: Completion,
    harness: Harness,
    *,
    prompt: str | None = None,
    banned_patterns: Sequence[str] = (),
    banned_names: Sequence[str] = (),
    banned_attributes: Sequence[str] = (),
    banned_modules: Sequence[str] = (),
    max_bytes: int = DEFAULT_MAX_BYTES,
    language: Language | None = None,
) -> Plan:
    """Sanitize a completion; problems become outcomes without touching a sandbox.

    ``prompt`` switches to function-body continuation: the code is the prompt plus the body.
    """
    cleaned = sanitize(
        completion,
        prompt=prompt,
        substrings=tuple(banned_patterns),
        names=tuple(banned_names),
        attributes=tuple(banned_attributes),
        modules=tuple(banned_modules),
        max_bytes=max_bytes,
        language=language,
    )
    if cleaned.problem is not None:
        kind = _PROBLEM_OUTCOMES[cleaned.problem.kind]
        return Plan(outcome=Outcome(kind, detail=cleaned.problem.reason))
    return Plan(code=cleaned.code, harness=harness)


async def run_plan(pool: SandboxPool, plan: Plan, *, deadline: float | None = None) -> Outcome:
    """The outcome of one plan; provider failures (after the pool's retries) become INFRA, and
    a run still pending at ``deadline`` (``time.monotonic()``) is cut off as DEADLINE."""
    if plan.outcome is not None:
        return plan.outcome
    assert plan.harness is not None
    harness = plan.harness
    try:
        request = harness.request(plan.code)
    except Unjudgeable as exc:
        logger.warning("a dataset row cannot be judged, no reward: %s", exc)
        return Outcome(OutcomeKind.UNSUPPORTED, detail=str(exc))

    async def attempt(sandbox: Sandbox) -> ExecResult:
        result = await sandbox.aexec(request.argv, stdin=request.stdin, timeout=request.timeout)
        why = spent(result, request)
        if why is not None:  # not this completion's doing: judge it on another sandbox
            raise SandboxLostError(f"sandbox {sandbox.id} can build no more: {why}")
        return result

    started = time.monotonic()
    try:
        result = await pool.arun(attempt, deadline=deadline)
    except DeadlineExceededError:
        return Outcome(
            OutcomeKind.DEADLINE,
            detail="cut off at the batch deadline",
            duration=time.monotonic() - started,
        )
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("infrastructure error, no reward: %s: %s", type(exc).__name__, exc)
        detail = f"{type(exc).__name__}: {exc}"
        return Outcome(OutcomeKind.INFRA, detail=detail, duration=time.monotonic() - started)
    except SandboxError as exc:  # SandboxNotFound after the pool gave up on replacing it
        detail = f"{type(exc).__name__}: {exc}"
        return Outcome(OutcomeKind.INFRA, detail=detail, duration=time.monotonic() - started)
    # In a thread: a checker may run a program of its own (through this loop) to judge.
    return await asyncio.to_thread(harness.judge, result, request)
