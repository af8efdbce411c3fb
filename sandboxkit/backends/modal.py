"""Modal sandboxes through the ``modal`` client.

Configuration (explicit options win over the environment, which may come from ``.env``):

- Endpoint: ``server_url=``, else ``MODAL_SERVER_URL``, else the client's own configuration
  (its default, ``https://api.modal.com``).
- Credentials: ``token_id=``/``token_secret=``, else ``MODAL_TOKEN_ID``/``MODAL_TOKEN_SECRET``,
  else the active profile of ``~/.modal.toml`` (what ``modal token new`` writes). With no
  token, building the backend fails at once, as Daytona's does, naming the variables to set.
- Sandboxes belong to an app: ``app_name=`` (``sandboxkit`` by default), looked up and created
  if missing on first use; a sandbox may name another with the ``app_name`` option.
- Rate limits: the client waits out Modal's throttling answers itself, for as long as the
  server asks, unless ``MODAL_MAX_THROTTLE_WAIT`` bounds it. Creating this backend sets that
  variable to 0 where it is unset (``throttle_wait=None`` leaves it alone), so that a throttled
  call comes back as :class:`~sandboxkit.errors.RateLimitedError` carrying the server's wait,
  and the pool and the ranks' shared budget, not the client, decide how to wait.

How the protocol maps onto the client (its ``.aio`` interface; the client runs its gRPC on its
own event-loop thread, so nothing here is bound to the caller's loop):

- ``create`` is ``Sandbox.create`` with the spec's ``workdir``, ``env``, ``cpu`` and
  ``memory_mb``; ``image`` is ``Image.from_registry(image)`` (the client's default image when
  None); ``lifetime_seconds`` is Modal's ``timeout`` (else 24 hours, Modal's longest) and
  ``idle_timeout_minutes`` (15 by default) its ``idle_timeout``, so a crashed run's sandboxes
  end by themselves. Provider options (:attr:`ModalBackend.sandbox_options`) are the
  keywords of ``Sandbox.create`` (``gpu``, ``volumes``, ``secrets``, ``region``,
  ``block_network``, ``image`` as a ``modal.Image``, ``timeout``, ...) plus ``app_name``.
- Tags become Modal tags: a tag ``t`` is the tag ``sbk.<sha256(t)[:16]>`` with value ``t``, so
  ``list(tags=...)`` filters on the server. The working directory and the creation time are
  tags too (``sbk.workdir``, ``sbk.started``): a sandbox found by id knows them.
- ``exec`` runs ``argv`` in ``workdir/cwd`` with ``env`` (both native to Modal's exec, so no
  shell wraps the command). stdin is written, then closed, in every case: a command reading
  it sees EOF. Arguments past the client's 64 KiB limit ride ahead of stdin
  (:func:`fit_arguments`). Modal's exec timeout is in whole seconds: ``timeout`` is rounded
  up; a command past it comes back as ``timed_out=True`` with returncode 137, like the local backend
  (output it printed is not kept). Output is read up to ``output_bytes`` per stream (1 MiB):
  the rest is never fetched.
- Files go through the client's filesystem API (Modal's in-sandbox file tool), at paths
  relative to the workdir; ``write_file`` makes missing parents.
- ``list`` covers the apps this backend has used and returns running sandboxes (Modal lists
  no finished ones); ``get`` of a finished sandbox, like every call on one, is
  :class:`~sandboxkit.errors.SandboxNotFoundError`.

Errors: Modal's auth and permission errors are ``AuthenticationError``; not found is
``SandboxNotFoundError``, except during an exec that Modal had started, where the sandbox's
end is ``SandboxLostError`` (the command may have run); throttling is ``RateLimitedError``
with the ``RPCRetryPolicy`` wait; server, transport and timeout errors left after the
client's own retries are ``TransientBackendError``; invalid arguments are
``BackendMisconfiguredError``.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import hashlib
import logging
import math
import os
import posixpath
import threading
import time
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime, timezone
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
    TransientBackendError,
    installed_for,
)
from ..keywords import keyword_only
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
from ._facts import MODAL_KEY_VARS, MODAL_URL_VAR
from ._output import cap_output
from ._owned import discard, start_owned

with installed_for("the 'modal' backend", "pip install 'sandboxkit[modal]'"):
    import grpclib
    import grpclib.exceptions
    import modal
    import modal.config
    import modal.exception as mx
    from modal_proto import api_pb2

T = TypeVar("T")
logger = logging.getLogger(__name__)

OUTPUT_BYTES = 1024 * 1024
DEFAULT_APP = "sandboxkit"
DEFAULT_LIFETIME = 24 * 3600
"""Modal's longest sandbox timeout: what a sandbox gets without ``lifetime_seconds``."""
STDIN_CHUNK = 8 * 1024 * 1024
"""Stdin is written in pieces under the client's 16 MiB buffer limit."""
ARG_MAX = 2**16
"""The client's limit on an exec's arguments, in characters all together (its
``ARG_MAX_BYTES``, which it keeps in a private module)."""
LAUNCHER = """\
def _load():
    import os, sys
    size = int(sys.argv.pop(1))
    source = bytearray()
    while len(source) < size:
        chunk = os.read(0, size - len(source))
        if not chunk:
            raise SystemExit("sandboxkit: stdin ended inside the program's source")
        source += chunk
    del globals()["_load"]
    return compile(bytes(source), "<string>", "exec")
exec(_load())
"""
"""What runs a ``python -c SOURCE`` whose source is over :data:`ARG_MAX`: it reads the
source, whose size it is given, ahead of stdin (unbuffered, so the program's stdin is left
whole) and runs it as ``-c`` would, in ``__main__`` with ``sys.argv[0] == "-c"``."""
SH_LAUNCHER = 'for n do a=$(head -c "$n"; printf x); set -- "$@" "${a%x}"; shift; done; exec "$@"'
"""What runs any other command over :data:`ARG_MAX`: its arguments, whose sizes it is given,
arrive ahead of stdin; ``head -c`` reads each exactly (the ``x`` keeps trailing newlines)."""
TAG_PREFIX = "sbk."
WORKDIR_TAG = "sbk.workdir"
STARTED_TAG = "sbk.started"
THROTTLE_VAR = "MODAL_MAX_THROTTLE_WAIT"
_OWN_OPTIONS = frozenset({"app_name"})
_NOT_OPTIONS = frozenset({"client", "environment_name", "pty_info", "cidr_allowlist"})
"""``Sandbox.create`` keywords a sandbox may not take: the backend's client, deprecated ones."""
_TRANSPORT = (
    mx.ServiceError,
    mx.InternalError,
    mx.ConnectionError,
    mx.TimeoutError,
    mx.ClientClosed,
    grpclib.exceptions.StreamTerminatedError,
    OSError,
    asyncio.TimeoutError,
)
_FILE_ERRORS: dict[type[BaseException], type[OSError]] = {
    mx.SandboxFilesystemNotFoundError: FileNotFoundError,
    mx.SandboxFilesystemIsADirectoryError: IsADirectoryError,
    mx.SandboxFilesystemNotADirectoryError: NotADirectoryError,
    mx.SandboxFilesystemPermissionError: PermissionError,
}


def tag_name(tag: str) -> str:
    """The Modal tag name a sandboxkit tag is stored under (its value is the tag itself)."""
    return TAG_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:16]


def _retry_after(exc: BaseException) -> float | None:
    """The wait Modal's ``RPCRetryPolicy`` asks for, if the error carries one."""
    for detail in getattr(exc, "_grpc_details", None) or ():
        if isinstance(detail, api_pb2.RPCRetryPolicy):
            return float(detail.retry_after_secs)
    return None


def translate(exc: BaseException, sandbox_id: str | None = None) -> BaseException:
    """The sandboxkit error for a ``modal`` (or transport) error; others pass through."""
    message = f"{f'sandbox {sandbox_id}' if sandbox_id else 'Modal'}: {exc}"
    if type(exc) is mx.SandboxFilesystemError and isinstance(exc.__context__, mx.Error):
        # The filesystem API reports an error of the exec it ran as "unexpected": the
        # error itself (throttling, the sandbox gone) is what it hides.
        return translate(exc.__context__, sandbox_id)
    for modal_error, os_error in _FILE_ERRORS.items():
        if isinstance(exc, modal_error):
            return os_error(message)
    if isinstance(exc, (mx.AuthError, mx.PermissionDeniedError)):
        return AuthenticationError(message)
    if isinstance(exc, (mx.NotFoundError, mx.SandboxTerminatedError)):
        return SandboxNotFoundError(message)
    if isinstance(exc, mx.ResourceExhaustedError):
        return RateLimitedError(message, retry_after=_retry_after(exc))
    if isinstance(exc, mx.ConflictError):
        return BackendError(message)
    if isinstance(exc, (mx.InvalidError, mx.VersionError)):
        return BackendMisconfiguredError(message)
    if isinstance(exc, _TRANSPORT):
        return TransientBackendError(message)
    if isinstance(exc, (mx.Error, grpclib.GRPCError)):
        return BackendError(message)
    return exc


async def _call(awaitable: Awaitable[T], sandbox_id: str | None = None) -> T:
    """Await a client operation, raising sandboxkit errors only."""
    try:
        return await awaitable
    except (mx.Error, grpclib.GRPCError, grpclib.exceptions.StreamTerminatedError, OSError,
            asyncio.TimeoutError) as exc:  # fmt: skip
        raise translate(exc, sandbox_id) from exc


def fit_arguments(argv: Sequence[str], stdin: bytes) -> tuple[list[str], bytes]:
    """``argv`` and ``stdin`` as the client takes them. Arguments over :data:`ARG_MAX` travel
    ahead of stdin instead, where no other process can touch them: a Python program given
    with ``-c`` (sandboxkit's test runner is one) as its source, read by Python itself; any
    other command (a model's long shell command) as all its arguments, read by ``sh``."""
    if sum(map(len, argv)) <= ARG_MAX:
        return list(argv), stdin
    if posixpath.basename(argv[0]).startswith("python") and "-c" in argv[1:-1]:
        at = argv.index("-c", 1)
        if all(flag.startswith("-") for flag in argv[1:at]):
            source = argv[at + 1].encode()
            fitted = [*argv[: at + 1], LAUNCHER, str(len(source)), *argv[at + 2 :]]
            if sum(map(len, fitted)) <= ARG_MAX:
                return fitted, source + stdin
    encoded = [arg.encode() for arg in argv]
    fitted = ["sh", "-c", SH_LAUNCHER, "sh", *(str(len(arg)) for arg in encoded)]
    if sum(map(len, fitted)) <= ARG_MAX:
        return fitted, b"".join(encoded) + stdin
    raise BackendMisconfiguredError(
        f"Modal takes at most {ARG_MAX} characters of arguments per command, and "
        f"{len(argv)} arguments are too many to send on stdin"
    )


class _Handle:
    """A sandbox's client object and the facts kept in its tags."""

    def __init__(self, sb: modal.Sandbox, tags: Mapping[str, str]) -> None:
        self.sb = sb
        self.workdir = tags.get(WORKDIR_TAG, DEFAULT_WORKDIR)
        self.tags = tuple(
            v
            for k, v in tags.items()
            if k.startswith(TAG_PREFIX) and k not in (WORKDIR_TAG, STARTED_TAG)
        )
        started = tags.get(STARTED_TAG)
        self.started_at = datetime.fromisoformat(started) if started else None


class ModalBackend:
    """Sandboxes on Modal."""

    name = "modal"
    sandbox_options: frozenset[str] = (
        frozenset(n for n in keyword_only(modal.Sandbox.create) if not n.startswith("_"))
        - _NOT_OPTIONS
    ) | _OWN_OPTIONS
    """Provider options a sandbox takes: the public keywords of ``modal.Sandbox.create``
    and ``app_name``."""

    def __init__(
        self,
        *,
        token_id: str | None = None,
        token_secret: str | None = None,
        server_url: str | None = None,
        app_name: str = DEFAULT_APP,
        idle_timeout_minutes: int | None = 15,
        throttle_wait: int | None = 0,
        output_bytes: int = OUTPUT_BYTES,
    ) -> None:
        token_id = token_id or setting(MODAL_KEY_VARS[0]) or modal.config.config.get("token_id")
        token_secret = (
            token_secret or setting(MODAL_KEY_VARS[1]) or modal.config.config.get("token_secret")
        )
        if not token_id or not token_secret:
            raise BackendMisconfiguredError(
                "the modal backend needs a token: pass token_id= and token_secret= or set "
                f"{MODAL_KEY_VARS[0]} and {MODAL_KEY_VARS[1]} (`modal token new` saves one in "
                "~/.modal.toml, which is read too)"
            )
        self.server_url = str(
            server_url or setting(MODAL_URL_VAR) or modal.config.config.get("server_url")
        )
        self.account = f"modal {self.server_url} {key_digest(token_id)}"
        """Whose limits its calls count against (ranks share a budget per account)."""
        self.app_name = app_name
        self.idle_timeout = idle_timeout_minutes * 60 if idle_timeout_minutes else None
        self.output_bytes = output_bytes
        if throttle_wait is not None:
            os.environ.setdefault(THROTTLE_VAR, str(throttle_wait))
        self._credentials = (token_id, token_secret)
        self._opening: concurrent.futures.Future[modal.Client] | None = None
        self._lock = threading.Lock()
        self._apps: dict[str, modal.App] = {}
        self._images: dict[str, modal.Image] = {}
        self._handles: dict[str, _Handle] = {}

    # -- the client and what sandboxes are made from ----------------------------------------

    async def _client(self) -> modal.Client:
        """The client, opened once on sandboxkit's own loop (a failed open is tried again)."""
        with self._lock:
            if self._opening is None or (
                self._opening.done() and self._opening.exception() is not None
            ):
                self._opening = asyncio.run_coroutine_threadsafe(self._open(), portal().loop)
            opening = self._opening
        return await _call(asyncio.wrap_future(opening))

    async def _open(self) -> modal.Client:
        client = modal.Client(self.server_url, api_pb2.CLIENT_TYPE_CLIENT, self._credentials)
        await client.__aenter__()  # type: ignore[no-untyped-call]  # opens it (its only way)
        return client

    async def _app(self, name: str, *, create: bool = True) -> modal.App:
        app = self._apps.get(name)
        if app is None:
            client = await self._client()
            app = await _call(modal.App.lookup.aio(name, create_if_missing=create, client=client))
            app = self._apps.setdefault(name, app)
        return app

    def _image(self, image: str) -> modal.Image:
        return self._images.setdefault(image, modal.Image.from_registry(image))

    # -- handles ----------------------------------------------------------------------------

    async def _find(self, sandbox_id: str) -> _Handle:
        """A fresh handle from the service; a finished sandbox is not found."""
        client = await self._client()
        sb = await _call(modal.Sandbox.from_id.aio(sandbox_id, client=client), sandbox_id)
        if sb.returncode is not None:
            raise SandboxNotFoundError(f"sandbox {sandbox_id} has finished ({sb.returncode})")
        return _Handle(sb, await _call(sb.get_tags.aio(), sandbox_id))

    async def _handle(self, sandbox_id: str) -> _Handle:
        handle = self._handles.get(sandbox_id)
        if handle is None:
            handle = self._handles.setdefault(sandbox_id, await self._find(sandbox_id))
        return handle

    async def _op(self, sandbox_id: str, awaitable: Awaitable[T]) -> T:
        """A client call on one sandbox; a sandbox found gone leaves the cache."""
        try:
            return await _call(awaitable, sandbox_id)
        except (SandboxNotFoundError, SandboxLostError):
            self._handles.pop(sandbox_id, None)
            raise

    # -- Backend protocol -------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        options = dict(spec.options)
        app = options.pop("app", None) or await self._app(options.pop("app_name", self.app_name))
        started = datetime.now(timezone.utc)
        tags = {tag_name(t): t for t in spec.tags} | dict(options.pop("tags", None) or {})
        tags |= {WORKDIR_TAG: spec.workdir, STARTED_TAG: started.isoformat()}
        lifetime = spec.lifetime_seconds
        arguments: dict[str, Any] = {
            "app": app,
            "client": await self._client(),
            "image": self._image(spec.image) if spec.image else None,
            "tags": tags,
            "env": dict(spec.env) or None,
            "workdir": spec.workdir,
            "timeout": math.ceil(lifetime) if lifetime else DEFAULT_LIFETIME,
            "idle_timeout": self.idle_timeout,
            "cpu": spec.cpu,
            "memory": spec.memory_mb,
            **options,
        }
        sb = await start_owned(self._start(arguments), self._discard)
        handle = _Handle(sb, tags)
        self._handles[sb.object_id] = handle
        return SandboxInfo(sb.object_id, SandboxStatus.RUNNING, tuple(spec.tags), started)

    async def _start(self, arguments: dict[str, Any]) -> modal.Sandbox:
        try:
            return await _call(modal.Sandbox.create.aio(**arguments))
        except TypeError as exc:
            raise BackendMisconfiguredError(f"Modal sandbox options: {exc}") from exc

    @staticmethod
    async def _discard(sb: modal.Sandbox) -> None:
        await discard(sb.terminate.aio, sb.object_id)

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
        workdir = posixpath.normpath(posixpath.join(handle.workdir, cwd or "."))
        argv, stdin = fit_arguments(argv, stdin or b"")
        started = time.monotonic()
        process = await self._op(
            sandbox_id,
            handle.sb.exec.aio(
                *argv,
                workdir=workdir,
                env=dict(env) if env else None,
                timeout=max(1, math.ceil(timeout)) if timeout is not None else None,
                text=False,
            ),
        )
        try:
            await self._feed(process, stdin)
            (out, cut_out), (err, cut_err), returncode = await asyncio.gather(
                self._read(process.stdout), self._read(process.stderr), process.wait.aio()
            )
        except (mx.NotFoundError, mx.SandboxTerminatedError) as exc:
            # Modal started the command, then its sandbox ended: it may have run.
            self._handles.pop(sandbox_id, None)
            raise SandboxLostError(f"sandbox {sandbox_id} ended during exec: {exc}") from exc
        except (mx.Error, grpclib.GRPCError, grpclib.exceptions.StreamTerminatedError, OSError,
                asyncio.TimeoutError) as exc:  # fmt: skip
            raise translate(exc, sandbox_id) from exc
        duration = time.monotonic() - started
        # -1: the client's deadline passed; 137 at the deadline: Modal killed it.
        if returncode == -1 or (
            timeout is not None and returncode == KILLED_RETURNCODE and duration >= timeout
        ):
            return ExecResult(returncode=KILLED_RETURNCODE, timed_out=True, duration=duration)
        return ExecResult(
            returncode=returncode,
            stdout_bytes=out,
            stderr_bytes=err,
            duration=duration,
            truncated=cut_out or cut_err,
        )

    async def _read(self, stream: Any) -> tuple[bytes, bool]:
        """A stream's output up to ``output_bytes``, and whether there was more. Modal's
        output is pulled: reading stops at the cap, so what a command prints past it is
        neither transferred nor held here, however much that is."""
        kept = bytearray()
        async for chunk in stream:
            kept += chunk
            if len(kept) > self.output_bytes:
                await stream.aclose()
                return cap_output(bytes(kept), self.output_bytes)
        return bytes(kept), False

    @staticmethod
    async def _feed(process: Any, data: bytes) -> None:
        """Write stdin and close it; a command that exits without reading it refuses the
        rest (a conflict), which is its own business."""
        with contextlib.suppress(mx.ConflictError):
            for offset in range(0, len(data), STDIN_CHUNK):
                process.stdin.write(data[offset : offset + STDIN_CHUNK])
                if offset + STDIN_CHUNK >= len(data):
                    process.stdin.write_eof()  # in the same call as the last piece
                await process.stdin.drain.aio()
            if not data:
                process.stdin.write_eof()
                await process.stdin.drain.aio()

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        handle = await self._handle(sandbox_id)
        target = posixpath.join(handle.workdir, path)
        await self._op(sandbox_id, handle.sb.filesystem.write_bytes.aio(data, target))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        handle = await self._handle(sandbox_id)
        target = posixpath.join(handle.workdir, path)
        data: bytes = await self._op(sandbox_id, handle.sb.filesystem.read_bytes.aio(target))
        return data

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        handle = self._handles.pop(sandbox_id, None)
        if handle is None or not missing_ok:
            try:
                handle = await self._find(sandbox_id)
            except SandboxNotFoundError:
                if missing_ok:
                    return
                raise
        await _call(handle.sb.terminate.aio(), sandbox_id)

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        if status not in (None, SandboxStatus.RUNNING):
            return []  # Modal lists running sandboxes only
        client = await self._client()
        wanted = {tag_name(t): t for t in tags} or None
        found: builtins.list[modal.Sandbox] = []
        apps = list(self._apps.values())
        if not apps:  # a listing creates no app: a missing one holds no sandboxes
            with contextlib.suppress(SandboxNotFoundError):
                apps.append(await self._app(self.app_name, create=False))
        for app in apps:
            listing = modal.Sandbox.list.aio(app_id=app.app_id, tags=wanted, client=client)
            found += await _call(self._collect(listing))
        handles = await asyncio.gather(*(self._tagged(sb) for sb in found), return_exceptions=True)
        infos = []
        for handle in handles:
            if isinstance(handle, SandboxNotFoundError):
                continue  # it finished since the listing
            if isinstance(handle, BaseException):
                raise handle
            infos.append(self._info(handle))
        return infos

    @staticmethod
    async def _collect(listing: Any) -> builtins.list[modal.Sandbox]:
        return [sb async for sb in listing]

    async def _tagged(self, sb: modal.Sandbox) -> _Handle:
        return _Handle(sb, await _call(sb.get_tags.aio(), sb.object_id))

    @staticmethod
    def _info(handle: _Handle) -> SandboxInfo:
        return SandboxInfo(
            handle.sb.object_id, SandboxStatus.RUNNING, handle.tags, handle.started_at
        )

    async def get(self, sandbox_id: str) -> SandboxInfo:
        return self._info(await self._find(sandbox_id))

    async def aclose(self) -> None:
        """Close the client's connections; the sandboxes themselves keep running."""
        self._handles.clear()
        with self._lock:
            opening, self._opening = self._opening, None
        if opening is not None and opening.done() and opening.exception() is None:
            with contextlib.suppress(Exception):
                await opening.result().__aexit__(None, None, None)  # type: ignore[no-untyped-call]
