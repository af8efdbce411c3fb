"""Sandboxes owned by one run, stopped however the run ends.

A training run that leaks sandboxes pays for them (remote providers) or fills the disk (local
backend). A :class:`Session` tags every sandbox it creates and stops them all when closed: on
context-manager exit, at interpreter exit, on SIGINT/SIGTERM, and when a create is cancelled
half-way. What a SIGKILL leaves behind is found later by its tags with :meth:`Session.reap`.

At interpreter exit the sessions still open are closed by a hook of ``threading``'s shutdown,
not ``atexit``: by ``atexit`` time ``concurrent.futures`` has shut down every thread pool for
good, and stopping a sandbox may need one (aiohttp resolves host names on the loop's default
executor, SDKs call ``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401  (first, so that its exit hook runs after ours)
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from types import FrameType, TracebackType
from typing import Any

from .client import Opening, Sandbox
from .coordination import launcher_run_id
from .keywords import suggest_keywords
from .portal import blocking, run_sync
from .protocol import SandboxInfo, SandboxStatus
from .registry import BackendLike, as_client
from .retry import retrying

logger = logging.getLogger("sandboxkit.session")

RUN_TAG = "sandboxkit-run"
"""Tag key naming the run a sandbox belongs to (``sandboxkit-run=<run_id>``)."""
SESSION_TAG = "sandboxkit-session"
"""Tag key naming the session that created a sandbox; a run may span many (one per rank)."""
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], Any] | int | None

_open_sessions: dict[Session, int] = {}
"""Sessions not yet closed, with the pid of the process that made them."""


def _close_open_sessions() -> None:
    """Close what this process opened; a forked child (which runs this hook too) leaves its
    parent's sandboxes alone."""
    for session, pid in list(_open_sessions.items()):
        if pid == os.getpid():
            session._close_at_exit()


# Hooks run in reverse order of registration: the thread pools' module, imported above, shuts
# them down after this hook.
threading._register_atexit(_close_open_sessions)  # type: ignore[attr-defined]  # CPython >= 3.9


@suggest_keywords
class Session:
    """Creates sandboxes for one run and stops every one of them when closed.

    ``client`` is a :class:`SandboxClient`, a backend, a backend name, or None for the
    configured backend; a client it makes from a name it closes, one it was given it leaves open.
    Sandboxes carry ``sandboxkit-run=<run_id>`` (``run_id`` defaults to one every rank of a
    torchrun / accelerate launch computes alike, else to a fresh id; give the same one to every
    rank of a run to count them together), a per-session tag, and ``tags``
    (free strings such as ``run=...``, ``step=...``, ``model=...``). With ``handle_signals``,
    SIGINT and SIGTERM close the session and then reach the handlers installed before it.
    """

    def __init__(
        self,
        client: BackendLike = None,
        *,
        tags: Iterable[str] = (),
        run_id: str | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.client, self._owns_client = as_client(client)
        self.run_id = run_id or launcher_run_id() or uuid.uuid4().hex[:12]
        self.run_tag = f"{RUN_TAG}={self.run_id}"
        self.session_tag = f"{SESSION_TAG}={uuid.uuid4().hex[:12]}"
        self.tags: tuple[str, ...] = (self.run_tag, self.session_tag, *tags)
        self.closed = False
        self._sandboxes: dict[str, Sandbox] = {}
        self._creating: set[asyncio.Task[Sandbox]] = set()
        self._unfinished_creates = False
        """Whether a create raised or was cancelled: the provider may have made its sandbox."""
        self._stopping: set[asyncio.Task[None]] = set()
        self._previous: dict[int, _Handler] = {}
        _open_sessions[self] = os.getpid()
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def __repr__(self) -> str:
        return f"<Session {self.run_tag} on {self.client.name}: {len(self._sandboxes)} sandboxes>"

    @property
    def sandboxes(self) -> list[Sandbox]:
        """The sandboxes this session created and has not stopped."""
        return list(self._sandboxes.values())

    # -- creating and stopping -------------------------------------------------------------

    def asandbox(self, /, *, tags: Iterable[str] = (), **options: Any) -> Opening:
        """Create a sandbox (options as :meth:`SandboxClient.asandbox`) tagged for this run:
        awaited, or with ``async with`` to have the session stop it at the end of the block.

        The create is shielded: if the caller is cancelled while it is in flight, the sandbox
        it eventually returns is stopped instead of leaking.
        """
        return Opening(self._create(tags, options), self.astop_sandbox)

    async def _create(self, tags: Iterable[str], options: dict[str, Any]) -> Sandbox:
        self._check_open()
        task = asyncio.ensure_future(self.client.asandbox(tags=(*self.tags, *tags), **options))
        self._creating.add(task)
        task.add_done_callback(self._create_done)
        try:
            sandbox = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._stop_abandoned)
            raise
        self._sandboxes[sandbox.id] = sandbox
        logger.debug("created %s", sandbox.id)
        if self.closed:  # closed while the create was in flight
            await self.astop_sandbox(sandbox)
            raise RuntimeError("the session was closed while the sandbox was being created")
        return sandbox

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the session is closed")

    def _create_done(self, task: asyncio.Task[Sandbox]) -> None:
        self._creating.discard(task)
        if task.cancelled() or task.exception() is not None:
            self._unfinished_creates = True

    def _stop_abandoned(self, task: asyncio.Task[Sandbox]) -> None:
        """Stop what a create returned after its caller was cancelled."""
        if task.cancelled() or task.exception() is not None:
            return
        sandbox = task.result()
        logger.debug("stopping %s: its creation was cancelled", sandbox.id)
        stopping = asyncio.ensure_future(self.astop_sandbox(sandbox))
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    async def astop_sandbox(self, sandbox: Sandbox | str) -> None:
        """Stop one sandbox now (retrying transient failures) and forget it."""
        sandbox_id = sandbox if isinstance(sandbox, str) else sandbox.id
        async for attempt in retrying(attempts=3, backoff=0.2, logger=logger):
            with attempt:
                await self.client.astop(sandbox_id)
        self._sandboxes.pop(sandbox_id, None)
        logger.debug("stopped %s", sandbox_id)

    async def aclose(self) -> None:
        """Stop every sandbox of this session, concurrently, then release the client.

        Creates still in flight on this event loop are awaited first, with the stops of the
        sandboxes they made for a caller that gave up; sandboxes whose create raised after
        the provider made them are found by the session tag (asked only if a create failed:
        otherwise the session knows all its sandboxes, and an unused session, or one whose
        provider is gone, makes no call).
        """
        self.closed = True
        if threading.current_thread() is threading.main_thread():
            self._restore_signals()
        _open_sessions.pop(self, None)
        loop = asyncio.get_running_loop()
        # Until none is left: a create that ends after its caller gave up adds a stop.
        while mine := [t for t in (*self._creating, *self._stopping) if t.get_loop() is loop]:
            await asyncio.gather(*mine, return_exceptions=True)
        listed: set[str] = set()
        try:
            if self._unfinished_creates:
                listed = {info.id for info in await self.client.alist(tags=[self.session_tag])}
        except Exception as exc:  # stop what we know of even if listing fails
            logger.warning("could not list the sandboxes of %s: %r", self.session_tag, exc)
        ids = sorted(listed | set(self._sandboxes))
        results = await asyncio.gather(
            *(self.astop_sandbox(i) for i in ids), return_exceptions=True
        )
        for sandbox_id, result in zip(ids, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("could not stop %s: %r", sandbox_id, result)
        if self._owns_client:
            await self.client.aclose()

    # -- finding sandboxes of a run --------------------------------------------------------

    async def alist(
        self, *, status: SandboxStatus | str | None = None, tags: Iterable[str] = ()
    ) -> list[SandboxInfo]:
        """Sandboxes of this run (every session sharing ``run_id``) with ``tags``."""
        return await self.client.alist(tags=(self.run_tag, *tags), status=status)

    async def acount(
        self, *, status: SandboxStatus | str | None = None, tags: Iterable[str] = ()
    ) -> int:
        """How many sandboxes of this run are in ``status`` (any status if None)."""
        return len(await self.alist(status=status, tags=tags))

    async def areap(
        self,
        *,
        tags: Iterable[str] = (),
        older_than: float | timedelta | None = None,
        dry_run: bool = False,
        all_sandboxes: bool = False,
    ) -> list[SandboxInfo]:
        """Stop sandboxes carrying all of ``tags`` started more than ``older_than`` ago.

        For runs that died without cleaning up (SIGKILL, OOM, a lost node). Without tags it
        would stop every sandbox of the account, so that needs ``all_sandboxes=True``.
        Sandboxes whose start time is unknown are left alone when ``older_than`` is given.
        Returns what was (with ``dry_run``: would be) stopped.
        """
        wanted = tuple(tags)
        if not wanted and not all_sandboxes:
            raise ValueError("reap needs at least one tag, or all_sandboxes=True")
        if isinstance(older_than, (int, float)):
            older_than = timedelta(seconds=older_than)
        now = datetime.now(timezone.utc)
        found = [
            info
            for info in await self.client.alist(tags=wanted)
            if older_than is None
            or (info.started_at is not None and now - info.started_at >= older_than)
        ]
        if not dry_run:
            await asyncio.gather(*(self.astop_sandbox(info.id) for info in found))
        logger.info("reaped %d sandboxes with tags %s", len(found), list(wanted))
        return found

    def close(self) -> None:
        """Blocking twin of :meth:`aclose`; also puts back the signal handlers (which only the
        main thread can do, and ``aclose`` runs on the portal thread here)."""
        if threading.current_thread() is threading.main_thread():
            self._restore_signals()
        run_sync(self.aclose())

    sandbox = blocking(asandbox)
    stop_sandbox = blocking(astop_sandbox)
    list = blocking(alist)
    count = blocking(acount)
    reap = blocking(areap)

    # -- closing however the process ends --------------------------------------------------

    def _close_at_exit(self) -> None:
        if not self.closed:
            self.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if self.closed:  # closed off the main thread, which could not restore the handlers
            self._restore_signals()
        else:
            logger.info("signal %d: stopping the sandboxes of %s", signum, self.run_tag)
            self.close()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def _restore_signals(self) -> None:
        """Put back the handlers found at start, unless someone installed theirs over ours (then
        ours stays in their chain and, once closed, only passes signals on)."""
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
