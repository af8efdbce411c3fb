"""The one retry policy for provider calls: exponential backoff with jitter, via tenacity.

Jitter matters because many evaluations fail together when a provider hiccups; retrying them
in lockstep would hit its rate limit again. A provider that says how long to wait (a
``RateLimitedError`` with ``retry_after``) is waited for at least that long.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .errors import RateLimitedError, SandboxTimeoutError, TransientBackendError

T = TypeVar("T")
MAX_BACKOFF = 30.0
"""The longest wait between two tries, a provider's ``retry_after`` included: a bogus hint
must not stall a run."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientBackendError, SandboxTimeoutError)
"""Failures of a provider call that the same call may not meet again."""


def _wait(backoff: float, max_backoff: float) -> Callable[[RetryCallState], float]:
    """Waits growing from ``backoff`` (doubling, plus up to ``backoff`` of jitter) to
    ``max_backoff``, and never shorter than the ``retry_after`` a rate limit asked for (itself
    capped at ``max_backoff``)."""
    growing = wait_exponential(multiplier=backoff, max=max_backoff) + wait_random(0, backoff)

    def wait(state: RetryCallState) -> float:
        delay = float(growing(state))
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, RateLimitedError) and error.retry_after is not None:
            delay = max(delay, min(error.retry_after, max_backoff))
        return delay

    return wait


def retrying(
    *,
    attempts: int,
    backoff: float,
    max_backoff: float = MAX_BACKOFF,
    on: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
    logger: logging.Logger | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> AsyncRetrying:
    """A tenacity controller: at most ``attempts`` calls, waits as :func:`_wait` says;
    reraises the last error once spent."""

    def _before_sleep(state: RetryCallState) -> None:
        if logger is not None and state.outcome is not None:
            logger.debug("attempt %d failed: %r", state.attempt_number, state.outcome.exception())
        if before_sleep is not None:
            before_sleep(state)

    return AsyncRetrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=_wait(backoff, max_backoff),
        retry=retry_if_exception_type(on),
        reraise=True,
        before_sleep=_before_sleep,
    )


async def retried(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    backoff: float,
    max_backoff: float = MAX_BACKOFF,
    on: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
    logger: logging.Logger | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> T:
    """``await call()`` under :func:`retrying`'s policy, which is only built once a first
    attempt failed: nearly every evaluation of a pool succeeds at once, and building and
    driving a tenacity controller for each would only add overhead."""
    try:
        return await call()
    except on as exc:
        failures = [exc]

    async def attempt() -> T:
        if failures:  # the attempt already made, as tenacity's first one
            raise failures.pop()
        return await call()

    policy = retrying(
        attempts=attempts,
        backoff=backoff,
        max_backoff=max_backoff,
        on=on,
        logger=logger,
        before_sleep=before_sleep,
    )
    return await policy(attempt)
