"""The one retry policy for provider calls: exponential backoff with jitter, via tenacity.

Jitter matters because many evaluations fail together when a provider hiccups; retrying them
in lockstep would hit its rate limit again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from .errors import SandboxTimeoutError, TransientBackendError

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientBackendError, SandboxTimeoutError)
"""Failures of a provider call that the same call may not meet again."""


def retrying(
    *,
    attempts: int,
    backoff: float,
    max_backoff: float = 30.0,
    on: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
    logger: logging.Logger | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> AsyncRetrying:
    """A tenacity controller: at most ``attempts`` calls, waits growing from ``backoff``
    seconds (doubling, plus up to ``backoff`` of jitter) to ``max_backoff``; reraises the last
    error once spent."""

    def _before_sleep(state: RetryCallState) -> None:
        if logger is not None and state.outcome is not None:
            logger.debug("attempt %d failed: %r", state.attempt_number, state.outcome.exception())
        if before_sleep is not None:
            before_sleep(state)

    return AsyncRetrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_exponential(multiplier=backoff, max=max_backoff) + wait_random(0, backoff),
        retry=retry_if_exception_type(on),
        reraise=True,
        before_sleep=_before_sleep,
    )
