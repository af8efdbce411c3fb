"""The host's side of a sandbox's warm template (``forkserver.py``): start it, run execs.

One template per namespaced sandbox, started on its first exec and killed with the sandbox.
An exec that finds the template busy runs the cold way, so execs in one sandbox still run
concurrently.
Anything unusual (a request too large for one packet, a template that could not fork, a
call from another event loop) drops back to the cold path, one bwrap per exec, which gives
the same guarantees at a higher start-up cost. A cancelled exec kills its command; the
template lives on.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import json
import logging
import marshal
import os
import socket
import struct
from collections.abc import Sequence
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

from ..harness.records import RUNNER_SOURCE
from ..protocol import KILLED_RETURNCODE, ExecResult
from . import forkserver, judge
from .supervisor import Confinement, Spawned, spawn

logger = logging.getLogger("sandboxkit.local")

SOURCE = Path(forkserver.__file__).read_text()
PUBLIC_PROGRAMS = json.dumps([RUNNER_SOURCE])
"""``-c`` programs every sandbox may read, which a template compiles once (a local one at
its first exec that runs one): the test runner would otherwise compile in every exec. No other
program's text is kept."""
HANDLES = {RUNNER_SOURCE: forkserver.public_handle(0)}
"""What an exec's argv carries in place of a public program's text (a short handle, which the
exec's own process resolves: ``forkserver.read_job``), not its ~100 KB in every request."""
MAX_REQUEST = forkserver.MAX_REQUEST
"""Largest request (argv, env and stdin) sent as one packet; larger execs take the cold path."""
SPAWN_INIT = True
"""Whether templates start each exec's init as the tiny static program where it runs (else as
a fork of the template, one more copy of it per exec): both ways are tested."""
_START_TIMEOUT = 60.0
_STUCK_AFTER = 0.9
"""Seconds past an exec's timeout after which a silent template counts as stuck: it is killed
and the exec answered as timed out, so that every exec returns within its timeout and a
second, whatever its program did to the template."""


@functools.cache
def compiled_source() -> int | None:
    """A sealed memfd that holds this host's compile of the template's source, which every
    template whose interpreter takes this host's bytecode loads rather than compile it (see
    ``forkserver.LAUNCHER``), kept open while this process lives; templates read it with
    ``pread`` (at offset 0: they share its file offset), and nothing can change it. None where
    no sealed memfd can be made: each template then compiles its source."""
    code = marshal.dumps(compile(SOURCE, "<string>", "exec", dont_inherit=True, optimize=0))
    try:
        fd = os.memfd_create("sandboxkit-template", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        return None
    try:
        with memoryview(code) as left:
            while left:
                left = left[os.write(fd, left) :]
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except OSError:
        os.close(fd)
        return None
    return fd


class ColdPath(Exception):
    """This exec cannot use the template; run it the cold way."""


def site_stamp(paths: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """What a learnt site ``sys.path`` rests on, as seen from the host (the sandbox mounts the
    interpreter's directories read-only at the same paths): each directory's mtime and that
    of its ``.pth`` files, which change when a package is installed or removed."""
    stamp: list[tuple[str, int]] = []
    for directory in paths:
        try:
            stamp.append((directory, os.stat(directory).st_mtime_ns))
            with os.scandir(directory) as entries:
                stamp += [
                    (e.path, e.stat().st_mtime_ns) for e in entries if e.name.endswith(".pth")
                ]
        except OSError:
            stamp.append((directory, -1))
    return tuple(stamp)


class LearntSite:
    """The site ``sys.path`` that one interpreter's templates learnt, handed to the next
    template while its stamp holds: learning it runs site's imports (much of a template's
    start), which a sandbox used once would otherwise pay. Without user site-packages
    (templates run with ``-I``) it depends on the interpreter's files alone, not on the
    sandbox."""

    def __init__(self) -> None:
        self._path: list[str] | None = None
        self._stamp: tuple[tuple[str, int], ...] = ()

    def known(self) -> list[str] | None:
        if self._path is not None and site_stamp(self._path) == self._stamp:
            return self._path
        return None

    def learnt(self, path: list[str]) -> None:
        self._path, self._stamp = path, site_stamp(path)


class _Answer:
    """One exec's answer as the template sends it: its output so far, then ``done``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.done: asyncio.Future[dict[str, Any]] = loop.create_future()

    def end(self, answer: dict[str, Any] | None, error: Exception | None = None) -> None:
        """Its exit status, or why it cannot be read (if it is still awaited)."""
        if not self.done.done():
            if error is not None:
                self.done.set_exception(error)
            else:
                self.done.set_result(answer or {})


class WarmTemplate:
    """A started template: its process, and the host's end of its socket, which the loop
    watches from start to close (one reader for every exec, not a wait per packet)."""

    def __init__(self, spawned: Spawned, sock: socket.socket, confinement: Confinement) -> None:
        self.spawned = spawned
        self.sock = sock
        self.rlimits = [[which, list(v)] for which, v in confinement.rlimits().items()]
        self.output_cap = confinement.limits.output_bytes
        self.isolation = confinement.isolation
        self.loop = asyncio.get_running_loop()
        self.busy = False
        self.broken = False
        self.learnt_site = False
        """Whether this template learnt its site path (rather than being handed it)."""
        self.spawned_init = False
        """Whether each exec's init is the tiny program (else a fork of the template)."""
        self.host_compiled = False
        """Whether it loaded this host's compile of its source (``compiled_source``)."""
        self.grafted = False
        """Whether a renewal showed it a new storage (``disk.graft``) since it started."""
        self._draining: set[asyncio.Task[None]] = set()
        self._awaited: _Answer | None = None
        self._reading = False

    @classmethod
    async def start(
        cls,
        confinement: Confinement,
        *,
        sandbox: str,
        uid: int,
        workspace: Path,
        tmp: Path,
        view: Path | None,
        env: dict[str, str],
        site: LearntSite,
    ) -> WarmTemplate:
        """Start a template in the sandbox, as its host ``uid``; raises :class:`ColdPath` if it
        cannot serve."""
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # -S: what site imports (.pth files) would make every fork dearer; the template
        # learns site's sys.path in a throw-away child instead, unless it is already known.
        compiled = compiled_source()
        argv = [confinement.isolation.python, "-I", "-S", "-c", forkserver.LAUNCHER, SOURCE]
        argv += [MAGIC_NUMBER.hex(), "" if compiled is None else str(compiled)]
        argv.append(str(template_end.fileno()))
        argv += ["spawn" if SPAWN_INIT else "fork", PUBLIC_PROGRAMS]
        # bwrap gives the template the base syscall filter; it stacks this one on each command.
        syscall_filter = confinement.syscall_filter
        argv.append(syscall_filter.command.hex() if syscall_filter is not None else "")
        argv.append(
            "lazy" if syscall_filter is not None and syscall_filter.lazy_network else "eager"
        )
        known = site.known()
        if known is not None:
            argv.append(json.dumps(known))
        judged = ("CAP_SETUID", "CAP_SETGID") if confinement.isolation.uids is not None else ()
        try:
            spawned = await spawn(
                confinement,
                argv,
                sandbox=sandbox,
                uid=uid,
                workspace=workspace,
                tmp=tmp,
                view=view,
                cwd="/workspace",
                env=env,
                stdin_pipe=False,
                pass_fds=(template_end.fileno(), *(() if compiled is None else (compiled,))),
                rlimits=False,  # the template forks freely; each command gets the limits
                # + bwrap init, template, S, G and the exec's socket supervisor
                pids_max=confinement.limits.processes + 5,
                # Only for the template's first act, its own user namespace: a root sandbox
                # can keep its uid there only with CAP_SETFCAP (see forkserver.become_server),
                # and the judge's is mapped there only with CAP_SETUID and CAP_SETGID.
                capabilities=("CAP_SETFCAP", *judged),
                command_filter=False,
            )
        finally:
            template_end.close()
        host_end.setblocking(False)
        template = cls(spawned, host_end, confinement)
        try:
            ready = json.loads(
                await asyncio.wait_for(
                    template.loop.sock_recv(host_end, MAX_REQUEST), _START_TIMEOUT
                )
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
        template._reading = True
        template.loop.add_reader(host_end, template._readable)
        template.learnt_site = bool(ready.get("learnt"))
        template.spawned_init = bool(ready.get("init"))
        template.host_compiled = bool(ready.get("host_compiled"))
        if template.learnt_site:  # sent before any command ran here: nothing could forge it
            site.learnt(list(ready["site_path"]))
        return template

    def idle_processes(self) -> list[int] | None:
        """While it serves no exec, the host pids of bwrap, bwrap's init, the template and its
        server S, whose mount namespaces are the template's (of which each exec's is a copy)
        and S's (the next exec's); None if it is serving, ending or not so. S must have no
        child: nothing of an exec is left."""
        if self.busy or self.broken or self._draining:
            return None
        chain = [self.spawned.proc.pid]
        try:
            while len(chain) < 4:
                (child,) = _children(chain[-1])
                chain.append(child)
            if _children(chain[-1]):
                return None
        except (OSError, ValueError):  # gone, or another shape than expected
            return None
        return chain

    def close(self) -> None:
        """Kill the template and everything running in it (also from another thread); an
        exec waiting on it gets its answer as a killed command."""
        self.broken = True
        self.spawned.kill()
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._closed)

    def _closed(self) -> None:
        if not self.busy:  # else the running exec closes it on its way out
            self._close_socket()

    def _close_socket(self) -> None:
        self._stop_reading()
        self.sock.close()

    def _stop_reading(
        self, answer: dict[str, Any] | None = None, error: Exception | None = None
    ) -> None:
        """No more reading from the template: the answer awaited, if any, ends as ``answer``
        (or with ``error``)."""
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self.sock)
        if self._awaited is not None:
            self._awaited.end(answer, error)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult:
        named = [HANDLES.get(arg, arg) for arg in argv]
        job = json.dumps({"argv": named, "cwd": cwd, "env": env}).encode()
        body = b"".join((struct.pack("<I", len(job)), job, stdin or b""))
        kept = [judge.CAPABILITIES[name] for name in judge.capabilities(argv, self.isolation)]
        header = {"limits": self.rlimits, "cap": self.output_cap, "timeout": timeout}
        header["capabilities"] = kept
        header["judge"] = judge.is_runner(argv)
        request = b"r" + json.dumps({**header, "size": len(body)}).encode() + b"\n" + body
        packets = [
            request[i : i + forkserver.MAX_PACKET]
            for i in range(0, len(request), forkserver.MAX_PACKET)
        ]
        if len(request) > MAX_REQUEST:
            raise ColdPath("request too large for the template")
        if self.busy:
            raise ColdPath("the template is busy: concurrent execs run the cold way")
        if self.broken:
            raise ColdPath("the template is gone")
        self.busy = True
        stuck_after = None if timeout is None else timeout + _STUCK_AFTER
        sent = False
        started = False
        awaited = self._awaited = _Answer(self.loop)
        stuck = None
        try:
            for packet in packets:
                await self.loop.sock_sendall(self.sock, packet)
                started = True
            sent = True
            if stuck_after is not None:
                stuck = self.loop.call_later(stuck_after, awaited.end, None, asyncio.TimeoutError())
            answer = await awaited.done
        except asyncio.CancelledError:
            if sent:
                self._abandon()
            else:  # part of a request would make the next one unreadable: a fresh template
                self._finish(failed=started)
            raise
        except asyncio.TimeoutError:
            logger.warning("the sandbox's template stopped answering; killing it")
            self._finish(failed=True)
            return ExecResult(KILLED_RETURNCODE, timed_out=True, duration=stuck_after or 0.0)
        except (OSError, ValueError, KeyError) as exc:
            self._finish(failed=True)
            raise ColdPath(f"the template failed: {exc!r}") from exc
        finally:
            if stuck is not None:
                stuck.cancel()
        self._finish(failed=answer.get("last") is True)  # it ends: the next exec starts another
        if "error" in answer:
            raise ColdPath(str(answer["error"]))
        return _result(answer, b"".join(awaited.out), b"".join(awaited.err))

    def _readable(self) -> None:
        """Read what the template sent, up to the end of the answer awaited: its output
        chunks, then its exit status; a closed template answers "killed" (killed with the
        sandbox, or by a limit). A template that sends anything else, or anything at all while
        no answer is awaited, is broken: the reading ends, and so does the template. What
        comes for a cancelled exec waits in the socket for its drain (:meth:`_abandon`)."""
        while True:
            if self._awaited is not None and self._awaited.done.cancelled():
                return
            try:
                packet = self.sock.recv(2 * forkserver.CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._stop_reading(None, exc)
                return
            awaited = self._awaited
            tag, body = packet[:1], packet[1:]
            if not packet:
                self._stop_reading({"exit": KILLED_RETURNCODE})
                return
            if awaited is None or awaited.done.done():
                logger.debug("the template sent %r while no answer was awaited", packet[:100])
                self._stop_reading(None)
                self.close()
                return
            if tag == b"o":
                awaited.out.append(body)
            elif tag == b"e":
                awaited.err.append(body)
            elif tag == b"x":
                try:
                    awaited.end(json.loads(body))
                except ValueError as exc:
                    awaited.end(None, exc)
                return
            else:
                bad = ValueError(f"bad packet from the template: {packet[:100]!r}")
                self._stop_reading(None, bad)
                return

    def _finish(self, *, failed: bool) -> None:
        self.busy = False
        self._awaited = None
        if failed:
            self.close()
        if self.broken:
            self._close_socket()

    def _abandon(self) -> None:
        """A cancelled exec: kill its command and drop the answer, in the background. Nothing
        awaits that task, so a template that died meanwhile (its sandbox stopped, a limit)
        ends it as a broken template, not as an exception that is never retrieved."""

        awaited = self._awaited = _Answer(self.loop)  # from now on: the rest of the answer

        async def drain() -> None:
            try:
                await self.loop.sock_sendall(self.sock, b"k")
                await asyncio.wait_for(awaited.done, _STUCK_AFTER)
            except asyncio.CancelledError:
                self._finish(failed=True)
                raise
            except Exception as exc:  # a reset or broken socket, no answer in time, a bad packet
                logger.debug("a cancelled exec's template failed while draining: %r", exc)
                self._finish(failed=True)
                return
            self._finish(failed=False)

        task = self.loop.create_task(drain())
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)


def _children(pid: int) -> list[int]:
    """The host pids of ``pid``'s children (of each of its threads)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as children:
            found += [int(child) for child in children.read().split()]
    return found


def _result(answer: dict[str, Any], out: bytes, err: bytes) -> ExecResult:
    code = int(answer["exit"])
    timed_out = bool(answer.get("timed_out"))
    if timed_out and code == 0:
        code = KILLED_RETURNCODE
    return ExecResult(
        returncode=code,
        stdout_bytes=out,
        stderr_bytes=err,
        timed_out=timed_out,
        duration=float(answer.get("duration", 0.0)),
        truncated=bool(answer.get("truncated")),
    )
