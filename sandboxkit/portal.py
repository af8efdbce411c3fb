"""Run sandboxkit's async core from synchronous code.

One event loop per process lives in a daemon thread; sync methods submit their coroutine to it
and block. That works the same from a plain script, from many threads at once, and from inside
a running event loop (a Jupyter cell), where ``asyncio.run`` would refuse.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.thread  # first, so that its exit hook runs after ours
import contextlib
import functools
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class _Portal:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._serve, args=(ready,), name="sandboxkit-portal", daemon=True
        )
        self.thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, R]) -> R:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError(
                "a sandboxkit sync method was called on sandboxkit's own event loop; "
                "await the async twin (the method prefixed with 'a') instead"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except (KeyboardInterrupt, concurrent.futures.CancelledError):
            future.cancel()
            raise


_portal: _Portal | None = None
_portal_lock = threading.Lock()


def portal() -> _Portal:
    """The process's portal, started on first use and restarted in a forked child."""
    global _portal
    with _portal_lock:
        if _portal is None or _portal.pid != os.getpid():
            _portal = _Portal()
        return _portal


def _finalize_at_exit() -> None:
    """Finalize the portal loop's async generators at interpreter exit, as ``asyncio.run``
    does for its loop: the connections that close with their loop (a provider SDK's HTTP
    session) would otherwise be left open when the daemon thread dies. It runs after the
    hook that closes the sessions still open (registered later, so run earlier), whose
    last calls may have opened one, and before the thread pools shut down."""
    current = _portal
    if current is None or current.pid != os.getpid() or not current.loop.is_running():
        return
    done = asyncio.run_coroutine_threadsafe(current.loop.shutdown_asyncgens(), current.loop)
    with contextlib.suppress(Exception):
        done.result(timeout=_FINALIZE_SECONDS)


_FINALIZE_SECONDS = 10.0
threading._register_atexit(_finalize_at_exit)  # type: ignore[attr-defined]  # CPython >= 3.9


def run_sync(coro: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine to completion from synchronous code, wherever that code runs."""
    return portal().call(coro)


async def on_portal(coro: Coroutine[Any, Any, R]) -> R:
    """Await ``coro`` run on the portal's loop, from any loop: for long-lived state (processes,
    sockets) that must not be bound to a short-lived loop such as ``asyncio.run``'s."""
    loop = portal().loop
    if asyncio.get_running_loop() is loop:
        return await coro
    future = asyncio.run_coroutine_threadsafe(_settled(coro), loop)
    ok, value = await asyncio.wrap_future(future)
    if not ok:
        raise value
    return cast(R, value)


async def _settled(coro: Coroutine[Any, Any, R]) -> tuple[bool, Any]:
    """``coro``'s result or exception as a value: a caller cancelled just as ``coro`` raised
    leaves no task whose exception nobody retrieves (asyncio would log it as an error)."""
    try:
        return True, await coro
    except Exception as exc:
        return False, exc


def blocking(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], R]:
    """Derive the sync twin of an async method, so the two can never drift apart."""

    @functools.wraps(method)
    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return run_sync(method(self, *args, **kwargs))

    name = method.__name__.removeprefix("a")
    wrapper.__name__ = name
    wrapper.__qualname__ = method.__qualname__.rsplit(".", 1)[0] + "." + name
    wrapper.__doc__ = f"Blocking twin of :meth:`{method.__name__}`. " + (method.__doc__ or "")
    return wrapper
