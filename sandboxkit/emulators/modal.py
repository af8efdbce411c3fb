"""A local stand-in for Modal's sandbox API, so the real ``modal`` client runs offline.

It serves, over plaintext HTTP/2 gRPC on loopback (``grpclib``, the client's own transport), the
two services the client talks to, built on the protobufs it ships (``modal_proto``): the control
plane ``modal.client.ModalClient`` at ``MODAL_SERVER_URL`` (apps, images, sandboxes, their tags
and lists) and the ``modal.task_command_router.TaskCommandRouter`` that runs commands in a
sandbox's task (on Modal, a server on the sandbox's worker; here the same port: the client
connects to whatever URL ``command_router_access`` names, in plaintext when the control plane
is on localhost). Each emulated sandbox is one sandbox of the local ``subprocess`` backend, in
a private root that is removed when the emulator stops. Calls without the configured token id
and secret (``x-modal-token-id``/``-secret``) are UNAUTHENTICATED; router calls need the JWT
the control plane issued for that task.

What the client does, and what is served for it:

- ``Sandbox.create`` takes the V2 path (``SandboxCreateV2``, which answers with the task id and
  the router's address, so no poll follows), or V1 when a GPU is asked for (``SandboxCreate``,
  ``SandboxGetTaskId``, ``TaskGetCommandRouterAccess``); ids have the shape that routes
  ``Sandbox.from_id`` to the same path. The image, app and auth token it resolves first
  (``ImageGetOrCreate``, ``AppGetOrCreate``, ``AuthTokenGet``) are answered at once. The
  definition's ``timeout_secs`` is the sandbox's lifetime (then it ends with TIMEOUT).
- ``exec`` is ``TaskExecStart`` on the router, then ``TaskExecStdioRead`` per stream and
  ``TaskExecWait``; stdin arrives through ``TaskExecStdinWrite`` or the client-streaming
  ``TaskExecStdinWriteStream``. The local backend takes a command's stdin whole, so a command
  starts when its stdin is closed, or when the client first waits on it or reads its output
  without having written any (the command then sees an empty stdin). It runs in its
  ``workdir`` with the sandbox's and the exec's variables (``secret_sources``), and is killed
  at its whole-second ``timeout_secs`` (exit status 137). Output is sent when the command
  ends.
- The filesystem API runs Modal's in-sandbox tool (``/__modal/.bin/modal-sandbox-fs-tools``
  with a JSON command) as an exec; the emulator does its ``ReadFile``/``WriteFile`` from the
  host, with the tool's exit status and JSON error on stderr.
- ``terminate`` ends a sandbox with TERMINATED; ended sandboxes stay visible to
  ``SandboxWait`` (their result) and to lists that include finished ones. The router answers
  NOT_FOUND for the tasks of ended sandboxes.

Faults (:class:`~sandboxkit.testing.faults.Faults`) apply to every call of either service:
latency, transient errors (RESOURCE_EXHAUSTED with an ``RPCRetryPolicy`` carrying
``retry_after`` when the faults set one, or UNAVAILABLE), dropped calls (UNAVAILABLE without
any effect), and ``die_rate``: the sandbox dies as a command starts, and the command's wait
and output reads are NOT_FOUND. ``max_sandboxes`` refuses creation beyond that many live
sandboxes, and ``max_concurrent_execs`` a command beyond that many running ones, with
RESOURCE_EXHAUSTED. The client retries UNAVAILABLE itself (3 times on the control plane, 10 on
the router), as it does against Modal.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

from ..backends._facts import MODAL_KEY_VARS, MODAL_URL_VAR
from ..errors import (
    BackendMisconfiguredError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    installed_for,
)
from ..protocol import DEFAULT_WORKDIR, Backend, ExecResult, SandboxSpec
from ..testing.faults import Faults
from . import ANY_KEY, INSTALL, MODAL_TOKEN_ID
from .host import base_image, image_env
from .serving import Served, serve_until_signalled

with installed_for("the modal emulator", INSTALL):
    import grpclib
    import grpclib.const
    import grpclib.server
    from grpclib import GRPCError, Status
    from modal._utils.grpc_utils import custom_detail_codec
    from modal_proto import api_grpc, api_pb2, task_command_router_grpc
    from modal_proto import task_command_router_pb2 as router_pb2

TOKEN_ID = MODAL_TOKEN_ID
FS_TOOLS = "/__modal/.bin/modal-sandbox-fs-tools"
"""The in-sandbox program the client's filesystem API runs."""
CHUNK_BYTES = 64 * 1024
PAGE_SIZE = 100
IMAGE_BUILDER_VERSION = "2025.06"
"""What the emulated environment builds images with (one the client supports)."""
FINISHED_EXECS_KEPT = 32
"""Finished commands kept per sandbox for late reads; older ones are forgotten."""
_RESULT = api_pb2.GenericResult
logger = logging.getLogger(__name__)
_V1_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _sandbox_id(v1: bool) -> str:
    """A new id of the shape the client routes to the V1 or the V2 implementation."""
    if v1:
        return "sb-" + "".join(secrets.choice(_V1_ALPHABET) for _ in range(22))
    return f"sb-{uuid.uuid4().hex}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class _Exec:
    """One command started through the router, and what it has said so far."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    timeout: float | None
    stdin: bytearray = field(default_factory=bytearray)
    closed: bool = False
    """Stdin is at EOF."""
    run: asyncio.Task[ExecResult | None] | None = None

    @property
    def fs_command(self) -> dict[str, Any] | None:
        """The filesystem tool's JSON command, when this is the tool."""
        if len(self.argv) != 2 or self.argv[0] != FS_TOOLS:
            return None
        try:
            command = json.loads(self.argv[1])
        except ValueError:
            return None
        return command if isinstance(command, dict) else None


@dataclass
class _Emulated:
    """One sandbox as the API reports it, and the local sandbox that backs it."""

    info: api_pb2.SandboxInfo
    definition: api_pb2.Sandbox
    local_id: str
    workdir: str
    env: dict[str, str]
    execs: dict[str, _Exec] = field(default_factory=dict)
    finished: collections.deque[str] = field(default_factory=collections.deque)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    lifetime: asyncio.TimerHandle | None = None

    @property
    def id(self) -> str:
        return str(self.info.id)

    @property
    def task_id(self) -> str:
        return str(self.info.task_info.id)

    @property
    def live(self) -> bool:
        return not self.ended.is_set()


class _Service:
    """A grpclib service: the generated base class's handler table, served by ``impl``'s
    methods of the same names; the others answer UNIMPLEMENTED (the generated base class
    declares every method abstract)."""

    def __init__(self, base: type, impl: object) -> None:
        self._base = base
        self._impl = impl

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        impl = self._impl

        class Lookup:
            def __getattr__(self, name: str) -> Callable[[Any], Awaitable[None]]:
                found: Callable[[Any], Awaitable[None]] | None = getattr(impl, name, None)
                if found is not None and name[0].isupper():
                    return found

                async def unimplemented(stream: Any) -> None:
                    raise GRPCError(Status.UNIMPLEMENTED, f"{name} is not emulated")

                return unimplemented

        table: dict[str, grpclib.const.Handler] = self._base.__mapping__(Lookup())  # type: ignore[attr-defined]
        return table


class ModalServicer:
    """Both services' methods, over one local backend. The control plane's methods take the
    names of its RPCs, the router's too (the two services share no name)."""

    def __init__(
        self,
        local: Backend,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.local = local
        self.api_key = api_key
        self.faults = faults or Faults()
        self.page_size = page_size
        self.url = ""
        """Where the router is reached (this server), set once it listens."""
        self.sandboxes: dict[str, _Emulated] = {}
        self._by_task: dict[str, _Emulated] = {}
        self._apps: dict[str, str] = {}
        self._secrets: dict[str, dict[str, str]] = {}
        self._images: dict[str, str | None] = {}
        """The image each image id was defined from (its Dockerfile's base)."""
        self._jwt_key = secrets.token_bytes(32)
        self._reserved = 0
        self._running = 0
        """Commands running now (``max_concurrent_execs`` refuses more)."""
        self._clock = itertools.count()
        self._stopping: set[asyncio.Task[None]] = set()
        """Local sandboxes of ended sandboxes, being stopped."""

    def live_count(self) -> int:
        return sum(1 for sb in self.sandboxes.values() if sb.live)

    # -- plumbing ---------------------------------------------------------------------------

    async def _faults(self, *, create: bool = False) -> None:
        await self.faults.delay(create=create)
        if self.faults.drop():
            raise GRPCError(Status.UNAVAILABLE, "connection dropped (injected)")
        kind = self.faults.transient_error()
        if kind == "rate_limited":
            self._rate_limited("rate limited (injected)")
        if kind == "server_error":
            raise GRPCError(Status.UNAVAILABLE, "server error (injected)")

    def _rate_limited(self, message: str) -> NoReturn:
        details = []
        if self.faults.retry_after is not None:
            details.append(api_pb2.RPCRetryPolicy(retry_after_secs=self.faults.retry_after))
        raise GRPCError(Status.RESOURCE_EXHAUSTED, message, details or None)

    async def _control(self, stream: Any, *, create: bool = False) -> Any:
        """Authenticate a control-plane call, apply faults, and read its request."""
        request = await stream.recv_message()
        if self.api_key is not None:
            metadata = stream.metadata or {}
            if (
                metadata.get("x-modal-token-id") != TOKEN_ID
                or metadata.get("x-modal-token-secret") != self.api_key
            ):
                raise GRPCError(Status.UNAUTHENTICATED, "invalid token id or secret")
        await self._faults(create=create)
        return request

    def _jwt(self, task_id: str) -> str:
        header = _b64(b'{"alg":"HS256","typ":"JWT"}')
        payload = _b64(json.dumps({"sub": task_id, "exp": int(time.time()) + 3600}).encode())
        signature = hmac.new(self._jwt_key, f"{header}.{payload}".encode(), hashlib.sha256)
        return f"{header}.{payload}.{_b64(signature.digest())}"

    async def _routed(self, stream: Any) -> tuple[Any, _Emulated]:
        """Authenticate a router call against its task, apply faults, and find the live
        sandbox of the task it names (NOT_FOUND once the sandbox has ended)."""
        request = await stream.recv_message()
        return request, await self._router_checks(stream, request.task_id)

    async def _router_checks(self, stream: Any, task_id: str) -> _Emulated:
        token = (stream.metadata or {}).get("authorization", "").removeprefix("Bearer ")
        if not self._jwt_valid(token, task_id):
            raise GRPCError(Status.UNAUTHENTICATED, "invalid task token")
        await self._faults()
        sb = self._by_task.get(task_id)
        if sb is None or not sb.live:
            raise GRPCError(Status.NOT_FOUND, f"task {task_id} not found or finished")
        return sb

    def _jwt_valid(self, token: str, task_id: str) -> bool:
        """A token this emulator signed for ``task_id`` (at any time, unexpired)."""
        header, _, rest = token.partition(".")
        payload, _, signature = rest.partition(".")
        expected = hmac.new(self._jwt_key, f"{header}.{payload}".encode(), hashlib.sha256)
        if not hmac.compare_digest(signature, _b64(expected.digest())):
            return False
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return bool(claims.get("sub") == task_id and claims.get("exp", 0) > time.time())

    def _sandbox(self, sandbox_id: str) -> _Emulated:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {sandbox_id!r} not found")
        return sb

    def _end(self, sb: _Emulated, status: int, message: str = "") -> None:
        """Move a sandbox to a terminal state: its commands die and its local sandbox goes."""
        if not sb.live:
            return
        result = _RESULT(status=status, exception=message)  # type: ignore[arg-type]
        sb.info.task_info.result.CopyFrom(result)
        sb.info.task_info.finished_at = time.time()
        sb.info.metadata.result.CopyFrom(result)
        sb.ended.set()
        if sb.lifetime is not None:
            sb.lifetime.cancel()
        # Its commands are not cancelled: stopping the local sandbox kills them, and a local
        # exec cancelled while it spawns could leave its process behind.
        stopping = asyncio.ensure_future(self.local.stop(sb.local_id, missing_ok=True))
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        """Stop every local sandbox (the emulator is going away)."""
        for sb in list(self.sandboxes.values()):
            self._end(sb, _RESULT.GENERIC_STATUS_TERMINATED)
        await asyncio.gather(*self._stopping, return_exceptions=True)

    # -- control plane: what create resolves first ------------------------------------------

    async def AuthTokenGet(self, stream: Any) -> None:
        await self._control(stream)
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=self._jwt("client")))

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:
        await self._control(stream)
        settings = api_pb2.EnvironmentSettings(image_builder_version=IMAGE_BUILDER_VERSION)
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(
                environment_id="en-sandboxkit",
                metadata=api_pb2.EnvironmentMetadata(name="main", settings=settings),
            )
        )

    async def AppGetOrCreate(self, stream: Any) -> None:
        request = await self._control(stream)
        create = request.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_UNSPECIFIED
        if request.app_name not in self._apps and not create:
            raise GRPCError(Status.NOT_FOUND, f"app {request.app_name!r} not found")
        app_id = self._apps.setdefault(request.app_name, f"ap-{uuid.uuid4().hex[:22]}")
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def ImageGetOrCreate(self, stream: Any) -> None:
        request = await self._control(stream)
        digest = hashlib.sha256(request.image.SerializeToString(deterministic=True)).hexdigest()
        image_id = f"im-{digest[:22]}"
        self._images[image_id] = base_image(request.image.dockerfile_commands)
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(
                image_id=image_id,
                result=_RESULT(status=_RESULT.GENERIC_STATUS_SUCCESS),
                metadata=api_pb2.ImageMetadata(
                    python_version_info="3.11", image_builder_version=IMAGE_BUILDER_VERSION
                ),
            )
        )

    async def SecretGetOrCreate(self, stream: Any) -> None:
        """The V1 path sends a sandbox's variables as an ephemeral secret."""
        request = await self._control(stream)
        secret_id = f"st-{uuid.uuid4().hex[:22]}"
        self._secrets[secret_id] = dict(request.env_dict)
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=secret_id))

    # -- control plane: sandboxes -----------------------------------------------------------

    async def _create(self, request: Any, env: dict[str, str], *, v1: bool) -> _Emulated:
        if self.faults.at_capacity(self.live_count() + self._reserved):
            self._rate_limited(f"sandbox quota of {self.faults.max_sandboxes} reached")
        definition = request.definition
        workdir = definition.workdir or DEFAULT_WORKDIR
        image = self._images.get(definition.image_id)
        spec = SandboxSpec(env=image_env(env, image), workdir=workdir)
        self._reserved += 1
        try:
            local = await self.local.create(spec)
        except BackendMisconfiguredError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
        finally:
            self._reserved -= 1
        now = time.time()
        # Lists page by creation time, so no two sandboxes share one.
        created = now + next(self._clock) * 1e-6
        sandbox_id = _sandbox_id(v1)
        task_id = f"ta-{uuid.uuid4().hex[:22]}" + ("" if v1 else "V")
        info = api_pb2.SandboxInfo(
            id=sandbox_id,
            created_at=created,
            app_id=request.app_id,
            tags=request.tags,
            name=definition.name,
            image_id=definition.image_id,
            timeout_secs=definition.timeout_secs,
            idle_timeout_secs=definition.idle_timeout_secs,
            task_info=api_pb2.TaskInfo(id=task_id, started_at=now, sandbox_id=sandbox_id),
            metadata=api_pb2.SandboxHandleMetadata(app_id=request.app_id),
        )
        sb = _Emulated(info, definition, local.id, workdir, env)
        self.sandboxes[sandbox_id] = sb
        self._by_task[task_id] = sb
        if definition.timeout_secs:
            sb.lifetime = asyncio.get_running_loop().call_later(
                definition.timeout_secs,
                self._end,
                sb,
                _RESULT.GENERIC_STATUS_TIMEOUT,
                "sandbox timed out",
            )
        return sb

    def _access(self, sb: _Emulated) -> api_pb2.CommandRouterAccess:
        return api_pb2.CommandRouterAccess(url=self.url, jwt=self._jwt(sb.task_id))

    async def SandboxCreateV2(self, stream: Any) -> None:
        request = await self._control(stream, create=True)
        env: dict[str, str] = {}
        for source in request.secret_sources:
            env |= dict(source.env.contents)
        sb = await self._create(request, env, v1=False)
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(
                sandbox_id=sb.id,
                task_id=sb.task_id,
                metadata=sb.info.metadata,
                command_router_access=self._access(sb),
            )
        )

    async def SandboxCreate(self, stream: Any) -> None:
        request = await self._control(stream, create=True)
        env: dict[str, str] = {}
        for secret_id in request.definition.secret_ids:
            env |= self._secrets.get(secret_id, {})
        sb = await self._create(request, env, v1=True)
        await stream.send_message(
            api_pb2.SandboxCreateResponse(sandbox_id=sb.id, metadata=sb.info.metadata)
        )

    async def SandboxGetTaskId(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = self._sandbox(request.sandbox_id)
        if sb.live:
            answer = api_pb2.SandboxGetTaskIdResponse(task_id=sb.task_id)
        else:
            answer = api_pb2.SandboxGetTaskIdResponse(task_result=sb.info.task_info.result)
        await stream.send_message(answer)

    SandboxGetTaskIdV2 = SandboxGetTaskId

    async def TaskGetCommandRouterAccess(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = self._by_task.get(request.task_id)
        if sb is None or not sb.live:
            raise GRPCError(Status.FAILED_PRECONDITION, f"task {request.task_id} is not running")
        access = self._access(sb)
        await stream.send_message(
            api_pb2.TaskGetCommandRouterAccessResponse(url=access.url, jwt=access.jwt)
        )

    async def SandboxGetCommandRouterAccess(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = (
            self._sandbox(request.sandbox_id)
            if request.sandbox_id
            else self._by_task.get(request.task_id)
        )
        if sb is None or not sb.live:
            raise GRPCError(Status.FAILED_PRECONDITION, "the sandbox is not running")
        access = self._access(sb)
        await stream.send_message(
            api_pb2.SandboxGetCommandRouterAccessResponse(url=access.url, jwt=access.jwt)
        )

    async def SandboxWait(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = self._sandbox(request.sandbox_id)
        if sb.live and request.timeout > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(sb.ended.wait(), request.timeout)
        answer = api_pb2.SandboxWaitResponse(metadata=sb.info.metadata)
        if not sb.live:
            answer.result.CopyFrom(sb.info.task_info.result)
        await stream.send_message(answer)

    SandboxWaitV2 = SandboxWait

    async def SandboxTerminate(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = self._sandbox(request.sandbox_id)
        answer = api_pb2.SandboxTerminateResponse()
        if sb.live:
            self._end(sb, _RESULT.GENERIC_STATUS_TERMINATED)
        else:
            answer.existing_result.CopyFrom(sb.info.task_info.result)
        await stream.send_message(answer)

    SandboxTerminateV2 = SandboxTerminate

    async def SandboxTagsGet(self, stream: Any) -> None:
        request = await self._control(stream)
        sb = self._sandbox(request.sandbox_id)
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=sb.info.tags))

    SandboxTagsGetV2 = SandboxTagsGet

    async def SandboxList(self, stream: Any) -> None:
        request = await self._control(stream)
        wanted = {(t.tag_name, t.tag_value) for t in request.tags}
        found = [
            sb.info
            for sb in self.sandboxes.values()
            if (request.include_finished or sb.live)
            and (not request.app_id or sb.info.app_id == request.app_id)
            and (not request.before_timestamp or sb.info.created_at < request.before_timestamp)
            and wanted <= {(t.tag_name, t.tag_value) for t in sb.info.tags}
        ]
        found.sort(key=lambda info: -info.created_at)
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=found[: self.page_size]))

    SandboxListV2 = SandboxList

    # -- the task command router ------------------------------------------------------------

    def _exec(self, sb: _Emulated, exec_id: str) -> _Exec:
        ex = sb.execs.get(exec_id)
        if ex is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {exec_id} not found")
        return ex

    async def TaskExecStart(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        if request.pty_info.enabled:
            raise GRPCError(Status.UNIMPLEMENTED, "PTY execs are not emulated")
        if request.exec_id in sb.execs:  # a retried start
            await stream.send_message(router_pb2.TaskExecStartResponse())
            return
        if self.faults.too_many_execs(self._running):
            limit = self.faults.max_concurrent_execs
            self._rate_limited(f"at most {limit} commands may run at once")
        env = dict(sb.env)
        for source in request.secret_sources:
            env |= dict(source.env.contents)
        env |= dict(request.env)
        cwd = request.workdir or sb.workdir
        ex = _Exec(list(request.command_args), cwd, env, request.timeout_secs or None)
        sb.execs[request.exec_id] = ex
        if ex.fs_command is not None and "WriteFile" not in ex.fs_command:
            self._start(sb, request.exec_id, ex)  # the tool's other commands read no stdin
        await stream.send_message(router_pb2.TaskExecStartResponse())

    def _start(self, sb: _Emulated, exec_id: str, ex: _Exec) -> asyncio.Task[ExecResult | None]:
        if ex.run is None:
            ex.run = asyncio.ensure_future(self._run(sb, ex))
            ex.run.add_done_callback(lambda run: self._forget(sb, exec_id, run))
        return ex.run

    def _forget(self, sb: _Emulated, exec_id: str, run: asyncio.Task[ExecResult | None]) -> None:
        """Keep the last :data:`FINISHED_EXECS_KEPT` finished commands of a sandbox. An
        error of the emulator's own reaches the waiters; with none, it is logged here."""
        if not run.cancelled() and run.exception() is not None:
            logger.error("exec %s failed in the emulator", exec_id, exc_info=run.exception())
        sb.finished.append(exec_id)
        while len(sb.finished) > FINISHED_EXECS_KEPT:
            sb.execs.pop(sb.finished.popleft(), None)

    async def _run(self, sb: _Emulated, ex: _Exec) -> ExecResult | None:
        """The command's result; None if its sandbox ended under it."""
        fs_command = ex.fs_command
        if fs_command is not None:
            return await self._fs_tool(sb, fs_command, bytes(ex.stdin))
        if self.faults.dies():
            self._end(sb, _RESULT.GENERIC_STATUS_FAILURE, "the sandbox died (injected)")
            return None
        self._running += 1
        try:
            return await self.local.exec(
                sb.local_id,
                ex.argv,
                timeout=ex.timeout,
                stdin=bytes(ex.stdin) or None,
                env=ex.env,
                cwd=ex.cwd,
            )
        except SandboxError as exc:
            if not sb.live or isinstance(exc, (SandboxNotFoundError, SandboxLostError)):
                return None  # the sandbox ended under it
            if type(exc) is not SandboxError:
                raise
            # No such working directory: the runtime cannot start the command.
            return ExecResult(returncode=1, stderr_bytes=f"{exc}\n".encode())
        finally:
            self._running -= 1

    async def _fs_tool(self, sb: _Emulated, command: dict[str, Any], data: bytes) -> ExecResult:
        """What ``modal-sandbox-fs-tools`` does for the two commands the emulator knows."""
        ((name, args),) = command.items()
        path = str(args.get("path", "")) if isinstance(args, dict) else ""
        try:
            if name == "ReadFile":
                return ExecResult(
                    returncode=0, stdout_bytes=await self.local.read_file(sb.local_id, path)
                )
            if name == "WriteFile":
                await self.local.write_file(sb.local_id, path, data)
                return ExecResult(returncode=0)
            kind, message = "NotSupported", f"{name} is not emulated"
        except FileNotFoundError:
            kind, message = "NotFound", "No such file or directory"
        except IsADirectoryError:
            kind, message = "IsDirectory", "Is a directory"
        except NotADirectoryError:
            kind, message = "NotDirectory", "Not a directory"
        except (PermissionError, SandboxError):
            kind, message = "PermissionDenied", "Permission denied"
        error = json.dumps({"error_kind": kind, "message": message})
        return ExecResult(returncode=1, stderr_bytes=error.encode())

    async def _result(self, sb: _Emulated, exec_id: str) -> ExecResult:
        """Wait for a command, starting it if the client wrote no stdin (see the module's
        docstring); NOT_FOUND if its sandbox ended under it."""
        ex = self._exec(sb, exec_id)
        run = ex.run
        if run is None and not ex.stdin and not (ex.fs_command or {}).get("WriteFile"):
            run = self._start(sb, exec_id, ex)
        if run is None:
            await sb.ended.wait()  # stdin still open: it runs when stdin closes
            raise GRPCError(Status.NOT_FOUND, f"task {sb.task_id} finished")
        ended = asyncio.ensure_future(sb.ended.wait())
        try:
            await asyncio.wait({run, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        result = run.result() if run.done() and not run.cancelled() else None
        if result is None:
            raise GRPCError(Status.NOT_FOUND, f"task {sb.task_id} finished during exec {exec_id}")
        return result

    async def TaskExecWait(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        result = await self._result(sb, request.exec_id)
        await stream.send_message(router_pb2.TaskExecWaitResponse(code=result.returncode))

    async def TaskExecPoll(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        ex = self._exec(sb, request.exec_id)
        answer = router_pb2.TaskExecPollResponse()
        if ex.run is not None and ex.run.done():
            result = ex.run.result() if not ex.run.cancelled() else None
            if result is None:
                raise GRPCError(Status.NOT_FOUND, f"task {sb.task_id} finished")
            answer.code = result.returncode
        await stream.send_message(answer)

    async def TaskExecStdioRead(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        result = await self._result(sb, request.exec_id)
        stdout = request.file_descriptor == router_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT
        data = result.stdout_bytes if stdout else result.stderr_bytes
        for offset in range(request.offset, len(data), CHUNK_BYTES):
            chunk = data[offset : offset + CHUNK_BYTES]
            await stream.send_message(router_pb2.TaskExecStdioReadResponse(data=chunk))

    def _stdin(self, sb: _Emulated, exec_id: str, offset: int, data: bytes, eof: bool) -> None:
        """Take stdin written from ``offset`` (a retried write repeats what was taken)."""
        ex = self._exec(sb, exec_id)
        if ex.closed or ex.run is not None:
            if data[max(0, len(ex.stdin) - offset) :]:
                raise GRPCError(Status.FAILED_PRECONDITION, "stdin is closed")
            return
        if offset > len(ex.stdin):
            raise GRPCError(Status.OUT_OF_RANGE, f"stdin offset {offset} is past {len(ex.stdin)}")
        ex.stdin += data[len(ex.stdin) - offset :]
        if eof:
            ex.closed = True
            self._start(sb, exec_id, ex)

    async def TaskExecStdinWrite(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        self._stdin(sb, request.exec_id, request.offset, request.data, request.eof)
        await stream.send_message(router_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinWriteStream(self, stream: Any) -> None:
        first = await stream.recv_message()
        if first is None or not first.HasField("start"):
            raise GRPCError(Status.INVALID_ARGUMENT, "the first message must be start")
        start = first.start
        sb = await self._router_checks(stream, start.task_id)
        offset = start.offset
        async for message in stream:
            if message.HasField("end"):
                self._stdin(sb, start.exec_id, offset, b"", True)
                break
            self._stdin(sb, start.exec_id, offset, message.data, False)
            offset += len(message.data)
        await stream.send_message(router_pb2.TaskExecStdinWriteStreamResponse())

    async def TaskExecStdinStatus(self, stream: Any) -> None:
        request, sb = await self._routed(stream)
        ex = self._exec(sb, request.exec_id)
        await stream.send_message(
            router_pb2.TaskExecStdinStatusResponse(
                num_bytes_written=len(ex.stdin), closed=ex.closed or ex.run is not None
            )
        )


class ModalEmulator(Served):
    """One emulated Modal workspace: a grpclib server and its servicer.

    Serve it as :class:`~sandboxkit.emulators.serving.Served` says (``with`` for a thread of
    its own); point the client at ``url`` with token id :data:`TOKEN_ID` and secret
    ``api_key``. ``faults`` may be changed while it runs. ``direct_python`` is accepted for
    symmetry with the other emulators: Modal's exec takes a working directory and variables
    itself, so commands always run as given.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        faults: Faults | None = None,
        page_size: int = PAGE_SIZE,
        direct_python: bool = True,
    ) -> None:
        super().__init__(host=host, port=port, api_key=api_key, faults=faults)
        self.page_size = page_size
        self._servicer: ModalServicer | None = None
        self._server: grpclib.server.Server | None = None

    @property
    def servicer(self) -> ModalServicer:
        assert self._servicer is not None, "the emulator is not running"
        return self._servicer

    async def start(self) -> None:
        self._servicer = ModalServicer(
            self._open_local("sandboxkit-modal-").backend,
            api_key=self.api_key,
            faults=self.faults,
            page_size=self.page_size,
        )
        services = [
            _Service(api_grpc.ModalClientBase, self._servicer),
            _Service(task_command_router_grpc.TaskCommandRouterBase, self._servicer),
        ]
        self._server = grpclib.server.Server(services, status_details_codec=custom_detail_codec)
        await self._server.start(self.host, self.port)
        listening = cast(asyncio.Server | None, self._server._server)
        sockets = listening.sockets if listening is not None else ()
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._servicer.url = self.url

    async def aclose(self) -> None:
        if self._servicer is not None:
            await self._servicer.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        await self._close_local()

    def live_sandboxes(self) -> int:
        """Sandboxes created and not yet ended."""
        return self.servicer.live_count()

    def describe(self, sandbox_id: str) -> api_pb2.SandboxInfo:
        """A copy of what the API reports for a sandbox, ended ones included."""
        copy = api_pb2.SandboxInfo()
        copy.CopyFrom(self.servicer.sandboxes[sandbox_id].info)
        return copy

    def definition(self, sandbox_id: str) -> api_pb2.Sandbox:
        """A copy of the definition a sandbox was created with."""
        copy = api_pb2.Sandbox()
        copy.CopyFrom(self.servicer.sandboxes[sandbox_id].definition)
        return copy

    def sandbox_ids(self) -> list[str]:
        """Every sandbox the emulator has made, ended ones included."""
        return list(self.servicer.sandboxes)


def serve_forever(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    faults: Faults | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM (``sandboxkit emulate modal``); prints the URL to use, then
    the token id and secret a client must send (the secret ``any`` when every one is
    accepted)."""
    return serve_until_signalled(
        ModalEmulator(host=host, port=port, api_key=api_key, faults=faults),
        lambda emu: (
            f"{MODAL_URL_VAR}={emu.url}\n{MODAL_KEY_VARS[0]}={TOKEN_ID}\n"
            f"{MODAL_KEY_VARS[1]}={api_key or ANY_KEY}"
        ),
    )
