"""Ranks on one machine sharing one budget per provider account.

A training run with one process per GPU (``torchrun``, ``accelerate launch``) has one pool per
process, and each pool's :class:`~sandboxkit.budget.ConcurrencyBudget` backs off on its own:
eight ranks that each halve after a 429 still send eight times what the provider allows. The
provider's limits are per account, so the budget must be too. :class:`SharedBudget` keeps it in
files that every process of this machine using the account opens:

- a call in flight holds a *token*: an exclusive ``flock`` on one of the lock files
  ``exec-<i>`` (evaluations) or ``create-<i>`` (creations), with ``i`` below the shared limit;
- the adaptive limit (the same AIMD rules, run on a state kept in ``state.json``), and the time
  until which a ``Retry-After`` asked everyone to wait, are read and changed under a lock, so
  that a 429 seen by one rank slows every rank;
- each process that takes part is a *member* (a lock file of its own holding its
  ``max_concurrency``): the shared maximum is the members' sum, so that ranks that are never
  refused run exactly as they would alone.

A :class:`SandboxCap` caps a run's live sandboxes on this machine the same way (``live-<i>``
tokens), each rank keeping at most its share so that none starves.

Why ``flock``: the kernel drops a process's locks when it dies, so a rank killed in the middle
of a call (SIGKILL, the OOM killer) never leaves the budget short; nothing has to notice that
it died. Waiting for a token is a short jittered poll on the event loop (a released lock wakes
nobody in another process), woken at once by a release in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import random
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from .budget import ConcurrencyBudget
from .config import setting
from .hostdirs import private_directory, state_path
from .retry import MAX_BACKOFF

logger = logging.getLogger("sandboxkit.coordination")

COORDINATE_VAR = "SANDBOXKIT_COORDINATE"
"""``1``: pools share their account's budget with the other processes of this machine; ``0``:
they do not; ``auto`` (the default): they do under a launcher that started several local
ranks (``LOCAL_WORLD_SIZE`` > 1)."""
DIRECTORY_VAR = "SANDBOXKIT_COORDINATION_DIR"
"""Where the shared budgets live (default ``$XDG_RUNTIME_DIR``, else the temporary directory,
``/sandboxkit-coordination-<uid>``): processes share a budget only if they agree on it."""
_POLL = (0.001, 0.02)
"""Seconds between two tries for a token: from the first, doubling while none is free, to the
second; jittered, so that waiting ranks do not move in step."""
_KEPT = 64
"""Tokens of a kind whose lock files a process keeps open (a descriptor each)."""
_COUNTS = ("maximum", "limit", "epoch", "successes", "signals")
"""The integers of the shared state (``state.json``), next to ``backoff_until`` (a time)."""
_STATE_BYTES = 4096
"""More than any state this module writes: a larger file is not one, and is not read."""

Kind = Literal["exec", "create"]


def local_ranks() -> int:
    """Processes of this run on this machine, as the launcher says (torchrun and accelerate
    launch set ``LOCAL_WORLD_SIZE``); 1 without one."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def coordination_wanted(coordinate: bool | None = None) -> bool:
    """Whether a pool shares its budget: ``coordinate`` if given, else ``SANDBOXKIT_COORDINATE``."""
    if coordinate is not None:
        return coordinate
    value = (setting(COORDINATE_VAR) or "auto").lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value == "auto":
        return local_ranks() > 1
    raise ValueError(f"{COORDINATE_VAR} must be 0, 1 or auto, got {value!r}")


def launcher_run_id() -> str | None:
    """A run id that every rank of a launched run computes alike, so that their sandboxes carry
    one ``sandboxkit-run`` tag: from torchrun's rendezvous id (``TORCHELASTIC_RUN_ID``), else
    the address of the rank-0 process (``MASTER_ADDR``:``MASTER_PORT``, same on every node);
    None outside a launcher. A later run reusing the same address gets the same id."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if run and run != "none":
        key = f"torchelastic:{run}"
    elif addr and port and os.environ.get("WORLD_SIZE"):
        key = f"master:{addr}:{port}"
    else:
        return None
    return _digest(key)[:12]


def account_key(backend: object) -> str:
    """What identifies a provider account: the backend's ``account`` (endpoint and a digest of
    the API key, for the remote backends; the root, for the local one), else its name."""
    account = getattr(backend, "account", None)
    return str(account) if account else str(getattr(backend, "name", type(backend).__name__))


def key_digest(secret: str | None) -> str:
    """A digest naming an API key in an account key without revealing it."""
    return _digest(secret or "")[:16]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def coordination_root() -> Path:
    configured = setting(DIRECTORY_VAR)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.access(runtime, os.W_OK):
        return Path(runtime) / f"sandboxkit-coordination-{os.getuid()}"
    return state_path("sandboxkit-coordination")


# -- lock files --------------------------------------------------------------------------------

_open_locks: weakref.WeakSet[_Tokens | _Members] = weakref.WeakSet()


def _close_inherited() -> None:
    """A forked child (a data loader worker) closes its copies of the parent's lock files: a
    lock lives until every copy is closed, so a child outliving its rank would hold it."""
    for locks in list(_open_locks):
        locks.forget()


os.register_at_fork(after_in_child=_close_inherited)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class _Tokens:
    """The lock files ``<prefix>-<i>`` of a directory: this process holds token ``i`` while it
    holds that file's lock, through a descriptor of its own (two descriptors of one process
    exclude each other, as two processes do). The descriptors of the first ``_KEPT`` tokens
    stay open (a try is then one system call); the others are opened per try."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self._directory = directory
        self._prefix = prefix
        self._kept: dict[int, int] = {}
        self._held: dict[int, int] = {}
        """The tokens held now, and their descriptors."""
        _open_locks.add(self)

    def _try(self, i: int) -> int | None:
        """Lock token ``i``: its descriptor, or None if another holds it."""
        fd = self._kept.get(i)
        if fd is None:
            fd = _open(self._directory / f"{self._prefix}-{i}")
            if i < _KEPT:
                self._kept[i] = fd
        if _try_lock(fd):
            return fd
        if i >= _KEPT:
            os.close(fd)
        return None

    def _unlock(self, i: int, fd: int) -> None:
        if i < _KEPT:
            fcntl.flock(fd, fcntl.LOCK_UN)
        else:
            os.close(fd)  # the lock goes with the last descriptor of its open file

    def take(self, limit: int, *, count: bool = False) -> tuple[int, int] | None:
        """The lowest free token below ``limit`` and how many calls were in flight then,
        this one included, or None. The lower ones were all held; ``count``: the higher ones
        are tried until one is free, so the count is exact when every token was held and a
        lower bound otherwise (enough to tell whether the call was made at the limit)."""
        taken: int | None = None
        for i in range(limit):
            if i in self._held or (fd := self._try(i)) is None:
                continue
            if taken is not None:  # a free one above it: tokens 0 .. i-1 were held
                self._unlock(i, fd)
                return taken, i
            self._held[i] = fd
            taken = i
            if not count:
                return i, i + 1
        return None if taken is None else (taken, limit)

    def give(self, i: int) -> None:
        fd = self._held.pop(i, None)
        if fd is not None:
            self._unlock(i, fd)

    def close(self) -> None:
        for i in list(self._held):
            self.give(i)
        for fd in self._kept.values():
            os.close(fd)
        self._kept.clear()

    def forget(self) -> None:
        """Close the descriptors without unlocking: in a forked child, whose copies share the
        parent's locks (an unlock would free the parent's tokens)."""
        for fd in {*self._kept.values(), *self._held.values()}:
            os.close(fd)
        self._kept.clear()
        self._held.clear()


class _Members:
    """The processes taking part, each a lock file ``members/<id>`` it holds and that holds a
    number (its maximum); ``members.lock`` guards joining, leaving and the state next to it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "members").mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = _open(directory / "members.lock")
        self._path: Path | None = None
        self._fd: int | None = None
        _open_locks.add(self)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held for microseconds (a few small files): blocking the event loop is cheaper
        than a thread hop."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def join(self, value: int) -> None:
        """Become a member holding ``value`` (call while ``locked``)."""
        path = self.directory / "members" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = _open(path)
        os.write(fd, str(value).encode())
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._path, self._fd = path, fd

    def leave(self) -> None:
        """Stop being a member (call while ``locked``)."""
        if self._fd is not None and self._path is not None:
            self._path.unlink(missing_ok=True)
            os.close(self._fd)
            self._path = self._fd = None

    def values(self) -> list[int]:
        """What the live members hold, this one included; the files of dead ones are removed
        (call while ``locked``, so that no member is half made)."""
        found = []
        for path in (self.directory / "members").iterdir():
            try:
                fd = _open(path)
            except OSError:  # not a member's file (a link, a directory): counts for nothing
                continue
            try:
                if _try_lock(fd):  # its holder died
                    path.unlink(missing_ok=True)
                    continue
                found.append(max(0, int(os.pread(fd, 32, 0) or b"0")))
            except (OSError, ValueError):
                continue  # not a number (or not a file): counts for nothing
            finally:
                os.close(fd)
        return found

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def forget(self) -> None:
        """Close the descriptors, leaving the membership to the parent (see ``_Tokens``)."""
        if self._fd is not None:
            os.close(self._fd)
        self._path = self._fd = None
        self.close()


def _directory(kind: str, key: str) -> Path:
    """Below a private root (see :mod:`sandboxkit.hostdirs`: in a shared temporary directory,
    another user could otherwise plant the state or links that our writes would follow)."""
    path = private_directory(coordination_root(), "the coordination directory") / kind
    path = path / _digest(key)[:16]
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


class _Waiter:
    """Tokens are polled for by one task of this process at a time (per kind): the others queue
    behind it rather than each scanning the lock files. A release here wakes the poller; one
    in another process is seen at the next try."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Future[None] | None = None
        self._delay = _POLL[0]

    def queue(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # a pool may move to a new loop
            self._lock, self._loop, self._wake = asyncio.Lock(), loop, None
        return self._lock

    async def pause(self, at_least: float = 0.0) -> None:
        """Until the next try: longer after each vain one, short again after a release here."""
        loop = asyncio.get_running_loop()
        self._wake = wake = loop.create_future()
        delay = max(at_least, random.uniform(0.5, 1.0) * self._delay)
        self._delay = min(2 * self._delay, _POLL[1])
        timer = loop.call_later(delay, _settle, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self._wake = None

    def got(self) -> None:
        self._delay = _POLL[0]

    def wake(self) -> None:
        self._delay = _POLL[0]
        if self._wake is not None and not self._wake.get_loop().is_closed():
            _settle(self._wake)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclasses.dataclass
class Token:
    """A call's place in the shared budget, held until :meth:`release`."""

    kind: str
    index: int
    in_flight: int
    """Calls in flight when it was taken (this one included): exact if every token was held,
    a lower bound otherwise."""
    epoch: int
    """The budget's epoch when the call started (see :mod:`sandboxkit.budget`)."""
    owner: SharedBudget | SandboxCap

    def release(self) -> None:
        self.owner._give(self.kind, self.index)


class SharedBudget:
    """One provider account's budget, shared by the processes of this machine that use it.

    ``maximum`` is this process's share of the maximum (its pool's ``max_concurrency``); the
    shared limit starts at the members' sum and follows the rules of
    :class:`~sandboxkit.budget.ConcurrencyBudget` (``adaptive``: whether 429s move it).
    """

    def __init__(self, account: str, maximum: int, *, adaptive: bool = True) -> None:
        if maximum < 1:
            raise ValueError(f"the concurrency maximum must be >= 1, got {maximum}")
        self.account = account
        self.maximum = maximum
        self.adaptive = adaptive
        self.directory = _directory("budgets", account)
        self._state_path = self.directory / "state.json"
        self._state: dict[str, Any] = {}
        self._version: tuple[int, int, int] | None = None
        self._members = _Members(self.directory)
        self._tokens = {kind: _Tokens(self.directory, kind) for kind in ("exec", "create")}
        self._waiters = {kind: _Waiter() for kind in ("exec", "create")}
        self._closed = False
        with self._members.locked():
            others = sum(self._members.values())
            state = self._load()
            total = others + maximum
            # Joining ranks raise the limit, unless a provider's refusals lowered it.
            if not others or state["limit"] >= state["maximum"]:
                state["limit"] = total
            state["maximum"] = total
            self._members.join(maximum)
            self._store(state)

    def __repr__(self) -> str:
        state = self._load()
        return f"<SharedBudget {state['limit']}/{state['maximum']} at {self.directory}>"

    # -- the state ---------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        """The state as last stored (written whole by a rename: readable without the lock;
        read again only when the file changed, since waiting ranks poll it).

        A state that is missing or is not one this module writes (emptied, truncated,
        another version's, garbage) reads as a fresh one of this rank's own maximum: a rank
        then runs as if alone, and the next change writes a good state; it never crashes or
        waits forever on it."""
        try:
            stat = os.stat(self._state_path)
            version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if version != self._version:
                if stat.st_size > _STATE_BYTES:
                    raise ValueError("too large")
                self._state = _checked(json.loads(self._state_path.read_bytes()))
                self._version = version
        except (OSError, ValueError, RecursionError):
            self._version = None
            fresh = dict.fromkeys(_COUNTS, 0) | {"maximum": self.maximum, "limit": self.maximum}
            return fresh | {"backoff_until": 0.0}
        return dict(self._state)

    def _store(self, state: dict[str, Any]) -> None:
        """Replace the state; one that cannot be written (a full disk) is logged and left as
        it was: the calls go on under the old one."""
        temporary = self._state_path.with_name(f"state.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(state))
            os.replace(temporary, self._state_path)
        except OSError as exc:
            logger.warning("could not store the shared budget's state: %s", exc)
            temporary.unlink(missing_ok=True)

    def _change(
        self, rate_limited: int | None, in_flight: int = 0, retry_after: float | None = None
    ) -> None:
        """Run the AIMD rules on the shared state: a 429 of a call started in epoch
        ``rate_limited`` (asking to wait ``retry_after`` seconds), else a success with
        ``in_flight`` calls in flight."""
        with self._members.locked():
            state = self._load()
            # A dead rank's share leaves the maximum at the next refusal (a scan of the
            # members); until then it only lets the limit grow where every live rank's own
            # max_concurrency still caps it. An unreadable state is rebuilt from the members.
            maximum = state["maximum"]
            if rate_limited is not None or self._version is None:
                maximum = max(1, sum(self._members.values()))
            budget = ConcurrencyBudget(
                maximum,
                adaptive=self.adaptive,
                limit=min(max(1, state["limit"]), maximum),
                signals=state["signals"],
                epoch=state["epoch"],
                successes=state["successes"],
            )
            if rate_limited is None:
                budget.succeeded(in_flight=in_flight)
            else:
                budget.rate_limited(rate_limited)
            backoff_until = state["backoff_until"]
            if retry_after:
                backoff_until = max(backoff_until, time.time() + min(retry_after, MAX_BACKOFF))
            self._store(
                {
                    "maximum": maximum,
                    "limit": budget.limit,
                    "epoch": budget.epoch,
                    "successes": budget.successes,
                    "signals": budget.signals,
                    "backoff_until": backoff_until,
                }
            )

    @property
    def limit(self) -> int:
        """Calls allowed in flight now, over every process sharing the budget."""
        return int(self._load()["limit"])

    @property
    def signals(self) -> int:
        """Rate-limit signals seen by every process sharing the budget."""
        return int(self._load()["signals"])

    # -- tokens --------------------------------------------------------------------------------

    async def acquire(self, kind: Kind) -> Token:
        """Wait for a token of ``kind`` below the shared limit, and past any shared back-off."""
        waiter, tokens = self._waiters[kind], self._tokens[kind]
        async with waiter.queue():
            while True:
                if self._closed:
                    raise RuntimeError("the shared budget is closed")
                state = self._load()
                backoff = state["backoff_until"] - time.time()
                if backoff > MAX_BACKOFF:  # never stored so (a clock set back, or garbage)
                    backoff = 0.0
                limit = state["limit"]
                # Counting what is in flight only matters while the limit can grow.
                count = self.adaptive and limit < state["maximum"]
                if backoff <= 0 and (taken := tokens.take(limit, count=count)) is not None:
                    waiter.got()
                    return Token(kind, *taken, state["epoch"], self)
                await waiter.pause(backoff)

    def _give(self, kind: str, index: int) -> None:
        self._tokens[kind].give(index)
        self._waiters[kind].wake()

    def rate_limited(self, token: Token, retry_after: float | None = None) -> None:
        """The call of ``token`` was refused for the provider's rate: the limit halves for
        every process (once per epoch), and no one starts a call for ``retry_after`` seconds."""
        self._change(token.epoch, retry_after=retry_after)

    def succeeded(self, token: Token) -> None:
        """The call of ``token`` got through (only calls made at the limit can raise it)."""
        state = self._load()
        if token.in_flight < state["limit"] or state["limit"] >= state["maximum"]:
            return  # nothing can change: no lock taken
        self._change(None, token.in_flight)

    def close(self) -> None:
        """Leave the budget (the shared maximum loses this process's share)."""
        if self._closed:
            return
        self._closed = True
        for kind, tokens in self._tokens.items():
            tokens.close()
            self._waiters[kind].wake()
        with self._members.locked():
            self._members.leave()
            state = self._load()
            maximum = sum(self._members.values())
            if maximum:
                state["maximum"], state["limit"] = maximum, min(state["limit"], maximum)
                self._store(state)
        self._members.close()


def _checked(state: object) -> dict[str, Any]:
    """``state`` if it is one :meth:`SharedBudget._store` writes, else ``ValueError``."""
    if not isinstance(state, dict):
        raise ValueError("not an object")
    counts: dict[str, int] = {}
    for key in _COUNTS:
        value = state.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key} is not a natural number")
        counts[key] = value
    if not 1 <= counts["limit"] <= counts["maximum"]:
        raise ValueError("the limit is not between 1 and the maximum")
    backoff_until = state.get("backoff_until", 0.0)
    if type(backoff_until) not in (int, float) or not math.isfinite(backoff_until):
        raise ValueError("backoff_until is not a time")
    return counts | {"backoff_until": float(backoff_until)}


class SandboxCap:
    """At most ``cap`` live sandboxes for one run (``run_id``) of one account on this machine,
    over all its ranks; each rank keeps at most :meth:`share` of them, so that none starves.

    A sandbox holds a ``live-<i>`` token from before its creation until it is stopped.
    """

    def __init__(self, account: str, run_id: str, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"max_sandboxes must be >= 1, got {cap}")
        self.cap = cap
        self.directory = _directory("runs", f"{account}\n{run_id}")
        self._members = _Members(self.directory)
        self._tokens = _Tokens(self.directory, "live")
        self._waiter = _Waiter()
        self._closed = False
        with self._members.locked():
            self._members.join(1)

    def share(self) -> int:
        """This rank's share of the cap: split between the ranks the launcher started on this
        machine, or those taking part now if more, but at least one sandbox."""
        with self._members.locked():
            ranks = max(local_ranks(), len(self._members.values()))
        return max(1, self.cap // ranks)

    async def acquire(self) -> Token:
        """Wait for a place for one more live sandbox of the run."""
        async with self._waiter.queue():
            while True:
                if self._closed:
                    raise RuntimeError("the sandbox cap is closed")
                if (taken := self._tokens.take(self.cap)) is not None:
                    self._waiter.got()
                    return Token("live", *taken, 0, self)
                await self._waiter.pause()

    def _give(self, kind: str, index: int) -> None:
        self._tokens.give(index)
        self._waiter.wake()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._tokens.close()
        self._waiter.wake()
        with self._members.locked():
            self._members.leave()
        self._members.close()
