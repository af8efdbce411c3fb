"""The Daytona backend: sandboxkit's protocol over the ``daytona`` SDK's async client.

Choices where Daytona and the protocol differ:

- **Tags** become labels. A tag ``t`` is the label ``sandboxkit.tag.<sha256(t)[:16]>`` whose
  value is ``t`` itself when it is a plain label value (``[A-Za-z0-9]``, inner ``._-``, at most
  63 characters), else ``b32-`` and its UTF-8 in lower-case unpadded base32. Keys are fixed,
  valid and derived from the tag alone, so ``list(tags=...)`` filters on the server; values
  decode back exactly. Tag order is not kept (Daytona stores labels as a map).
- **stdout and stderr**: Daytona's exec merges them and cannot carry bytes that are not UTF-8.
  Each argv runs under a ``sh`` wrapper that sends the two streams through ``head -c`` (so a
  chatty program cannot fill the disk; the rest is drained, not broken off) into files under
  ``/tmp/.sandboxkit/<exec id>/``, then prints the exit status and both files in base64. One
  round trip per exec: stdin (a harness's program) travels in the command, in base64, while
  that keeps it under ``INLINE_COMMAND_BYTES``; larger stdin is uploaded first, a second round
  trip. Needs ``sh``, ``head``, ``cat``, ``base64`` and ``mkfifo``, which every mainstream
  image has.
- **Cancellation**: Daytona's exec is one HTTP request with no cancel; the wrapper keeps a
  FIFO in its scratch directory, and a cancelled exec sends a second exec (in the background)
  that writes a line into it, on which the wrapper kills its command. Should that kill not
  arrive, the watchdog's ``timeout`` and the sandbox's deletion (a pool retires a sandbox
  whose exec was cancelled) remain the backstops.
- **Timeouts**: a watchdog in the wrapper kills the command at ``timeout`` (sub-second, with
  the output so far) -> ``ExecResult(timed_out=True, returncode=137)``. Daytona's own limit
  (whole seconds, rounded up, plus a grace) is the backstop for a command whose children keep
  its pipes open: its 408 answer gives the same result, with what the wrapper's files hold
  (two more round trips, in that case only).
- **workdir** is stored as a label and created by the first exec (with ``sudo -n`` where the
  sandbox user cannot); relative paths and ``cwd`` are resolved against it on this side.
- **Leaks**: sandboxes get ``auto_stop_interval`` (default 15 idle minutes) and
  ``auto_delete_interval`` (default 0: deleted as soon as stopped), and ``ttl_minutes`` from
  ``lifetime_seconds``. A create that fails after the server made the sandbox (lost answer,
  timeout, cancellation) finds it by a per-request label and deletes it.
- **Errors**: 401/403 -> ``AuthenticationError``, 404 -> ``SandboxNotFoundError``, 429 ->
  ``RateLimitedError`` (with its ``Retry-After``), 5xx and connection failures ->
  ``TransientBackendError``; a toolbox call that fails while the sandbox left the ``started``
  state -> ``SandboxLostError``. No retries here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import concurrent.futures
import contextlib
import hashlib
import logging
import math
import posixpath
import re
import shlex
import time
import uuid
import warnings
from collections.abc import AsyncGenerator, Awaitable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

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
)
from ._daytona_wire import MARK, NO_CWD, NO_WORKDIR, STREAMS_SEPARATOR, kill_command, wrap_command
from ._facts import DAYTONA_DEFAULT_URL, DAYTONA_KEY_VAR, DAYTONA_TARGET_VAR, DAYTONA_URL_VAR
from ._output import cap_output
from ._retry_after import retry_after_seconds

with installed_for("the 'daytona' backend", "pip install 'sandboxkit[daytona]'"):
    import aiohttp
    import pydantic
    from daytona import (
        AsyncDaytona,
        AsyncSandbox,
        CreateSandboxFromImageParams,
        CreateSandboxFromSnapshotParams,
        DaytonaAuthenticationError,
        DaytonaConfig,
        DaytonaConnectionError,
        DaytonaError,
        DaytonaForbiddenError,
        DaytonaProcessExecutionTimeoutError,
        DaytonaTimeoutError,
        FileDownloadRequest,
        ListSandboxesQuery,
        Resources,
        SandboxState,
    )

T = TypeVar("T")

TAG_PREFIX = "sandboxkit.tag."
WORKDIR_LABEL = "sandboxkit.workdir"
REQUEST_LABEL = "sandboxkit.request"
OUTPUT_CAP = 1024 * 1024
"""Bytes kept per stream; the rest is dropped and ``truncated`` set (as the local backend)."""
SCRATCH_DIR = "/tmp/.sandboxkit"
INLINE_COMMAND_BYTES = 96 * 1024
"""Stdin travels in the exec's command while the command stays this short, else it is uploaded
before the exec: the command is one argument of a shell, and Linux caps one at 128 KiB."""
logger = logging.getLogger("sandboxkit.daytona")

UNLIMITED_EXEC_SECONDS = 24 * 3600
"""Sent for ``timeout=None``: the daemon would otherwise apply its 10 s default."""
TIMEOUT_GRACE_SECONDS = 5
KILL_EXEC_SECONDS = 30
"""Daytona's limit on the exec that kills a cancelled exec's command."""
_SDK_ERRORS = (DaytonaError, aiohttp.ClientError, ConnectionError, asyncio.TimeoutError)
_ENCODED = "b32-"
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_STATES = {
    SandboxStatus.RUNNING: ("started",),
    SandboxStatus.PENDING: (
        "creating",
        "restoring",
        "starting",
        "pending_build",
        "building_snapshot",
        "pulling_snapshot",
        "resuming",
        "unknown",
    ),
    SandboxStatus.STOPPED: ("stopped", "stopping", "archived", "archiving", "paused", "pausing"),
    SandboxStatus.FAILED: ("error", "build_failed"),
}
_GONE = ("destroyed", "destroying")


# -- tags as labels ------------------------------------------------------------------------------


def encode_label_value(text: str) -> str:
    """A valid label value for any string, reversible by :func:`decode_label_value`."""
    if _PLAIN_VALUE.fullmatch(text) and not text.startswith(_ENCODED):
        return text
    return _ENCODED + base64.b32encode(text.encode()).decode().rstrip("=").lower()


def decode_label_value(value: str) -> str:
    if not value.startswith(_ENCODED):
        return value
    data = value[len(_ENCODED) :].upper()
    try:
        return base64.b32decode(data + "=" * (-len(data) % 8)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return value  # not ours: show it as it is


def tag_label(tag: str) -> tuple[str, str]:
    return TAG_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:16], encode_label_value(tag)


def tags_from_labels(labels: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(decode_label_value(v) for k, v in labels.items() if k.startswith(TAG_PREFIX))


# -- the backend ---------------------------------------------------------------------------------


@dataclass
class _Connection:
    """One loop's SDK client, and the sandboxes it has handles for (saves a ``get`` per call)."""

    daytona: AsyncDaytona
    closer: AsyncGenerator[None, None]
    sandboxes: dict[str, AsyncSandbox] = field(default_factory=dict)

    @classmethod
    async def open(cls, config: DaytonaConfig) -> _Connection:
        daytona = AsyncDaytona(config)
        closer = _close_with_loop(daytona)
        await closer.__anext__()
        return cls(daytona, closer)


async def _close_with_loop(daytona: AsyncDaytona) -> AsyncGenerator[None, None]:
    """Closes the client when its loop shuts down (``asyncio.run`` finalizes async generators
    before closing the loop), or earlier through ``aclose()``: a loop that ends without the
    caller closing sandboxkit does not leave an open session behind."""
    try:
        yield
    finally:
        await daytona.close()  # type: ignore[no-untyped-call]


def _state(sb: AsyncSandbox) -> str:
    """The state as its wire value (the sync and async clients have their own enums)."""
    state: object = sb.state
    return str(getattr(state, "value", state))


def _status(state: str) -> SandboxStatus:
    for status, states in _STATES.items():
        if state in states:
            return status
    return SandboxStatus.STOPPED if state in _GONE else SandboxStatus.PENDING


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error, wherever in the cause chain it was recorded."""
    for error in _causes(exc):
        for attr in ("status_code", "status"):
            value = getattr(error, attr, None)
            if isinstance(value, int):
                return value
    return None


def _retry_after(exc: BaseException) -> float | None:
    """The seconds an answer's ``Retry-After`` header asks for (a number or an HTTP date)."""
    for error in _causes(exc):
        headers = getattr(error, "headers", None)
        if not isinstance(headers, Mapping):
            continue
        value = next((str(v) for k, v in headers.items() if str(k).lower() == "retry-after"), None)
        if value is not None:
            return retry_after_seconds(value)
    return None


def _workdir(sb: AsyncSandbox) -> str:
    value = (sb.labels or {}).get(WORKDIR_LABEL)
    return decode_label_value(value) if value else DEFAULT_WORKDIR


async def _shielded(coro: Coroutine[Any, Any, None]) -> None:
    """Run cleanup to its end even if the caller is being cancelled."""
    task = asyncio.ensure_future(coro)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)


class DaytonaBackend:
    """Sandboxes on Daytona (or on ``sandboxkit emulate daytona``)."""

    name = "daytona"
    sandbox_options: frozenset[str] = frozenset(
        {"snapshot", *CreateSandboxFromImageParams.model_fields}
    )
    """Provider options a sandbox takes: the SDK's create parameters, and a snapshot."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        target: str | None = None,
        auto_stop_minutes: int = 15,
        auto_delete_minutes: int = 0,
        create_timeout: float = 120.0,
        output_cap_bytes: int = OUTPUT_CAP,
        connection_pool_maxsize: int | None = 250,
    ) -> None:
        """Credentials and endpoint from the arguments, else ``DAYTONA_API_KEY``,
        ``DAYTONA_API_URL`` and ``DAYTONA_TARGET``. ``auto_stop_minutes`` (idle minutes, 0 never)
        and ``auto_delete_minutes`` (minutes after stopping, -1 never) bound what a crashed run
        leaves behind."""
        key = api_key or setting(DAYTONA_KEY_VAR)
        if not key:
            raise BackendMisconfiguredError(
                f"the daytona backend needs an API key: pass api_key= or set {DAYTONA_KEY_VAR}"
            )
        self.api_url = api_url or setting(DAYTONA_URL_VAR) or DAYTONA_DEFAULT_URL
        self.account = f"daytona {self.api_url} {key_digest(key)}"
        """Whose limits its calls count against (ranks share a budget per account)."""
        # An explicit config: the SDK would otherwise also read .env files on its own.
        self.config = DaytonaConfig(
            api_key=key,
            api_url=self.api_url,
            target=target or setting(DAYTONA_TARGET_VAR),
            connection_pool_maxsize=connection_pool_maxsize,
        )
        self.auto_stop_minutes = auto_stop_minutes
        self.auto_delete_minutes = auto_delete_minutes
        self.create_timeout = create_timeout
        self.output_cap = output_cap_bytes
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}
        self._killing: set[concurrent.futures.Future[None]] = set()
        """Background kills of cancelled execs (``_kill_later``); awaited by ``aclose``."""
        self._warned_resources = False

    def __repr__(self) -> str:
        return f"<DaytonaBackend {self.api_url}>"

    async def _connection(self) -> _Connection:
        """The SDK client of the running loop (its aiohttp session cannot cross loops)."""
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is None:
            for old in [old for old in self._connections if old.is_closed()]:
                del self._connections[old]  # their sessions died with their loops
            connection = self._connections[loop] = await _Connection.open(self.config)
        return connection

    # -- errors ----------------------------------------------------------------------------------

    def _translate(self, exc: BaseException, what: str) -> SandboxError:
        status = _http_status(exc)
        message = f"Daytona {what} failed: {exc}"
        if status in (401, 403) or isinstance(
            exc, (DaytonaAuthenticationError, DaytonaForbiddenError)
        ):
            return AuthenticationError(
                f"Daytona at {self.api_url} refused the API key (HTTP {status}); "
                f"check {DAYTONA_KEY_VAR} or the api_key option"
            )
        if status == 404:
            return SandboxNotFoundError(message)
        if status == 429:
            return RateLimitedError(message, retry_after=_retry_after(exc))
        if (status is not None and status >= 500) or isinstance(
            exc, (DaytonaConnectionError, aiohttp.ClientError, ConnectionError)
        ):
            return TransientBackendError(message)
        if status == 408 or isinstance(exc, (DaytonaTimeoutError, asyncio.TimeoutError)):
            return SandboxTimeoutError(message)
        return BackendError(message)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except _SDK_ERRORS as exc:
            raise self._translate(exc, what) from exc

    async def _toolbox(
        self, connection: _Connection, sb: AsyncSandbox, what: str, call: Awaitable[T]
    ) -> T:
        """Await a toolbox call; if it fails, tell a dead sandbox from a flaky service."""
        try:
            return await call
        except _SDK_ERRORS as exc:
            raise await self._toolbox_error(connection, sb, exc, what) from exc

    async def _toolbox_error(
        self, connection: _Connection, sb: AsyncSandbox, exc: BaseException, what: str
    ) -> SandboxError:
        error = self._translate(exc, what)
        if isinstance(error, SandboxNotFoundError):
            connection.sandboxes.pop(sb.id, None)
        if type(error) not in (TransientBackendError, BackendError):
            return error  # a rate limit among them: asking for the state would add to it
        try:
            fresh = await connection.daytona.get(sb.id)
            state, reason = _state(fresh), fresh.error_reason
        except _SDK_ERRORS as check:
            if _http_status(check) != 404:
                return error
            state, reason = "deleted", None
        if state == "started":
            return error
        connection.sandboxes.pop(sb.id, None)
        because = f": {reason}" if reason else ""
        return SandboxLostError(f"sandbox {sb.id} is {state}{because} ({what} failed: {exc})")

    # -- lifecycle -------------------------------------------------------------------------------

    def _params(
        self, spec: SandboxSpec, request_id: str
    ) -> CreateSandboxFromImageParams | CreateSandboxFromSnapshotParams:
        options = dict(spec.options)
        snapshot = options.pop("snapshot", None)
        labels = dict(options.pop("labels", None) or {})
        labels |= dict(tag_label(tag) for tag in spec.tags)
        labels |= {WORKDIR_LABEL: encode_label_value(spec.workdir), REQUEST_LABEL: request_id}
        unknown = set(options) - self.sandbox_options
        if unknown:
            raise BackendMisconfiguredError(f"unknown Daytona create options: {sorted(unknown)}")
        settings: dict[str, Any] = {
            "env_vars": dict(spec.env),
            "labels": labels,
            "auto_stop_interval": self.auto_stop_minutes,
            "auto_delete_interval": self.auto_delete_minutes,
        }
        if spec.lifetime_seconds is not None:
            settings["ttl_minutes"] = max(1, math.ceil(spec.lifetime_seconds / 60))
        settings |= options
        resources = self._resources(spec)
        try:
            if spec.image is not None:
                if snapshot is not None:
                    raise BackendMisconfiguredError("pass an image or a snapshot, not both")
                return CreateSandboxFromImageParams(
                    image=spec.image, resources=resources, **settings
                )
            if resources is not None and not self._warned_resources:
                self._warned_resources = True
                warnings.warn(
                    "Daytona sets cpu, memory and disk only for sandboxes made from an image; "
                    "this sandbox gets its snapshot's resources",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return CreateSandboxFromSnapshotParams(snapshot=snapshot, **settings)
        except pydantic.ValidationError as exc:
            raise BackendMisconfiguredError(f"invalid Daytona create options: {exc}") from None

    @staticmethod
    def _resources(spec: SandboxSpec) -> Resources | None:
        if spec.cpu is None and spec.memory_mb is None and spec.disk_mb is None:
            return None

        def gib(mb: int | None) -> int | None:
            return math.ceil(mb / 1024) if mb is not None else None

        cpu = math.ceil(spec.cpu) if spec.cpu is not None else None
        return Resources(cpu=cpu, memory=gib(spec.memory_mb), disk=gib(spec.disk_mb))

    @staticmethod
    def _info(sb: AsyncSandbox) -> SandboxInfo:
        started = datetime.fromisoformat(sb.created_at) if sb.created_at else None
        return SandboxInfo(sb.id, _status(_state(sb)), tags_from_labels(sb.labels or {}), started)

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        if not posixpath.isabs(spec.workdir):
            raise BackendMisconfiguredError(f"workdir {spec.workdir!r} must be an absolute path")
        request_id = uuid.uuid4().hex
        params = self._params(spec, request_id)
        connection = await self._connection()
        try:
            sb = await connection.daytona.create(params, timeout=self.create_timeout)
        except BaseException as exc:
            await _shielded(self._discard(connection, request_id))
            if isinstance(exc, _SDK_ERRORS):
                raise self._translate(exc, "create") from exc
            raise
        connection.sandboxes[sb.id] = sb
        return self._info(sb)

    async def _discard(self, connection: _Connection, request_id: str) -> None:
        """Delete what a failed create made anyway; best effort (auto-delete is the backstop)."""
        with contextlib.suppress(*_SDK_ERRORS):
            query = ListSandboxesQuery(labels={REQUEST_LABEL: request_id})
            async for sb in connection.daytona.list(query):
                with contextlib.suppress(*_SDK_ERRORS):
                    await connection.daytona.delete(sb)

    async def _sandbox(self, connection: _Connection, sandbox_id: str) -> AsyncSandbox:
        sb = connection.sandboxes.get(sandbox_id)
        if sb is None:
            with self._errors("get"):
                sb = await connection.daytona.get(sandbox_id)
            if _state(sb) in _GONE:
                raise SandboxNotFoundError(f"sandbox {sandbox_id} was deleted")
            connection.sandboxes[sandbox_id] = sb
        return sb

    async def get(self, sandbox_id: str) -> SandboxInfo:
        connection = await self._connection()
        connection.sandboxes.pop(sandbox_id, None)
        return self._info(await self._sandbox(connection, sandbox_id))

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        connection = await self._connection()
        try:
            sb = await self._sandbox(connection, sandbox_id)
            with self._errors("delete"):
                await connection.daytona.delete(sb)
        except SandboxNotFoundError:
            if not missing_ok:
                raise
        finally:
            connection.sandboxes.pop(sandbox_id, None)

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        states = [SandboxState(s) for s in _STATES[status]] if status is not None else None
        query = ListSandboxesQuery(labels=dict(tag_label(t) for t in tags) or None, states=states)
        connection = await self._connection()
        found = []
        with self._errors("list"):
            async for sb in connection.daytona.list(query):
                if _state(sb) in _GONE:
                    continue
                connection.sandboxes.setdefault(sb.id, sb)
                found.append(self._info(sb))
        return found

    async def aclose(self) -> None:
        """Close this loop's client here and other loops' clients on their own loops."""
        if self._killing:
            kills = [asyncio.wrap_future(f) for f in self._killing]
            await asyncio.wait(kills, timeout=KILL_EXEC_SECONDS)
        current = asyncio.get_running_loop()
        connections, self._connections = self._connections, {}
        for loop, connection in connections.items():
            if loop is current:
                await connection.closer.aclose()
            elif loop.is_running() and not loop.is_closed():
                asyncio.run_coroutine_threadsafe(connection.closer.aclose(), loop)

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
        if argv[0].startswith("-") or any("\0" in a for a in argv):
            raise ValueError(f"cannot run {argv[0]!r}: no NUL bytes, no leading '-' in argv[0]")
        connection = await self._connection()
        sb = await self._sandbox(connection, sandbox_id)
        workdir = _workdir(sb)
        scratch = f"{SCRATCH_DIR}/{uuid.uuid4().hex}"
        started = time.monotonic()

        def command_with(inline_stdin: bytes | None) -> str:
            return wrap_command(
                argv,
                workdir=workdir,
                cwd=posixpath.join(workdir, cwd or "."),
                scratch=scratch,
                has_stdin=bool(stdin),
                cap=self.output_cap,
                timeout=timeout,
                inline_stdin=inline_stdin,
            )

        inline = stdin if stdin and 4 * len(stdin) // 3 < INLINE_COMMAND_BYTES else None
        command = command_with(inline)
        if inline is not None and len(command) >= INLINE_COMMAND_BYTES:  # beside a long argv
            inline, command = None, command_with(None)
        if stdin and inline is None:
            upload = sb.fs.upload_file(stdin, f"{scratch}/stdin")
            await self._toolbox(connection, sb, "stdin upload", upload)
        # The daemon's own limit (whole seconds) is the backstop for a wrapper that hangs.
        seconds = UNLIMITED_EXEC_SECONDS
        if timeout is not None:
            seconds = math.ceil(timeout) + TIMEOUT_GRACE_SECONDS
        try:
            response = await sb.process.exec(command, env=dict(env or {}), timeout=seconds)
        except asyncio.CancelledError:
            self._kill_later(sandbox_id, scratch)
            raise
        except _SDK_ERRORS as exc:
            if not (
                isinstance(exc, DaytonaProcessExecutionTimeoutError) or _http_status(exc) == 408
            ):
                raise await self._toolbox_error(connection, sb, exc, "exec") from exc
            stdout, stderr = await self._salvage(sb, scratch)
            return self._result(KILLED_RETURNCODE, stdout, stderr, started=started, timed_out=True)
        return self._parse(response.result or "", cwd=cwd, workdir=workdir, started=started)

    def _kill_later(self, sandbox_id: str, scratch: str) -> None:
        """Kill a cancelled exec's command with another exec, in the background (the caller is
        leaving) and on sandboxkit's own loop (the caller's may be ``asyncio.run``'s, which
        ends now); the wrapper's watchdog and Daytona's own limit remain the backstop."""

        async def kill() -> None:
            try:
                sb = await self._sandbox(await self._connection(), sandbox_id)
                await sb.process.exec(kill_command(scratch), timeout=KILL_EXEC_SECONDS)
            except Exception as exc:  # best effort: logged, never raised into a caller
                logger.info("could not kill a cancelled exec in %s: %r", sandbox_id, exc)

        future = asyncio.run_coroutine_threadsafe(kill(), portal().loop)
        self._killing.add(future)
        future.add_done_callback(self._killing.discard)

    def _result(
        self, code: int, stdout: bytes, stderr: bytes, *, started: float, timed_out: bool = False
    ) -> ExecResult:
        stdout, cut_out = cap_output(stdout, self.output_cap)
        stderr, cut_err = cap_output(stderr, self.output_cap)
        return ExecResult(
            returncode=code,
            stdout_bytes=stdout,
            stderr_bytes=stderr,
            timed_out=timed_out,
            duration=time.monotonic() - started,
            truncated=cut_out or cut_err,
        )

    def _parse(self, text: str, *, cwd: str | None, workdir: str, started: float) -> ExecResult:
        head, _, rest = text.partition("\n")
        if head == NO_CWD:
            raise SandboxError(f"cwd {cwd!r} is not a directory in the sandbox")
        if head == NO_WORKDIR:
            raise BackendMisconfiguredError(
                f"cannot create workdir {workdir!r} in the Daytona sandbox: its user may not "
                "write there and has no sudo; choose a workdir under the user's home"
            )
        fields = head.split(" ")
        lines = rest.split("\n")
        if (
            len(fields) != 3
            or fields[0] != MARK
            or not fields[1].isdigit()
            or STREAMS_SEPARATOR not in lines
        ):
            raise BackendError(f"unexpected answer from the exec wrapper: {text[:300]!r}")
        split = lines.index(STREAMS_SEPARATOR)
        try:
            stdout = base64.b64decode("".join(lines[:split]))
            stderr = base64.b64decode("".join(lines[split + 1 :]))
        except binascii.Error as exc:
            raise BackendError(f"corrupt output from the exec wrapper: {exc}") from None
        timed_out = fields[2] == "1"
        code = KILLED_RETURNCODE if timed_out else int(fields[1])
        return self._result(code, stdout, stderr, started=started, timed_out=timed_out)

    async def _salvage(self, sb: AsyncSandbox, scratch: str) -> tuple[bytes, bytes]:
        """What a timed-out command wrote before it was killed; then remove its files."""
        found: dict[str, bytes] = {}
        with contextlib.suppress(*_SDK_ERRORS):
            requests = [FileDownloadRequest(source=f"{scratch}/{n}") for n in ("o", "e")]
            for response in await sb.fs.download_files(requests):
                if isinstance(response.result, bytes):
                    found[response.source] = response.result
        with contextlib.suppress(*_SDK_ERRORS):
            await sb.process.exec(shlex.join(["rm", "-rf", scratch]), timeout=30)
        return found.get(f"{scratch}/o", b""), found.get(f"{scratch}/e", b"")

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        connection = await self._connection()
        sb = await self._sandbox(connection, sandbox_id)
        target = posixpath.join(_workdir(sb), path)
        await self._toolbox(connection, sb, "upload", sb.fs.upload_file(data, target))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        connection = await self._connection()
        sb = await self._sandbox(connection, sandbox_id)
        request = FileDownloadRequest(source=posixpath.join(_workdir(sb), path))
        [response] = await self._toolbox(
            connection, sb, "download", sb.fs.download_files([request])
        )
        if response.error is None:
            result = response.result
            return result.encode() if isinstance(result, str) else bytes(result or b"")
        details = response.error_details
        missing = (details is not None and details.status_code == 404) or any(
            hint in response.error.lower() for hint in ("no such file", "not found")
        )
        if missing:
            raise FileNotFoundError(f"{path}: no such file in sandbox {sandbox_id}")
        raise SandboxError(f"cannot read {path!r} in sandbox {sandbox_id}: {response.error}")
