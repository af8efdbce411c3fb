"""How an emulator that serves from an event loop is started: in the caller's running loop, or
on a thread of its own with its own loop (for synchronous callers: tests, benchmarks)."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Self


class LoopServed:
    """``async with emu`` or ``with emu`` around an emulator's ``start()`` and ``aclose()``."""

    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

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
