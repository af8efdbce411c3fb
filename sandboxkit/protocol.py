"""The contract between sandboxkit and a sandbox provider.

A provider adapter implements :class:`Backend`: a handful of async methods keyed by sandbox id.
Everything users touch (sync facade, context managers, pools, harnesses, rewards) lives above
it, so an adapter stays a thin translation of one SDK.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

DEFAULT_WORKDIR = "/workspace"


class SandboxStatus(str, enum.Enum):
    """Lifecycle states every provider's states are folded into."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


def check_env(env: Mapping[str, str]) -> None:
    """Refuse what no process environment can hold (a name that is empty or holds ``=``, a
    NUL anywhere), before any backend sees it: each would fail its own way, late."""
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name {key!r}")
        if "\0" in value:
            raise ValueError(f"environment variable {key!r} holds a NUL byte")


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Fields a provider lacks are ignored by that provider."""

    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    workdir: str = DEFAULT_WORKDIR
    cpu: float | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    lifetime_seconds: float | None = None
    """Backstop after which the provider may stop the sandbox by itself (auto-stop/delete)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific settings, passed through untouched."""


def shell_returncode(returncode: int) -> int:
    """``returncode`` as a shell reports it: Python's ``-N`` for death by signal ``N`` becomes
    ``128 + N``, so ``ExecResult.returncode`` reads the same on every backend."""
    return 128 - returncode if returncode < 0 else returncode


KILLED_RETURNCODE = shell_returncode(-signal.SIGKILL)
"""What a command killed by SIGKILL reports, on every backend: at its timeout, or with its
sandbox."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command. Output is kept as bytes; ``stdout``/``stderr`` decode it."""

    returncode: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    timed_out: bool = False
    duration: float = 0.0
    truncated: bool = False
    """True when stdout or stderr was cut at the backend's output cap."""

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """Ran to completion with exit status 0."""
        return self.returncode == 0 and not self.timed_out


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    status: SandboxStatus
    tags: tuple[str, ...] = ()
    started_at: datetime | None = None


@runtime_checkable
class Backend(Protocol):
    """A sandbox provider, async-first and stateless apart from its connection.

    Contract (checked by ``sandboxkit.testing.conformance``):

    - ``exec`` never raises for what the program does: a non-zero exit, a crash or running past
      ``timeout`` (``timed_out=True``, non-zero ``returncode``) are results. It raises
      ``SandboxNotFoundError`` for an unknown or stopped sandbox and ``BackendError`` subclasses
      for provider failures.
    - Relative paths and ``cwd`` are relative to the spec's ``workdir``.
    - ``list`` returns sandboxes carrying *all* the given tags.
    - ``stop`` of a missing sandbox is a no-op when ``missing_ok`` is true.
    - Loop-bound clients (aiohttp sessions, grpc.aio channels) must be keyed by the running
      event loop: the sync facade and user code may call from different loops.
    - Optionally, ``sandbox_options`` (a ``frozenset`` of names, on the class) says which
      ``SandboxSpec.options`` the backend reads; then any other is a ``TypeError`` where it is
      passed (a sandbox, a pool, a reward function), not an option silently ignored.
    - Optionally, ``images = False`` (on the class) says its sandboxes all run in one
      environment whatever ``SandboxSpec.image`` names; then an image is a
      ``BackendMisconfiguredError`` where it is passed, not an image silently ignored.
    """

    name: str

    async def create(self, spec: SandboxSpec) -> SandboxInfo: ...

    async def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult: ...

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None: ...

    async def read_file(self, sandbox_id: str, path: str) -> bytes: ...

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None: ...

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> list[SandboxInfo]: ...

    async def get(self, sandbox_id: str) -> SandboxInfo: ...

    async def aclose(self) -> None: ...
