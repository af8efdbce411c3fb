"""A pool of warm sandboxes shared by every evaluation of a training run.

Creating a sandbox costs far more than running a test in one, so a reward function keeps one
pool for the whole run and calls :meth:`SandboxPool.arun` per evaluation. Nothing of one
evaluation may reach the next (its files would take the next one's memory and disk, and could
stand where it writes), so a sandbox whose leases have ended is made as new before its next
lease where the backend can, else replaced by a fresh one (:mod:`sandboxkit.renewal`). The
pool hides the provider's flakiness from training: transient errors are retried with backoff,
dead sandboxes are replaced, worn ones recycled, and what cannot be recovered surfaces as an
infrastructure error (which rewards turn into ``None``) rather than as a crash or a leaked
sandbox. A provider that rate-limits gets fewer calls at once
(:class:`~sandboxkit.budget.ConcurrencyBudget`), and an evaluation given a deadline is cut off
there rather than holding up its batch.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

from tenacity import RetryCallState
from tqdm import tqdm

from .budget import ConcurrencyBudget
from .client import Sandbox
from .coordination import SandboxCap, SharedBudget, Token, account_key, coordination_wanted
from .errors import (
    INFRASTRUCTURE_ERRORS,
    DeadlineExceededError,
    RateLimitedError,
    SandboxLostError,
    SandboxNotFoundError,
)
from .keywords import check_keywords, keyword_only, suggest_keywords
from .portal import blocking
from .protocol import SandboxStatus
from .registry import BackendLike, sandbox_keywords_for
from .renewal import Renewal
from .retry import TRANSIENT_ERRORS, retried
from .session import Session

logger = logging.getLogger("sandboxkit.pool")

T = TypeVar("T")
_ALIVE = (SandboxStatus.RUNNING, SandboxStatus.PENDING)
_RETRIED = (*TRANSIENT_ERRORS, SandboxLostError)
"""What an evaluation is tried again for (a lost sandbox: on another one)."""


@dataclasses.dataclass
class PoolStats:
    """Counters a training loop can log; ``pool.stats`` returns a fresh snapshot."""

    created: int = 0
    """Sandboxes created, replacements and recycling included."""
    replaced: int = 0
    """Sandboxes replaced because they died, failed a health check or could not be renewed."""
    recycled: int = 0
    """Sandboxes replaced by a fresh one once their leases ended: after every lease where the
    pool does not renew them (``reuse``), else after ``max_uses`` leases."""
    renewed: int = 0
    """Sandboxes made as new in place once their leases ended, for the next lease."""
    retries: int = 0
    """Evaluation attempts that failed and were tried again."""
    failures: int = 0
    """Evaluations that raised an infrastructure error once the retry budget was spent."""
    size: int = 0
    """Sandboxes ready for leases now."""
    in_use: int = 0
    """Leases held now."""
    leases: int = 0
    """Leases handed out so far."""
    abandoned: int = 0
    """Sandboxes retired because an evaluation was cancelled while running in them (its
    deadline passed, or its caller gave up): its command may still be running there."""
    expired: int = 0
    """Evaluations cut off at their deadline."""
    rate_limited: int = 0
    """Calls the provider refused for its rate (``RateLimitedError``), creations included."""
    concurrency_limit: int = 0
    """Leases, and sandbox creations, allowed in flight now: ``max_concurrency``, lowered
    while the provider rate-limits."""
    evicted: int = 0
    """Idle sandboxes of one image stopped to make room for a lease of another (``size``
    bounds the pool's sandboxes of every image together)."""


class _Queue:
    """Tasks waiting for something to become available, first come first served.

    Each wake-up goes to one waiter: a release serves one, and waking all of them would cost
    O(waiters) per release. A waiter woken in vain goes back to the front.
    """

    def __init__(self) -> None:
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def __len__(self) -> int:
        return len(self._waiters)

    def clear(self) -> None:
        self._waiters.clear()

    def wake(self) -> None:
        """Tell the longest-waiting task that something became available."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def wait(self, *, first: bool) -> None:
        """Queue until woken; ``first``: at the front (a waiter that was woken in vain)."""
        waiter = asyncio.get_running_loop().create_future()
        if first:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif not waiter.cancelled():
                self.wake()  # woken, then cancelled: the wake-up is the next waiter's
            raise


async def _until(deadline: float, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``await make()``, cancelled once ``time.monotonic()`` passes ``deadline``.

    Then raises :class:`DeadlineExceededError`, but only once the cancelled work has unwound,
    so that the commands it was running have been killed (where the backend can kill them).
    Past the deadline already, it starts nothing (which would take a sandbox out of service).
    """
    if time.monotonic() >= deadline:
        raise DeadlineExceededError("its deadline had passed before it started")
    task = asyncio.ensure_future(make())
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), expire)
    try:
        return await task
    except asyncio.CancelledError:
        if expired and task.cancelled() and not _cancel_requested():
            raise DeadlineExceededError("cut off at its deadline") from None
        raise
    finally:
        timer.cancel()


def _cancel_requested() -> bool:
    """Whether the running task itself is being cancelled (knowable on Python >= 3.11; on
    3.10 a cancellation that lands just as the deadline passes reads as the deadline)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is not None and bool(cancelling())


@dataclasses.dataclass(eq=False)
class _Slot:
    sandbox: Sandbox
    checked: float
    """``time.monotonic()`` when the sandbox was last known to be alive."""
    image: str | None = None
    """The image it was made from (None: the backend's default)."""
    released: float = 0.0
    """``time.monotonic()`` when its last lease ended (or it was made): the least recently
    used idle sandbox is the one stopped to make room for another image."""
    leases: int = 0
    uses: int = 0
    spent: bool = False
    """A lease ran something in it since it was made or renewed, and has ended: it takes no
    new lease until it is renewed."""
    renewing: bool = False
    retired: bool = False
    seat: Token | None = None
    """Its place under the run's shared cap on live sandboxes (``max_sandboxes``)."""


@suggest_keywords
class SandboxPool:
    """``size`` sandboxes, each leased to up to ``per_sandbox`` evaluations at once.

    - ``max_concurrency`` caps leases over the whole pool (default ``size * per_sandbox``),
      and sandbox creations in flight;
    - ``adaptive_concurrency``: a provider's rate limiting (``RateLimitedError``) lowers that
      cap, which grows back while calls get through (see :mod:`sandboxkit.budget`); False
      keeps it fixed;
    - ``retries``: how many times an evaluation is tried again after a transient error or the
      loss of its sandbox (on a replacement), waiting ``backoff`` seconds, doubling, jittered;
    - ``reuse``: whether a sandbox whose leases have ended serves later leases, made as new
      first (:class:`~sandboxkit.renewal.Renewal`); None (default): where the backend can renew
      it (the local backend, Ray, Docker), else it is replaced by a fresh one; True: wiped
      where it cannot be renewed (what the wipe cannot reach is the caller's risk); False:
      always replaced. A renewal or wipe that fails replaces it too. With ``per_sandbox`` > 1
      the leases of one sandbox share it while they run, and it takes no new lease once one
      has ended, until it is renewed;
    - ``max_uses``: leases after which a sandbox is replaced rather than renewed;
    - ``health_check_after``: a sandbox idle for longer is checked (a cheap ``get``) before
      its next lease, since providers stop idle sandboxes on their own;
    - ``session``: the :class:`Session` whose sandboxes these are (default: one of its own,
      created from ``client`` and closed with the pool);
    - ``tags``, ``image``, ``env`` and other keywords go to every sandbox created (one that
      the backend does not take is a ``TypeError`` here); ``image`` is the default of
      :meth:`arun`'s, which leases only a sandbox made from the image it names. ``size``
      bounds the sandboxes of every image together: a lease of an image the pool has no
      sandbox of, the pool full, stops the least recently used idle sandbox of another image
      to make room (``stats.evicted``), else waits for one to become idle;
    - ``progress``: show a progress bar while starting (None: when stderr is a terminal);
    - ``coordinate``: share the provider account's budget with the other processes of this
      machine (:mod:`sandboxkit.coordination`): calls in flight, creations, the adaptive limit
      and its back-off; None (default): ``SANDBOXKIT_COORDINATE``, which by default turns it
      on under a launcher that started several local ranks (torchrun, accelerate launch);
    - ``max_sandboxes``: live sandboxes of the pool at most; coordinated, of the whole run on
      this machine (every pool of its ``run_id``), each rank keeping at most its share.

    The pool's state lives on one event loop: the loop it is first used from (the sandboxkit
    portal for the sync methods). Calls from another running loop are run on that one; once
    that loop is closed, the pool moves to the next loop that uses it.
    """

    def __init__(
        self,
        client: BackendLike = None,
        *,
        size: int = 8,
        per_sandbox: int = 1,
        reuse: bool | None = None,
        max_uses: int = 200,
        max_concurrency: int | None = None,
        adaptive_concurrency: bool = True,
        retries: int = 3,
        backoff: float = 0.5,
        health_check_after: float = 30.0,
        session: Session | None = None,
        tags: Iterable[str] = (),
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        progress: bool | None = None,
        coordinate: bool | None = None,
        max_sandboxes: int | None = None,
        **sandbox_options: Any,
    ) -> None:
        optional = [n for n in (max_concurrency, max_sandboxes) if n is not None]
        if min(size, per_sandbox, max_uses, *optional) < 1 or retries < 0:
            raise ValueError(
                "size, per_sandbox, max_uses, max_concurrency and max_sandboxes must be >= 1"
            )
        if session is not None and client is not None:
            raise ValueError("pass a client or a session, not both")
        accepted = sandbox_keywords_for(session.client if session is not None else client)
        if accepted is not None:
            check_keywords("SandboxPool()", sandbox_options, accepted | keyword_only(SandboxPool))
        self.session = session or Session(client)
        self._owns_session = session is None
        self._renewal = Renewal(self.session.client.backend, reuse)
        self.reuse = self._renewal.reuse
        """Whether sandboxes are renewed between leases (else replaced)."""
        self.size = size
        self.per_sandbox = per_sandbox
        self.max_uses = max_uses
        self.max_concurrency = max_concurrency or size * per_sandbox
        self.retries = retries
        self.backoff = backoff
        self.health_check_after = health_check_after
        self.progress = progress
        self.image = image
        self._sandbox_options: dict[str, Any] = {"tags": tuple(tags), "env": env, **sandbox_options}
        self._stats = PoolStats()
        self.max_sandboxes = max_sandboxes
        self._shared: SharedBudget | None = None
        self._cap: SandboxCap | None = None
        if coordination_wanted(coordinate):
            account = account_key(self.session.client.backend)
            self._shared = SharedBudget(
                account, self.max_concurrency, adaptive=adaptive_concurrency
            )
            if max_sandboxes is not None:
                self._cap = SandboxCap(account, self.session.run_id, max_sandboxes)
        # Shared, the limit adapts there; this one only counts this pool's rate limits.
        self._budget = ConcurrencyBudget(
            self.max_concurrency, adaptive=adaptive_concurrency and self._shared is None
        )
        self._slots: list[_Slot] = []
        self._retiring: list[_Slot] = []
        """Slots that take no new leases; stopped when their last lease ends."""
        self._creating: collections.Counter[str | None] = collections.Counter()
        """Sandboxes being made, by image, waiting for a turn included."""
        self._create_calls = 0
        """Create calls in flight: at most the budget's limit."""
        self._create_turns = _Queue()
        """Creations waiting for a turn to call the provider."""
        self._create_errors: dict[str | None, Exception] = {}
        """The last creation error of each image, for its next lease that finds none of it."""
        self._in_use = 0
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        """Background stops: awaited, not cancelled, by close (a half-done stop leaks)."""
        self._renewing: set[asyncio.Task[None]] = set()
        """Background renewals: awaited, not cancelled, by close (a half-done renewal would
        race the stop)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[str | None, _Queue] = collections.defaultdict(_Queue)
        """Leases waiting for a sandbox, a lease or an error, by image; each release wakes
        one (see :meth:`_wake`)."""

    def __repr__(self) -> str:
        return f"<SandboxPool {self.session.run_tag} {self.stats}>"

    @property
    def stats(self) -> PoolStats:
        return dataclasses.replace(
            self._stats,
            size=len(self._slots),
            in_use=self._in_use,
            rate_limited=self._budget.signals,
            concurrency_limit=self._shared.limit if self._shared else self._budget.limit,
        )

    # -- the home event loop ---------------------------------------------------------------

    async def _at_home(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the pool's loop, adopting the current loop if it has none."""
        loop = asyncio.get_running_loop()
        home = self._loop
        if home is not None and home is not loop and home.is_running():
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), home))
        if home is not loop:
            if home is not None:
                logger.debug("pool moves to a new event loop; its old one stopped")
            self._loop, self._create_calls, self._in_use = loop, 0, 0
            self._creating.clear()
            self._waiters.clear()
            self._create_turns.clear()
            self._tasks.clear()
            self._stopping.clear()
            self._renewing.clear()
            for slot in list(self._slots):
                stranded = slot.leases > 0 or slot.renewing or slot.spent
                slot.leases, slot.renewing = 0, False
                if not stranded:
                    continue
                # Its evaluation, or its renewal, ended with the old loop: a renewal (again)
                # ends whatever of it still runs; without one, it is replaced.
                if self._renewal.renews:
                    slot.spent = True
                    self._renew_later(slot)
                else:
                    self._retire(slot, why="abandoned")
                    self._stop_later(slot)
        return await make()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _spawn_renewal(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._renewing.add(task)
        task.add_done_callback(self._renewing.discard)

    # -- creating and stopping sandboxes ---------------------------------------------------

    def _target(self) -> int:
        """How many sandboxes the pool keeps: ``size``, within ``max_sandboxes`` (its share
        of them, coordinated)."""
        if self._cap is not None:
            return min(self.size, self._cap.share())
        return min(self.size, self.max_sandboxes or self.size)

    def _fill(self, image: str | None) -> list[asyncio.Task[None]]:
        """Start creating, from ``image``, what the pool lacks to reach its target."""
        if self._closed:
            return []
        missing = self._target() - len(self._slots) - self._creating.total()
        self._creating[image] += max(0, missing)
        return [self._spawn(self._add_sandbox(image)) for _ in range(missing)]

    def _make_room(self, image: str | None) -> None:
        """Stop the least recently used idle sandbox of another image, to create one of
        ``image`` in its place (the pool being full)."""
        idle = [s for s in self._slots if s.image != image and s.leases == 0 and not s.renewing]
        victim = min(idle, key=lambda s: s.released, default=None)
        if victim is not None:
            logger.debug("stopping idle %s to make room for %s", victim.sandbox.id, image)
            self._retire(victim, why="evicted", refill=image)
            self._stop_later(victim)

    def _wake(self, image: str | None) -> None:
        """Wake a waiter of ``image`` (a sandbox of it became free), else one of any other
        image: it can stop that sandbox, if idle, to make one of its own."""
        queue = self._waiters.get(image)
        if queue:
            queue.wake()
            return
        for other in self._waiters.values():
            if other:
                other.wake()
                return

    async def _create(self, image: str | None) -> Sandbox:
        """One create call, in turn: no more in flight than the budget's limit (creating
        hundreds of sandboxes at once is how a pool hammers a rate-limited provider)."""
        woken = False
        while (self._create_turns and not woken) or self._create_calls >= self._budget.limit:
            await self._create_turns.wait(first=woken)
            woken = True
        self._create_calls += 1
        if self._create_calls < self._budget.limit:
            self._create_turns.wake()  # room for more than this one (the limit grew)
        try:
            token = await self._shared.acquire("create") if self._shared else None
            try:
                return await self._counted(
                    self.session.asandbox(**{**self._sandbox_options, "image": image}),
                    token,
                    lambda: self._create_calls,
                )
            finally:
                if token is not None:
                    token.release()
        finally:
            self._create_calls -= 1
            self._create_turns.wake()

    async def _counted(
        self, call: Awaitable[T], token: Token | None, in_flight: Callable[[], int]
    ) -> T:
        """``await call``, telling the budget (and the shared one, whose ``token`` the call
        holds) whether the provider refused it for its rate."""
        epoch = self._budget.epoch
        try:
            result = await call
        except RateLimitedError as exc:
            self._budget.rate_limited(epoch)
            if self._shared is not None and token is not None:
                self._shared.rate_limited(token, exc.retry_after)
            raise
        self._budget.succeeded(in_flight=in_flight())
        if self._shared is not None and token is not None:
            self._shared.succeeded(token)
        return result

    async def _add_sandbox(self, image: str | None) -> None:
        seat = None
        made = False
        try:
            seat = await self._cap.acquire() if self._cap else None
            sandbox = await retried(
                lambda: self._create(image), attempts=self.retries + 1, backoff=self.backoff
            )
        except Exception as exc:
            if seat is not None:
                seat.release()
            self._create_errors[image] = exc
            logger.info("could not create a sandbox: %r", exc)
        except asyncio.CancelledError:
            if seat is not None:
                seat.release()
            raise
        else:
            now = time.monotonic()
            self._slots.append(_Slot(sandbox, now, image, released=now, seat=seat))
            self._stats.created += 1
            made = True
            logger.debug("created %s", sandbox.id)
        finally:
            self._creating[image] -= 1
            if made:
                self._wake(image)
            else:  # its image's waiters get the error; its place is any image's to take
                for queue in self._waiters.values():
                    queue.wake()

    def _retire(
        self,
        slot: _Slot,
        *,
        why: Literal["lost", "worn", "used", "abandoned", "evicted"],
        refill: str | None = None,
    ) -> None:
        """Take a slot out of service and start creating its successor (from its own image,
        or ``refill`` for an evicted one)."""
        if slot.retired:
            return
        slot.retired = True
        self._slots.remove(slot)
        self._retiring.append(slot)
        if why == "lost":
            self._stats.replaced += 1
        elif why in ("worn", "used"):
            self._stats.recycled += 1
        elif why == "evicted":
            self._stats.evicted += 1
        else:
            self._stats.abandoned += 1
        self._fill(refill if why == "evicted" else slot.image)

    def _stop_later(self, slot: _Slot) -> None:
        """Stop a retired slot in the background (close waits for it)."""
        stopping = asyncio.ensure_future(self._stop(slot))
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    def _renew_later(self, slot: _Slot) -> None:
        """Make a slot whose leases have all ended as new for the next lease, in the
        background, or replace it where the pool does not renew."""
        if not self.reuse:
            self._retire(slot, why="used")
            self._stop_later(slot)
            return
        slot.renewing = True
        self._spawn_renewal(self._renewed(slot))

    async def _renewed(self, slot: _Slot) -> None:
        """Renew a slot, then let its waiters lease it, or replace it if that failed."""
        renewed = await self._renewal.renewed(slot.sandbox)
        slot.renewing = False
        if renewed and not slot.retired:
            slot.spent = False
            slot.checked = slot.released = time.monotonic()
            self._stats.renewed += 1
        else:  # charged to no one: the next lease waits for a fresh sandbox
            self._retire(slot, why="lost")
            self._stop_later(slot)
        self._wake(slot.image)

    async def _stop(self, slot: _Slot) -> None:
        try:
            await self.session.astop_sandbox(slot.sandbox)
        except Exception as exc:  # the session stops it again when it closes
            logger.warning("could not stop %s: %r", slot.sandbox.id, exc)
            return
        if slot.seat is not None:
            slot.seat.release()
        if slot in self._retiring:
            self._retiring.remove(slot)

    async def astart(self) -> None:
        """Create the pool's sandboxes now, concurrently, rather than on first use.

        Raises the last creation error only if no sandbox at all could be created.
        """
        await self._at_home(self._start)

    async def _start(self) -> None:
        creating = self._fill(self.image)
        show = sys.stderr.isatty() if self.progress is None else self.progress
        with tqdm(total=len(creating), desc="sandboxes", unit="sb", disable=not show) as bar:
            for done in asyncio.as_completed(creating):
                await done
                bar.update(1)
        if not self._slots and self.image in self._create_errors:
            raise self._create_errors[self.image]

    # -- leases ----------------------------------------------------------------------------

    def _free(self, image: str | None) -> list[_Slot]:
        """The sandboxes of ``image`` that can take another lease."""
        return [
            s
            for s in self._slots
            if s.image == image and s.leases < self.per_sandbox and not (s.spent or s.renewing)
        ]

    def _pick(self, image: str | None) -> _Slot | None:
        if self._in_use >= self._budget.limit:
            return None
        return min(self._free(image), key=lambda s: s.leases, default=None)

    async def _lease(self, image: str | None) -> _Slot:
        woken = False
        queue = self._waiters[image]
        while True:
            if self._closed:
                queue.wake()
                raise RuntimeError("the pool is closed")
            # Newcomers queue behind those already waiting for the same image.
            if (woken or not queue) and (slot := self._pick(image)) is not None:
                break
            # Every waiter's wake-up starts a create: waiting for none to be in flight would
            # wait forever when every create fails (a provider that is gone).
            if image in self._create_errors and not any(s.image == image for s in self._slots):
                error = self._create_errors.pop(image)
                queue.wake()
                raise error
            # Full: room for one more of this image, while its waiters outnumber its creates
            # and renewals and none of its sandboxes is free (only the concurrency limit holds
            # them back).
            made = self._fill(image)
            renewing = sum(s.image == image and s.renewing for s in self._slots)
            coming = self._creating[image] + renewing
            if not made and coming <= len(queue) and not self._free(image):
                self._make_room(image)
            await queue.wait(first=woken)
            woken = True
        slot.leases += 1
        slot.uses += 1
        self._in_use += 1
        self._stats.leases += 1
        if slot.uses >= self.max_uses:
            logger.debug("recycling %s after %d uses", slot.sandbox.id, slot.uses)
            self._retire(slot, why="worn")
        if queue and self._pick(image) is not None:
            queue.wake()  # room for more than this lease (a new sandbox, per_sandbox > 1)
        return slot

    def _release(self, slot: _Slot, *, ran: bool = True) -> None:
        """End a lease; ``ran``: it ran something in the sandbox, which must then be renewed
        before its next lease."""
        slot.leases -= 1
        slot.released = time.monotonic()
        self._in_use -= 1
        slot.spent = slot.spent or ran
        if slot.leases == 0 and slot.retired:
            self._stop_later(slot)
        elif slot.leases == 0 and slot.spent:
            self._renew_later(slot)
        self._wake(slot.image)

    async def _lease_healthy(self, image: str | None) -> _Slot:
        """A lease on a sandbox known to be alive, replacing dead ones found on the way."""
        while True:
            slot = await self._lease(image)
            if time.monotonic() - slot.checked < self.health_check_after:
                return slot
            try:
                alive = (await slot.sandbox.ainfo()).status in _ALIVE
            except SandboxNotFoundError:
                alive = False
            except BaseException:
                self._release(slot, ran=False)
                raise
            if alive:
                slot.checked = time.monotonic()
                return slot
            logger.info("%s failed its health check; replacing it", slot.sandbox.id)
            self._retire(slot, why="lost")
            self._release(slot, ran=False)

    # -- running evaluations ---------------------------------------------------------------

    async def arun(
        self,
        fn: Callable[[Sandbox], Awaitable[T]],
        *,
        deadline: float | None = None,
        image: str | None = None,
    ) -> T:
        """``await fn(sandbox)`` on a leased sandbox, retried as the pool's settings say: one
        made from ``image`` (None: the pool's ``image``).

        Errors ``fn`` raises that say nothing about the infrastructure propagate at once;
        infrastructure errors (``sandboxkit.errors.INFRASTRUCTURE_ERRORS``) propagate once the
        retry budget is spent.

        ``deadline`` (a ``time.monotonic()`` value): past it, the evaluation is cancelled
        wherever it is (waiting for a lease, running, backing off) and raises
        :class:`DeadlineExceededError` once its command has been cancelled. A cancelled command
        may run on a while (Daytona kills it with a second exec), so the sandbox it ran in
        takes no more leases: it is stopped when its other leases end, and replaced.
        """
        wanted = self.image if image is None else image
        return await self._at_home(lambda: self._run(fn, deadline, wanted))

    async def _run(
        self, fn: Callable[[Sandbox], Awaitable[T]], deadline: float | None, image: str | None
    ) -> T:
        if deadline is None:
            return await self._retried(fn, image)
        try:
            return await _until(deadline, lambda: self._retried(fn, image))
        except DeadlineExceededError:
            self._stats.expired += 1
            raise

    def _count_retry(self, state: RetryCallState) -> None:
        self._stats.retries += 1

    async def _retried(self, fn: Callable[[Sandbox], Awaitable[T]], image: str | None) -> T:
        try:
            return await retried(
                lambda: self._attempt(fn, image),
                attempts=self.retries + 1,
                backoff=self.backoff,
                on=_RETRIED,
                logger=logger,
                before_sleep=self._count_retry,
            )
        except INFRASTRUCTURE_ERRORS as exc:
            self._stats.failures += 1
            logger.info("evaluation failed after %d retries: %r", self.retries, exc)
            raise

    async def _attempt(self, fn: Callable[[Sandbox], Awaitable[T]], image: str | None) -> T:
        slot = await self._lease_healthy(image)
        try:  # a lease waiting for the provider's turn (shared) has not run anything yet
            token = await self._shared.acquire("exec") if self._shared else None
        except BaseException:
            self._release(slot, ran=False)
            raise
        try:
            result = await self._counted(fn(slot.sandbox), token, lambda: self._in_use)
        except (SandboxLostError, SandboxNotFoundError) as exc:
            logger.info("%s was lost (%r); replacing it", slot.sandbox.id, exc)
            self._retire(slot, why="lost")
            if isinstance(exc, SandboxNotFoundError):
                raise SandboxLostError(f"sandbox {slot.sandbox.id} disappeared: {exc}") from exc
            raise
        except asyncio.CancelledError:
            logger.info("an evaluation in %s was cancelled; retiring it", slot.sandbox.id)
            self._retire(slot, why="abandoned")
            raise
        finally:
            if token is not None:
                token.release()
            self._release(slot)
        return result

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every sandbox of the pool (and its own session); later leases raise."""
        await self._at_home(self._close)

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for queue in self._waiters.values():
            queue.wake()  # each waiter wakes the next on its way out
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self._renewing, return_exceptions=True)
        await asyncio.gather(*self._stopping, return_exceptions=True)
        slots = [*self._slots, *self._retiring]
        await asyncio.gather(*(self._stop(slot) for slot in slots))
        self._slots.clear()
        if self._owns_session:
            await self.session.aclose()
        for coordinated in (self._shared, self._cap):  # leftover seats go with the cap
            if coordinated is not None:
                coordinated.close()
        logger.debug("closed: %s", self._stats)

    start = blocking(astart)
    run = blocking(arun)
    close = blocking(aclose)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
