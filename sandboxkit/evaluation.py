"""One evaluation: a completion, sanitized, run under a harness in a pooled sandbox, judged.

Nothing here raises for what the model wrote or for a failing provider: every path ends in an
:class:`Outcome` (``INFRA`` for the provider, ``DEADLINE`` when cut off while waiting, the
completion's own failure for anything else), so a training loop can never be stopped by a
completion.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .client import Sandbox
from .contest.languages import Language
from .errors import (
    INFRASTRUCTURE_ERRORS,
    DeadlineExceededError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
)
from .harness import Harness
from .harness.records import RunRequest, read_records, spent
from .harness.runner import RUN_WALL_ENV
from .outcomes import Outcome, OutcomeKind
from .pool import SandboxPool
from .protocol import KILLED_RETURNCODE, ExecResult
from .sanitize import DEFAULT_MAX_BYTES, Completion, ProblemKind, sanitize

logger = logging.getLogger("sandboxkit.evaluation")

RETURN_GRACE = 2.0
"""Seconds before a batch's deadline at which a backend ends a run the deadline would cut, so
that its result (the runner's records so far) comes back in time."""

_PROBLEM_OUTCOMES = {
    ProblemKind.EMPTY: OutcomeKind.EMPTY,
    ProblemKind.TOO_LARGE: OutcomeKind.EMPTY,
    ProblemKind.NUL_BYTES: OutcomeKind.EMPTY,
    ProblemKind.SYNTAX_ERROR: OutcomeKind.ERROR,
    ProblemKind.BANNED: OutcomeKind.BANNED,
}


@dataclass(frozen=True)
class Plan:
    """What to do with one completion: run ``code`` under ``harness`` (in a sandbox made from
    ``image``; None: the pool's), or just ``outcome``."""

    code: str = ""
    harness: Harness | None = None
    outcome: Outcome | None = None
    image: str | None = None


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


def longest_first(harnesses: Sequence[Harness | None]) -> list[int]:
    """The order in which to start a batch's runs: those expected to take longest first
    (their harness's ``reference_seconds``: its reference's own time on its tests, measured on
    the host, in whole milliseconds: finer is the host's noise), the rest as given. A batch's
    wall time is its slowest run's end, so a long run started last holds up the whole step
    while the other workers idle. The estimate is the row's alone (its tests and reference),
    never the completion's: no completion can move itself in the queue (towards a batch
    deadline's cut-off, say)."""
    return sorted(
        range(len(harnesses)),
        key=lambda i: -int(1000 * getattr(harnesses[i], "reference_seconds", 0.0)),
    )


LOST_WHILE_RUNNING = 2
"""Sandboxes that may die under one completion's program before their deaths count as its
doing. A provider says that a sandbox died, not why: the program may have killed it (its
daemon, its memory), and a lost sandbox is retried and, retries spent, scored None. So the
first death is the provider's (a retry on a fresh sandbox), the second the program's (its
failure, saying so): an honest program meets two in a row only where the provider itself
is failing, which the batch's error rate and the pool's retirements then show."""


class _RunFailed(Exception):
    """The backend raised something untyped while running a completion's program: caused, as
    far as anyone can tell, by what that program did or printed."""


def failed(what: str, exc: Exception) -> Outcome:
    """The completion's failure, for an exception raised while handling it (logged: a bug
    somewhere, and never a reason to stop training)."""
    logger.warning("%s: %s: %s", what, type(exc).__name__, exc, exc_info=exc)
    return Outcome(OutcomeKind.ERROR, detail=f"{what}: {type(exc).__name__}: {exc}"[:500])


async def run_plan(pool: SandboxPool, plan: Plan, *, deadline: float | None = None) -> Outcome:
    """The outcome of one plan; never raises (but for cancellation).

    Provider failures (after the pool's retries) become INFRA; anything else raised while the
    program ran or was judged is the completion's ERROR. With a ``deadline``
    (``time.monotonic()``), a run's wall-clock limit is its ``allowance``: past it, only
    sleeping, blocking or starving keeps a program going (the per-test backstops alone could
    add up to five times as much). Where less of the batch is left, the backend ends the run
    just before the deadline instead, and the run is judged only if it had already run past a
    limit of its own (a test's time limit, as the runner recorded it). At the deadline, an
    evaluation still pending is cut off: one whose program had run its whole allowance is a
    TIMEOUT, judged by its harness as a run that timed out; one waiting for a sandbox, or
    running for less, is DEADLINE: its time went to the queue, not to the program."""
    if plan.outcome is not None:
        return plan.outcome
    assert plan.harness is not None
    harness = plan.harness
    try:
        request = harness.request(plan.code)
    except Exception as exc:  # the row's part was built without it: the code's doing
        return failed("its run could not be built", exc)
    allowance = min(request.timeout, request.allowance or request.timeout)
    limit = request.timeout if deadline is None else allowance
    running: float | None = None
    """When the program now running started (``time.monotonic()``); None while waiting."""
    lost: list[SandboxError] = []
    """Sandboxes that died while this completion's program ran in them."""

    async def attempt(sandbox: Sandbox) -> ExecResult:
        nonlocal running, limit
        running = time.monotonic()
        if deadline is not None:
            limit = min(allowance, max(deadline - running - RETURN_GRACE, RETURN_GRACE))
        # Cut short of its allowance, a runner ends the run itself just before its limit,
        # saying whether the program kept its CPU limits' pace (then the cut is the deadline's).
        env = {RUN_WALL_ENV: f"{limit:.3f}"} if limit < allowance and request.key else None
        try:
            result = await sandbox.aexec(request.argv, stdin=request.stdin, timeout=limit, env=env)
        except asyncio.CancelledError:
            raise  # cut off while running: ``running`` says since when
        except (SandboxLostError, SandboxNotFoundError) as exc:
            running = None
            lost.append(exc)
            if len(lost) >= LOST_WHILE_RUNNING:  # the program is what kills them
                raise _RunFailed() from exc
            raise
        except SandboxError:
            running = None
            raise
        except Exception as exc:
            running = None
            raise _RunFailed() from exc
        running = None
        try:
            why = spent(result, request)
        except Exception as exc:
            raise _RunFailed() from exc
        if why is not None:  # not this completion's doing: judge it on another sandbox
            raise SandboxLostError(f"sandbox {sandbox.id} can build no more: {why}")
        return result

    started = time.monotonic()
    try:
        result = await pool.arun(attempt, deadline=deadline, image=plan.image)
    except DeadlineExceededError:
        assert deadline is not None
        ran = None if running is None else deadline - running
        if ran is not None and ran >= allowance:
            detail = f"still running after {ran:.0f}s, more than its limits allow ({allowance:g}s)"
            killed = ExecResult(KILLED_RETURNCODE, timed_out=True, duration=ran)
            return replace(_judged(harness, killed, request), detail=detail)
        waited = (
            "waiting for a sandbox" if ran is None else f"after {ran:.0f}s of its {allowance:g}s"
        )
        return Outcome(
            OutcomeKind.DEADLINE,
            detail=f"cut off at the batch deadline, {waited}",
            duration=time.monotonic() - started,
        )
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("infrastructure error, no reward: %s: %s", type(exc).__name__, exc)
        detail = f"{type(exc).__name__}: {exc}"
        return Outcome(OutcomeKind.INFRA, detail=detail, duration=time.monotonic() - started)
    except SandboxError as exc:  # SandboxNotFound after the pool gave up on replacing it
        detail = f"{type(exc).__name__}: {exc}"
        return Outcome(OutcomeKind.INFRA, detail=detail, duration=time.monotonic() - started)
    except _RunFailed as exc:
        cause = exc.__cause__
        what = (
            f"{len(lost)} sandboxes died while it ran in them"
            if len(lost) >= LOST_WHILE_RUNNING
            else "the backend failed on its run"
        )
        return failed(what, cause if isinstance(cause, Exception) else exc)
    except Exception as exc:  # the pool's own machinery: nothing of the completion's ran
        logger.exception("the pool failed, no reward")
        detail = f"{type(exc).__name__}: {exc}"
        return Outcome(OutcomeKind.INFRA, detail=detail, duration=time.monotonic() - started)
    try:
        cut_short = limit < allowance and _cut_short(result, request)
    except Exception as exc:
        return failed("its result could not be read", exc)
    if cut_short:
        return Outcome(
            OutcomeKind.DEADLINE,
            detail=f"cut off at the batch deadline after {result.duration:.0f}s of its "
            f"{allowance:g}s, no limit of its own passed",
            duration=result.duration,
        )
    if not getattr(harness, "judge_waits", True):
        return _judged(harness, result, request)
    # In a thread: a checker may run a program of its own (through this loop) to judge.
    return await asyncio.to_thread(_judged, harness, result, request)


def _cut_short(result: ExecResult, request: RunRequest) -> bool:
    """Whether a run the deadline cut short of its allowance ended through no doing of its
    program's: the runner stopped it keeping its CPU limits' pace (``cut``), or it was killed
    at its limit before the runner recorded a time limit of the program's own passed (loading
    it, or a test). Sealed records, which no candidate process can forge."""
    records = read_records(result, request)
    if records.cut:
        return True
    overran = records.load_timeout or any(
        t.get("status") == "timeout" for t in records.tests.values()
    )
    return result.timed_out and not overran


def _judged(harness: Harness, result: ExecResult, request: RunRequest) -> Outcome:
    """The harness's verdict on ``result``, which the program produced: if reading it raises,
    the program's failure."""
    try:
        return harness.judge(result, request)
    except Exception as exc:
        return failed("its result could not be judged", exc)
