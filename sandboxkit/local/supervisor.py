"""Run one untrusted command: start it blocked, confine it, release it, collect capped output.

The command (bwrap's namespace init, or a shell stub in the weaker tiers) starts blocked on a
pipe. While it waits, the host applies rlimits to it with ``prlimit(2)`` and moves it into its
sandbox's memory and cpu cgroups and a pids cgroup of its own; then it is released. Everything
it spawns inherits all of them. On exit or timeout the whole tree is killed: the pid namespace
dies with its init, and the pids cgroup is emptied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..protocol import KILLED_RETURNCODE, ExecResult, shell_returncode
from . import judge
from .cgroup import Cgroups
from .forkserver import OOM_SCORE_ADJ, pipe_holding
from .isolation import IsolationReport, Tier, bwrap_argv
from .limits import Limits, apply_rlimits
from .seccomp import SyscallFilter

_KILL_GRACE = 0.5
"""Seconds to wait for output pipes to close after the tree is killed (at once, unless a
process escaped the kill: rlimits tier only); part of the second an exec may take past its
timeout."""


@dataclass(frozen=True)
class Confinement:
    """Everything about how commands of one backend are confined."""

    isolation: IsolationReport
    limits: Limits
    bwrap: str | None
    cgroups: Cgroups
    read_only: tuple[str, ...] = ()
    syscall_filter: SyscallFilter | None = None

    def seccomp_program(self, *, command: bool) -> bytes | None:
        """The syscall filter for a command, or for the warm template if not ``command`` (it
        stacks the commands' part on each of its commands itself)."""
        if self.syscall_filter is None:
            return None
        return self.syscall_filter.whole if command else self.syscall_filter.base

    def rlimits(self) -> dict[int, tuple[int, int]]:
        """Each command's rlimits; RLIMIT_NPROC and RLIMIT_AS only where no cgroup bounds
        processes and memory: they count what is not the sandbox's (every process of its uid;
        address space reserved and never used, which runtimes and sanitizers do)."""
        return self.limits.rlimits(
            with_nproc=self.isolation.process_limit == "rlimit",
            with_as=self.cgroups.memory is None,
        )


class Capped:
    """Output kept up to ``cap`` bytes; what comes after is dropped and ``truncated`` set."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False

    def add(self, data: bytes) -> None:
        room = self.cap - self.kept
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        if data:
            self.chunks.append(data)
            self.kept += len(data)

    def data(self) -> bytes:
        return b"".join(self.chunks)


class CappedReader(Capped):
    """Drains a stream to EOF, keeping at most ``cap`` bytes."""

    def __init__(self, stream: asyncio.StreamReader, cap: int) -> None:
        super().__init__(cap)
        self.stream = stream

    async def run(self) -> None:
        while chunk := await self.stream.read(1 << 16):
            self.add(chunk)


async def _read_info(fd: int) -> int:
    """The namespace init's host pid, from bwrap's ``--info-fd`` JSON."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    data = b""
    try:
        while chunk := await reader.read(4096):
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])
    finally:
        transport.close()
    raise BackendError("bwrap exited before starting the command")


async def _feed(stdin: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            stdin.write(data)
            await stdin.drain()
        stdin.close()
        await stdin.wait_closed()


_LAUNCH = """\
import os, sys
fd, uid, seccomp = int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3])
if os.read(fd, 1) != b"\\n":
    os._exit(125)  # the supervisor died before confining us: never run unconfined
os.close(fd)
if uid >= 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
if seccomp:
    import ctypes
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    prctl, program = ctypes.CDLL(None).prctl, Program(len(seccomp) // 8, seccomp)
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    if prctl(38, 1, 0, 0, 0) or prctl(22, 2, ctypes.byref(program), 0, 0):
        os.write(2, b"sandboxkit: the syscall filter could not be installed\\n")
        os._exit(125)
os.execvp(sys.argv[4], sys.argv[4:])
"""


def _launcher(confinement: Confinement, block_fd: int, uid: int) -> list[str]:
    """A small launcher that waits for the go-ahead, then becomes the command (without bwrap,
    or bwrap itself on a root host).

    It drops to the sandbox's ``uid`` only after the host applied the limits: a root host may
    lack CAP_SYS_RESOURCE, and then ``prlimit`` only works on processes of its own uid. Then,
    without bwrap, it installs the syscall filter, after ``no_new_privs`` (which bwrap sets and
    installs itself in its tier).
    """
    drop = uid if uid != os.getuid() else -1
    seccomp = b""
    if confinement.isolation.tier is not Tier.NAMESPACES:  # else bwrap installs it
        seccomp = confinement.seccomp_program(command=True) or b""
    python = confinement.isolation.python
    return [python, "-I", "-S", "-c", _LAUNCH, str(block_fd), str(drop), seccomp.hex()]


async def _exit_of(pid: int) -> None:
    """Returns when ``pid`` exits, even while its descendants keep its pipes open (asyncio's
    ``Process.wait`` also waits for the pipes)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def _returncode(proc: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the child watcher has reaped the process."""
    for _ in range(1000):
        if proc.returncode is not None:
            return proc.returncode
        await asyncio.sleep(0.002)
    return -signal.SIGKILL


def _kill_first(pid: int) -> None:
    """Give a command the OOM score of the template's commands (``OOM_SCORE_ADJ``); where the
    kernel refuses, the victim is simply the largest process, as by default."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/oom_score_adj", "w") as adj:
        adj.write(str(OOM_SCORE_ADJ))


def kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@dataclass
class Spawned:
    """A confined command that is running (released from its block)."""

    proc: asyncio.subprocess.Process
    group: Path | None

    def kill(self) -> None:
        """Kill it and all it started: its session, its cgroup and (for bwrap) its pid
        namespace, whose init dies with the bwrap monitor."""
        kill_session(self.proc.pid)
        if self.group is not None:
            Cgroups.kill_all(self.group)


async def spawn(
    confinement: Confinement,
    argv: Sequence[str],
    *,
    sandbox: str,
    uid: int,
    workspace: Path,
    tmp: Path,
    view: Path | None,
    cwd: str,
    env: dict[str, str],
    stdin_pipe: bool,
    pass_fds: tuple[int, ...] = (),
    rlimits: bool = True,
    pids_max: int | None = None,
    capabilities: tuple[str, ...] = (),
    command_filter: bool = True,
) -> Spawned:
    """Start ``argv`` blocked as the host ``uid`` of ``sandbox`` (which sees the host through
    its ``view``, see ``bwrap_argv``), confine it (rlimits and the
    command's OOM score, the runner's excepted (``judge.is_runner``), unless ``rlimits`` is
    False, the cgroups of ``sandbox`` (made beforehand), a pids cgroup of ``pids_max`` or the
    limit's process count, bwrap's ``capabilities``, the syscall filter: the warm template's if
    not ``command_filter``), then release it."""
    tier = confinement.isolation.tier
    limits = confinement.limits
    block_r, block_w = os.pipe()
    info_r = info_w = -1
    seccomp_r = -1
    kwargs: dict[str, object]
    # A root host runs bwrap as the sandbox's unprivileged uid. It may lack CAP_SYS_RESOURCE
    # (containers and VMs often do), and then it can apply limits only to a process of its own
    # uid: the launcher, which takes them before it drops its uid and becomes bwrap.
    # (Not subprocess's ``user=``: a child forked from a multithreaded host, a gRPC server's,
    # crashed in its setreuid; the launcher changes its uid in a fresh process.)
    launched = tier is not Tier.NAMESPACES or uid != os.getuid()
    # Where the host gives uids, it maps the judge's too (``judge``): bwrap waits for it.
    mapped = tier is Tier.NAMESPACES and confinement.isolation.uids is not None
    maps_r = maps_w = -1
    if tier is Tier.NAMESPACES:
        assert confinement.bwrap is not None
        if not launched or mapped:
            info_r, info_w = os.pipe()
        if mapped:
            maps_r, maps_w = os.pipe()
        seccomp = confinement.seccomp_program(command=command_filter)
        seccomp_r = -1 if seccomp is None else pipe_holding(seccomp)
        command = bwrap_argv(
            confinement.bwrap,
            python=confinement.isolation.python,
            workspace=workspace,
            tmp=tmp,
            cwd=cwd,
            env=env,
            read_only=confinement.read_only,
            view=view,
            overlays=confinement.isolation.overlays,
            info_fd=None if info_w < 0 else info_w,
            block_fd=None if launched else block_r,
            capabilities=capabilities,
            seccomp_fd=None if seccomp_r < 0 else seccomp_r,
            userns_block_fd=None if maps_r < 0 else maps_r,
        ) + list(argv)
        # bwrap's own processes (its namespace init among them) must not carry our
        # environment: the sandbox can read their /proc/<pid>/environ.
        kwargs = {"env": {"PATH": "/usr/bin:/bin"}}
    else:
        command = list(argv)
        kwargs = {"cwd": cwd, "env": env}
    if launched:
        command = [*_launcher(confinement, block_r, uid), *command]
    child_fds = tuple(fd for fd in (info_w, block_r, seccomp_r, maps_r) if fd >= 0)
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(*child_fds, *pass_fds),
            start_new_session=True,
            **kwargs,  # type: ignore[arg-type]
        )
    )
    try:
        # Shielded: a cancellation must not leave a started command without its supervisor.
        proc = await asyncio.shield(starting)
    except BaseException as exc:
        if not starting.done() or starting.cancelled() or starting.exception() is None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                late = await starting
                kill_session(late.pid)
                await late.wait()
        for fd in (block_r, block_w, info_r, info_w, seccomp_r, maps_r, maps_w):
            if fd >= 0:
                os.close(fd)
        if isinstance(exc, OSError):
            raise BackendError(f"could not start {command[0]}: {exc}") from exc
        raise
    for fd in (block_r, seccomp_r, info_w, maps_r):
        if fd >= 0:
            os.close(fd)
    spawned = Spawned(proc, None)
    released = False
    try:
        if launched:
            target = proc.pid
        else:
            fd, info_r = info_r, -1  # from here on owned and closed by the pipe transport
            target = await _bwrap_child(proc, fd)
        if tier is not Tier.NONE:
            try:
                if rlimits:
                    apply_rlimits(target, confinement.rlimits())
                    if not judge.is_runner(argv):
                        _kill_first(target)
                spawned.group = confinement.cgroups.confine(
                    target, sandbox=sandbox, max_pids=pids_max or limits.processes
                )
            except OSError as exc:
                raise BackendError(f"could not confine the command: {exc}") from exc
        os.write(block_w, b"\n")
        if maps_w >= 0:
            fd, info_r = info_r, -1
            try:
                judge.write_id_maps(await _bwrap_child(proc, fd), uid)
            except OSError as exc:
                raise BackendError(f"could not map the sandbox's uids: {exc}") from exc
            os.write(maps_w, b"\n\n")  # bwrap's monitor's, then its child's (bwrap_argv)
        released = True
    finally:
        if not released:
            # Killed before the go-ahead pipe closes: a blocked command must die, not start
            # unconfined.
            spawned.kill()
        os.close(block_w)
        for fd in (info_r, maps_w):
            if fd >= 0:
                os.close(fd)
    return spawned


async def _bwrap_child(proc: asyncio.subprocess.Process, info: int) -> int:
    """The host pid of bwrap's namespace init, from its ``--info-fd`` (``info``, closed
    here); if bwrap failed first, what it said."""
    try:
        return await _read_info(info)
    except BackendError as exc:
        assert proc.stderr is not None
        said = (await asyncio.wait_for(proc.stderr.read(4096), _KILL_GRACE)).strip()
        raise BackendError(f"{exc}: {said.decode(errors='replace')}") from exc


async def run(
    confinement: Confinement,
    argv: Sequence[str],
    *,
    sandbox: str,
    uid: int,
    workspace: Path,
    tmp: Path,
    view: Path | None,
    cwd: str,
    env: dict[str, str],
    timeout: float | None,
    stdin: bytes | None,
    running: set[int] | None = None,
) -> ExecResult:
    """Run ``argv`` confined, as the host ``uid`` of ``sandbox``; never raises for what the
    command itself does.

    ``running`` holds the supervised pids while they run, so the caller can kill them.
    """
    started = time.monotonic()
    spawned = await spawn(
        confinement,
        argv,
        sandbox=sandbox,
        uid=uid,
        capabilities=judge.capabilities(argv, confinement.isolation),
        workspace=workspace,
        tmp=tmp,
        view=view,
        cwd=cwd,
        env=env,
        stdin_pipe=bool(stdin),
    )
    proc = spawned.proc
    if running is not None:
        running.add(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None
    cap = confinement.limits.output_bytes
    out = CappedReader(proc.stdout, cap)
    err = CappedReader(proc.stderr, cap)
    readers = asyncio.gather(out.run(), err.run())
    timed_out = False
    try:
        feeder = asyncio.ensure_future(_feed(proc.stdin, stdin))
        try:
            await asyncio.wait_for(_exit_of(proc.pid), timeout)
        except asyncio.TimeoutError:
            timed_out = True
        feeder.cancel()
    finally:
        spawned.kill()  # whatever the command left behind dies now
        if running is not None:
            running.discard(proc.pid)
        code = await finish(readers, _returncode(proc))
    return result(code, out, err, timed_out, time.monotonic() - started)


async def finish(readers: asyncio.Future[Any], status: Awaitable[int]) -> int:
    """Collect the output once the tree is dead, then the exit status."""
    try:
        await asyncio.wait_for(asyncio.shield(readers), _KILL_GRACE)
    except asyncio.TimeoutError:
        # A descendant that escaped the kill still holds the pipe (rlimits tier only).
        readers.cancel()
    return await status


def result(
    code: int, out: CappedReader, err: CappedReader, timed_out: bool, duration: float
) -> ExecResult:
    code = shell_returncode(code)  # as bwrap reports a death by signal, too
    if timed_out and code == 0:
        code = KILLED_RETURNCODE
    return ExecResult(
        returncode=code,
        stdout_bytes=out.data(),
        stderr_bytes=err.data(),
        timed_out=timed_out,
        duration=duration,
        truncated=out.truncated or err.truncated,
    )
