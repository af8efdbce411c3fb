"""The host's side of a sandbox's warm template (``forkserver.py``): start it, run execs.

One template per namespaced sandbox, started on its first exec and killed with the sandbox.
An exec that finds the template busy runs the cold way, so execs in one sandbox still run
concurrently.
Anything unusual (a request too large for one packet, a template that could not fork, a
cancelled exec, a call from another event loop) drops back to the cold path, one bwrap per
exec, which gives the same guarantees at a higher start-up cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from ..protocol import ExecResult
from . import forkserver
from .supervisor import CappedReader, Confinement, Spawned, finish, result, spawn

logger = logging.getLogger("sandboxkit.local")

SOURCE = Path(forkserver.__file__).read_text()
MAX_REQUEST = 128 * 1024
"""Largest request sent as one packet (argv and env); larger execs take the cold path."""
_START_TIMEOUT = 60.0


class ColdPath(Exception):
    """This exec cannot use the template; run it the cold way."""


class WarmTemplate:
    def __init__(self, spawned: Spawned, sock: socket.socket, confinement: Confinement) -> None:
        self.spawned = spawned
        self.sock = sock
        limits = confinement.limits
        with_nproc = confinement.isolation.process_limit != "none"
        self.rlimits = [
            [which, list(v)] for which, v in limits.rlimits(with_nproc=with_nproc).items()
        ]
        self.output_cap = limits.output_bytes
        self.loop = asyncio.get_running_loop()
        self.lock = asyncio.Lock()
        self.broken = False
        self.closed = asyncio.Event()

    @classmethod
    async def start(
        cls, confinement: Confinement, *, workspace: Path, tmp: Path, env: dict[str, str]
    ) -> WarmTemplate:
        """Start a template in the sandbox; raises :class:`ColdPath` if it cannot serve."""
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # -S: what site imports (.pth files) would make every fork dearer; the template
        # learns site's sys.path in a throw-away child instead.
        argv = [confinement.isolation.python, "-I", "-S", "-c", SOURCE, str(template_end.fileno())]
        try:
            spawned = await spawn(
                confinement,
                argv,
                workspace=workspace,
                tmp=tmp,
                cwd="/workspace",
                env=env,
                stdin_pipe=False,
                pass_fds=(template_end.fileno(),),
                rlimits=False,  # the template forks freely; each command gets the limits
                pids_max=confinement.limits.processes + 4,  # + bwrap init, template, C, G
            )
        finally:
            template_end.close()
        host_end.setblocking(False)
        template = cls(spawned, host_end, confinement)
        try:
            ready = json.loads(
                await asyncio.wait_for(template.loop.sock_recv(host_end, 4096), _START_TIMEOUT)
                or b"{}"
            )
        except (asyncio.TimeoutError, OSError, ValueError) as exc:
            template.close()
            raise ColdPath(f"the template did not start: {exc!r}") from exc
        except BaseException:  # cancelled while starting: nothing may outlive this
            template.close()
            raise
        if not ready.get("ready"):
            template.close()
            raise ColdPath(str(ready.get("reason") or "the template did not start"))
        return template

    def close(self) -> None:
        """Kill the template and everything running in it (also from another thread)."""
        self.broken = True
        self.spawned.kill()
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._closed)

    def spawned_alive(self) -> bool:
        return not self.broken

    def _closed(self) -> None:
        self.closed.set()
        if not self.lock.locked():  # else the running exec closes it on its way out
            self.sock.close()

    async def _answer(self, timeout: float | None) -> bytes:
        """The next message, or b"" once the template is closed."""
        receive = asyncio.ensure_future(self.loop.sock_recv(self.sock, 4096))
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            done, _ = await asyncio.wait(
                {receive, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            closed.cancel()
            if not receive.done():
                receive.cancel()
        if receive in done:
            return receive.result()
        if closed in done:
            return b""
        raise asyncio.TimeoutError

    async def _recv_with_fds(self) -> tuple[bytes, list[int]]:
        while True:
            try:
                message, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 3)
                return message, fds
            except BlockingIOError:
                readable = self.loop.create_future()
                self.loop.add_reader(self.sock, readable.set_result, None)
                try:
                    await readable
                finally:
                    self.loop.remove_reader(self.sock)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult:
        request = json.dumps({"argv": list(argv), "cwd": cwd, "env": env, "limits": self.rlimits})
        if len(request) > MAX_REQUEST:
            raise ColdPath("request too large for the template")
        if self.lock.locked():
            raise ColdPath("the template is busy: concurrent execs run the cold way")
        async with self.lock:
            if self.broken:
                raise ColdPath("the template is gone")
            try:
                return await self._run(request.encode(), timeout, stdin)
            except ColdPath:
                raise
            except asyncio.CancelledError:
                self.close()  # it may still be running the command: end it all
                raise
            except (OSError, ValueError, KeyError) as exc:
                self.close()
                raise ColdPath(f"the template failed: {exc!r}") from exc
            finally:
                if self.closed.is_set() or not self.spawned_alive():
                    self.sock.close()

    async def _run(self, request: bytes, timeout: float | None, stdin: bytes | None) -> ExecResult:
        started = time.monotonic()
        await self.loop.sock_sendall(self.sock, request)
        message, fds = await self._recv_with_fds()
        if message and b'"error"' in message and not fds:
            raise ColdPath(json.loads(message)["error"])
        if not message or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            raise ValueError(f"bad answer from the template: {message[:200]!r}")
        stdin_w, out_r, err_r = fds
        out = CappedReader(await _reader(out_r), self.output_cap)
        err = CappedReader(await _reader(err_r), self.output_cap)
        readers = asyncio.gather(out.run(), err.run())
        feeder = asyncio.ensure_future(_feed(stdin_w, stdin or b""))
        timed_out = False
        try:
            answer = await self._answer(timeout)
        except asyncio.TimeoutError:
            timed_out = True
            await self.loop.sock_sendall(self.sock, b'{"kill": true}')
            answer = await self._answer(None)
        code = int(json.loads(answer)["exit"]) if answer else 128 + 9  # closed: killed
        duration = time.monotonic() - started

        async def status() -> int:
            with contextlib.suppress(Exception):
                await feeder
            return code

        code = await finish(readers, status())
        return result(code, out, err, timed_out, duration)


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader


async def _feed(fd: int, data: bytes) -> None:
    """Write what fits in the pipe at once; only a larger stdin needs a worker thread."""
    os.set_blocking(fd, False)
    try:
        sent = os.write(fd, data) if data else 0
    except BlockingIOError:
        sent = 0
    except OSError:
        os.close(fd)
        return
    if sent == len(data):
        os.close(fd)
        return
    os.set_blocking(fd, True)
    await asyncio.to_thread(_write_all, fd, data[sent:])


def _write_all(fd: int, data: bytes) -> None:
    """Feed a command's stdin (in a worker thread) and close it; a command that does not read
    it all just breaks the pipe."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)
