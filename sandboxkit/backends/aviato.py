"""CoreWeave Sandbox (Aviato) through its ``cwsandbox`` client.

Configuration (explicit options win over the environment, which may come from ``.env``):

- Endpoint: ``base_url=``, else ``CWSANDBOX_BASE_URL``, else the client's default
  (``https://api.cwsandbox.com``). It is passed to every call, because ``list``/``from_id``/
  ``delete`` in the client read only the environment or an explicit ``base_url``.
- Credentials: ``api_key=``, else ``CWSANDBOX_API_KEY``, else ``AVIATO_API_KEY`` (the name from
  before the rename, which the client itself ignores). ``auth=`` takes any ``cwsandbox``
  auth config (``WandbAuth()``, say) instead. With neither, building the backend fails at once,
  as Daytona's does, naming the variable to set (the client would send no credentials, and
  the service answer "invalid API key", or the default URL not resolve, only at the first call).
- Signals: the client installs SIGINT/SIGTERM handlers when a sandbox is first made on the main
  thread; they would run its cleanup before sandboxkit's or TRL's. Creating this backend turns
  them off for the process (``cwsandbox.disable_signal_handlers()``) unless
  ``signal_handlers=True``. The client's ``atexit`` hook stays; it only closes ``cwsandbox``
  sessions, which this backend does not use.

How the protocol maps onto the client:

- The client runs all its gRPC on its own event-loop thread and hands back awaitable
  references, so nothing here is bound to the caller's loop: the sync portal and user loops
  share one backend safely. Sandbox handles are cached by id (a handle found by id costs one
  GetSandbox), and ``aclose`` releases their channels.
- Every command runs as ``/bin/sh -c 'cd "$0" && exec "$@"' CWD [env K=V ...] ARGV``: the client
  has no per-exec environment, and its ``cwd`` must be absolute, while ours defaults to the
  spec's ``workdir`` (created by the container runtime as the container's working directory).
- stdin goes through the client's stdin stream, written once and closed.
- An exec timeout is the client's stream deadline; the service kills the command when the
  stream is cancelled. It comes back as ``timed_out=True`` with returncode 137, like the local
  backend; output printed before the timeout is not kept by the client.
- Output is capped at ``output_bytes`` per stream (1 MiB) after it arrives: the client itself
  buffers everything a command prints.
- A stream that ends without an exit status (the sandbox died mid-exec) is
  ``SandboxLostError``: whether the command ran is unknown, so the work must not be retried in
  that sandbox. Rate limiting (RESOURCE_EXHAUSTED) is ``RateLimitedError``, with the
  ``RetryInfo`` delay the service sent; UNAVAILABLE and dropped connections are
  ``TransientBackendError``. The client's own status-poll retries are off by default
  (``poll_retry_budget_seconds=0``) because retrying is the job of the layer above.
- A cancelled exec cancels its stream, and the service kills the command.
- A stopped or finished sandbox counts as not found, as in every backend.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import posixpath
import time
from collections.abc import Awaitable, Mapping, Sequence
from datetime import timedelta, timezone
from typing import Any, TypeVar

from ..config import setting
from ..coordination import key_digest
from ..errors import (
    AuthenticationError,
    BackendError,
    BackendMisconfiguredError,
    RateLimitedError,
    SandboxLostError,
    SandboxNotFoundError,
    SandboxTimeoutError,
    TransientBackendError,
    installed_for,
)
from ..keywords import keyword_only
from ..protocol import (
    DEFAULT_WORKDIR,
    KILLED_RETURNCODE,
    ExecResult,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    check_env,
)
from ._facts import AVIATO_DEFAULT_URL, AVIATO_KEY_VARS, AVIATO_URL_VAR
from ._output import cap_output
from ._owned import discard, start_owned

with installed_for("the 'aviato' backend", "pip install 'sandboxkit[aviato]'"):
    import cwsandbox
    import grpc

T = TypeVar("T")
logger = logging.getLogger(__name__)

OUTPUT_BYTES = 1024 * 1024

_CW = cwsandbox.SandboxStatus
_STATUS = {
    _CW.RUNNING: SandboxStatus.RUNNING,
    _CW.CREATING: SandboxStatus.PENDING,
    _CW.PREPARING: SandboxStatus.PENDING,
    _CW.PENDING: SandboxStatus.PENDING,
    _CW.UNSPECIFIED: SandboxStatus.PENDING,
    _CW.PAUSED: SandboxStatus.PENDING,  # it may resume
    _CW.TERMINATING: SandboxStatus.STOPPED,
    _CW.COMPLETED: SandboxStatus.STOPPED,
    _CW.TERMINATED: SandboxStatus.STOPPED,
    _CW.FAILED: SandboxStatus.FAILED,
}
_TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
    }
)
_TERMINAL_ERRORS = (
    cwsandbox.SandboxNotRunningError,
    cwsandbox.SandboxTerminatedError,
    cwsandbox.SandboxFailedError,
)


def _grpc_code(exc: BaseException) -> grpc.StatusCode | None:
    """The status code behind a client error, when it came from an RPC."""
    for cause in (exc, exc.__cause__):
        if isinstance(cause, grpc.RpcError):
            code: grpc.StatusCode = cause.code()
            return code
    return None


def _rate_limited(message: str, exc: BaseException) -> RateLimitedError:
    delay = getattr(exc, "retry_delay", None)  # the service's RetryInfo, parsed by the client
    retry_after = delay.total_seconds() if isinstance(delay, timedelta) else None
    return RateLimitedError(message, retry_after=retry_after)


def translate(exc: BaseException, sandbox_id: str | None = None) -> BaseException:
    """The sandboxkit error for a ``cwsandbox`` (or raw gRPC) error; others pass through."""
    what = f"sandbox {sandbox_id}" if sandbox_id else "Aviato"
    message = f"{what}: {exc}"
    if isinstance(exc, cwsandbox.CWSandboxAuthenticationError):
        return AuthenticationError(message)
    if isinstance(exc, cwsandbox.SandboxFileError):
        if exc.reason == "CWSANDBOX_FILE_NOT_FOUND":
            return FileNotFoundError(message)
        if exc.reason == "CWSANDBOX_FILE_IS_DIRECTORY":
            return IsADirectoryError(message)
        if exc.reason == "CWSANDBOX_FILE_PERMISSION_DENIED":
            return PermissionError(message)
        return BackendError(message)
    if isinstance(exc, cwsandbox.SandboxNotFoundError):
        return SandboxNotFoundError(message)
    if isinstance(exc, cwsandbox.SandboxResourceExhaustedError):
        return _rate_limited(message, exc)
    if isinstance(exc, cwsandbox.SandboxUnavailableError):
        return TransientBackendError(message)
    if isinstance(
        exc, (cwsandbox.SandboxStreamBackpressureError, cwsandbox.SandboxStreamTruncatedError)
    ):
        return TransientBackendError(message)
    if isinstance(exc, cwsandbox.SandboxExecutionError):
        return SandboxLostError(message)
    if isinstance(exc, _TERMINAL_ERRORS):
        return SandboxNotFoundError(message)
    if isinstance(exc, cwsandbox.CWSandboxValidationError):
        return BackendMisconfiguredError(message)
    if isinstance(exc, cwsandbox.SandboxTimeoutError):
        return SandboxTimeoutError(message)
    if isinstance(exc, (cwsandbox.CWSandboxError, grpc.RpcError)):
        code = _grpc_code(exc)
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return AuthenticationError(message)
        if code == grpc.StatusCode.NOT_FOUND:
            return SandboxNotFoundError(message)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return SandboxTimeoutError(message)
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
            return BackendMisconfiguredError(message)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return _rate_limited(message, exc)
        if code in _TRANSIENT_CODES:
            return TransientBackendError(message)
        return BackendError(message)
    if isinstance(exc, ConnectionError):
        return TransientBackendError(message)
    return exc


async def _call(awaitable: Awaitable[T], sandbox_id: str | None = None) -> T:
    """Await a client operation, raising sandboxkit errors only."""
    try:
        return await awaitable
    except (cwsandbox.CWSandboxError, grpc.RpcError, ConnectionError) as exc:
        raise translate(exc, sandbox_id) from exc


CD_EXEC = ("/bin/sh", "-c", 'cd "$0" && exec "$@"')
"""How every command runs: ``CD_EXEC + (cwd, [env K=V...], *argv)`` (the Aviato emulator reads
it back to run a Python command directly)."""


def wrap_command(argv: Sequence[str], cwd: str, env: Mapping[str, str] | None) -> list[str]:
    """The command line that runs ``argv`` in ``cwd`` with ``env`` added."""
    check_env(env or {})
    assignments = [f"{key}={value}" for key, value in (env or {}).items()]
    prefix = ["env", *assignments] if assignments else []
    return [*CD_EXEC, cwd, *prefix, *argv]


class AviatoBackend:
    """Sandboxes on CoreWeave Sandbox (formerly Aviato)."""

    name = "aviato"
    sandbox_options: frozenset[str] = frozenset(
        n for n in keyword_only(cwsandbox.Sandbox) if not n.startswith("_")
    )
    """Provider options a sandbox takes: the public ones of the client's ``Sandbox``."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        auth: cwsandbox.AuthConfig | None = None,
        signal_handlers: bool = False,
        output_bytes: int = OUTPUT_BYTES,
        request_timeout_seconds: float | None = None,
        poll_retry_budget_seconds: float = 0.0,
        data_plane_mode: str | None = None,
    ) -> None:
        key = api_key or next(filter(None, (setting(v) for v in AVIATO_KEY_VARS)), None)
        if key is not None and auth is not None:
            raise BackendMisconfiguredError("give api_key or auth, not both")
        if key is None and auth is None:
            raise BackendMisconfiguredError(
                f"the aviato backend needs an API key: pass api_key= or set {AVIATO_KEY_VARS[0]}"
                f" ({AVIATO_KEY_VARS[1]} is read too; auth= takes another cwsandbox credential)"
            )
        if key is not None:
            auth = cwsandbox.AuthHeaders({"Authorization": f"Bearer {key}"}, strategy="api_key")
        self.base_url = base_url or setting(AVIATO_URL_VAR) or AVIATO_DEFAULT_URL
        self.account = f"aviato {self.base_url} {key_digest(key)}"
        """Whose limits its calls count against (ranks share a budget per account)."""
        self.output_bytes = output_bytes
        self._auth = auth
        self._request_timeout = request_timeout_seconds
        self._poll_budget = poll_retry_budget_seconds
        self._data_plane_mode = data_plane_mode
        self._handles: dict[str, cwsandbox.Sandbox] = {}
        if not signal_handlers:
            with contextlib.suppress(RuntimeError):  # already installed by the host program
                cwsandbox.disable_signal_handlers()

    def _connection(self) -> dict[str, Any]:
        """Keyword arguments every client call takes."""
        options: dict[str, Any] = {"base_url": self.base_url, "auth": self._auth}
        options["poll_retry_budget_seconds"] = self._poll_budget
        if self._data_plane_mode is not None:
            options["data_plane_mode"] = self._data_plane_mode
        return options

    # -- handles ----------------------------------------------------------------------------

    async def _find(self, sandbox_id: str) -> cwsandbox.Sandbox:
        """A fresh handle from the service; a stopped sandbox is not found."""
        sb = await _call(
            cwsandbox.Sandbox.from_id(
                sandbox_id, timeout_seconds=self._request_timeout, **self._connection()
            ),
            sandbox_id,
        )
        if _STATUS.get(sb.status or _CW.UNSPECIFIED) is SandboxStatus.STOPPED:
            raise SandboxNotFoundError(f"sandbox {sandbox_id} is {sb.status}")
        return sb

    async def _handle(self, sandbox_id: str) -> cwsandbox.Sandbox:
        """The cached handle of a running sandbox, else one found by id."""
        sb = self._handles.get(sandbox_id)
        if sb is not None:
            return sb
        sb = await self._find(sandbox_id)
        if sb.status is _CW.FAILED:
            raise SandboxNotFoundError(f"sandbox {sandbox_id} has failed")
        return self._handles.setdefault(sandbox_id, sb)

    async def _op(self, sandbox_id: str, awaitable: Awaitable[T]) -> T:
        """A client call on one sandbox; a sandbox found gone leaves the cache."""
        try:
            return await _call(awaitable, sandbox_id)
        except (SandboxNotFoundError, SandboxLostError):
            self._handles.pop(sandbox_id, None)
            raise

    def _info(self, sb: cwsandbox.Sandbox) -> SandboxInfo:
        assert sb.sandbox_id is not None
        return SandboxInfo(
            id=sb.sandbox_id,
            status=_STATUS.get(sb.status or _CW.UNSPECIFIED, SandboxStatus.PENDING),
            tags=tuple(sb.tags),
            # The client gives naive datetimes read off UTC timestamps.
            started_at=sb.started_at
            and sb.started_at.replace(tzinfo=sb.started_at.tzinfo or timezone.utc),
        )

    @staticmethod
    def _workdir(sb: cwsandbox.Sandbox) -> str:
        """The working directory the sandbox was created with (``/workspace`` if unknown)."""
        for container in sb.containers:
            if container.working_dir:
                return str(container.working_dir)
        return DEFAULT_WORKDIR

    # -- Backend protocol -------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        resources: dict[str, str] = {}
        if spec.cpu is not None:
            resources["cpu"] = f"{spec.cpu:g}"
        if spec.memory_mb is not None:
            resources["memory"] = f"{spec.memory_mb}Mi"
        options: dict[str, Any] = {
            "container_image": spec.image,
            "tags": list(spec.tags) or None,
            "environment_variables": dict(spec.env) or None,
            "resources": resources or None,
            "working_dir": spec.workdir,
            "max_lifetime_seconds": spec.lifetime_seconds,
            "request_timeout_seconds": self._request_timeout,
            **self._connection(),
            **spec.options,
        }
        try:
            sb = cwsandbox.Sandbox(**options)
        except (TypeError, ValueError) as exc:
            raise BackendMisconfiguredError(f"Aviato sandbox options: {exc}") from exc
        await start_owned(self._start(sb), self._discard)
        assert sb.sandbox_id is not None
        self._handles[sb.sandbox_id] = sb
        return self._info(sb)

    async def _start(self, sb: cwsandbox.Sandbox) -> cwsandbox.Sandbox:
        """Create and wait for RUNNING; a sandbox made on the way is deleted on failure."""
        try:
            await _call(sb.start())
            await _call(sb)
        except BaseException:
            if sb.sandbox_id is not None:
                await self._discard(sb)
            raise
        return sb

    async def _discard(self, sb: cwsandbox.Sandbox) -> None:
        await discard(lambda: sb.stop(missing_ok=True, graceful_shutdown_seconds=0), sb.sandbox_id)

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
        if not argv:
            raise ValueError("argv is empty")
        sb = await self._handle(sandbox_id)
        command = wrap_command(argv, posixpath.join(self._workdir(sb), cwd or "."), env)
        started = time.monotonic()
        process = sb.exec(command, timeout_seconds=timeout, stdin=bool(stdin))
        if stdin and process.stdin is not None:
            # A command that exits without reading its input closes the stream early.
            with contextlib.suppress(cwsandbox.CWSandboxError):
                await process.stdin.write(stdin)
                await process.stdin.close()
        try:
            result = await self._op(sandbox_id, process)
        except SandboxTimeoutError:
            return ExecResult(
                returncode=KILLED_RETURNCODE,
                timed_out=True,
                duration=time.monotonic() - started,
            )
        stdout, cut_out = cap_output(result.stdout_bytes, self.output_bytes)
        stderr, cut_err = cap_output(result.stderr_bytes, self.output_bytes)
        return ExecResult(
            returncode=result.returncode,
            stdout_bytes=stdout,
            stderr_bytes=stderr,
            duration=time.monotonic() - started,
            truncated=cut_out or cut_err,
        )

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        sb = await self._handle(sandbox_id)
        target = posixpath.join(self._workdir(sb), path)
        try:
            await self._op(sandbox_id, sb.write_file(target, data))
        except FileNotFoundError:
            # The parent directory is missing: make it, then write once more.
            made = await self.exec(sandbox_id, ["mkdir", "-p", posixpath.dirname(target)])
            if not made.ok:
                raise BackendError(f"cannot create the parent of {target}: {made.stderr}") from None
            await self._op(sandbox_id, sb.write_file(target, data))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        sb = await self._handle(sandbox_id)
        target = posixpath.join(self._workdir(sb), path)
        return await self._op(sandbox_id, sb.read_file(target))

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        sb = self._handles.pop(sandbox_id, None)
        if sb is not None:
            await _call(sb.stop(missing_ok=missing_ok, graceful_shutdown_seconds=0), sandbox_id)
            return
        await _call(
            cwsandbox.Sandbox.delete(
                sandbox_id,
                base_url=self.base_url,
                auth=self._auth,
                timeout_seconds=self._request_timeout,
                missing_ok=missing_ok,
            ),
            sandbox_id,
        )

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        wanted = [cw for cw, ours in _STATUS.items() if ours is status]
        found = await _call(
            cwsandbox.Sandbox.list(
                tags=list(tags) or None,
                # The client filters on one status: ask for it when ours maps to exactly one.
                status=wanted[0].value if len(wanted) == 1 else None,
                show_terminated=status in (SandboxStatus.STOPPED, SandboxStatus.FAILED),
                timeout_seconds=self._request_timeout,
                **self._connection(),
            )
        )
        infos = [self._info(sb) for sb in found]
        return [info for info in infos if status is None or info.status is status]

    async def get(self, sandbox_id: str) -> SandboxInfo:
        return self._info(await self._find(sandbox_id))

    async def aclose(self) -> None:
        """Release the cached handles' channels; the sandboxes themselves keep running."""
        handles, self._handles = list(self._handles.values()), {}
        for sb in handles:
            # The client's own channel release, without the stop its context managers add.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(sb._cleanup_channels)
