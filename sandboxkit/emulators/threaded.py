"""How an emulator's server runs: on an event loop of its own, on a thread of this process (tests
and benchmarks, which may change its faults while it runs) or as the whole process
(``sandboxkit emulate``); and the private root its local sandboxes live in."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ..protocol import Backend
from ..registry import get_backend

OUTPUT_BYTES = 16 * 1024 * 1024
"""Output an emulator keeps per stream. The real services stream everything; keeping more than
a backend's cap lets the backend, not the emulator, decide what is truncated."""

T = TypeVar("T")


def local_backend(prefix: str) -> tuple[Path, Backend]:
    """A private root (named with ``prefix``) and the local backend on it, whose sandboxes
    stand for the emulated ones."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o711)  # an unprivileged sandbox uid must reach its directory
    return root, get_backend("subprocess", root=root, output_bytes=OUTPUT_BYTES).backend


class Server(Protocol):
    """One emulator's server: it listens once started, and removes its root when stopped."""

    @property
    def root(self) -> Path: ...

    async def start(self, host: str, port: int) -> str:
        """Listen; the URL a client uses."""
        ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Server)
E = TypeVar("E", bound="ThreadedEmulator[Any]")


class ThreadedEmulator(Generic[S]):
    """A server (made by :meth:`_make_server`) on its own thread and event loop.

    Use as a context manager (or ``start()``/``stop()``); ``url`` is where it listens.
    """

    thread_name = "sandboxkit-emulator"

    def __init__(self, *, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: S | None = None
        self.url = ""

    def _make_server(self) -> S:
        raise NotImplementedError

    @property
    def server(self) -> S:
        assert self._server is not None, "the emulator is not running"
        return self._server

    @property
    def root(self) -> Path:
        """Where the emulated sandboxes' local sandboxes live."""
        return self.server.root

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the emulator's loop and wait for it."""
        assert self._loop is not None, "the emulator is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self: E) -> E:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=self.thread_name, daemon=True
        )
        self._thread.start()
        self._server = self._make_server()
        self.url = self.call(self.server.start(self.host, self.port))
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._server is not None:
            self.call(self._server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self: E) -> E:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_until_signalled(
    make_server: Callable[[], Server], host: str, port: int, announce: Callable[[str], str]
) -> int:
    """Serve until SIGINT/SIGTERM, having printed ``announce(url)`` (the variables a client
    sets: the URL first); then stop, which stops the emulated sandboxes."""

    async def main() -> None:
        server = make_server()
        url = await server.start(host, port)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, done.set)
        print(announce(url), flush=True)
        try:
            await done.wait()
        finally:
            await server.stop()

    asyncio.run(main())
    return 0
