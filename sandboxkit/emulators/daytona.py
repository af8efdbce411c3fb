"""A local Daytona: the part of Daytona's HTTP API that the ``daytona`` SDK uses, on loopback.

The real SDK talks to it unchanged, so the Daytona backend is tested without network or
account. It serves the control plane under ``{url}`` (``/sandbox`` create, get, list with label
filter and cursor paging, delete; the Socket.IO gateway the SDK opens for state events) and the
toolbox under ``toolboxProxyUrl/{sandboxId}/...`` (``process/execute``, ``process/code-run``,
``files/bulk-upload``, ``files/bulk-download`` and the code-interpreter WebSocket).

Each emulated sandbox is one sandbox of the local ``subprocess`` backend, so commands inherit
its isolation; shell commands name absolute paths (``/workspace``, ``/tmp``) that only exist
inside its namespaces tier. Sandboxes answer ``started`` at once, so the SDK never waits.

sandboxkit's Daytona backend wraps every command in a shell script (``wrap_command``) that
starts a dozen small processes around it. When the wrapped command is Python, the emulator
runs it directly, with the stdin, cwd, variables, timeout and output cap the script would give
it, and answers as the script would (``direct_python``): the local backend's warm template
then serves it, instead of two shells, their helpers and an interpreter started cold on the
cores the emulator shares with its client, which would cost far more than the rest of the
exec and swamp what tests and benchmarks measure of the client. The backend's
kill command for such an exec cancels it. ``tests/test_daytona.py`` checks that programs see
the same either way.

Differences from Daytona worth knowing: the interpreter runs each cell in a fresh process (no
shared context); ``result`` of an exec interleaves stdout and stderr as one pipe would; a
dropped connection is cut *after* the request was handled (the worst case for a client).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import posixpath
import re
import shlex
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from ..backends._daytona_wire import (
    ARGV_CLOSES,
    ARGV_OPENS,
    KILL_POLLS,
    MARK,
    STREAMS_SEPARATOR,
    kill_command,
    wrap_command,
)
from ..backends._facts import DAYTONA_KEY_VAR, DAYTONA_URL_VAR
from ..errors import SandboxError, SandboxNotFoundError, installed_for
from ..local.isolation import Tier
from ..protocol import DEFAULT_WORKDIR, KILLED_RETURNCODE, ExecResult, SandboxSpec
from ..testing.faults import Faults
from . import ANY_KEY, INSTALL, PYTHONS
from .host import base_image, image_env, remove_from_host
from .serving import OUTPUT_BYTES, Served, serve_until_signalled

with installed_for("the daytona emulator", INSTALL):
    import socketio  # type: ignore[import-untyped]
    from aiohttp import BodyPartReader, MultipartWriter, web

API_SOURCE = "DAYTONA_API"
DAEMON_SOURCE = "DAYTONA_DAEMON"
PROXY_SOURCE = "DAYTONA_PROXY"
EXEC_DEFAULT_TIMEOUT = 10
"""Seconds, when an exec request names none (the daemon's documented default)."""
INTERPRETER_DEFAULT_TIMEOUT = 600
INTERPRETER_TIMEOUT_CLOSE = 4008
_LIVE_STATES = ("creating", "started")
_ERROR_MARK = "\x00sandboxkit-interpreter-error\x00"
_INTERPRETER = f"""
import json, sys, traceback
source = sys.stdin.read()
try:
    exec(compile(source, "<cell>", "exec"), {{"__name__": "__main__"}})
except BaseException as exc:
    sys.stdout.flush()
    info = {{"name": type(exc).__name__, "value": str(exc), "traceback": traceback.format_exc()}}
    sys.stderr.write({_ERROR_MARK!r} + json.dumps(info))
"""


# -- the backend's exec wrapper, read back --------------------------------------------------------


@dataclass(frozen=True)
class WrappedExec:
    """What :func:`~sandboxkit.backends._daytona_wire.wrap_command` was given (its parameters,
    by name), as :func:`unwrap_command` reads it back."""

    argv: list[str]
    workdir: str
    cwd: str
    scratch: str
    has_stdin: bool
    cap: int
    timeout: float | None
    inline_stdin: bytes | None


def unwrap_command(command: str) -> WrappedExec | None:
    """The arguments ``wrap_command`` made ``command`` from, or None if it did not make it.

    So that the emulator runs ``argv`` itself rather than the wrapper's dozen shell processes
    on the machine it shares with its client. What is read back is wrapped again and must
    give ``command`` exactly, so running it as the wrapper would is the wrapper's behaviour
    whatever ``argv`` holds.
    """
    closings = (ARGV_CLOSES[True], ARGV_CLOSES[False])
    try:
        sh, flag, script = shlex.split(command)
        first_line = script.partition("\n")[0]
        scratch, workdir = (word.partition("=")[2] for word in shlex.split(first_line))
        cd_line = re.search(r"^cd .*$", script, re.MULTILINE)
        cap = re.search(r"^c\(\) \{ head -c (\d+) ", script, re.MULTILINE)
        if (sh, flag) != ("sh", "-c") or cd_line is None or cap is None:
            return None
        cwd = shlex.split(cd_line.group())[1]
        start = script.index(ARGV_OPENS) + len(ARGV_OPENS)
        end, closing = max((script.rfind(closing), closing) for closing in closings)
        watchdog = re.match(r"\s*\( sleep (\d+\.\d{3}); ", script[end + len(closing) :])
        inline = re.search(r"^printf %s ([A-Za-z0-9+/=]*|'') \| base64 -d ", script, re.MULTILINE)
        found = WrappedExec(
            argv=shlex.split(script[start:end]),
            workdir=workdir,
            cwd=cwd,
            scratch=scratch,
            has_stdin=closing == ARGV_CLOSES[True],
            cap=int(cap.group(1)) - 1,
            timeout=float(watchdog.group(1)) if watchdog else None,
            inline_stdin=base64.b64decode(inline.group(1).strip("'")) if inline else None,
        )
    except (ValueError, binascii.Error):  # not shell words, too few or too many of them, no argv
        return None
    return found if found.argv and wrap_command(**asdict(found)) == command else None


def unwrap_kill_command(command: str) -> str | None:
    """The scratch directory of the exec that ``command``, made by ``kill_command``, kills;
    None for any other command."""
    fifo = re.match(r"sh -c 'i=0; while \[ ! -p (\S+) \]", command)
    if fifo is None or not fifo.group(1).endswith("/k"):
        return None
    scratch = fifo.group(1)[: -len("/k")]
    return scratch if kill_command(scratch) == command else None


def wrapper_output(status: int, timed_out: bool, stdout: bytes, stderr: bytes) -> str:
    """What the wrapper prints for a command that ended with ``status`` having written
    ``stdout`` and ``stderr`` (each at most the cap plus one byte, as ``head`` keeps)."""

    def base64_lines(data: bytes) -> str:  # as coreutils' base64: lines of 76 characters
        text = base64.b64encode(data).decode()
        return "".join(text[i : i + 76] + "\n" for i in range(0, len(text), 76))

    streams = f"{base64_lines(stdout)}{STREAMS_SEPARATOR}\n{base64_lines(stderr)}"
    return f"{MARK} {status} {int(timed_out)}\n{streams}"


# -- the server -----------------------------------------------------------------------------------


class _Reply(Exception):
    """Ends a request early with a Daytona-shaped error answer."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        source: str = API_SOURCE,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        body = {"statusCode": status, "message": message, "code": code, "source": source}
        self.response = web.json_response(body, status=status, headers=headers)


def _image(body: Mapping[str, Any]) -> str | None:
    """The image a create asks for: the base of the Dockerfile the SDK builds for an image
    (``FROM <image>``), else the snapshot named."""
    build = body.get("buildInfo") or {}
    snapshot = body.get("snapshot")
    dockerfile = str(build.get("dockerfileContent") or "").splitlines()
    return base_image(dockerfile) or (str(snapshot) if snapshot else None)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class _Sandbox:
    id: str
    name: str
    labels: dict[str, str]
    env: dict[str, str]
    request: Mapping[str, Any]
    state: str = "creating"
    local_id: str | None = None
    error_reason: str | None = None
    created_at: str = field(default_factory=_now)

    def dto(self, organization_id: str, toolbox_url: str) -> dict[str, Any]:
        body = self.request

        def number(key: str, default: int) -> int:
            value = body.get(key)
            return int(value) if value is not None else default

        return {
            "id": self.id,
            "organizationId": organization_id,
            "name": self.name,
            "snapshot": body.get("snapshot") or "daytona-emulator",
            "user": body.get("user") or "daytona",
            "env": self.env,
            "labels": self.labels,
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "local",
            "cpu": number("cpu", 1),
            "gpu": number("gpu", 0),
            "memory": number("memory", 1),
            "disk": number("disk", 3),
            "state": self.state,
            "errorReason": self.error_reason,
            "autoStopInterval": number("autoStopInterval", 15),
            "autoArchiveInterval": number("autoArchiveInterval", 10080),
            "autoDeleteInterval": number("autoDeleteInterval", -1),
            "createdAt": self.created_at,
            "updatedAt": self.created_at,
            "toolboxProxyUrl": toolbox_url,
        }


class DaytonaEmulator(Served):
    """One emulated Daytona organization.

    Start it in the running loop (``async with DaytonaEmulator() as emu``) or on a thread of
    its own (``with DaytonaEmulator() as emu``, for sync tests); ``url`` is the API URL to give
    the SDK (``DAYTONA_API_URL``). Stopping it stops every sandbox it made.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        page_size: int = 100,
        organization_id: str = "emulated-org",
        direct_python: bool = True,
    ) -> None:
        """``api_key``: require ``Authorization: Bearer <api_key>`` (None accepts any);
        ``page_size``: the largest page ``GET /sandbox`` answers; ``direct_python``: run the
        backend's wrapped Python commands directly where the local backend has warm templates
        (see the module's docstring)."""
        super().__init__(host=host, port=port, api_key=api_key, faults=faults)
        self.page_size = page_size
        self.organization_id = organization_id
        self._sandboxes: dict[str, _Sandbox] = {}
        self._sio: Any = None
        self._background: set[asyncio.Task[Any]] = set()
        self._execs = 0
        """Commands running now (``max_concurrent_execs`` refuses more)."""
        self.direct_python = direct_python
        self._wrapped: dict[str, asyncio.Future[ExecResult] | None] = {}
        """The backend's wrapped execs in flight, by scratch directory: the command run
        directly, or None for one run the shell way (the kill command finds its FIFO)."""

    # -- what tests look at --------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/api"

    @property
    def toolbox_url(self) -> str:
        return f"http://{self.host}:{self.port}/toolbox"

    def live_sandboxes(self) -> int:
        """Sandboxes being created or running (each holds a local sandbox)."""
        return sum(sb.state in _LIVE_STATES for sb in list(self._sandboxes.values()))

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._open_local("daytona-emulator-")
        self.direct_python = self.direct_python and self.local.warm
        if self.isolation.tier is not Tier.NAMESPACES:
            warnings.warn(
                "the Daytona emulator runs shell commands that name /workspace and /tmp, which "
                f"only the local namespaces tier provides (here: {self.isolation.reason})",
                RuntimeWarning,
                stacklevel=2,
            )
        app = web.Application(middlewares=[self._middleware], client_max_size=1 << 30)
        self._routes(app)
        self._sio = socketio.AsyncServer(async_mode="aiohttp", logger=False, engineio_logger=False)
        self._sio.on("connect", self._socket_connect)
        # Engine.IO pings from background tasks it never cancels: keep them to cancel on close.
        self._sio.eio.start_background_task = self._background_task
        self._sio.attach(app, socketio_path="api/socket.io")
        await self._listen_http(app)

    async def aclose(self) -> None:
        if self._sio is not None:
            await self._sio.shutdown()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for sb in list(self._sandboxes.values()):
            await self._release(sb)
        self._sandboxes.clear()
        await self._close_local()

    # -- plumbing ------------------------------------------------------------------------------

    def _routes(self, app: web.Application) -> None:
        api, box = "/api/sandbox", "/toolbox/{sandbox_id}"
        add = app.router.add_route
        add("POST", api, self._create, name="create")
        add("GET", api, self._list, name="list")
        add("GET", api + "/{sandbox_id}", self._get, name="get")
        add("DELETE", api + "/{sandbox_id}", self._delete, name="delete")
        add("GET", api + "/{sandbox_id}/toolbox-proxy-url", self._proxy_url, name="proxy_url")
        add("POST", box + "/process/execute", self._execute, name="exec")
        add("POST", box + "/process/code-run", self._code_run, name="code_run")
        add("POST", box + "/files/bulk-upload", self._upload, name="upload")
        add("POST", box + "/files/bulk-download", self._download, name="download")
        add("GET", box + "/process/interpreter/execute", self._interpreter, name="interpreter")

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        operation = request.match_info.route.name
        if operation is None:  # the Socket.IO gateway authenticates on its own
            return await handler(request)
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _Reply(401, "Invalid API key", code="UNAUTHORIZED").response
        await self.faults.delay(create=operation == "create")
        drop = False
        if self.faults.applies_to(operation):
            error = self.faults.transient_error()
            if error == "rate_limited":
                return self._rate_limited("Too many requests", code="TOO_MANY_REQUESTS").response
            if error == "server_error":
                return _Reply(503, "Service unavailable", code="SERVICE_UNAVAILABLE").response
            drop = self.faults.drop()
        try:
            response = await handler(request)
        except _Reply as reply:
            response = reply.response
        if drop and request.transport is not None and operation != "interpreter":
            # The work is done, the answer is lost: the client sees the connection reset.
            request.transport.abort()
        return response

    def _background_task(
        self, target: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(target(*args, **kwargs))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _socket_connect(self, sid: str, environ: object, auth: object) -> bool:
        token = auth.get("token") if isinstance(auth, dict) else None
        return not self.api_key or token == self.api_key

    def _lookup(self, key: str) -> _Sandbox:
        sb = self._sandboxes.get(key) or next(
            (s for s in self._sandboxes.values() if s.name == key), None
        )
        if sb is None:
            raise _Reply(404, f"Sandbox with ID or name {key} not found", code="NOT_FOUND")
        return sb

    def _running(self, request: web.Request) -> _Sandbox:
        """The sandbox a toolbox call is for, which must be running."""
        sandbox_id = request.match_info["sandbox_id"]
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            raise _Reply(
                404, f"sandbox {sandbox_id} not found", code="NOT_FOUND", source=PROXY_SOURCE
            )
        if sb.state != "started" or sb.local_id is None:
            raise _Reply(
                502,
                f"sandbox {sandbox_id} is not reachable (state {sb.state})",
                code="SANDBOX_UNREACHABLE",
                source=PROXY_SOURCE,
            )
        return sb

    def _dto(self, sb: _Sandbox) -> dict[str, Any]:
        return sb.dto(self.organization_id, self.toolbox_url)

    async def _release(self, sb: _Sandbox) -> None:
        local_id, sb.local_id = sb.local_id, None
        if local_id is not None:
            await self.local.stop(local_id)

    def _rate_limited(self, message: str, *, code: str) -> _Reply:
        """A 429, with the ``Retry-After`` the faults ask for."""
        after = self.faults.retry_after
        headers = {"Retry-After": f"{after:g}"} if after is not None else None
        return _Reply(429, message, code=code, headers=headers)

    # -- control plane -------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.faults.at_capacity(self.live_sandboxes()):
            raise self._rate_limited(
                f"Sandbox limit reached: at most {self.faults.max_sandboxes} running sandboxes",
                code="SANDBOX_LIMIT_EXCEEDED",
            )
        sandbox_id = str(uuid.uuid4())
        env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        labels = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        sb = _Sandbox(sandbox_id, body.get("name") or sandbox_id, labels, env, body)
        self._sandboxes[sandbox_id] = sb  # counted against the cap while it is made
        try:
            info = await self.local.create(SandboxSpec(env=image_env(env, _image(body))))
        except BaseException:
            del self._sandboxes[sandbox_id]
            raise
        if sandbox_id not in self._sandboxes:  # deleted while being made
            await self.local.stop(info.id)
            raise _Reply(404, f"sandbox {sandbox_id} was deleted", code="NOT_FOUND")
        sb.local_id, sb.state = info.id, "started"
        return web.json_response(self._dto(sb))

    async def _list(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            labels = json.loads(query.get("labels") or "{}")
            cursor = int(query.get("cursor") or 0)
            limit = min(int(query.get("limit") or self.page_size), self.page_size)
        except ValueError as exc:
            raise _Reply(400, f"bad query: {exc}", code="BAD_REQUEST") from None
        states = set(query.getall("states", []))
        found = [
            sb
            for sb in list(self._sandboxes.values())
            if labels.items() <= sb.labels.items() and (not states or sb.state in states)
        ]
        page = found[cursor : cursor + max(limit, 1)]
        more = cursor + len(page) < len(found)
        body = {
            "items": [self._dto(sb) for sb in page],
            "nextCursor": str(cursor + len(page)) if more else None,
        }
        return web.json_response(body)

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(self._dto(self._lookup(request.match_info["sandbox_id"])))

    async def _delete(self, request: web.Request) -> web.Response:
        sb = self._lookup(request.match_info["sandbox_id"])
        self._sandboxes.pop(sb.id, None)
        await self._release(sb)
        sb.state = "destroyed"
        return web.json_response(self._dto(sb))

    async def _proxy_url(self, request: web.Request) -> web.Response:
        self._lookup(request.match_info["sandbox_id"])
        return web.json_response({"url": self.toolbox_url})

    # -- toolbox -------------------------------------------------------------------------------

    async def _run(
        self,
        sb: _Sandbox,
        argv: Sequence[str],
        *,
        timeout: float | None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run a command in the sandbox's local twin; the ``die_rate`` fault kills both, and
        ``max_concurrent_execs`` refuses it when that many are running."""
        if self.faults.too_many_execs(self._execs):
            limit = self.faults.max_concurrent_execs
            raise self._rate_limited(
                f"at most {limit} commands may run at once", code="TOO_MANY_REQUESTS"
            )
        self._execs += 1
        try:
            assert sb.local_id is not None
            run = asyncio.ensure_future(
                self.local.exec(sb.local_id, argv, timeout=timeout, stdin=stdin, cwd=cwd, env=env)
            )
            if self.faults.dies():
                await asyncio.wait({run}, timeout=0.05)
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run
                sb.state, sb.error_reason = "error", "the sandbox died (emulated fault)"
                await self._release(sb)
                raise _Reply(
                    502,
                    f"sandbox {sb.id} stopped responding",
                    code="SANDBOX_UNREACHABLE",
                    source=PROXY_SOURCE,
                )
            try:
                result: ExecResult = await run
            except SandboxNotFoundError:
                raise _Reply(404, f"sandbox {sb.id} not found", code="NOT_FOUND") from None
            except SandboxError as exc:
                raise _Reply(400, str(exc), code="BAD_REQUEST", source=DAEMON_SOURCE) from None
            if sb.local_id is None:
                # Deleted under the command, which the deletion killed: the toolbox connection is
                # gone with the sandbox, so the client gets no result (not an empty one).
                raise _Reply(
                    404, f"sandbox {sb.id} was deleted", code="NOT_FOUND", source=PROXY_SOURCE
                )
            return result
        finally:
            self._execs -= 1

    @staticmethod
    def _timeout(value: object, default: int) -> float | None:
        if value is None:
            return default
        if not isinstance(value, (int, float)) or value < 0:
            raise _Reply(400, f"invalid timeout {value!r}", code="BAD_REQUEST")
        return float(value) or None

    @staticmethod
    def _timed_out() -> _Reply:
        return _Reply(
            408, "command execution timeout", code="PROCESS_EXECUTION_TIMEOUT", source=DAEMON_SOURCE
        )

    async def _execute(self, request: web.Request) -> web.Response:
        sb = self._running(request)
        body = await request.json()
        command, cwd, env = str(body.get("command", "")), body.get("cwd"), body.get("envs")
        timeout = self._timeout(body.get("timeout"), EXEC_DEFAULT_TIMEOUT)
        if self.direct_python and cwd is None:
            scratch = unwrap_kill_command(command)
            if scratch is not None and await self._kill_direct(scratch):
                return web.json_response({"exitCode": 0, "result": ""})
            wrapped = unwrap_command(command)
            if wrapped is not None:
                self._wrapped[wrapped.scratch] = None
                try:
                    answer = await self._direct(sb, wrapped, timeout=timeout, env=env)
                    if answer is not None:
                        return answer
                    return await self._shell(sb, command, timeout=timeout, cwd=cwd, env=env)
                finally:
                    self._wrapped.pop(wrapped.scratch, None)
        return await self._shell(sb, command, timeout=timeout, cwd=cwd, env=env)

    async def _shell(
        self,
        sb: _Sandbox,
        command: str,
        *,
        timeout: float | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
    ) -> web.Response:
        """Run ``command`` as the daemon does: with a shell, one pipe for stdout and stderr."""
        result = await self._run(
            sb, ["sh", "-c", "exec 2>&1\n" + command], timeout=timeout, cwd=cwd, env=env
        )
        if result.timed_out:
            raise self._timed_out()
        return web.json_response({"exitCode": result.returncode, "result": result.stdout})

    async def _direct(
        self,
        sb: _Sandbox,
        wrapped: WrappedExec,
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
    ) -> web.Response | None:
        """Answer a wrapped Python command as its wrapper would, having run it directly; None
        where only the shell way gives the wrapper's answer: a watchdog that Daytona's own
        limit would beat (its 408 leaves the output in files), a cap above the emulator's, a
        cwd outside the workdir (the wrapper creates the workdir), a cwd or stdin file that is
        not there (sh says so)."""
        cwd = posixpath.normpath(wrapped.cwd)
        fits = (
            PYTHONS.fullmatch(wrapped.argv[0])
            and wrapped.timeout is not None
            and (timeout is None or wrapped.timeout <= timeout)
            and wrapped.cap < OUTPUT_BYTES
            and ".." not in wrapped.cwd.split("/")
            and (cwd + "/").startswith(posixpath.normpath(wrapped.workdir) + "/")
        )
        if not fits:
            return None
        assert sb.local_id is not None
        stdin = wrapped.inline_stdin  # the wrapper writes it to a file, then reads that
        if wrapped.has_stdin and stdin is None:
            try:
                stdin = await self.local.read_file(sb.local_id, f"{wrapped.scratch}/stdin")
            except (OSError, SandboxError):
                return None
            await self._remove_scratch(sb.local_id, wrapped.scratch)
        # What sh's ``cd`` sets: it starts in the local sandbox's workdir.
        variables = dict(env or {}) | {"PWD": cwd, "OLDPWD": DEFAULT_WORKDIR}
        run = asyncio.ensure_future(
            self._run(
                sb, wrapped.argv, timeout=wrapped.timeout, stdin=stdin, cwd=cwd, env=variables
            )
        )
        self._wrapped[wrapped.scratch] = run
        try:
            await asyncio.wait({run})
        except asyncio.CancelledError:
            run.cancel()
            raise
        if run.cancelled():  # by the backend's kill command: the wrapper's answer is lost
            output = wrapper_output(KILLED_RETURNCODE, False, b"", b"")
            return web.json_response({"exitCode": KILLED_RETURNCODE, "result": output})
        try:
            result = run.result()
        except _Reply as reply:
            if reply.response.status != 400:
                raise
            return None  # no such cwd
        cap = wrapped.cap + 1  # what ``head -c`` keeps
        stdout, stderr = result.stdout_bytes[:cap], result.stderr_bytes[:cap]
        output = wrapper_output(result.returncode, result.timed_out, stdout, stderr)
        return web.json_response({"exitCode": result.returncode, "result": output})

    async def _remove_scratch(self, local_id: str, scratch: str) -> None:
        """Remove the scratch directory the stdin upload made, as the wrapper does when its
        command ends (here before the command starts, which never sees it): from the host,
        which costs nothing like a command, or with ``rm -rf`` if something else is in it."""
        try:
            for path in (f"{scratch}/stdin", scratch):
                await remove_from_host(self.local, local_id, path)
        except (OSError, SandboxError):
            with contextlib.suppress(OSError, SandboxError):
                await self.local.exec(local_id, ["rm", "-rf", scratch], timeout=60)

    async def _kill_direct(self, scratch: str) -> bool:
        """Kill the directly run command of the wrapped exec with this scratch directory,
        waiting for it as the kill command waits for the wrapper's FIFO; False if that exec
        runs the shell way (or never came), whose FIFO the kill command itself finds."""
        for _ in range(KILL_POLLS):
            if scratch in self._wrapped:
                break
            await asyncio.sleep(0.1)
        run = self._wrapped.get(scratch)
        if run is None:
            return False
        run.cancel()
        return True

    async def _code_run(self, request: web.Request) -> web.Response:
        sb = self._running(request)
        body = await request.json()
        if body.get("language", "python") != "python":
            raise _Reply(400, "the emulator runs python only", code="BAD_REQUEST")
        result = await self._run(
            sb,
            ["sh", "-c", 'exec 2>&1; exec python3 - "$@"', "sh", *map(str, body.get("argv") or [])],
            timeout=self._timeout(body.get("timeout"), EXEC_DEFAULT_TIMEOUT),
            stdin=str(body.get("code", "")).encode(),
            env=body.get("envs"),
        )
        if result.timed_out:
            raise self._timed_out()
        artifacts = {"stdout": result.stdout, "charts": []}
        body = {"exitCode": result.returncode, "result": result.stdout, "artifacts": artifacts}
        return web.json_response(body)

    async def _upload(self, request: web.Request) -> web.Response:
        sb = self._running(request)
        reader = await request.multipart()
        paths: dict[str, str] = {}
        files: dict[str, tuple[bytes, str | None]] = {}
        while (part := await reader.next()) is not None:
            assert isinstance(part, BodyPartReader)
            match = re.fullmatch(r"files\[(\d+)\]\.(path|file)", part.name or "")
            if match is None:
                continue
            if match[2] == "path":
                paths[match[1]] = await part.text()
            else:
                files[match[1]] = (bytes(await part.read()), part.filename)
        assert sb.local_id is not None
        for index, (data, filename) in files.items():
            path = paths.get(index) or filename
            if not path:
                raise _Reply(400, f"file {index} has no path", code="BAD_REQUEST")
            try:
                await self.local.write_file(sb.local_id, path, data)
            except (SandboxError, OSError) as exc:
                raise _Reply(
                    400, str(exc), code="INVALID_FILE_PATH", source=DAEMON_SOURCE
                ) from None
        return web.json_response({})

    async def _download(self, request: web.Request) -> web.Response:
        sb = self._running(request)
        body = await request.json()
        writer = MultipartWriter("form-data")
        assert sb.local_id is not None
        for path in body.get("paths") or []:
            try:
                data = await self.local.read_file(sb.local_id, path)
                name, content_type = "file", "application/octet-stream"
            except (FileNotFoundError, IsADirectoryError, SandboxError) as exc:
                missing = isinstance(exc, FileNotFoundError)
                status, code = (404, "FILE_NOT_FOUND") if missing else (400, "INVALID_FILE_PATH")
                error = {"message": str(exc), "statusCode": status, "code": code}
                data = json.dumps(error | {"source": DAEMON_SOURCE}).encode()
                name, content_type = "error", "application/json"
            # The SDK matches parts to requests by the exact path: send it losslessly.
            disposition = f"form-data; name=\"{name}\"; filename*=utf-8''{quote(path, safe='')}"
            writer.append(data, {"Content-Type": content_type, "Content-Disposition": disposition})
        return web.Response(body=writer)

    async def _interpreter(self, request: web.Request) -> web.WebSocketResponse:
        sb = self._running(request)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        try:
            message = await ws.receive_json(timeout=60)
        except (TypeError, ValueError, asyncio.TimeoutError):
            await ws.close(code=1003, message=b"expected a JSON request")
            return ws
        try:
            result = await self._run(
                sb,
                ["python3", "-c", _INTERPRETER],
                timeout=self._timeout(message.get("timeout"), INTERPRETER_DEFAULT_TIMEOUT),
                stdin=str(message.get("code", "")).encode(),
                env=message.get("envs"),
            )
        except _Reply as reply:
            await ws.close(code=1011, message=str(reply).encode()[:120])
            return ws
        if result.timed_out:
            await ws.close(code=INTERPRETER_TIMEOUT_CLOSE, message=b"execution timed out")
            return ws
        stderr, _, error = result.stderr.partition(_ERROR_MARK)
        for kind, text in (("stdout", result.stdout), ("stderr", stderr)):
            if text:
                await ws.send_json({"type": kind, "text": text})
        if error:
            await ws.send_json({"type": "error", **json.loads(error)})
        await ws.close()
        return ws


def serve_forever(
    *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None, faults: Faults | None
) -> int:
    """Serve until SIGINT or SIGTERM (``sandboxkit emulate daytona``), then stop every sandbox.

    Prints ``DAYTONA_API_URL=...`` once the server accepts connections, then the key a client
    must send (``DAYTONA_API_KEY=...``: ``api_key``, or ``any`` when every key is accepted).
    """

    emulator = DaytonaEmulator(host=host, port=port, api_key=api_key, faults=faults)
    return serve_until_signalled(
        emulator, lambda emu: f"{DAYTONA_URL_VAR}={emu.url}\n{DAYTONA_KEY_VAR}={api_key or ANY_KEY}"
    )
