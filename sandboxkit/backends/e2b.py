"""E2B sandboxes through the ``e2b`` SDK (or ``sandboxkit emulate e2b``).

Configuration (explicit options win over the environment, which may come from ``.env``):
``api_key=`` else ``E2B_API_KEY``; ``api_url=`` else ``E2B_API_URL`` else
``https://api.<E2B_DOMAIN or e2b.app>``; ``sandbox_url=`` else ``E2B_SANDBOX_URL`` (where every
sandbox's ``envd`` is reached; unset, the SDK's own per-sandbox host names).

How the protocol maps onto E2B:

- **Control plane and files**: the SDK's generated REST client (``e2b.api.client``) and its
  httpx client of envd's file API, whose answers keep their status and headers, so a 429's
  ``Retry-After`` reaches :class:`~sandboxkit.errors.RateLimitedError` (the SDK's exceptions
  drop it). The SDK's own retries are off (``retries=0``):
  retrying is the job of the layer above.
- **Commands** run as their argv through envd's ``process.Process/Start`` (no shell between),
  on the SDK's Connect client, reading the raw events: the SDK's command handle decodes output
  as UTF-8 with replacement, which would lose bytes. stdin is sent with ``SendInput`` and
  closed with ``CloseStdin``. Output beyond ``output_bytes`` per stream is drained, not kept
  (``truncated``).
- **Timeouts**: at ``timeout`` the command is killed with ``SendSignal(SIGKILL)``
  (``timed_out=True``, returncode 137, the output so far); the stream's own deadline,
  ``TIMEOUT_GRACE_SECONDS`` later, has envd kill it should that signal be lost. A cancelled
  exec kills its command the same way, in the background.
- **Tags** become metadata: a tag ``t`` is the key ``sandboxkit.tag.<sha256(t)[:16]>`` with the
  value ``t``, so ``list(tags=...)`` filters on the server (metadata matches all pairs).
- **User**: commands and file calls run as ``user`` (``sandboxkit``), an unprivileged user that
  a sandbox's first call creates as root (its home: the workdir). E2B's templates give their
  default user passwordless sudo, with which a program could stop envd, restart it, or power
  the sandbox off, and so turn its own outcome into the provider's failure. ``user=None``
  runs as the template's default user instead (for a template without ``useradd`` or
  ``adduser``, or one whose default user is already unprivileged).
- **workdir** is kept in the metadata and created by the first command or file call (as
  root, open to the user); relative paths and ``cwd`` are resolved against it here.
- **Leaks**: a sandbox lives ``lifetime_seconds``, else ``timeout_seconds`` (one hour), after
  which E2B kills it (or pauses it: ``lifecycle={"on_timeout": "pause"}``). A create that fails
  after the server may have made the sandbox finds it by a per-request metadata key and kills
  it.
- **Errors**: 401/403 -> ``AuthenticationError``, 404 -> ``SandboxNotFoundError``, 429 and
  envd's ``resource_exhausted`` -> ``RateLimitedError`` (with the wait asked for), 5xx and
  connection failures -> ``TransientBackendError``. A command whose stream breaks without an
  end event (a transport error, envd's ``unavailable``) is ``SandboxLostError`` when the API
  then says the sandbox is gone or paused, or envd no longer answers its health check (a
  program may kill envd: E2B's default user has sudo); otherwise ``TransientBackendError``.
- **Pause and resume** (E2B's own): :meth:`E2BBackend.pause` and :meth:`E2BBackend.resume`; a
  paused sandbox keeps its files and memory, runs nothing, and lists as ``PENDING``.

Provider options (``sandbox_options``): ``template`` (an image is a template too), ``timeout``
(seconds), ``metadata``, ``lifecycle`` (the SDK's ``SandboxLifecycle``) and
``allow_internet_access``.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import hashlib
import logging
import posixpath
import re
import time
import urllib.parse
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from ..config import setting
from ..coordination import key_digest
from ..errors import (
    AuthenticationError,
    BackendError,
    BackendMisconfiguredError,
    RateLimitedError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    SandboxTimeoutError,
    TransientBackendError,
    installed_for,
)
from ..portal import portal
from ..protocol import (
    DEFAULT_WORKDIR,
    KILLED_RETURNCODE,
    ExecResult,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    check_env,
)
from ._facts import E2B_KEY_VAR, E2B_SANDBOX_URL_VAR, E2B_URL_VAR
from ._retry_after import retry_after_seconds

with installed_for("the 'e2b' backend", "pip install 'sandboxkit[e2b]'"):
    import httpx
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError
    from e2b import AsyncSandbox, ConnectionConfig
    from e2b.api.client.api.sandboxes import (
        delete_sandboxes_sandbox_id,
        get_sandboxes_sandbox_id,
        get_v2_sandboxes,
        post_sandboxes_sandbox_id_pause,
        post_v2_sandboxes,
        post_v_2_sandboxes_sandbox_id_connect,
    )
    from e2b.api.client.models import (
        ConnectSandboxV2,
        NewSandboxV2,
        SandboxDetail,
        SandboxPauseRequest,
        SandboxState,
    )
    from e2b.api.client.models import Sandbox as CreatedSandbox
    from e2b.api.client.types import UNSET, Response
    from e2b.api.client_async import get_api_client, get_envd_api
    from e2b.envd.api import (
        ENVD_API_FILE_DOWNLOAD_HTTP_VERSION,
        ENVD_API_FILES_ROUTE,
        ENVD_API_HEALTH_ROUTE,
    )
    from e2b.envd.client_async import create_rpc_client
    from e2b.envd.process import process_connect, process_pb
    from e2b.envd.utils import authentication_header
    from e2b.exceptions import SandboxException
    from e2b.sandbox.sandbox_api import build_lifecycle_config
    from packaging.version import Version
    from protobuf import Oneof
    from protobuf.wkt import Duration

T = TypeVar("T")
logger = logging.getLogger("sandboxkit.e2b")

TAG_PREFIX = "sandboxkit.tag."
WORKDIR_KEY = "sandboxkit.workdir"
REQUEST_KEY = "sandboxkit.request"
OUTPUT_BYTES = 1024 * 1024
"""Bytes kept per stream; the rest is drained and ``truncated`` set (as the local backend)."""
TIMEOUT_GRACE_SECONDS = 5.0
KILL_SECONDS = 30.0
"""The limit on the call that kills a cancelled or timed-out command."""
RUN_AS = "sandboxkit"
"""The user commands and file calls run as by default: made without sudo by a sandbox's first
call."""
SETUP_SCRIPT = """w=$1 u=$2
if [ -n "$u" ] && [ "$(id -u)" = 0 ] && ! id -u "$u" >/dev/null 2>&1; then
  useradd -M -d "$w" -s /bin/sh "$u" 2>/dev/null || adduser -D -H -h "$w" "$u" || exit 3
fi
mkdir -p "$w" && chmod a+rwx "$w"
"""
"""Run as root by a sandbox's first call: the unprivileged user (with the workdir as its
home), where it is missing, and the workdir, open to it. (Not as root, as the E2B emulator's
sandboxes run it, users are left alone.)"""
HEALTH_SECONDS = 5.0
"""The limit on envd's health check after a call to it broke."""
STDIN_CHUNK = 1024 * 1024
"""Bytes of stdin per ``SendInput`` call."""
_SIGNAL_STATUS = re.compile(r"signal: (\w[\w ]*)")
_SIGNALS = {"killed": 9, "terminated": 15, "interrupt": 2, "aborted": 6, "segmentation fault": 11}
"""envd's status for a command a signal ended (Go's names), by signal number."""
_TRANSPORT_ERRORS = (httpx.TransportError, OSError, asyncio.TimeoutError)
_RPC_LOST = frozenset({Code.UNAVAILABLE, Code.UNKNOWN, Code.INTERNAL, Code.CANCELED})
"""RPC codes that say the command's connection broke, not what envd made of the request."""


def tag_key(tag: str) -> str:
    """The metadata key of a tag (its value is the tag itself)."""
    return TAG_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:16]


def _metadata_query(pairs: Mapping[str, str]) -> str:
    """``GET /v2/sandboxes``'s ``metadata`` filter, encoded as the SDK's own paginator does."""
    quoted = {urllib.parse.quote(k): urllib.parse.quote(v) for k, v in pairs.items()}
    return urllib.parse.urlencode(quoted)


def _retry_delay(error: ConnectError) -> float | None:
    """The wait a ``google.rpc.RetryInfo`` detail of an envd error asks for (its one field, a
    Duration, is field 1)."""
    for detail in error.details:
        data = detail.message_bytes
        if detail.type_name == "google.rpc.RetryInfo" and data[:1] == b"\x0a" and len(data) > 2:
            delay = Duration.from_binary(data[2 : 2 + data[1]])
            return max(0.0, delay.seconds + delay.nanos / 1e9)
    return None


def _selector(pid: int) -> process_pb.ProcessSelector:
    field: Literal["pid"] = "pid"
    return process_pb.ProcessSelector(selector=Oneof(field, pid))


def _returncode(end: process_pb.ProcessEvent.EndEvent) -> int:
    """A shell's status for envd's end event: a signal's death is ``128 + N``."""
    match = _SIGNAL_STATUS.fullmatch(end.status or "")
    if match is not None and not end.exited:
        return 128 + _SIGNALS.get(match.group(1), 9)
    return int(end.exit_code)


@dataclass
class _Handle:
    """What a sandbox's envd calls need: the SDK's clients of its file API (httpx, on the
    SDK's shared transport) and of its process service (Connect)."""

    files: httpx.AsyncClient
    rpc: process_connect.ProcessClient
    workdir: str
    envd_version: Version
    workdir_made: bool = False
    """Whether this handle's first command or file call made the workdir (once per handle:
    making it again is harmless)."""


@dataclass
class _Output:
    """A command's output so far, kept up to the cap."""

    cap: int
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    end: process_pb.ProcessEvent.EndEvent | None = None

    def add(self, stream: bytearray, chunk: bytes) -> None:
        room = self.cap - len(stream)
        if len(chunk) > room:
            self.truncated = True
        stream += chunk[: max(room, 0)]


class E2BBackend:
    """Sandboxes on E2B (or on ``sandboxkit emulate e2b``)."""

    name = "e2b"
    sandbox_options: frozenset[str] = frozenset(
        {"template", "timeout", "metadata", "lifecycle", "allow_internet_access"}
    )
    """Provider options a sandbox takes (see the module's docstring)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        domain: str | None = None,
        timeout_seconds: int = 3600,
        request_timeout: float = 60.0,
        output_bytes: int = OUTPUT_BYTES,
        user: str | None = RUN_AS,
    ) -> None:
        """``timeout_seconds``: how long a sandbox lives when its spec names no lifetime;
        ``request_timeout``: the limit on each API call (and on a command's start); ``user``:
        who commands and file calls run as (see the module's docstring; None: the template's
        default user, which on E2B's templates has passwordless sudo)."""
        key = api_key or setting(E2B_KEY_VAR)
        if not key:
            raise BackendMisconfiguredError(
                f"the e2b backend needs an API key: pass api_key= or set {E2B_KEY_VAR}"
            )
        self.config = ConnectionConfig(
            api_key=key,
            api_url=api_url or setting(E2B_URL_VAR),
            sandbox_url=sandbox_url or setting(E2B_SANDBOX_URL_VAR),
            domain=domain,
            request_timeout=request_timeout,
            retries=0,
        )
        self.api_url = self.config.api_url
        self.account = f"e2b {self.api_url} {key_digest(key)}"
        """Whose limits its calls count against (ranks share a budget per account)."""
        self.timeout_seconds = timeout_seconds
        self.output_bytes = output_bytes
        self.user = user
        self._api = get_api_client(self.config)
        self._handles: dict[str, _Handle] = {}
        self._killing: set[concurrent.futures.Future[None]] = set()
        """Background kills of cancelled commands; awaited by ``aclose``."""
        self._warned_resources = False

    def __repr__(self) -> str:
        return f"<E2BBackend {self.api_url}>"

    # -- errors ----------------------------------------------------------------------------------

    def _http_error(self, status: int, headers: Mapping[str, str], what: str, detail: str) -> Any:
        message = f"E2B {what} failed: HTTP {status} {detail}".rstrip()
        if status in (401, 403):
            return AuthenticationError(
                f"E2B at {self.api_url} refused the API key (HTTP {status}); "
                f"check {E2B_KEY_VAR} or the api_key option"
            )
        if status == 404:
            return SandboxNotFoundError(message)
        if status == 429:
            wait = headers.get("retry-after")
            return RateLimitedError(
                message, retry_after=retry_after_seconds(wait) if wait else None
            )
        if status >= 500:
            return TransientBackendError(message)
        if status in (400, 409, 422):
            return BackendMisconfiguredError(message)
        return BackendError(message)

    async def _call(self, what: str, call: Awaitable[Response[T]]) -> Response[T]:
        """A control-plane call; any answer but a 2xx is raised as sandboxkit's error."""
        try:
            response = await call
        except _TRANSPORT_ERRORS as exc:
            raise TransientBackendError(f"E2B {what} failed: {exc!r}") from exc
        if response.status_code >= 300:
            detail = bytes(response.content[:300]).decode("utf-8", "replace")
            raise self._http_error(int(response.status_code), response.headers, what, detail)
        return response

    def _rpc_error(self, exc: ConnectError, what: str) -> SandboxError:
        message = f"E2B {what} failed: {exc.code.name.lower()}: {exc.message}"
        if exc.code is Code.RESOURCE_EXHAUSTED:
            return RateLimitedError(message, retry_after=_retry_delay(exc))
        if exc.code in (Code.UNAUTHENTICATED, Code.PERMISSION_DENIED):
            return AuthenticationError(message)
        if exc.code is Code.NOT_FOUND:
            return SandboxNotFoundError(message)
        if exc.code is Code.INVALID_ARGUMENT:
            return SandboxError(message)
        if exc.code is Code.DEADLINE_EXCEEDED:
            return SandboxTimeoutError(message)
        return TransientBackendError(message)

    async def _lost_or_transient(self, sandbox_id: str, what: str, cause: object) -> SandboxError:
        """The error for a call to envd that broke, from evidence outside the sandbox: the API
        says whether it still runs; if it does, whether envd still answers its health check
        (a program may kill envd, with the sudo E2B's default user has: that sandbox is lost
        as one the program killed, which the layer above charges to the program the second
        time; a network blip leaves envd answering, and is transient)."""
        handle = self._handles.pop(sandbox_id, None)
        try:
            info = await self.get(sandbox_id)
        except SandboxNotFoundError:
            return SandboxLostError(f"sandbox {sandbox_id} is gone ({what} failed: {cause})")
        except SandboxError as exc:
            return TransientBackendError(f"E2B {what} failed: {cause}; state unknown: {exc}")
        if info.status is not SandboxStatus.RUNNING:
            state = info.status.value
            return SandboxLostError(f"sandbox {sandbox_id} is {state} ({what} failed: {cause})")
        if handle is not None:
            try:
                health = await handle.files.get(ENVD_API_HEALTH_ROUTE, timeout=HEALTH_SECONDS)
                answered = health.status_code < 300
            except _TRANSPORT_ERRORS:
                answered = False
            if not answered:
                return SandboxLostError(
                    f"sandbox {sandbox_id} runs but its envd does not answer ({what} failed: "
                    f"{cause})"
                )
            self._handles[sandbox_id] = handle
        return TransientBackendError(f"E2B {what} failed: {cause}")

    # -- lifecycle -------------------------------------------------------------------------------

    def _body(self, spec: SandboxSpec, request_id: str) -> NewSandboxV2:
        options = dict(spec.options)
        unknown = set(options) - self.sandbox_options
        if unknown:
            raise BackendMisconfiguredError(f"unknown E2B sandbox options: {sorted(unknown)}")
        template = options.get("template") or spec.image or AsyncSandbox.default_template
        if spec.image is not None and options.get("template") not in (None, spec.image):
            raise BackendMisconfiguredError("pass an image or a template, not both")
        resources = (spec.cpu, spec.memory_mb, spec.disk_mb) != (None, None, None)
        if resources and not self._warned_resources:
            self._warned_resources = True
            warnings.warn(
                "E2B sets cpu, memory and disk per template; this sandbox gets its "
                "template's resources",
                RuntimeWarning,
                stacklevel=4,
            )
        metadata = {str(k): str(v) for k, v in (options.get("metadata") or {}).items()}
        metadata |= {tag_key(tag): tag for tag in spec.tags}
        metadata |= {WORKDIR_KEY: spec.workdir, REQUEST_KEY: request_id}
        lifetime = options.get("timeout") or spec.lifetime_seconds or self.timeout_seconds
        try:
            lifecycle = build_lifecycle_config(options.get("lifecycle"))
        except SandboxException as exc:
            raise BackendMisconfiguredError(f"invalid E2B lifecycle: {exc}") from None
        internet = options.get("allow_internet_access")
        return NewSandboxV2(
            template_id=str(template),
            timeout=max(1, round(float(lifetime))),
            auto_pause=lifecycle.auto_pause,
            auto_pause_memory=lifecycle.auto_pause_memory,
            auto_resume=lifecycle.auto_resume,
            metadata=metadata,
            env_vars=dict(spec.env),
            allow_internet_access=UNSET if internet is None else bool(internet),
        )

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        if not posixpath.isabs(spec.workdir):
            raise BackendMisconfiguredError(f"workdir {spec.workdir!r} must be an absolute path")
        check_env(spec.env)
        request_id = uuid.uuid4().hex
        body = self._body(spec, request_id)
        started = datetime.now(timezone.utc)
        try:
            response = await self._call(
                "create",
                post_v2_sandboxes.asyncio_detailed(
                    client=self._api, body=body, idempotency_key=request_id
                ),
            )
            created = response.parsed
            assert isinstance(created, CreatedSandbox)
            handle = self._open(created, spec.workdir)
        except BaseException:
            await _shielded(self._discard(request_id))
            raise
        self._handles[created.sandbox_id] = handle
        # What a get would answer, without its round trip.
        tags = tuple(dict.fromkeys(spec.tags))
        return SandboxInfo(created.sandbox_id, SandboxStatus.RUNNING, tags, started)

    def _open(self, sandbox: CreatedSandbox | SandboxDetail, workdir: str) -> _Handle:
        """A handle on a sandbox's envd, from what create or get answered (no call)."""
        token = sandbox.envd_access_token if isinstance(sandbox.envd_access_token, str) else None
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"}
        if token is not None:
            headers["X-Access-Token"] = token
        config = ConnectionConfig(
            extra_sandbox_headers=headers, **self.config.get_api_params(retries=0)
        )
        domain = sandbox.domain if isinstance(sandbox.domain, str) else None
        url = config.get_sandbox_url(sandbox.sandbox_id, domain or config.domain)
        rpc = create_rpc_client(process_connect.ProcessClient, url, config)
        # Downloads over HTTP/1.1, as the SDK's own (see ENVD_API_FILE_DOWNLOAD_HTTP_VERSION).
        files = get_envd_api(config, url, http_version=ENVD_API_FILE_DOWNLOAD_HTTP_VERSION)
        return _Handle(files, rpc, workdir, Version(sandbox.envd_version))

    async def _make_workdir(self, sandbox_id: str, handle: _Handle) -> None:
        """Create the workdir as root, open to the sandbox's user (templates have no
        ``/workspace``, and their user may not write to ``/``): by a handle's first command or
        file call, as Daytona's backend does, so that creating a sandbox is one call."""
        made = await self._run(
            sandbox_id,
            handle,
            ["/bin/sh", "-c", SETUP_SCRIPT, "sh", handle.workdir, self.user or ""],
            timeout=self.config.request_timeout,
            user="root",
        )
        if not made.ok:
            raise BackendMisconfiguredError(
                f"cannot create workdir {handle.workdir!r} or user {self.user!r} in the E2B "
                f"sandbox (user=None runs as the template's user): {made.stderr.strip()}"
            )

    async def _discard(self, request_id: str) -> None:
        """Kill what a failed create made anyway; best effort (its timeout is the backstop)."""
        with contextlib.suppress(SandboxError):
            for info in await self._list({REQUEST_KEY: request_id}, None):
                await self.stop(info.id)

    async def _handle(self, sandbox_id: str) -> _Handle:
        handle = self._handles.get(sandbox_id)
        if handle is None:
            detail = await self._detail(sandbox_id)
            if detail.state != SandboxState.RUNNING:
                raise SandboxNotFoundError(f"sandbox {sandbox_id} is {detail.state.value}")
            metadata = detail.metadata if isinstance(detail.metadata, dict) else {}
            handle = self._open(detail, str(metadata.get(WORKDIR_KEY) or DEFAULT_WORKDIR))
            self._handles[sandbox_id] = handle
        if not handle.workdir_made:
            await self._make_workdir(sandbox_id, handle)
            handle.workdir_made = True
        return handle

    async def _detail(self, sandbox_id: str) -> SandboxDetail:
        response = await self._call(
            "get", get_sandboxes_sandbox_id.asyncio_detailed(sandbox_id, client=self._api)
        )
        assert isinstance(response.parsed, SandboxDetail)
        return response.parsed

    @staticmethod
    def _info(sandbox: Any) -> SandboxInfo:
        metadata = sandbox.metadata if isinstance(sandbox.metadata, dict) else {}
        tags = tuple(str(v) for k, v in metadata.items() if str(k).startswith(TAG_PREFIX))
        running = sandbox.state == SandboxState.RUNNING
        status = SandboxStatus.RUNNING if running else SandboxStatus.PENDING  # paused: resumable
        started = sandbox.started_at if isinstance(sandbox.started_at, datetime) else None
        return SandboxInfo(sandbox.sandbox_id, status, tags, started)

    async def get(self, sandbox_id: str) -> SandboxInfo:
        return self._info(await self._detail(sandbox_id))

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        self._handles.pop(sandbox_id, None)
        try:
            await self._call(
                "kill", delete_sandboxes_sandbox_id.asyncio_detailed(sandbox_id, client=self._api)
            )
        except SandboxNotFoundError:
            if not missing_ok:
                raise

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        return await self._list({tag_key(t): t for t in tags}, status)

    async def _list(
        self, metadata: Mapping[str, str], status: SandboxStatus | None
    ) -> builtins.list[SandboxInfo]:
        states: dict[SandboxStatus | None, Any] = {
            None: UNSET,
            SandboxStatus.RUNNING: [SandboxState.RUNNING],
            SandboxStatus.PENDING: [SandboxState.PAUSED],
        }
        if status not in states:
            return []  # E2B lists no stopped or failed sandboxes: they are gone
        found: builtins.list[SandboxInfo] = []
        token: str | None = None
        while True:
            response = await self._call(
                "list",
                get_v2_sandboxes.asyncio_detailed(
                    client=self._api,
                    metadata=_metadata_query(metadata) if metadata else UNSET,
                    state=states[status],
                    next_token=token or UNSET,
                ),
            )
            listed = response.parsed if isinstance(response.parsed, builtins.list) else []
            found += [self._info(sb) for sb in listed]
            token = response.headers.get("x-next-token")
            if not token:
                return found

    async def pause(self, sandbox_id: str) -> bool:
        """Pause a running sandbox (E2B keeps its files and memory); False if it already was."""
        self._handles.pop(sandbox_id, None)
        try:
            await self._call(
                "pause",
                post_sandboxes_sandbox_id_pause.asyncio_detailed(
                    sandbox_id, client=self._api, body=SandboxPauseRequest()
                ),
            )
        except BackendMisconfiguredError as exc:
            if "HTTP 409" in str(exc):
                return False
            raise
        return True

    async def resume(self, sandbox_id: str, *, timeout_seconds: int | None = None) -> SandboxInfo:
        """Resume a paused sandbox (a running one is left running); ``timeout_seconds`` from
        now on, if longer than what it has."""
        body = ConnectSandboxV2(timeout=UNSET if timeout_seconds is None else timeout_seconds)
        await self._call(
            "resume",
            post_v_2_sandboxes_sandbox_id_connect.asyncio_detailed(
                sandbox_id, client=self._api, body=body
            ),
        )
        self._handles.pop(sandbox_id, None)
        return await self.get(sandbox_id)

    async def aclose(self) -> None:
        """Wait for the kills of cancelled commands; the sandboxes themselves keep running."""
        if self._killing:
            kills = [asyncio.wrap_future(f) for f in self._killing]
            await asyncio.wait(kills, timeout=KILL_SECONDS)
        self._handles.clear()

    # -- exec and files --------------------------------------------------------------------------

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
        check_env(env or {})
        handle = await self._handle(sandbox_id)
        where = posixpath.join(handle.workdir, cwd or ".")
        return await self._run(sandbox_id, handle, argv, timeout, stdin, where, env, self.user)

    async def _run(
        self,
        sandbox_id: str,
        handle: _Handle,
        argv: Sequence[str],
        timeout: float | None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        started = time.monotonic()
        headers = authentication_header(handle.envd_version, user)
        config = process_pb.ProcessConfig(cmd=argv[0], args=list(argv[1:]), envs=dict(env or {}))
        if cwd is not None:  # absolute; else envd's default (the user's home)
            config.cwd = cwd
        deadline = None if timeout is None else round((timeout + TIMEOUT_GRACE_SECONDS) * 1000)
        events = handle.rpc.start(
            process_pb.StartRequest(process=config, stdin=bool(stdin)),
            headers=headers,
            timeout_ms=deadline,
        )
        output = _Output(self.output_bytes)
        pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        reader: asyncio.Future[None] = asyncio.ensure_future(self._read_events(events, output, pid))
        try:
            first: list[asyncio.Future[Any]] = [pid, reader]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if not pid.done():
                await reader  # it failed before the start event: raises
            if stdin and pid.done():
                await self._send_stdin(handle, pid.result(), stdin, headers)
            remaining = None if timeout is None else timeout - (time.monotonic() - started)
            done, _ = await asyncio.wait({reader}, timeout=remaining)
            if not done:
                await self._kill(handle, pid.result(), headers)
                return self._result(output, started, timed_out=True)
            await reader
        except asyncio.CancelledError:
            if pid.done() and not pid.cancelled():
                self._kill_later(handle, pid.result(), headers)
            raise
        except ConnectError as exc:
            if exc.code in _RPC_LOST:
                raise await self._lost_or_transient(sandbox_id, "exec", exc) from exc
            raise self._rpc_error(exc, "exec") from exc
        except _TRANSPORT_ERRORS as exc:
            raise await self._lost_or_transient(sandbox_id, "exec", repr(exc)) from exc
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        if output.end is None:  # the stream ended without an end (or a start) event
            raise await self._lost_or_transient(sandbox_id, "exec", "no end event")
        return self._result(output, started)

    @staticmethod
    async def _read_events(
        events: AsyncIterator[process_pb.StartResponse], output: _Output, pid: asyncio.Future[int]
    ) -> None:
        try:
            async for response in events:
                event = response.event.event if response.event is not None else None
                value = event.value if event is not None else None
                if isinstance(value, process_pb.ProcessEvent.StartEvent):
                    pid.set_result(int(value.pid))
                elif isinstance(value, process_pb.ProcessEvent.DataEvent) and value.output:
                    stream = output.stdout if value.output.field == "stdout" else output.stderr
                    if value.output.field in ("stdout", "stderr"):
                        output.add(stream, value.output.value)
                elif isinstance(value, process_pb.ProcessEvent.EndEvent):
                    output.end = value
        finally:
            with contextlib.suppress(BaseException):
                await events.aclose()  # type: ignore[attr-defined]

    async def _send_stdin(
        self, handle: _Handle, pid: int, data: bytes, headers: Mapping[str, str]
    ) -> None:
        """Send stdin and close it; a command that exited without reading it is not an error
        (envd no longer knows its pid)."""
        selector = _selector(pid)
        try:
            for offset in range(0, len(data), STDIN_CHUNK):
                chunk = data[offset : offset + STDIN_CHUNK]
                field: Literal["stdin"] = "stdin"
                stdin = process_pb.ProcessInput(input=Oneof(field, chunk))
                request = process_pb.SendInputRequest(process=selector, input=stdin)
                await handle.rpc.send_input(request, headers=headers)
            await handle.rpc.close_stdin(
                process_pb.CloseStdinRequest(process=selector), headers=headers
            )
        except ConnectError as exc:
            if exc.code is not Code.NOT_FOUND:
                raise

    @staticmethod
    async def _kill(handle: _Handle, pid: int, headers: Mapping[str, str]) -> None:
        """SIGKILL a command; one that has ended already is not an error."""
        request = process_pb.SendSignalRequest(
            process=_selector(pid), signal=process_pb.Signal.SIGKILL
        )
        try:
            await handle.rpc.send_signal(
                request, headers=headers, timeout_ms=round(KILL_SECONDS * 1000)
            )
        except ConnectError as exc:
            if exc.code is not Code.NOT_FOUND:
                logger.info("could not kill command %d: %s", pid, exc)
        except _TRANSPORT_ERRORS as exc:
            logger.info("could not kill command %d: %r", pid, exc)

    def _kill_later(self, handle: _Handle, pid: int, headers: Mapping[str, str]) -> None:
        """Kill a cancelled exec's command on sandboxkit's own loop (the caller's may be
        ``asyncio.run``'s, which ends now); the stream's deadline is the backstop."""
        future = asyncio.run_coroutine_threadsafe(self._kill(handle, pid, headers), portal().loop)
        self._killing.add(future)
        future.add_done_callback(self._killing.discard)

    @staticmethod
    def _result(output: _Output, started: float, *, timed_out: bool = False) -> ExecResult:
        code = KILLED_RETURNCODE if timed_out or output.end is None else _returncode(output.end)
        return ExecResult(
            returncode=code,
            stdout_bytes=bytes(output.stdout),
            stderr_bytes=bytes(output.stderr),
            timed_out=timed_out,
            duration=time.monotonic() - started,
            truncated=output.truncated,
        )

    async def _files(
        self, sandbox_id: str, what: str, request: Awaitable[httpx.Response]
    ) -> httpx.Response:
        """A call to envd's file API; any answer but a 2xx is raised as sandboxkit's error."""
        try:
            response = await request
        except _TRANSPORT_ERRORS as exc:
            raise await self._lost_or_transient(sandbox_id, what, repr(exc)) from exc
        status = response.status_code
        if status < 300:
            return response
        detail = response.text[:300]
        if status == 404:
            raise FileNotFoundError(f"{what} in sandbox {sandbox_id}: {detail}")
        if status == 502:  # the edge proxy: the sandbox is not (or no longer) reachable
            raise await self._lost_or_transient(sandbox_id, what, f"HTTP 502 {detail}")
        if status == 400:
            raise SandboxError(f"{what} in sandbox {sandbox_id}: {detail}")
        raise self._http_error(status, response.headers, what, detail)

    def _file_params(self, path: str) -> dict[str, str]:
        return {"path": path, "username": self.user} if self.user else {"path": path}

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        handle = await self._handle(sandbox_id)
        target = posixpath.join(handle.workdir, path)
        upload = handle.files.post(
            ENVD_API_FILES_ROUTE, params=self._file_params(target), files={"file": (target, data)}
        )
        await self._files(sandbox_id, f"write {path}", upload)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        handle = await self._handle(sandbox_id)
        target = posixpath.join(handle.workdir, path)
        download = handle.files.get(ENVD_API_FILES_ROUTE, params=self._file_params(target))
        return (await self._files(sandbox_id, f"read {path}", download)).content


async def _shielded(coro: Awaitable[None]) -> None:
    """Run cleanup to its end even if the caller is being cancelled."""
    task = asyncio.ensure_future(coro)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)
