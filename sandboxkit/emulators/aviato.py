"""A local stand-in for CoreWeave Sandbox (Aviato), so the real ``cwsandbox`` client runs offline.

It serves, over plaintext gRPC on loopback, the ``coreweave.sandbox.v1.SandboxService`` RPCs the
client uses, built on the protos the client ships. Each emulated sandbox is one sandbox of the
local ``subprocess`` backend, in a private root that is removed when the emulator stops.

Choices that keep the client fast and its behaviour realistic:

- Sandboxes are RUNNING as soon as CreateSandbox answers, so the client's status poll returns
  at once instead of sleeping 0.2-2 s.
- Deleted sandboxes stay queryable as COMPLETED (exit code 0); a second delete is NOT_FOUND
  unless ``allow_missing``.
- ConnectSandbox (the direct mTLS data plane) is UNIMPLEMENTED, so the client uses the gateway.
- StreamExec gathers stdin until the client closes it, then runs the command; the client's
  deadline is the command's, and a cancelled stream kills the command. sandboxkit's backend
  wraps every command in ``/bin/sh -c 'cd "$0" && exec "$@"' CWD [env K=V...] ARGV``; when
  ARGV is Python, the emulator runs it directly in CWD with the variables sh and ``env`` would
  set (``direct_python``), so the local backend's warm template runs it in-process instead of
  sh starting an interpreter. ``tests/test_aviato.py`` checks programs see the same either way.
- File errors carry the AIP-193 ``ErrorInfo`` reasons the client maps to typed errors.

Faults (:class:`~sandboxkit.testing.faults.Faults`) apply to every RPC: latency, transient
errors (RESOURCE_EXHAUSTED or UNAVAILABLE), dropped calls (UNAVAILABLE without any effect), and
``die_rate``: the sandbox dies during an exec and the stream ends without an exit status.
``max_sandboxes`` refuses creation beyond that many live sandboxes with RESOURCE_EXHAUSTED, and
``max_concurrent_execs`` a command beyond that many running ones; every RESOURCE_EXHAUSTED
carries a ``RetryInfo`` when the faults set ``retry_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..backends._facts import AVIATO_KEY_VARS, AVIATO_URL_VAR
from ..errors import BackendMisconfiguredError, SandboxError, SandboxNotFoundError, installed_for
from ..protocol import DEFAULT_WORKDIR, KILLED_RETURNCODE, Backend, ExecResult, SandboxSpec
from ..testing.faults import Faults
from . import ANY_KEY, INSTALL, PYTHONS
from .host import image_env
from .serving import Served, serve_until_signalled

with installed_for("the aviato emulator", INSTALL):
    import grpc
    from cwsandbox._proto import sandbox_pb2 as pb
    from cwsandbox._proto import sandbox_pb2_grpc as pb_grpc
    from google.protobuf import duration_pb2, timestamp_pb2
    from google.rpc import error_details_pb2, status_pb2

    from ..backends.aviato import CD_EXEC  # the client and grpc, which the emulator serves

ERROR_DOMAIN = "cwsandbox.com"
"""The ``ErrorInfo`` domain the client trusts for reason-specific errors."""
MAX_MESSAGE_BYTES = 100 * 1024 * 1024
"""The client's gRPC message limit; unary file calls carry up to 32 MiB."""
CHUNK_BYTES = 64 * 1024
PAGE_SIZE = 100
_TERMINAL = frozenset({pb.STATE_COMPLETED, pb.STATE_FAILED, pb.STATE_TERMINATED})


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any],
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str | None = None,
    metadata: Mapping[str, str] | None = None,
    retry_after: float | None = None,
) -> NoReturn:
    """End the call with ``code``, adding an ``ErrorInfo`` when there is a ``reason`` and a
    ``RetryInfo`` when there is a ``retry_after`` (seconds)."""
    details: list[Any] = []
    if reason is not None:
        details.append(
            error_details_pb2.ErrorInfo(
                reason=reason, domain=ERROR_DOMAIN, metadata=dict(metadata or {})
            )
        )
    if retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(retry_after * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    trailing: tuple[tuple[str, bytes], ...] = ()
    if details:
        status = status_pb2.Status(code=code.value[0], message=message)
        for detail in details:
            status.details.add().Pack(detail)
        trailing = (("grpc-status-details-bin", status.SerializeToString()),)
    await context.abort(code, message, trailing_metadata=trailing)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


@dataclass
class _Emulated:
    """One sandbox as the API reports it, and the local sandbox that backs it."""

    proto: pb.Sandbox
    workdir: str
    execs: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def id(self) -> str:
        return str(self.proto.sandbox_id)

    @property
    def live(self) -> bool:
        return self.proto.status.state not in _TERMINAL


def direct_python(command: list[str], workdir: str) -> tuple[list[str], str, dict[str, str]] | None:
    """``(argv, cwd, variables)`` when ``command`` is the cd-and-exec wrapper around a Python
    command: running that directly, with the variables sh and ``env`` would have set, lets the
    local backend's warm template run it without starting an interpreter behind sh."""
    if tuple(command[: len(CD_EXEC)]) != CD_EXEC or len(command) < len(CD_EXEC) + 2:
        return None
    cwd, rest = command[len(CD_EXEC)], command[len(CD_EXEC) + 1 :]
    variables = {"PWD": posixpath.normpath(cwd), "OLDPWD": workdir}
    if rest[0] == "env":
        rest = rest[1:]
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            variables[key] = value
    if not rest or not PYTHONS.fullmatch(rest[0]) or not cwd.startswith("/"):
        return None
    return rest, cwd, variables


class AviatoServicer(pb_grpc.SandboxServiceServicer):  # type: ignore[misc]
    """The RPCs, over one local backend. Methods the client does not use stay UNIMPLEMENTED."""

    def __init__(
        self,
        local: Backend,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        page_size: int = PAGE_SIZE,
        direct_python: bool = True,
    ) -> None:
        self.local = local
        self.direct_python = direct_python and getattr(local, "warm", False)
        """Run the backend's cd-and-exec wrapper around Python directly (see
        :func:`direct_python`); only worth it where the local backend has warm templates."""
        self.api_key = api_key
        self.faults = faults or Faults()
        self.page_size = page_size
        self.sandboxes: dict[str, _Emulated] = {}
        self._by_request: dict[str, str] = {}
        self._reserved = 0
        self._execs = 0
        """Commands running now (``max_concurrent_execs`` refuses more)."""

    def live_count(self) -> int:
        return sum(1 for sb in self.sandboxes.values() if sb.live)

    # -- plumbing ---------------------------------------------------------------------------

    async def _enter(
        self, context: grpc.aio.ServicerContext[Any, Any], *, create: bool = False
    ) -> None:
        """Authenticate, then apply latency and injected failures."""
        if self.api_key is not None:
            metadata = dict(context.invocation_metadata() or ())
            if metadata.get("authorization") != f"Bearer {self.api_key}":
                await _abort(context, grpc.StatusCode.UNAUTHENTICATED, "invalid API key")
        await self.faults.delay(create=create)
        if self.faults.drop():
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "connection dropped (injected)")
        kind = self.faults.transient_error()
        if kind == "rate_limited":
            await self._rate_limited(context, "rate limited (injected)")
        if kind == "server_error":
            await _abort(context, grpc.StatusCode.UNAVAILABLE, "server error (injected)")

    async def _rate_limited(
        self, context: grpc.aio.ServicerContext[Any, Any], message: str
    ) -> NoReturn:
        await _abort(
            context,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            message,
            retry_after=self.faults.retry_after,
        )

    async def _running(
        self, sandbox_id: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> _Emulated:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None or not sb.live:
            await _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"sandbox {sandbox_id!r} not found or not running",
                reason="CWSANDBOX_SANDBOX_NOT_FOUND",
            )
        return sb

    async def _end(self, sb: _Emulated, state: int, exit_code: int) -> None:
        """Move a sandbox to a terminal state: its commands die and its local sandbox goes."""
        sb.proto.status.state = state  # type: ignore[assignment]
        sb.proto.status.exit_code = exit_code
        sb.proto.status.end_time.CopyFrom(_now())
        for task in list(sb.execs):
            task.cancel()
        await self.local.stop(sb.id, missing_ok=True)

    async def close(self) -> None:
        """Stop every local sandbox (the emulator is going away)."""
        for sb in list(self.sandboxes.values()):
            if sb.live:
                await self._end(sb, pb.STATE_TERMINATED, KILLED_RETURNCODE)

    # -- control plane ----------------------------------------------------------------------

    async def CreateSandbox(
        self, request: pb.CreateSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Sandbox:
        await self._enter(context, create=True)
        if request.request_id and request.request_id in self._by_request:
            return self.sandboxes[self._by_request[request.request_id]].proto
        if self.faults.at_capacity(self.live_count() + self._reserved):
            await self._rate_limited(
                context, f"sandbox quota of {self.faults.max_sandboxes} reached"
            )
        containers = list(request.sandbox.spec.containers)
        if not containers:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "a container is required")
        main = next((c for c in containers if c.primary), containers[0])
        spec = SandboxSpec(
            env=image_env(main.environment_variables, main.image),
            tags=tuple(request.sandbox.spec.tags),
            workdir=main.working_dir or DEFAULT_WORKDIR,
        )
        self._reserved += 1
        try:
            info = await self.local.create(spec)
        except BackendMisconfiguredError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            self._reserved -= 1
        proto = pb.Sandbox()
        proto.CopyFrom(request.sandbox)
        proto.sandbox_id = info.id
        now = _now()
        proto.status.state = pb.STATE_RUNNING
        proto.status.create_time.CopyFrom(now)
        proto.status.start_time.CopyFrom(now)
        self.sandboxes[info.id] = _Emulated(proto, spec.workdir)
        if request.request_id:
            self._by_request[request.request_id] = info.id
        return proto

    async def GetSandbox(
        self, request: pb.GetSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Sandbox:
        await self._enter(context)
        sb = self.sandboxes.get(request.sandbox_id)
        if sb is None:
            await _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"sandbox {request.sandbox_id!r} not found",
                reason="CWSANDBOX_SANDBOX_NOT_FOUND",
            )
        return sb.proto

    async def ListSandboxes(
        self, request: pb.ListSandboxesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListSandboxesResponse:
        await self._enter(context)
        wanted = set(request.tags)
        state = request.state
        show_terminated = request.show_terminated or state in _TERMINAL
        matches = [
            sb.proto
            for sb in self.sandboxes.values()
            if wanted <= set(sb.proto.spec.tags)
            and (state == pb.STATE_UNSPECIFIED or sb.proto.status.state == state)
            and (show_terminated or sb.live)
        ]
        try:
            start = int(request.page_token or 0)
        except ValueError:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "bad page token")
        size = request.page_size or self.page_size
        page = matches[start : start + size]
        more = start + size < len(matches)
        return pb.ListSandboxesResponse(
            sandboxes=page, next_page_token=str(start + size) if more else ""
        )

    async def DeleteSandbox(
        self, request: pb.DeleteSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteSandboxResponse:
        await self._enter(context)
        sb = self.sandboxes.get(request.sandbox_id)
        if sb is None or not sb.live:
            if request.allow_missing:
                return pb.DeleteSandboxResponse()
            await _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"sandbox {request.sandbox_id!r} not found",
                reason="CWSANDBOX_SANDBOX_NOT_FOUND",
            )
        await self._end(sb, pb.STATE_COMPLETED, 0)
        return pb.DeleteSandboxResponse(sandbox=sb.proto)

    async def ConnectSandbox(
        self, request: pb.ConnectSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> NoReturn:
        await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "direct data plane not emulated")

    # -- data plane -------------------------------------------------------------------------

    async def StreamExec(
        self,
        request_iterator: AsyncIterator[pb.ExecStreamRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ExecStreamResponse]:
        # Read the request before refusing it: the client reports a call ended while it was
        # still sending as INTERNAL, whatever the status.
        first = await anext(request_iterator, None)
        await self._enter(context)
        if first is None or not first.HasField("init"):
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "first message must be init")
        init = first.init
        if init.tty:
            await _abort(context, grpc.StatusCode.UNIMPLEMENTED, "tty exec is not emulated")
        if not init.command:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "command is empty")
        sb = await self._running(init.sandbox_id, context)
        yield pb.ExecStreamResponse(ready=pb.ExecStreamReady(ready_time=_now()))
        stdin = bytearray()
        async for message in request_iterator:
            if message.HasField("close"):
                break
            stdin += message.stdin
        if self.faults.too_many_execs(self._execs):
            limit = self.faults.max_concurrent_execs
            await self._rate_limited(context, f"at most {limit} commands may run at once")
        if self.faults.dies():
            await self._end(sb, pb.STATE_FAILED, KILLED_RETURNCODE)
            return  # the stream ends with no exit status, as when the sandbox's node is lost
        command, env = list(init.command), dict(init.env)
        direct = direct_python(command, sb.workdir) if self.direct_python else None
        self._execs += 1
        try:
            result: ExecResult | None = None
            if direct is not None:
                argv, cwd, variables = direct
                try:
                    result = await self._execute(sb, argv, cwd, env | variables, stdin, context)
                except SandboxError as exc:
                    if type(exc) is not SandboxError:
                        raise
                    direct = None  # no such directory: sh says so, as it would
            if direct is None:
                result = await self._execute(sb, command, None, env, stdin, context)
        except SandboxNotFoundError:
            raise
        except SandboxError as exc:
            await _abort(context, grpc.StatusCode.INTERNAL, str(exc))
        finally:
            self._execs -= 1
        if result is None:
            return  # the sandbox was stopped under the command: no exit status
        for stream, data in (
            (pb.ExecStreamOutput.STREAM_STDOUT, result.stdout_bytes),
            (pb.ExecStreamOutput.STREAM_STDERR, result.stderr_bytes),
        ):
            for offset in range(0, len(data), CHUNK_BYTES):
                chunk = data[offset : offset + CHUNK_BYTES]
                yield pb.ExecStreamResponse(output=pb.ExecStreamOutput(stream=stream, data=chunk))
        yield pb.ExecStreamResponse(
            exit=pb.ExecStreamExit(exit_code=result.returncode, completed_time=_now())
        )

    async def _execute(
        self,
        sb: _Emulated,
        command: list[str],
        cwd: str | None,
        env: dict[str, str],
        stdin: bytearray,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> ExecResult | None:
        """Run a command in the sandbox's local sandbox; None if the sandbox was stopped
        under it. A client that goes away cancels it (and so kills the command)."""
        run = asyncio.ensure_future(
            self.local.exec(
                sb.id,
                command,
                timeout=context.time_remaining(),
                stdin=bytes(stdin) or None,
                env=env,
                cwd=cwd,
            )
        )
        sb.execs.add(run)
        try:
            return await asyncio.shield(run)
        except SandboxNotFoundError:
            await self._running(sb.id, context)  # it was stopped: NOT_FOUND
            raise
        except asyncio.CancelledError:
            if not run.cancelled():
                raise  # the client went away: the finally clause kills the command
            return None
        finally:
            sb.execs.discard(run)
            if not run.done():
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run

    async def WriteFile(
        self, request: pb.WriteFileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.WriteFileResponse:
        await self._enter(context)
        sb = await self._running(request.sandbox_id, context)
        try:
            await self.local.write_file(sb.id, request.path, request.content)
        except (OSError, SandboxError) as exc:
            await self._file_error(context, request.path, exc)
        return pb.WriteFileResponse()

    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReadFileResponse:
        await self._enter(context)
        sb = await self._running(request.sandbox_id, context)
        try:
            data = await self.local.read_file(sb.id, request.path)
        except (OSError, SandboxError) as exc:
            await self._file_error(context, request.path, exc)
        return pb.ReadFileResponse(content=data)

    async def _file_error(
        self, context: grpc.aio.ServicerContext[Any, Any], path: str, exc: BaseException
    ) -> NoReturn:
        if isinstance(exc, FileNotFoundError):
            code, reason = grpc.StatusCode.NOT_FOUND, "CWSANDBOX_FILE_NOT_FOUND"
        elif isinstance(exc, IsADirectoryError):
            code, reason = grpc.StatusCode.FAILED_PRECONDITION, "CWSANDBOX_FILE_IS_DIRECTORY"
        elif isinstance(exc, (PermissionError, SandboxError)):
            code, reason = grpc.StatusCode.PERMISSION_DENIED, "CWSANDBOX_FILE_PERMISSION_DENIED"
        else:
            code, reason = grpc.StatusCode.INTERNAL, "CWSANDBOX_FILE_IO_FAILED"
        await _abort(context, code, str(exc), reason=reason, metadata={"filepath": path})


class AviatoEmulator(Served):
    """One emulated Aviato (CoreWeave Sandbox) service: a gRPC server and its servicer.

    Serve it as :class:`~sandboxkit.emulators.serving.Served` says (``with`` for a thread of
    its own); point the client at ``url`` with ``api_key``. ``faults`` may be changed while it
    runs.
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
        self.direct_python = direct_python
        self._servicer: AviatoServicer | None = None
        self._server: grpc.aio.Server | None = None

    @property
    def servicer(self) -> AviatoServicer:
        assert self._servicer is not None, "the emulator is not running"
        return self._servicer

    async def start(self) -> None:
        self._servicer = AviatoServicer(
            self._open_local("sandboxkit-aviato-").backend,
            api_key=self.api_key,
            faults=self.faults,
            page_size=self.page_size,
            direct_python=self.direct_python,
        )
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
        )
        pb_grpc.add_SandboxServiceServicer_to_server(self._servicer, self._server)
        bound = self._server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        await self._server.start()
        self.port = bound

    async def aclose(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
        if self._servicer is not None:
            await self._servicer.close()
        await self._close_local()

    def live_sandboxes(self) -> int:
        """Sandboxes created and not yet deleted (or lost)."""
        return self.servicer.live_count()

    def describe(self, sandbox_id: str) -> pb.Sandbox:
        """A copy of what the API reports for a sandbox, deleted ones included."""
        copy = pb.Sandbox()
        copy.CopyFrom(self.servicer.sandboxes[sandbox_id].proto)
        return copy

    def sandbox_ids(self) -> list[str]:
        """Every sandbox the emulator has made, deleted ones included."""
        return list(self.servicer.sandboxes)


def serve_forever(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    faults: Faults | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM (``sandboxkit emulate aviato``); prints the URL to use, then
    the key a client must send (``api_key``, or ``any`` when every key is accepted)."""

    return serve_until_signalled(
        AviatoEmulator(host=host, port=port, api_key=api_key, faults=faults),
        lambda emu: f"{AVIATO_URL_VAR}={emu.url}\n{AVIATO_KEY_VARS[0]}={api_key or ANY_KEY}",
    )
