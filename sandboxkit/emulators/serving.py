"""How an emulator runs: in the caller's running loop (``async with``), on a thread of its own
with its own loop (``with``: tests and benchmarks, which may change its faults while it runs) or
as the whole process until signalled (``sandboxkit emulate``); and the private root its local
sandboxes live in, made when it starts and removed when it stops."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

from ..backends.subprocess import SubprocessBackend
from ..client import SandboxClient
from ..local.isolation import IsolationReport
from ..registry import get_backend
from ..testing.faults import Faults

if TYPE_CHECKING:
    from aiohttp import web

OUTPUT_BYTES = 16 * 1024 * 1024
"""Output an emulator keeps per stream. The real services stream everything; keeping more than
a backend's cap lets the backend, not the emulator, decide what is truncated."""

E = TypeVar("E", bound="Served")


class Served:
    """An emulator: :meth:`start` listens on ``host``/``port`` (``url`` is where), :meth:`aclose`
    stops every sandbox it made and the server. Subclasses write those two; this class runs
    them in each of the three ways."""

    root: Path | None = None
    """Where the emulated sandboxes' local sandboxes live, while it runs."""
    _local: SandboxClient | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, *, host: str, port: int, api_key: str | None, faults: Faults | None) -> None:
        """``api_key``: the key a client must send (None accepts any); ``port`` 0 picks one."""
        self.host = host
        self.port = port
        self.api_key = api_key
        self.faults = faults or Faults()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    # -- the local sandboxes behind the emulated ones ------------------------------------------

    @property
    def local(self) -> SubprocessBackend:
        """The local backend whose sandboxes stand for the emulated ones (while it runs)."""
        assert self._local is not None, "the emulator is not running"
        backend = self._local.backend
        assert isinstance(backend, SubprocessBackend)
        return backend

    @property
    def isolation(self) -> IsolationReport:
        """How the local sandboxes behind the emulated ones are confined."""
        return self.local.isolation

    def _open_local(self, prefix: str) -> SandboxClient:
        """The local backend, on a private root named with ``prefix``, whose sandboxes stand
        for the emulated ones."""
        root = Path(tempfile.mkdtemp(prefix=prefix))
        os.chmod(root, 0o711)  # an unprivileged sandbox uid must reach its directory
        self.root = root
        self._local = get_backend("subprocess", root=root, output_bytes=OUTPUT_BYTES)
        return self._local

    async def _close_local(self) -> None:
        """Stop the HTTP server (if it serves one), then close the local backend and remove
        its root: the subclass's ``aclose`` stops its sandboxes first, which ends the commands
        still running for requests in flight, so their handlers answer rather than being
        destroyed."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._local is not None:
            await self._local.aclose()
            self._local = None
        if self.root is not None:
            await asyncio.to_thread(shutil.rmtree, self.root, True)
            self.root = None

    async def _listen_http(self, app: web.Application) -> None:
        """Serve an aiohttp ``app`` on ``host``/``port`` (``port`` then the one bound)."""
        from aiohttp import web

        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]

    # -- in the caller's loop ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- on a thread of its own ----------------------------------------------------------------

    def start_in_thread(self) -> Self:
        """Serve from a daemon thread with its own event loop (for synchronous callers)."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        name = f"{type(self).__name__}-loop"
        self._thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout=120)
        return self

    def close(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout=120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve_until_signalled(emulator: E, announce: Callable[[E], str]) -> int:
    """Serve ``emulator`` until SIGINT/SIGTERM, having printed ``announce(emulator)`` once it
    accepts connections (the variables a client sets: the URL first); then stop it, which
    stops the emulated sandboxes."""

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, done.set)
        async with emulator:
            print(announce(emulator), flush=True)
            await done.wait()
        print(f"{type(emulator).__name__} stopped", file=sys.stderr, flush=True)

    asyncio.run(main())
    return 0
