"""Fault injection: what goes wrong, and a backend that makes any backend go wrong.

:class:`Faults` says what fails and how often (latency, error answers, dropped connections,
sandboxes that die mid-exec, a cap on live sandboxes as on a provider's free tier and one on
execs in flight as a provider's rate limit). The emulators apply it to the API they serve;
:class:`FaultyBackend` applies it to any backend, in process.

Retries, sandbox replacement and cleanup only run when a provider fails, which real providers do
rarely and never on demand. ``FaultyBackend`` makes a backend fail as often as its
:class:`Faults` says, while the sandboxes stay real: a sandbox that "dies" is really stopped,
and a create that "fails" after the fact really leaves a sandbox behind (as a provider does
when its answer is lost), which is what leak tests need.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import (
    BackendMisconfiguredError,
    RateLimitedError,
    SandboxLostError,
    TransientBackendError,
)
from ..protocol import Backend, ExecResult, SandboxInfo, SandboxSpec, SandboxStatus

T = TypeVar("T")


@dataclass
class Faults:
    """What fails and how often; ``seed`` makes a run repeatable."""

    latency_ms: float = 0.0
    """Added to every API call."""
    create_latency_ms: float = 0.0
    """Added to sandbox creation, on top of ``latency_ms``."""
    error_rate: float = 0.0
    """Share of calls answered with a transient error (half rate-limited, half server error)."""
    drop_rate: float = 0.0
    """Share of calls whose connection is cut without an answer."""
    die_rate: float = 0.0
    """Share of execs during which the sandbox dies."""
    max_sandboxes: int | None = None
    """Live sandboxes allowed at once; creation beyond it is refused as rate limiting."""
    max_concurrent_execs: int | None = None
    """Execs allowed in flight at once; an exec beyond it is refused as rate limiting."""
    retry_after: float | None = None
    """Seconds that rate-limit answers ask the client to wait (Daytona: a ``Retry-After``
    header; Aviato: a ``RetryInfo`` detail); None: they do not say."""
    missing_images: frozenset[str] = frozenset()
    """Images the provider lacks: a create naming one is refused as misconfigured, as a real
    provider's answer for an image it cannot pull (or, on Docker, does not hold)."""
    seed: int | None = None
    operations: frozenset[str] | None = None
    """Operations (``create``, ``exec``, ...) that errors and drops hit; None: all of them."""
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("error_rate", "drop_rate", "die_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        self.rng = random.Random(self.seed)

    async def delay(self, *, create: bool = False) -> None:
        total = self.latency_ms + (self.create_latency_ms if create else 0.0)
        if total > 0:
            await asyncio.sleep(total / 1000)

    def transient_error(self) -> str | None:
        """``"rate_limited"``, ``"server_error"`` or None for this call."""
        if self.error_rate and self.rng.random() < self.error_rate:
            return "rate_limited" if self.rng.random() < 0.5 else "server_error"
        return None

    def applies_to(self, operation: str) -> bool:
        return self.operations is None or operation in self.operations

    def drop(self) -> bool:
        return bool(self.drop_rate) and self.rng.random() < self.drop_rate

    def dies(self) -> bool:
        return bool(self.die_rate) and self.rng.random() < self.die_rate

    def at_capacity(self, live: int) -> bool:
        return self.max_sandboxes is not None and live >= self.max_sandboxes

    def too_many_execs(self, in_flight: int) -> bool:
        """Whether an exec that finds ``in_flight`` others running is refused."""
        return self.max_concurrent_execs is not None and in_flight >= self.max_concurrent_execs


class FaultyBackend:
    """``inner`` with the faults of ``faults`` injected, counting every call.

    - ``latency_ms`` / ``create_latency_ms`` delay every call / creation;
    - ``error_rate``: create, exec and file calls raise ``TransientBackendError`` (the
      rate-limited half: ``RateLimitedError``), half of them before the inner call and half
      after it (the work is done, the answer is lost);
    - ``drop_rate``: the same calls lose their answer after the inner call (a cut connection);
    - ``die_rate``: an exec's sandbox is stopped while the command runs and the exec raises
      ``SandboxLostError``, as do the other execs that were running in it;
    - ``max_sandboxes``: creation beyond that many live sandboxes (of this wrapper) is refused
      with ``RateLimitedError``;
    - ``max_concurrent_execs``: an exec that finds that many execs of this wrapper in flight
      is refused with ``RateLimitedError`` (after the call's latency: a 429 is a round trip);
    - ``retry_after``: what every injected ``RateLimitedError`` carries;
    - ``missing_images``: a create naming one raises ``BackendMisconfiguredError`` (after the
      call's latency).

    ``calls`` counts calls per method, ``injected`` the faults injected per kind (such as
    ``"server_error after create"``, ``"died"``), and
    ``peak`` the most create/exec/file calls of a kind that were in flight at once.
    """

    def __init__(self, inner: Backend, faults: Faults | None = None) -> None:
        self.inner = inner
        self.faults = faults or Faults()
        self.name = inner.name
        self.calls: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()
        self._live: set[str] = set()

    def __repr__(self) -> str:
        return f"<FaultyBackend over {self.inner.name}: {self.faults}>"

    def __getattr__(self, attr: str) -> object:
        # Backend-specific facts (``root``, ``isolation`` of the local backend) read through.
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def _fail(self, kind: str, what: str, *, rate_limited: bool = False) -> TransientBackendError:
        self.injected[kind] += 1
        message = f"injected fault ({kind}) in {what}"
        if rate_limited:
            return RateLimitedError(message, retry_after=self.faults.retry_after)
        return TransientBackendError(message)

    async def _call(
        self, what: str, call: Callable[[], Awaitable[T]], *, create: bool = False
    ) -> T:
        """One faulty call: latency, then an error before or after the inner call, or none."""
        self.calls[what] += 1
        self._in_flight[what] += 1
        self.peak[what] = max(self.peak[what], self._in_flight[what])
        try:
            await self.faults.delay(create=create)
            error = self.faults.transient_error()
            after = error is not None and self.faults.rng.random() < 0.5
            limited = error == "rate_limited"
            if error is not None and not after:
                raise self._fail(f"{error} before {what}", what, rate_limited=limited)
            result = await call()
            if error is not None:
                raise self._fail(f"{error} after {what}", what, rate_limited=limited)
            if self.faults.drop():
                raise self._fail(f"dropped after {what}", what)
            return result
        finally:
            self._in_flight[what] -= 1

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        if self.faults.at_capacity(len(self._live)):
            self.calls["create"] += 1
            raise self._fail("at capacity", "create", rate_limited=True)
        if spec.image in self.faults.missing_images:
            self.calls["create"] += 1
            self.injected["missing image"] += 1
            await self.faults.delay(create=True)
            raise BackendMisconfiguredError(f"injected fault: no image {spec.image!r} here")

        async def create() -> SandboxInfo:
            info = await self.inner.create(spec)
            self._live.add(info.id)
            return info

        return await self._call("create", create, create=True)

    async def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if self.faults.too_many_execs(self._in_flight["exec"]):
            self.calls["exec"] += 1
            await self.faults.delay()
            raise self._fail("too many execs", "exec", rate_limited=True)

        async def run() -> ExecResult:
            live = sandbox_id in self._live
            command = self.inner.exec(
                sandbox_id, argv, timeout=timeout, stdin=stdin, cwd=cwd, env=env
            )
            if self.faults.dies():
                return await self._die_during(sandbox_id, command)
            result = await command
            if live and sandbox_id not in self._live:
                # Its sandbox died under it (another exec's fault): the result is not real.
                raise SandboxLostError(f"sandbox {sandbox_id} was stopped during exec")
            return result

        return await self._call("exec", run)

    async def _die_during(self, sandbox_id: str, command: Awaitable[ExecResult]) -> ExecResult:
        """Start the command, then stop its sandbox under it.

        The command is left to end by itself (it lost its files, and its own timeout bounds
        it) rather than cancelled: cancelling the local backend's exec while it is spawning can
        orphan the sandboxed process, which is the backend's bug to fix, not a fault to inject.
        """
        self.injected["died"] += 1
        task = asyncio.ensure_future(command)
        await asyncio.sleep(self.faults.rng.uniform(0.0, 0.05))
        await self.stop(sandbox_id)
        with contextlib.suppress(Exception):
            await task
        raise SandboxLostError(f"injected fault: sandbox {sandbox_id} died during exec")

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        await self._call("write_file", lambda: self.inner.write_file(sandbox_id, path, data))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self._call("read_file", lambda: self.inner.read_file(sandbox_id, path))

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        self.calls["stop"] += 1
        await self.faults.delay()
        await self.inner.stop(sandbox_id, missing_ok=missing_ok)
        self._live.discard(sandbox_id)

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        self.calls["list"] += 1
        await self.faults.delay()
        return await self.inner.list(tags=tags, status=status)

    async def get(self, sandbox_id: str) -> SandboxInfo:
        self.calls["get"] += 1
        await self.faults.delay()
        return await self.inner.get(sandbox_id)

    async def aclose(self) -> None:
        await self.inner.aclose()
