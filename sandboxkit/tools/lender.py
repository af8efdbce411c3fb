"""Whole sandboxes lent to one holder at a time: a rollout that calls tools across turns.

A :class:`~sandboxkit.pool.SandboxPool` leases a sandbox per call, to whoever is next; a
rollout needs the same sandbox for all its calls (its files, its interpreter's state) and no
one else in it. The lender hands each holder a sandbox of its own, created only when none is
idle, and takes it back when the rollout ends: made as new and kept for the next holder where
the backend can, so that no leftover can reach the next rollout; otherwise stopped, and a
replacement created in the background (:mod:`sandboxkit.renewal`, which a pool's judging
sandboxes follow too). Either way a training step reuses what the step before made, rather
than creating one sandbox per rollout per step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..client import Sandbox
from ..keywords import suggest_keywords
from ..registry import BackendLike
from ..renewal import Renewal, prime
from ..retry import retried
from ..session import Session

logger = logging.getLogger("sandboxkit.tools")


@dataclass
class LenderStats:
    leases: int = 0
    created: int = 0
    reused: int = 0
    """Leases served at once by an idle sandbox (wiped after an earlier holder, or a spare
    made to replace one), with no create to wait for."""
    replaced: int = 0
    """Returned sandboxes stopped rather than reused (backend, wipe failure or wear)."""
    evicted: int = 0
    """Idle sandboxes of one image stopped to make room for a holder of another."""


@suggest_keywords
class SandboxLender:
    """Lends whole sandboxes, one holder each; see the module's docstring.

    ``reuse``: renew (or wipe) and reuse returned sandboxes (None: where the backend can
    renew them, see :class:`~sandboxkit.renewal.Renewal`);
    ``max_uses``: holders a sandbox serves before it is replaced; ``session``: whose
    sandboxes these are (default: one of its own, closed with the lender); other keywords
    (``tags``, ``env``, ...) go to every sandbox created; ``image`` is the default of
    :meth:`alease`'s. An idle sandbox serves only a holder of its own image; a lease that
    must create one stops the longest idle sandbox of another image, if any, so that the
    lender keeps no more sandboxes than its busiest moment needed, whichever images.

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
        self._renewal = Renewal(self.session.client.backend, reuse)
        self.reuse = self._renewal.reuse
        self.max_uses = max_uses
        self.retries = retries
        self.backoff = backoff
        self.image = image
        self._options: dict[str, Any] = {
            "tags": ("sandboxkit-lent", *tags),
            "env": env,
            **sandbox_options,
        }
        self.stats = LenderStats()
        self._lock = threading.Lock()
        self._idle: list[tuple[str | None, Sandbox]] = []
        """Idle sandboxes and their images, the longest idle first."""
        self._uses: dict[str, int] = {}
        self._images: dict[str, str | None] = {}
        """The image of each sandbox lent or idle."""
        self._background: set[asyncio.Future[None]] = set()
        self._returning: dict[asyncio.Future[None], str | None] = {}
        """Returns in flight (wipes), and their images: a lease of the same image waits for
        them rather than create."""
        self.closed = False

    def __repr__(self) -> str:
        return f"<SandboxLender {self.session.run_tag} idle={len(self._idle)} {self.stats}>"

    async def alease(self, image: str | None = None) -> Sandbox:
        """A sandbox for this holder alone, made from ``image`` (None: the lender's): an idle
        one, else one being wiped (a wipe takes far less than a create), else a new one."""
        wanted = self.image if image is None else image
        while True:
            with self._lock:
                if self.closed:
                    raise RuntimeError("the lender is closed")
                mine = [n for n, (made, _) in enumerate(self._idle) if made == wanted]
                if mine:
                    self.stats.leases += 1
                    self.stats.reused += 1
                    return self._idle.pop(mine[-1])[1]
                loop = asyncio.get_running_loop()
                returning = [
                    t
                    for t, made in self._returning.items()
                    if made == wanted and t.get_loop() is loop
                ]
                other = self._idle.pop(0)[1] if not returning and self._idle else None
                self.stats.evicted += other is not None
            if other is not None:  # room for the one made now
                self._spawn(self._retired(other))
            if not returning:
                break
            await asyncio.wait(returning, return_when=asyncio.FIRST_COMPLETED)
        sandbox = await self._make(wanted, attempts=self.retries + 1)
        with self._lock:
            self.stats.leases += 1
        return sandbox

    async def _make(self, image: str | None, *, attempts: int) -> Sandbox:
        """A new sandbox from ``image``, counted."""
        sandbox = await retried(
            lambda: self.session.asandbox(**self._options, image=image),
            attempts=attempts,
            backoff=self.backoff,
            logger=logger,
        )
        with self._lock:
            self.stats.created += 1
            self._uses[sandbox.id] = 0
            self._images[sandbox.id] = image
        return sandbox

    async def areturn(self, sandbox: Sandbox) -> None:
        """Take a sandbox back: wiped and made idle, or stopped and replaced."""
        with self._lock:
            uses = self._uses[sandbox.id] = self._uses.get(sandbox.id, 0) + 1
        image = self._images.get(sandbox.id, self.image)
        if (
            self.reuse
            and uses < self.max_uses
            and not self.closed
            and await self._renewal.renewed(sandbox)
        ):
            with self._lock:
                if not self.closed:
                    self._idle.append((image, sandbox))
                    return
        with self._lock:
            self.stats.replaced += 1
        await self._retired(sandbox)
        if not self.closed:
            self._spare(image)

    async def _retired(self, sandbox: Sandbox) -> None:
        """Stop a sandbox that is lent no more."""
        with self._lock:
            self._uses.pop(sandbox.id, None)
            self._images.pop(sandbox.id, None)
        await self._stop(sandbox)

    def give_back(self, sandbox: Sandbox) -> asyncio.Future[None]:
        """:meth:`areturn` in the background, on the running loop: a rollout's ``reset`` need
        not wait for the wipe (:meth:`aclose` waits for what is still in flight), and a
        caller that awaits it and gives up does not stop a wipe half-way (the sandbox would
        be neither lent again nor stopped until the lender closed)."""
        task = self._spawn(self.areturn(sandbox))
        self._returning[task] = self._images.get(sandbox.id, self.image)
        task.add_done_callback(lambda done: self._returning.pop(done, None))
        return task

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``work`` in the background, on the running loop (:meth:`asettle` waits)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _spare(self, image: str | None) -> None:
        """Create an idle sandbox from ``image`` in the background, for the next holder."""

        async def make() -> None:
            try:
                sandbox = await self._make(image, attempts=1)
            except Exception as exc:  # the next lease creates one itself
                logger.info("could not create a spare sandbox: %r", exc)
                return
            await prime(sandbox)
            with self._lock:
                closed = self.closed
                if not closed:
                    self._idle.append((image, sandbox))
            if closed:
                await self._stop(sandbox)

        self._spawn(make())

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
