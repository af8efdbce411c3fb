"""A backend that runs nothing: every call just waits ``latency`` seconds.

With it, a pooled batch's wall time is sandboxkit's own scheduling (pool, retries, reward
function) on top of perfectly overlapped latency, free of the host's CPU, which the emulators
share with the programs they run.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from sandboxkit.errors import SandboxNotFoundError
from sandboxkit.protocol import ExecResult, SandboxInfo, SandboxSpec, SandboxStatus


class LatencyOnlyBackend:
    """Sandboxes that exist only as ids; each call sleeps, each exec exits 0."""

    name = "latency-only"

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.live: dict[str, SandboxInfo] = {}
        self.calls = 0

    async def _wait(self) -> None:
        self.calls += 1
        await asyncio.sleep(self.latency)

    def _info(self, sandbox_id: str) -> SandboxInfo:
        try:
            return self.live[sandbox_id]
        except KeyError:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}") from None

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        await self._wait()
        info = SandboxInfo(
            uuid.uuid4().hex, SandboxStatus.RUNNING, tuple(spec.tags), datetime.now(timezone.utc)
        )
        self.live[info.id] = info
        return info

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
        self._info(sandbox_id)
        await self._wait()
        return ExecResult(returncode=0, duration=self.latency)

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        self._info(sandbox_id)
        await self._wait()

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        self._info(sandbox_id)
        await self._wait()
        return b""

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        await self._wait()
        if self.live.pop(sandbox_id, None) is None and not missing_ok:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}")

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        await self._wait()
        return [i for i in self.live.values() if set(tags) <= set(i.tags)]

    async def get(self, sandbox_id: str) -> SandboxInfo:
        await self._wait()
        return self._info(sandbox_id)

    async def aclose(self) -> None:
        """Nothing to release."""
