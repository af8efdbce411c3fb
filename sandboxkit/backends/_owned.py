"""Making a remote sandbox that nobody loses track of: a create cut short after the provider
made the sandbox would leave it running (and billed), unseen by every session."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..portal import portal

T = TypeVar("T")
logger = logging.getLogger(__name__)


async def start_owned(
    start: Coroutine[Any, Any, T], discard: Callable[[T], Coroutine[Any, Any, None]]
) -> T:
    """``await start``, run on sandboxkit's own loop, so that a caller that gives up (or whose
    loop ends) cannot cut it short once the provider has made the sandbox; what it still
    makes then goes to ``discard``. A start that fails cleans up after itself."""
    future = asyncio.run_coroutine_threadsafe(start, portal().loop)
    try:
        return await asyncio.shield(asyncio.wrap_future(future))
    except asyncio.CancelledError:
        future.add_done_callback(functools.partial(_discard_unowned, discard))
        raise


def _discard_unowned(
    discard: Callable[[T], Coroutine[Any, Any, None]], done: concurrent.futures.Future[T]
) -> None:
    if not done.cancelled() and done.exception() is None:
        asyncio.run_coroutine_threadsafe(discard(done.result()), portal().loop)


async def discard(
    stop: Callable[[], Awaitable[object]], sandbox_id: object, attempts: int = 3
) -> None:
    """Delete a sandbox nobody will own with ``stop``, trying a few times: a leak costs money."""
    for attempt in range(attempts):
        try:
            await stop()
            return
        except Exception as exc:
            if attempt + 1 == attempts:
                logger.warning("could not delete sandbox %s, which may leak: %s", sandbox_id, exc)
                return
            await asyncio.sleep(0.5 * 2**attempt)
