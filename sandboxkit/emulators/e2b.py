"""A local E2B: the parts of E2B's REST API and of ``envd`` that the ``e2b`` SDK uses, on loopback.

The real SDK talks to it unchanged, over its own protocols: the control plane is E2B's REST API
(``POST /v2/sandboxes``, ``GET /v2/sandboxes`` with its metadata filter and ``x-next-token``
paging, ``GET``/``DELETE /sandboxes/{id}``, ``/timeout``, ``/pause``,
``POST /v2/sandboxes/{id}/connect``, which resumes), and each sandbox's ``envd`` speaks Connect
RPC over HTTP (``process.Process/Start``, a server stream; ``SendInput``, ``CloseStdin``,
``SendSignal``) beside its HTTP file API (``GET``/``POST /files``, ``GET /health``).

Routing: envd normally listens on port 49983 of each sandbox, behind a host name per sandbox
(``49983-<id>.<domain>``), or behind ``sandbox.<domain>`` for E2B's own domains. The SDK names
the sandbox of every envd request in its ``E2b-Sandbox-Id`` header, and its ``sandbox_url``
(``E2B_SANDBOX_URL``) sends every sandbox's envd traffic to one URL; the emulator serves both
planes on one port, so ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` are the same URL, and a request
with that header is envd's. (``E2B_DEBUG`` would pin both to fixed localhost ports and skip the
control plane altogether: not what is tested.)

Each emulated sandbox is one sandbox of the local ``subprocess`` backend. A command is run as
its argv (envd's ``ProcessConfig`` is ``cmd`` + ``args``), so Python programs reach the local
backend's warm template with nothing to unwrap. Differences from E2B worth knowing:

- A command started with ``stdin`` gathers its input until ``CloseStdin`` and only then runs;
  output is streamed when the command has ended (in 32 KiB data events), not as it is written.
- The user an envd request names (``Authorization: Basic``) is ignored: every command runs as
  the local sandbox's user.
- A stream's deadline (``Connect-Timeout-Ms``) kills its command, as envd does; a client that
  goes away does not (envd keeps the process: ``SendSignal`` kills it).
- Templates are accepted by name and all look the same (the local sandbox); a sandbox whose
  timeout passes is killed, or paused when it was created with ``autoPause``. A paused sandbox
  keeps its files (the local sandbox stays) and runs no command until it is resumed.

Faults (:class:`~sandboxkit.testing.faults.Faults`) apply to every call: latency, transient
errors (429 with ``Retry-After``, or 503; on envd's RPCs ``resource_exhausted`` with a
``google.rpc.RetryInfo`` detail, or ``unavailable``), dropped answers (the work is done, the
connection is cut: a command's stream ends with no end event), ``die_rate`` (the sandbox is
killed while its command runs: the stream is cut and the API then answers 404),
``max_sandboxes`` and ``max_concurrent_execs`` (refused as rate limiting).
"""

from __future__ import annotations

import asyncio
import base64
import json
import posixpath
import struct
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..backends._facts import E2B_KEY_VAR, E2B_SANDBOX_URL_VAR, E2B_URL_VAR
from ..errors import SandboxError, SandboxNotFoundError, installed_for
from ..protocol import ExecResult, SandboxSpec
from ..testing.faults import Faults
from . import ANY_KEY, INSTALL
from .host import image_env
from .serving import Served, serve_until_signalled

with installed_for("the e2b emulator", INSTALL):
    from aiohttp import BodyPartReader, web

ENVD_VERSION = "0.6.7"
"""What the emulated envd reports: new enough for every call the SDK makes (stdin closing,
octet-stream uploads)."""
SANDBOX_HEADER = "E2b-Sandbox-Id"
DEFAULT_TIMEOUT = 300
"""Seconds a sandbox lives when its create names no timeout (E2B's default)."""
CHUNK_BYTES = 32 * 1024
PAGE_SIZE = 100
_END_STREAM = 0x02
KILLED_END = {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}
"""envd's end event for a command killed by SIGKILL (at its deadline or by ``SendSignal``)."""
_DROP = web.RequestKey("drop", bool)
"""Whether the faults drop this request's answer (the work done, the connection then cut)."""
_RPCS = frozenset({"exec", "send_input", "close_stdin", "send_signal"})
"""Routes that are envd's Connect RPCs (their errors are Connect errors)."""


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def envelope(message: Mapping[str, Any], flags: int = 0) -> bytes:
    """One message of a Connect stream: flags, big-endian length, JSON."""
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def retry_info(seconds: float) -> bytes:
    """A ``google.rpc.RetryInfo`` asking for ``seconds``, serialized: field 1, a Duration of
    whole seconds (field 1) and nanoseconds (field 2), as varints."""

    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            low, value = value & 0x7F, value >> 7
            out.append(low | (0x80 if value else 0))
            if not value:
                return bytes(out)

    whole = int(seconds)
    nanos = round((seconds - whole) * 1e9)
    duration = b"\x08" + varint(whole) + (b"\x10" + varint(nanos) if nanos else b"")
    return b"\x0a" + varint(len(duration)) + duration


class _Reply(Exception):
    """Ends a request early with an error answer: REST (``{code, message}`` JSON, an HTTP
    status) or Connect (``connect`` set: a Connect code, with details)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        connect: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.connect, self.retry_after = (
            status,
            message,
            connect,
            retry_after,
        )

    def error_body(self) -> dict[str, Any]:
        """The Connect error object (for a unary answer or a stream's end)."""
        body: dict[str, Any] = {"code": self.connect, "message": self.message}
        if self.retry_after is not None:
            value = base64.b64encode(retry_info(self.retry_after)).decode()
            body["details"] = [{"type": "google.rpc.RetryInfo", "value": value}]
        return body

    def response(self, *, stream: bool = False) -> web.Response:
        """The answer; ``stream``: to a server-streaming RPC, whose errors come as the end of
        a stream (status 200) in the Connect protocol."""
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = f"{self.retry_after:g}"
        if self.connect is not None and stream:
            trailer = envelope({"error": self.error_body()}, _END_STREAM)
            return web.Response(body=trailer, content_type="application/connect+json")
        if self.connect is not None:
            return web.json_response(self.error_body(), status=self.status, headers=headers)
        body = {"code": self.status, "message": self.message}
        return web.json_response(body, status=self.status, headers=headers)


@dataclass
class _Process:
    """A command envd started: its input until closed, then its run."""

    pid: int
    stdin: bytearray = field(default_factory=bytearray)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    run: asyncio.Task[ExecResult] | None = None
    killed: bool = False


@dataclass
class _Sandbox:
    id: str
    template: str
    metadata: dict[str, str]
    env: dict[str, str]
    auto_pause: bool
    local_id: str | None = None
    state: str = "running"
    started_at: datetime = field(default_factory=_now)
    end_at: datetime = field(default_factory=_now)
    processes: dict[int, _Process] = field(default_factory=dict)
    next_pid: int = 1000
    envd_up: bool = True
    timer: asyncio.TimerHandle | None = None

    def created(self) -> dict[str, Any]:
        """A ``Sandbox`` (what create and connect answer)."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "emulated",
            "envdVersion": ENVD_VERSION,
            "domain": None,
        }

    def listed(self) -> dict[str, Any]:
        """A ``ListedSandbox``; ``GET /sandboxes/{id}`` answers the same fields."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "emulated",
            "startedAt": _iso(self.started_at),
            "endAt": _iso(self.end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": self.state,
            "envdVersion": ENVD_VERSION,
            "metadata": self.metadata,
        }


class E2BEmulator(Served):
    """One emulated E2B team.

    Start it in the running loop (``async with E2BEmulator() as emu``) or on a thread of its
    own (``with E2BEmulator() as emu``); ``url`` is both the API URL (``E2B_API_URL``) and the
    sandbox URL (``E2B_SANDBOX_URL``) to give the SDK. Stopping it stops every sandbox it made.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        page_size: int = PAGE_SIZE,
    ) -> None:
        """``api_key``: require ``X-API-KEY: <api_key>`` (None accepts any); ``page_size``: the
        largest page ``GET /v2/sandboxes`` answers."""
        super().__init__(host=host, port=port, api_key=api_key, faults=faults)
        self.page_size = page_size
        self._sandboxes: dict[str, _Sandbox] = {}
        self._by_key: dict[str, str] = {}
        """Sandboxes by the ``Idempotency-Key`` of the create that made them."""
        self._execs = 0

    # -- what tests look at --------------------------------------------------------------------

    def live_sandboxes(self) -> int:
        """Sandboxes running or paused (each holds a local sandbox)."""
        return sum(sb.local_id is not None for sb in list(self._sandboxes.values()))

    def kill_envd(self, sandbox_id: str) -> None:
        """End a running sandbox's envd, as a program with sudo may: its commands' streams
        break and every envd call is the edge proxy's 502 "port is not open", while the API
        still reports the sandbox running."""
        assert self._loop is not None, "serve with start_in_thread() to call this"
        sb = self._sandboxes[sandbox_id]

        def down() -> None:
            sb.envd_up = False
            self._stop_processes(sb)

        self._loop.call_soon_threadsafe(down)

    def state(self, sandbox_id: str) -> str | None:
        """``running`` or ``paused``; None once it is killed (or was never made)."""
        sb = self._sandboxes.get(sandbox_id)
        return sb.state if sb is not None else None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._open_local("e2b-emulator-")
        app = web.Application(middlewares=[self._middleware], client_max_size=1 << 30)
        self._routes(app)
        await self._listen_http(app)

    async def aclose(self) -> None:
        for sb in list(self._sandboxes.values()):
            await self._kill(sb)
        await self._close_local()

    # -- plumbing ------------------------------------------------------------------------------

    def _routes(self, app: web.Application) -> None:
        add = app.router.add_route
        one = "/sandboxes/{sandbox_id}"
        add("POST", "/v2/sandboxes", self._create, name="create")
        add("GET", "/v2/sandboxes", self._list, name="list")
        add("GET", one, self._get, name="get")
        add("DELETE", one, self._delete, name="kill")
        add("POST", one + "/timeout", self._set_timeout, name="set_timeout")
        add("POST", one + "/pause", self._pause, name="pause")
        add("POST", "/v2" + one + "/connect", self._connect, name="connect")
        add("GET", "/health", self._health, name="health")
        add("GET", "/files", self._read, name="read_file")
        add("POST", "/files", self._write, name="write_file")
        add("POST", "/process.Process/Start", self._start, name="exec")
        add("POST", "/process.Process/SendInput", self._send_input, name="send_input")
        add("POST", "/process.Process/CloseStdin", self._close_stdin, name="close_stdin")
        add("POST", "/process.Process/SendSignal", self._send_signal, name="send_signal")

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        operation = request.match_info.route.name or ""
        envd = SANDBOX_HEADER in request.headers
        rpc = operation in _RPCS
        if not envd and self.api_key and request.headers.get("X-API-KEY") != self.api_key:
            return _Reply(401, "Invalid API key").response()
        await self.faults.delay(create=operation == "create")
        drop = False
        try:
            if self.faults.applies_to(operation) and operation != "health":
                error = self.faults.transient_error()
                if error == "rate_limited":
                    raise self._rate_limited("too many requests (injected)", rpc=rpc)
                if error == "server_error":
                    code = "unavailable" if rpc else None
                    raise _Reply(503, "service unavailable (injected)", connect=code)
                drop = self.faults.drop()
            request[_DROP] = drop
            response = await handler(request)
        except _Reply as reply:
            response = reply.response(stream=operation == "exec")
        if drop and request.transport is not None and operation != "exec":
            # The work is done, the answer is lost: the client sees the connection reset.
            request.transport.abort()
        return response

    def _rate_limited(self, message: str, *, rpc: bool) -> _Reply:
        """A 429 (an envd RPC's: ``resource_exhausted``), with the wait the faults ask for."""
        code = "resource_exhausted" if rpc else None
        return _Reply(429, message, connect=code, retry_after=self.faults.retry_after)

    def _lookup(self, request: web.Request) -> _Sandbox:
        sandbox_id = request.match_info["sandbox_id"]
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            raise _Reply(404, f"sandbox {sandbox_id} not found")
        return sb

    def _envd(self, request: web.Request) -> _Sandbox:
        """The running sandbox an envd request is for; anything else is the edge proxy's 502
        (the SDK reads "was not found" as a sandbox that is gone)."""
        sandbox_id = request.headers.get(SANDBOX_HEADER, "")
        sb = self._sandboxes.get(sandbox_id)
        if sb is None or sb.state != "running":
            raise _Reply(502, f"The sandbox {sandbox_id} was not found")
        if not sb.envd_up:
            raise _Reply(502, f"The sandbox {sandbox_id} is running but port is not open")
        assert sb.local_id is not None
        return sb

    async def _kill(self, sb: _Sandbox) -> None:
        """Remove a sandbox: its commands die with its local sandbox."""
        self._sandboxes.pop(sb.id, None)
        if sb.timer is not None:
            sb.timer.cancel()
        local_id, sb.local_id = sb.local_id, None
        for process in sb.processes.values():
            if process.run is not None:
                process.run.cancel()
            process.closed.set()
        if local_id is not None:
            await self.local.stop(local_id)

    def _arm(self, sb: _Sandbox, seconds: float) -> None:
        """End the sandbox ``seconds`` from now: killed, or paused with ``autoPause``."""
        if sb.timer is not None:
            sb.timer.cancel()
        sb.end_at = _now() + timedelta(seconds=seconds)
        loop = asyncio.get_running_loop()
        sb.timer = loop.call_later(seconds, lambda: asyncio.ensure_future(self._expire(sb)))

    async def _expire(self, sb: _Sandbox) -> None:
        if sb.id not in self._sandboxes or sb.state != "running":
            return
        if sb.auto_pause:
            self._stop_processes(sb)
            sb.state = "paused"
        else:
            await self._kill(sb)

    @staticmethod
    def _stop_processes(sb: _Sandbox) -> None:
        for process in sb.processes.values():
            if process.run is not None:
                process.run.cancel()
            process.closed.set()

    # -- control plane -------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = request.headers.get("Idempotency-Key")
        if key and key in self._by_key and self._by_key[key] in self._sandboxes:
            return web.json_response(self._sandboxes[self._by_key[key]].created(), status=201)
        if self.faults.at_capacity(self.live_sandboxes()):
            raise self._rate_limited(
                f"at most {self.faults.max_sandboxes} sandboxes may run at once", rpc=False
            )
        env = {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
        template = str(body.get("templateID") or "base")
        sb = _Sandbox(uuid.uuid4().hex[:20], template, metadata, env, bool(body.get("autoPause")))
        self._sandboxes[sb.id] = sb  # counted against the cap while it is made
        try:
            info = await self.local.create(SandboxSpec(env=image_env(env, template)))
        except BaseException:
            self._sandboxes.pop(sb.id, None)
            raise
        if sb.id not in self._sandboxes:  # killed while being made
            await self.local.stop(info.id)
            raise _Reply(404, f"sandbox {sb.id} was killed")
        sb.local_id = info.id
        self._arm(sb, float(body.get("timeout") or DEFAULT_TIMEOUT))
        if key:
            self._by_key[key] = sb.id
        return web.json_response(sb.created(), status=201)

    async def _list(self, request: web.Request) -> web.Response:
        query = request.query
        wanted: dict[str, str] = {}
        for k, v in urllib.parse.parse_qsl(query.get("metadata") or "", keep_blank_values=True):
            wanted[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
        states = set(filter(None, (query.get("state") or "").split(","))) or {"running", "paused"}
        try:
            start = int(query.get("nextToken") or 0)
            limit = min(int(query.get("limit") or self.page_size), self.page_size)
        except ValueError as exc:
            raise _Reply(400, f"bad query: {exc}") from None
        found = [
            sb
            for sb in list(self._sandboxes.values())
            if wanted.items() <= sb.metadata.items() and sb.state in states
        ]
        page = found[start : start + max(limit, 1)]
        headers = {}
        if start + len(page) < len(found):
            headers["x-next-token"] = str(start + len(page))
        return web.json_response([sb.listed() for sb in page], headers=headers)

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(self._lookup(request).listed())

    async def _delete(self, request: web.Request) -> web.Response:
        await self._kill(self._lookup(request))
        return web.Response(status=204)

    async def _set_timeout(self, request: web.Request) -> web.Response:
        sb = self._lookup(request)
        body = await request.json()
        self._arm(sb, float(body.get("timeout") or 0))
        return web.Response(status=204)

    async def _pause(self, request: web.Request) -> web.Response:
        sb = self._lookup(request)
        if sb.state == "paused":
            raise _Reply(409, f"sandbox {sb.id} is already paused")
        self._stop_processes(sb)
        sb.state = "paused"
        return web.Response(status=204)

    async def _connect(self, request: web.Request) -> web.Response:
        sb = self._lookup(request)
        body = await request.json() if request.can_read_body else {}
        resumed = sb.state == "paused"
        sb.state = "running"
        timeout = float(body.get("timeout") or DEFAULT_TIMEOUT)
        if resumed or sb.end_at < _now() + timedelta(seconds=timeout):
            self._arm(sb, timeout)
        return web.json_response(sb.created(), status=201 if resumed else 200)

    # -- envd: files ---------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        self._envd(request)
        return web.Response(status=204)

    async def _read(self, request: web.Request) -> web.Response:
        sb = self._envd(request)
        path = request.query.get("path", "")
        assert sb.local_id is not None
        try:
            data = await self.local.read_file(sb.local_id, path)
        except FileNotFoundError as exc:
            raise _Reply(404, f"path not found: {exc}") from None
        except (OSError, SandboxError) as exc:
            raise _Reply(400, str(exc)) from None
        return web.Response(body=data, content_type="application/octet-stream")

    async def _write(self, request: web.Request) -> web.Response:
        sb = self._envd(request)
        default_path = request.query.get("path")
        written = []
        if request.content_type == "application/octet-stream":
            uploads = [(default_path, await request.read())]
        else:
            uploads = []
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                assert isinstance(part, BodyPartReader)
                uploads.append((default_path or part.filename, bytes(await part.read())))
        assert sb.local_id is not None
        for path, data in uploads:
            if not path:
                raise _Reply(400, "a file has no path")
            try:
                await self.local.write_file(sb.local_id, path, data)
            except (OSError, SandboxError) as exc:
                raise _Reply(400, str(exc)) from None
            written.append({"name": posixpath.basename(path), "type": "file", "path": path})
        return web.json_response(written)

    # -- envd: processes -----------------------------------------------------------------------

    @staticmethod
    async def _message(request: web.Request) -> dict[str, Any]:
        """A unary Connect request's JSON message."""
        try:
            message = await request.json()
        except ValueError:
            raise _Reply(400, "not JSON", connect="invalid_argument") from None
        return message if isinstance(message, dict) else {}

    def _process(self, request: web.Request, message: Mapping[str, Any]) -> _Process:
        sb = self._envd(request)
        pid = (message.get("process") or {}).get("pid")
        process = sb.processes.get(pid) if isinstance(pid, int) else None
        if process is None:
            raise _Reply(404, f"process with pid {pid} not found", connect="not_found")
        return process

    async def _send_input(self, request: web.Request) -> web.Response:
        message = await self._message(request)
        process = self._process(request, message)
        data = (message.get("input") or {}).get("stdin") or ""
        process.stdin += base64.b64decode(data)
        return web.json_response({})

    async def _close_stdin(self, request: web.Request) -> web.Response:
        self._process(request, await self._message(request)).closed.set()
        return web.json_response({})

    async def _send_signal(self, request: web.Request) -> web.Response:
        process = self._process(request, await self._message(request))
        process.killed = True
        process.closed.set()
        if process.run is not None:
            process.run.cancel()
        return web.json_response({})

    async def _start(self, request: web.Request) -> web.StreamResponse:
        """``process.Process/Start``: a Connect server stream of start, data and end events."""
        body = await request.read()
        if len(body) < 5:
            raise _Reply(400, "expected one enveloped message", connect="invalid_argument")
        (size,) = struct.unpack(">I", body[1:5])
        try:
            message = json.loads(body[5 : 5 + size])
            config = message["process"]
            argv = [str(config["cmd"]), *map(str, config.get("args") or [])]
        except (ValueError, KeyError, TypeError):
            raise _Reply(400, "bad StartRequest", connect="invalid_argument") from None
        sb = self._envd(request)
        if self.faults.too_many_execs(self._execs):
            limit = self.faults.max_concurrent_execs
            raise self._rate_limited(f"at most {limit} commands may run at once", rpc=True)
        deadline = request.headers.get("Connect-Timeout-Ms")
        timeout = int(deadline) / 1000 if deadline and deadline.isdigit() else None
        process = _Process(sb.next_pid)
        sb.next_pid += 1
        sb.processes[process.pid] = process
        if not message.get("stdin"):
            process.closed.set()
        stream = web.StreamResponse(headers={"Content-Type": "application/connect+json"})
        await stream.prepare(request)
        self._execs += 1
        try:
            await self._event(stream, {"start": {"pid": process.pid}})
            end = await self._run(sb, process, argv, config, timeout, stream)
            if isinstance(end, _Reply):
                await stream.write(envelope({"error": end.error_body()}, _END_STREAM))
            elif request[_DROP] and request.transport is not None:
                request.transport.abort()  # it ran; its end event is lost
            else:
                await self._event(stream, {"end": end})
                await stream.write(envelope({}, _END_STREAM))
        except ConnectionResetError:
            pass  # the client went away; the command ran on until its end, as envd's do
        finally:
            self._execs -= 1
            sb.processes.pop(process.pid, None)
        return stream

    async def _run(
        self,
        sb: _Sandbox,
        process: _Process,
        argv: list[str],
        config: Mapping[str, Any],
        timeout: float | None,
        stream: web.StreamResponse,
    ) -> Mapping[str, Any] | _Reply:
        """Run a started command once its input is closed and send its data events; its end
        event, or the error to end the stream with instead."""
        await process.closed.wait()
        if sb.local_id is None or process.killed or sb.state != "running":
            return self._ended(sb, process)
        cwd = config.get("cwd") or None
        env = {str(k): str(v) for k, v in (config.get("envs") or {}).items()}
        process.run = asyncio.ensure_future(
            self.local.exec(
                sb.local_id, argv, timeout=timeout, stdin=bytes(process.stdin), cwd=cwd, env=env
            )
        )
        if self.faults.dies():  # the command may have ended: its sandbox, and answer, are lost
            await asyncio.wait({process.run}, timeout=0.05)
            await self._kill(sb)
            return self._ended(sb, process)
        try:
            result: ExecResult = await asyncio.shield(process.run)
        except asyncio.CancelledError:
            if not process.run.cancelled():
                process.run.cancel()  # the server is going away
                raise
            return self._ended(sb, process)
        except SandboxNotFoundError:
            return self._ended(sb, process)
        except SandboxError as exc:  # no such cwd: envd cannot start it
            return _Reply(400, str(exc), connect="invalid_argument")
        for name, data in (("stdout", result.stdout_bytes), ("stderr", result.stderr_bytes)):
            for offset in range(0, len(data), CHUNK_BYTES):
                chunk = base64.b64encode(data[offset : offset + CHUNK_BYTES]).decode()
                await self._event(stream, {"data": {name: chunk}})
        if result.timed_out:
            return KILLED_END
        status = f"exit status {result.returncode}"
        return {"exitCode": result.returncode, "exited": True, "status": status}

    @staticmethod
    def _ended(sb: _Sandbox, process: _Process) -> Mapping[str, Any] | _Reply:
        """A command that did not run to its end: killed by ``SendSignal`` (envd's end event
        for a killed process), or gone with its sandbox (the stream ends in ``unavailable``,
        as when the proxy loses the sandbox)."""
        if process.killed and sb.local_id is not None:
            return KILLED_END
        return _Reply(502, f"the connection to sandbox {sb.id} ended", connect="unavailable")

    @staticmethod
    async def _event(stream: web.StreamResponse, event: Mapping[str, Any]) -> None:
        await stream.write(envelope({"event": event}))


def serve_forever(
    *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None, faults: Faults | None
) -> int:
    """Serve until SIGINT or SIGTERM (``sandboxkit emulate e2b``), then stop every sandbox.

    Prints ``E2B_API_URL=...`` once the server accepts connections, then ``E2B_SANDBOX_URL``
    (the same URL) and the key a client must send (``E2B_API_KEY=...``: ``api_key``, or ``any``
    when every key is accepted).
    """

    emulator = E2BEmulator(host=host, port=port, api_key=api_key, faults=faults)
    return serve_until_signalled(
        emulator,
        lambda emu: (
            f"{E2B_URL_VAR}={emu.url}\n{E2B_SANDBOX_URL_VAR}={emu.url}\n"
            f"{E2B_KEY_VAR}={api_key or ANY_KEY}"
        ),
    )
