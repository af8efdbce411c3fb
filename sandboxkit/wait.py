"""Waiting on many sandbox calls at once: the first N, with a timeout, cancelling the rest.

Best-of-N scoring and early stopping want "the first N results, then stop the others"; a
stopped call must really stop its program (the local backend kills the process when its exec
is cancelled). Sync code gets concurrent futures from :func:`spawn` and :func:`wait`; async code
gets :func:`wait_async` and :func:`await_first` over awaitables.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

from .keywords import suggest_keywords
from .portal import portal

T = TypeVar("T")


def spawn(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on sandboxkit's event loop; cancelling the future cancels the coroutine."""
    return asyncio.run_coroutine_threadsafe(coro, portal().loop)


def _wanted(num_returns: int | None, total: int) -> int:
    wanted = total if num_returns is None else num_returns
    if not 0 <= wanted <= total:
        raise ValueError(f"num_returns={num_returns} but only {total} to wait for")
    return wanted


@suggest_keywords
def wait(
    futures: Iterable[concurrent.futures.Future[T]],
    *,
    num_returns: int | None = None,
    timeout: float | None = None,
    cancel_pending: bool = False,
) -> tuple[list[concurrent.futures.Future[T]], list[concurrent.futures.Future[T]]]:
    """Block until ``num_returns`` futures (default: all) are done or ``timeout`` passes.

    Returns ``(done, pending)`` in the order given; ``done`` holds every finished future, which
    may be more than ``num_returns``. With ``cancel_pending`` the pending ones are cancelled.
    """
    futures = list(futures)
    wanted = _wanted(num_returns, len(futures))
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = set(futures)
    while len(futures) - len(pending) < wanted:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        finished, pending = concurrent.futures.wait(
            pending, timeout=remaining, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if not finished:
            break
    if cancel_pending:
        for future in pending:
            future.cancel()
    return [f for f in futures if f not in pending], [f for f in futures if f in pending]


@suggest_keywords
async def wait_async(
    aws: Iterable[Awaitable[T]],
    *,
    num_returns: int | None = None,
    timeout: float | None = None,
    cancel_pending: bool = False,
) -> tuple[list[asyncio.Future[T]], list[asyncio.Future[T]]]:
    """The async twin of :func:`wait` over awaitables, returning their tasks.

    Cancelled pending tasks are awaited, so their cleanup (killing the process) is done when
    this returns. If this call is cancelled, the tasks it made from coroutines are cancelled too.
    """
    given = list(aws)
    tasks = [asyncio.ensure_future(a) for a in given]
    owned = [t for a, t in zip(given, tasks, strict=True) if t is not a]
    wanted = _wanted(num_returns, len(tasks))
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = set(tasks)
    try:
        while len(tasks) - len(pending) < wanted:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            finished, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            if not finished:
                break
    except asyncio.CancelledError:
        await _cancel([t for t in owned if not t.done()])
        raise
    if cancel_pending:
        await _cancel(pending)
    return [t for t in tasks if t not in pending], [t for t in tasks if t in pending]


@suggest_keywords
async def await_first(
    aws: Iterable[Awaitable[T]], num_returns: int = 1, *, cancel_pending: bool = True
) -> list[T]:
    """The results of ``num_returns`` awaitables that finished first (in the order given); the
    others are cancelled. Raises the error of a finished one that failed."""
    done, _ = await wait_async(aws, num_returns=num_returns, cancel_pending=cancel_pending)
    return [task.result() for task in done[:num_returns]]


async def _cancel(tasks: Iterable[asyncio.Future[Any]]) -> None:
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
