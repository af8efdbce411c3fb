"""Whole sandboxes lent to one holder at a time: a rollout that calls tools across turns.

A :class:`~sandboxkit.pool.SandboxPool` leases a sandbox per call, to whoever is next; a
rollout needs the same sandbox for all its calls (its files, its interpreter's state) and no
one else in it. The lender hands each holder a sandbox of its own, created only when none is
idle, and takes it back when the rollout ends: made as new and kept for the next holder where
the backend can (the local backend's ``renew``: its storage, template and processes made
again), so that no leftover can reach the next rollout; otherwise stopped, and a replacement
created in the background. (A backend without ``renew`` is wiped instead, where the caller
asks for reuse: what a wipe cannot reach is then the caller's risk.) Either way a training
step reuses what the step before made, rather than creating one sandbox per rollout per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..client import Sandbox
from ..keywords import suggest_keywords
from ..registry import BackendLike
from ..retry import retried
from ..session import Session

logger = logging.getLogger("sandboxkit.tools")

SCRATCH = "/tmp/.sandboxkit"
"""Where remote backends' exec wrappers keep their files while an exec runs (Daytona's, one
directory per exec: the wipe's own too)."""

WIPE = (
    'w=$(pwd) && t=${TMPDIR:-/tmp} && [ "$w" != / ] && [ "$t" != / ] || exit 1; '
    'chmod -R u+rwX -- "$w" "$t" 2>/dev/null; '
    f'find "$w" "$t" -mindepth 1 -maxdepth 1 ! -path {SCRATCH} -exec rm -rf -- {{}} + 2>/dev/null; '
    f'[ -z "$(find "$w" "$t" -mindepth 1 -maxdepth 1 ! -path {SCRATCH} -print -quit 2>/dev/null)" ]'
)
"""For a backend that cannot renew a sandbox: empty the workdir and the sandbox's temporary
directory (``$TMPDIR`` where the backend sets one), giving back the permissions a program took
away first, but :data:`SCRATCH` (wiping it took the wipe's own exec wrapper's files on
Daytona, which failed every wipe); fails unless both are empty after. Processes may outlive
an exec there, so reuse is the caller's choice, and what the wipe cannot reach (metadata,
inode numbers, anything outside the two directories) its risk."""


_WIPE_TIMEOUT = 30.0


async def _prime(sandbox: Sandbox) -> None:
    """A first exec starts what execs need (the local backend's warm template), so that the
    next holder does not wait for it."""
    with contextlib.suppress(Exception):
        await sandbox.aexec(["true"], timeout=_WIPE_TIMEOUT)


@dataclass
class LenderStats:
    leases: int = 0
    created: int = 0
    reused: int = 0
    """Leases served at once by an idle sandbox (wiped after an earlier holder, or a spare
    made to replace one), with no create to wait for."""
    replaced: int = 0
    """Returned sandboxes stopped rather than reused (backend, wipe failure or wear)."""


def leaves_no_processes(sandbox_backend: object) -> bool:
    """Whether the backend says nothing an exec starts outlives it (then a renewed sandbox is
    as good as new)."""
    return bool(getattr(sandbox_backend, "execs_leave_no_processes", False))


def renewer(sandbox_backend: object) -> Callable[[str], Awaitable[None]] | None:
    """The backend's ``renew(sandbox_id)``, which makes a sandbox as new in place, if it has
    one (the local backend)."""
    renew: Callable[[str], Awaitable[None]] | None = getattr(sandbox_backend, "renew", None)
    return renew


@suggest_keywords
class SandboxLender:
    """Lends whole sandboxes, one holder each; see the module's docstring.

    ``reuse``: wipe and reuse returned sandboxes (None: where the backend allows it);
    ``max_uses``: holders a sandbox serves before it is replaced; ``session``: whose
    sandboxes these are (default: one of its own, closed with the lender); other keywords
    (``tags``, ``image``, ``env``, ...) go to every sandbox created.

    Safe to use from several threads and event loops: a lease or return touches shared state
    only under a lock, never across an ``await``.
    """

    def __init__(
        self,
        client: BackendLike = None,
        *,
        reuse: bool | None = None,
        max_uses: int = 100,
        retries: int = 3,
        backoff: float = 0.5,
        session: Session | None = None,
        tags: Iterable[str] = (),
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        **sandbox_options: Any,
    ) -> None:
        if session is not None and client is not None:
            raise ValueError("pass a client or a session, not both")
        if max_uses < 1:
            raise ValueError("max_uses must be >= 1")
        self.session = session or Session(client)
        self._owns_session = session is None
        backend = self.session.client.backend
        self.reuse = leaves_no_processes(backend) if reuse is None else reuse
        self._renew = renewer(backend)
        self.max_uses = max_uses
        self.retries = retries
        self.backoff = backoff
        self._options: dict[str, Any] = {
            "tags": ("sandboxkit-lent", *tags),
            "image": image,
            "env": env,
            **sandbox_options,
        }
        self.stats = LenderStats()
        self._lock = threading.Lock()
        self._idle: list[Sandbox] = []
        self._uses: dict[str, int] = {}
        self._background: set[asyncio.Future[None]] = set()
        self._returning: set[asyncio.Future[None]] = set()
        """Returns in flight (wipes), which a lease waits for rather than create."""
        self.closed = False

    def __repr__(self) -> str:
        return f"<SandboxLender {self.session.run_tag} idle={len(self._idle)} {self.stats}>"

    async def alease(self) -> Sandbox:
        """A sandbox for this holder alone: an idle one, else one being wiped (a wipe takes
        far less than a create), else a new one."""
        while True:
            with self._lock:
                if self.closed:
                    raise RuntimeError("the lender is closed")
                if self._idle:
                    self.stats.leases += 1
                    self.stats.reused += 1
                    return self._idle.pop()
                loop = asyncio.get_running_loop()
                returning = [t for t in self._returning if t.get_loop() is loop]
            if not returning:
                break
            await asyncio.wait(returning, return_when=asyncio.FIRST_COMPLETED)
        sandbox = await retried(
            lambda: self.session.asandbox(**self._options),
            attempts=self.retries + 1,
            backoff=self.backoff,
            logger=logger,
        )
        with self._lock:
            self.stats.leases += 1
            self.stats.created += 1
            self._uses[sandbox.id] = 0
        return sandbox

    async def areturn(self, sandbox: Sandbox) -> None:
        """Take a sandbox back: wiped and made idle, or stopped and replaced."""
        with self._lock:
            uses = self._uses[sandbox.id] = self._uses.get(sandbox.id, 0) + 1
        if self.reuse and uses < self.max_uses and not self.closed and await self._wiped(sandbox):
            with self._lock:
                if not self.closed:
                    self._idle.append(sandbox)
                    return
        with self._lock:
            self.stats.replaced += 1
            self._uses.pop(sandbox.id, None)
        await self._stop(sandbox)
        if not self.closed:
            self._spare()

    def give_back(self, sandbox: Sandbox) -> asyncio.Future[None]:
        """:meth:`areturn` in the background, on the running loop: a rollout's ``reset`` need
        not wait for the wipe (:meth:`aclose` waits for what is still in flight), and a
        caller that awaits it and gives up does not stop a wipe half-way (the sandbox would
        be neither lent again nor stopped until the lender closed)."""
        task = asyncio.ensure_future(self.areturn(sandbox))
        self._background.add(task)
        self._returning.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(self._returning.discard)
        return task

    def _spare(self) -> None:
        """Create an idle sandbox in the background, for the next holder."""

        async def make() -> None:
            try:
                sandbox = await self.session.asandbox(**self._options)
            except Exception as exc:  # the next lease creates one itself
                logger.info("could not create a spare sandbox: %r", exc)
                return
            await _prime(sandbox)
            with self._lock:
                self.stats.created += 1
                self._uses[sandbox.id] = 0
                closed = self.closed
                if not closed:
                    self._idle.append(sandbox)
            if closed:
                await self._stop(sandbox)

        task = asyncio.ensure_future(make())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _wiped(self, sandbox: Sandbox) -> bool:
        """Renew the sandbox (then start what its execs need) or, where the backend cannot,
        wipe it; False if that failed."""
        try:
            if self._renew is not None:
                await self._renew(sandbox.id)
                await _prime(sandbox)
                return True
            result = await sandbox.aexec(["sh", "-c", WIPE], timeout=_WIPE_TIMEOUT)
        except Exception as exc:
            logger.info("could not wipe %s (%r); replacing it", sandbox.id, exc)
            return False
        if not result.ok:
            logger.info("%s was not left empty by its wipe; replacing it", sandbox.id)
        return result.ok

    async def _stop(self, sandbox: Sandbox | str) -> None:
        try:
            await self.session.astop_sandbox(sandbox)
        except Exception as exc:  # the session stops it again when it closes
            logger.warning("could not stop %s: %r", sandbox, exc)

    async def asettle(self) -> None:
        """Wait until the returns and spares in flight on this loop are done (a benchmark's
        or a test's next step should not race them)."""
        loop = asyncio.get_running_loop()
        while pending := [t for t in self._background if t.get_loop() is loop]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop every sandbox lent or idle (the session knows them all)."""
        with self._lock:
            self.closed = True
            self._idle.clear()
        await self.asettle()
        if self._owns_session:
            await self.session.aclose()
        else:
            for sandbox_id in list(self._uses):
                await self._stop(sandbox_id)
