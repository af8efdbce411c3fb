"""Hostile programs against the local backend, in each isolation tier this machine offers.

Each case is a real program doing what model-written code may do, and states what must happen:
the host stays healthy, the program is stopped, nothing of it keeps running, and nothing of the
host's leaks in. The rlimits tier is the documented fallback: where it cannot defend (network,
world-writable paths) the test states that as the expected outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import Sandbox, SandboxClient, SandboxError, get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.contest.checkers import compile_checker, default_cache_dir
from sandboxkit.coordination import SharedBudget, coordination_root
from sandboxkit.emulators.host import remove_from_host
from sandboxkit.errors import SandboxNotFoundError
from sandboxkit.harness import AssertTests
from sandboxkit.integrations.environment import sandbox_environment
from sandboxkit.local import disk, files
from sandboxkit.local.isolation import Tier, namespaces_failure
from sandboxkit.local.seccomp import native_arch, syscall_number, unsupported
from sandboxkit.local.syscalls import SYSCALLS
from sandboxkit.outcomes import OutcomeKind
from sandboxkit.portal import run_sync
from sandboxkit.protocol import KILLED_RETURNCODE, ExecResult
from sandboxkit.testing.remote import processes_with
from sandboxkit.tools import Rollout, SandboxLender

PY = "python3"
CAP = 64 * 1024
MEMORY_MB = 256
DISK_MB = 64
DISK_INODES = 2000


LOCAL_TIERS = ["namespaces", "namespaces-cold", "rlimits"]
on_docker_too = pytest.mark.parametrize(
    "tier", [*LOCAL_TIERS, "docker", "docker-engine"], indirect=True
)
"""For an attack that applies to a container as well: run it on the docker backend too."""


@pytest.fixture(params=LOCAL_TIERS)
def tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tier; ``namespaces`` runs Python through the warm template, ``-cold`` one bwrap per
    exec; ``docker``: the docker backend's container, on this machine's Engine (its execs
    through the container's server; ``-engine``: an Engine exec each)."""
    if str(request.param).startswith("docker"):
        request.getfixturevalue("docker_engine")
        monkeypatch.setenv("SBX_TEST_DOCKER_SERVER", "0" if "engine" in request.param else "1")
        return "docker"
    tier, _, cold = str(request.param).partition("-")
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", tier)
    monkeypatch.setenv("SANDBOXKIT_WARM", "0" if cold else "1")
    if tier == "rlimits" and os.geteuid() != 0:
        pytest.skip("the rlimits expectations below assume the switch to an unprivileged uid")
    return tier


@contextlib.contextmanager
def _sandbox_of(
    tier: str, local_root: Path, **roomier: int
) -> Iterator[tuple[SandboxClient, Sandbox, str]]:
    """A sandbox with tight limits (or ``roomier`` ones) whose stop must leave nothing of it
    behind."""
    if tier == "namespaces" and (reason := namespaces_failure()) is not None:
        pytest.skip(f"no namespaces on this machine: {reason}")
    limits = {
        "memory_mb": MEMORY_MB,
        "disk_mb": DISK_MB,
        "disk_inodes": DISK_INODES,
        "file_size_mb": 8,
        "processes": 64,
        "cpu_seconds": 20,
    }
    if tier == "docker":
        served = os.environ["SBX_TEST_DOCKER_SERVER"] == "1"
        options = {"output_bytes": CAP, "exec_server": served, **limits, **roomier}
        with get_backend("docker", **options) as client:
            marker = f"SBX_MARK_{uuid.uuid4().hex}"
            sb = client.sandbox(env={marker: "1"})
            yield client, sb, marker
            sb.stop()
            with pytest.raises(SandboxNotFoundError):  # its container is removed
                client.get(sb.id)
        return
    client = get_backend("subprocess", root=local_root, output_bytes=CAP, **{**limits, **roomier})
    local = client.backend_as(SubprocessBackend)
    assert local.isolation.tier == Tier(tier)
    assert local.warm == (tier == "namespaces" and os.environ["SANDBOXKIT_WARM"] == "1")
    marker = f"SBX_MARK_{uuid.uuid4().hex}"
    sb = client.sandbox(env={marker: "1"})
    yield client, sb, marker
    sb.stop()
    left = [p.name for p in local_root.iterdir() if sb.id in p.name]
    assert left == [], f"a stopped sandbox left its directory: {left}"
    assert mounts_under(local_root) == [], "a stopped sandbox left its storage mounted"
    assert processes_with(marker, "environ") == [], "processes of the sandbox are still running"
    client.close()


@pytest.fixture
def hostile(tier: str, local_root: Path) -> Iterator[tuple[SandboxClient, Sandbox, str]]:
    with _sandbox_of(tier, local_root) as made:
        yield made


def mounts_under(root: Path) -> list[str]:
    """Mount points below ``root`` in this process's mount namespace."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p.startswith(f"{root}/")]


def run(sb: Sandbox, code: str, timeout: float = 5) -> tuple[int, str, str, bool]:
    sb.write_file("prog.py", code)
    r = sb.exec([PY, "prog.py"], timeout=timeout)
    return r.returncode, r.stdout, r.stderr, r.timed_out


def assert_next_exec_works(sb: Sandbox) -> None:
    r = sb.exec([PY, "-c", "print('next exec')"], timeout=60)
    assert (r.returncode, r.stdout) == (0, "next exec\n"), r.stderr


def wait_for_file(sb: Sandbox, name: str, timeout: float = 60) -> bool:
    """Whether the program created ``name`` within ``timeout`` seconds: how the host knows it
    started, on a machine that may be slow to start it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            sb.read_file(name)
            return True
        time.sleep(0.05)
    return False


def host_is_healthy() -> None:
    """The host can still start processes and allocate memory."""
    assert os.system("true") == 0
    assert len(bytearray(50 * 1024 * 1024)) == 50 * 1024 * 1024


@on_docker_too
@pytest.mark.slow
def test_infinite_loop_times_out(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    t0 = time.monotonic()
    code, _, _, timed_out = run(sb, "while True: pass", timeout=2)
    assert timed_out and code != 0
    assert time.monotonic() - t0 < 30


@on_docker_too
@pytest.mark.slow
def test_sleep_ignoring_sigterm_is_killed(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"
    code, _, _, timed_out = run(sb, prog, timeout=2)
    assert timed_out and code != 0


@on_docker_too
@pytest.mark.slow
def test_fork_bomb_is_contained(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    _, _, _, timed_out = run(sb, prog, timeout=4)
    assert timed_out
    host_is_healthy()
    assert_next_exec_works(sb)


@on_docker_too
def test_fork_count_is_bounded(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(1000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(n)\n"
    )
    _, out, _, _ = run(sb, prog, timeout=20)
    assert "refused 11" in out, out  # EAGAIN
    assert int(out.split()[-1]) < 64


@on_docker_too
def test_memory_bomb_fails_inside(hostile: tuple[SandboxClient, Sandbox, str], tier: str) -> None:
    """Killed by the sandbox's memory cgroup (exit 137), or, where only the address space of
    each process is bounded, failing with MemoryError; the sandbox still works."""
    client, sb, _ = hostile
    prog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
    code, _, err, timed_out = run(sb, prog, timeout=20)
    assert not timed_out
    if tier != "docker" and client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        assert code == 1 and "MemoryError" in err
    else:
        assert code == 137
    host_is_healthy()
    assert_next_exec_works(sb)


@on_docker_too
@pytest.mark.slow
def test_output_flood_is_capped(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    sb.write_file("flood.py", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    r = sb.exec([PY, "flood.py"], timeout=2)
    assert r.timed_out and r.truncated
    assert len(r.stdout_bytes) == CAP


@on_docker_too
def test_bounded_flood_keeps_exit_status(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    sb.write_file("flood.py", "import sys\nsys.stderr.write('e' * 5_000_000)\nprint('done')")
    r = sb.exec([PY, "flood.py"], timeout=30)
    assert r.returncode == 0 and not r.timed_out and r.truncated
    assert r.stdout == "done\n" and len(r.stderr_bytes) == CAP


@on_docker_too
def test_huge_file_write_is_refused(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (100 * 1024 * 1024))"
    code, _, err, _ = run(sb, prog, timeout=20)
    assert code != 0 and "File too large" in err
    with pytest.raises(FileNotFoundError):
        # read_file would load it; size it through a program instead
        sb.read_file("missing-to-prove-reads-work")
    size = sb.exec([PY, "-c", "import os; print(os.path.getsize('big.bin'))"], timeout=30)
    assert int(size.stdout) <= 8 * 1024 * 1024


@on_docker_too
@pytest.mark.slow
def test_double_forked_daemon_dies_with_the_exec(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    _, sb, _ = hostile
    prog = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            with open('beat', 'a') as f: f.write('.')\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
        "print('parent done')\n"
    )
    t0 = time.monotonic()
    code, out, _, timed_out = run(sb, prog, timeout=20)
    assert code == 0 and out == "parent done\n" and not timed_out
    assert time.monotonic() - t0 < 15, "exec waited for the daemon"
    before = sb.read_file("beat")
    time.sleep(0.5)
    assert sb.read_file("beat") == before, "the daemon kept running after exec returned"


@on_docker_too
def test_caller_environment_is_invisible(
    hostile: tuple[SandboxClient, Sandbox, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, sb, _ = hostile
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    os.environ["SANDBOXKIT_HOSTILE_SECRET"] = secret  # also in this process's /proc environ
    try:
        prog = (
            "import os\n"
            "seen = repr(dict(os.environ))\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit():\n"
            "        try: seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin1')\n"
            "        except OSError: pass\n"
            f"for pid in [os.getppid(), {os.getpid()}, 1]:\n"
            "    try: seen += open(f'/proc/{pid}/environ', 'rb').read().decode('latin1')\n"
            "    except OSError: pass\n"
            "print(seen)\n"
        )
        code, out, _, _ = run(sb, prog)
        assert code == 0
        assert secret not in out
    finally:
        del os.environ["SANDBOXKIT_HOSTILE_SECRET"]


@on_docker_too
def test_secret_file_in_callers_home_is_unreadable(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    _, sb, _ = hostile
    secret_file = Path.home() / f".sandboxkit-secret-{uuid.uuid4().hex[:8]}"
    secret_file.write_text("machine example.com password hunter2")
    secret_file.chmod(0o600)
    try:
        prog = f"print(open({str(secret_file)!r}).read())"
        code, out, err, _ = run(sb, prog)
        assert code != 0 and "hunter2" not in out
        assert "Error" in err
    finally:
        secret_file.unlink()


@on_docker_too
@pytest.mark.slow
def test_network_to_host_loopback(hostile: tuple[SandboxClient, Sandbox, str], tier: str) -> None:
    _, sb, _ = hostile
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    prog = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "print('connected')\n"
    )
    code, out, _, _ = run(sb, prog, timeout=10)
    server.setblocking(False)  # a connection made is in the backlog, accepted or not
    try:
        server.accept()[0].close()
        accepted = True
    except BlockingIOError:
        accepted = False
    finally:
        server.close()
    if tier in ("namespaces", "docker"):
        assert code != 0 and "connected" not in out and not accepted
    else:  # documented: the rlimits tier has no network isolation
        assert code == 0 and accepted


@on_docker_too
def test_writes_outside_the_sandbox_fail(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    _, sb, _ = hostile
    targets = [
        str(Path.home() / f"pwned-{uuid.uuid4().hex[:6]}"),
        f"/usr/pwned-{uuid.uuid4().hex[:6]}",
        str(Path.cwd() / f"pwned-{uuid.uuid4().hex[:6]}"),
    ]
    prog = (
        "ok = []\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x'); ok.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(ok)\n"
    )
    code, out, _, _ = run(sb, prog)
    assert code == 0 and out.strip() == "[]"
    assert not any(os.path.exists(t) for t in targets)


@on_docker_too
def test_private_tmp(hostile: tuple[SandboxClient, Sandbox, str], tier: str) -> None:
    _, sb, _ = hostile
    host_tmp_file = Path("/tmp") / f"sandboxkit-host-{uuid.uuid4().hex[:8]}"
    host_tmp_file.write_text("host")
    try:
        code, out, _, _ = run(sb, f"import os; print(os.path.exists({str(host_tmp_file)!r}))")
        assert code == 0
        # Only a mount namespace gives a private /tmp.
        assert out.strip() == ("False" if tier in ("namespaces", "docker") else "True")
    finally:
        host_tmp_file.unlink()


PROCESS_STATE = """\
import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
LIMITS = ('CPU', 'FSIZE', 'DATA', 'STACK', 'NOFILE', 'AS', 'NPROC', 'MEMLOCK', 'MSGQUEUE')
def state():
    limits = [resource.getrlimit(getattr(resource, 'RLIMIT_' + name)) for name in LIMITS]
    ioprio = libc.syscall(IOPRIO_GET, 1, 0)  # IOPRIO_WHO_PROCESS, itself
    return (limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
            os.sched_getscheduler(0), ioprio)
"""
"""What an exec starts with that another process of its uid could have changed in the process
it was forked from: its limits, nice value, CPUs, scheduling policy and I/O priority."""

ON_EVERY_PROCESS = """\
mine = os.getpid()
for pid in {1, os.getppid()} | {int(p) for p in os.listdir('/proc') if p.isdigit()}:
    if pid == mine:
        continue
    for name in LIMITS:
        which, low = getattr(resource, 'RLIMIT_' + name), 5 if name == 'NOFILE' else 1
        try:
            resource.prlimit(pid, which, (low, low))
        except (OSError, ValueError):
            pass
    attempts = (
        lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),
        lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))}),
        lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)),
    )
    for attempt in attempts:
        try:
            attempt()
        except OSError:
            pass
    libc.syscall(IOPRIO_SET, 1, pid, 3 << 13)  # the idle I/O class
for who in (os.PRIO_USER, os.PRIO_PGRP):
    try:
        os.setpriority(who, 0, 19)
    except OSError:
        pass
print('done')
"""
"""Lower the limits, priority, CPUs, scheduling class and I/O priority of every process in
view: pid 1, the parent, and whatever else ``/proc`` lists."""


@on_docker_too
def test_what_a_command_does_to_the_processes_it_sees_reaches_no_later_exec(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A command may lower the limits and priority of any process of its uid it can name (no
    capability needed): where later execs are forked from such a process (a container's pid
    1), they would start with a file limit of 5, a CPU limit of a second and the idle class
    (correct programs then fail), and the process itself would die at its next request. Every
    exec starts as the first one did, and the sandbox goes on."""
    _, sb, _ = hostile
    numbers = (
        f"IOPRIO_SET, IOPRIO_GET = {SYSCALLS_HERE['ioprio_set']}, {SYSCALLS_HERE['ioprio_get']}\n"
    )
    look = numbers + PROCESS_STATE + "print(repr(state()))\n"
    before = run(sb, look, timeout=60)
    assert before[0] == 0, before
    attacked = run(sb, numbers + PROCESS_STATE + ON_EVERY_PROCESS, timeout=60)
    assert attacked[:2] == (0, "done\n"), attacked
    work = (
        "import sys, time\n"
        "block = bytearray(64 << 20)\n"  # memory
        "sys.setrecursionlimit(100_000)\n"
        "def deep(n): return 0 if n == 0 else 1 + deep(n - 1)\n"
        "until = time.process_time() + 1.5\n"  # CPU past a limit of a second
        "while time.process_time() < until:\n"
        "    pass\n"
        "print(deep(20_000), len(block) >> 20)\n"
    )
    for _ in range(2):
        assert run(sb, look, timeout=60) == before
        assert run(sb, work, timeout=60)[:2] == (0, "20000 64\n")
    assert_next_exec_works(sb)


def test_killing_the_parent_and_everything_visible(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    _, sb, _ = hostile
    prog = (
        "import os, signal\n"
        "for pid in [os.getppid(), 1] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    if pid != os.getpid():\n"
        "        try: os.kill(pid, signal.SIGKILL)\n"
        "        except OSError: pass\n"
        "print('still here')\n"
    )
    run(sb, prog)
    # This test process is alive to check; the sandbox still works afterwards.
    r = sb.exec([PY, "-c", "print('next exec')"], timeout=30)
    assert r.stdout == "next exec\n"
    host_is_healthy()


def test_taking_away_the_sandbox_directories_leaves_the_next_exec_working(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A pool runs the next completions in the same sandbox: mode 000 on its working directory
    and temp directory must not make them fail to start (and so score 0)."""
    _, sb, _ = hostile
    sb.exec(["mkdir", "-p", "sub/dir"], timeout=30)
    prog = "import os\nfor d in ('sub/dir', 'sub', os.environ['TMPDIR'], '.'): os.chmod(d, 0)\n"
    assert run(sb, prog)[0] == 0
    check = "import os, tempfile\ntempfile.mkstemp()\nprint(sorted(os.listdir()))"
    r = sb.exec([PY, "-c", check], timeout=30)
    assert (r.returncode, r.stdout) == (0, "['prog.py', 'sub']\n"), r.stderr
    r = sb.exec([PY, "-c", check], cwd="sub/dir", timeout=30)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr


@pytest.mark.parametrize(
    "attack",
    [
        "os.unlink(meta)",
        "os.rename(meta, meta + '.gone')",
        "m = json.load(open(meta)); m['env']['INJECTED'] = 'yes'; os.unlink(meta); "
        "open(meta, 'w').write(json.dumps(m))",
        "os.chmod(os.path.dirname(meta), 0o777)",
    ],
    ids=["unlink", "rename", "rewrite", "chmod"],
)
def test_a_program_cannot_make_its_sandbox_look_stopped_or_set_later_envs(
    hostile: tuple[SandboxClient, Sandbox, str], attack: str
) -> None:
    """The host's record of a sandbox sits beside its workspace (a path the rlimits tier's
    programs can name). Were it the program's, it could make its sandbox look stopped (a lost
    sandbox is retried, then scored None) or put variables in the environment of the pool's
    later completions."""
    _, sb, _ = hostile
    prog = (
        "import json, os\n"
        "meta = os.path.join(os.path.dirname(os.getcwd()), 'sandbox.json')\n"
        f"try:\n    {attack}\nexcept OSError as exc:\n    print(type(exc).__name__)\n"
        "else:\n    print('done')\n"
    )
    code, out, err, _ = run(sb, prog)  # no SandboxLostError: the sandbox is not stopped
    assert (code, out) != (0, "done\n"), err  # refused (read-only, missing, not its own)
    r = sb.exec([PY, "-c", "import os; print(os.environ.get('INJECTED'))"], timeout=30)
    assert (r.returncode, r.stdout) == (0, "None\n"), r.stderr


def test_removing_from_the_host_follows_no_link_a_program_planted(
    hostile: tuple[SandboxClient, Sandbox, str], tmp_path: Path
) -> None:
    """The Daytona emulator removes a command's scratch files from the host: links the
    program left on the way must not lead that removal outside the sandbox."""
    client, sb, _ = hostile
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("keep")
    prog = (
        "import os\n"
        "t = os.environ['TMPDIR']\n"
        "os.makedirs(t + '/d/empty'); open(t + '/d/f', 'w').close()\n"
        f"os.symlink({str(victim)!r}, t + '/link')\n"
        f"os.symlink({str(victim / 'file')!r}, t + '/d/filelink')\n"
    )
    assert run(sb, prog)[0] == 0

    backend = client.backend_as(SubprocessBackend)

    def remove(path: str) -> None:
        run_sync(remove_from_host(backend, sb.id, path))

    with pytest.raises(OSError):
        remove("/tmp/link/file")
    remove("/tmp/d/filelink")  # the link itself, not what it names
    with pytest.raises(OSError):
        remove("/tmp/d")  # not empty
    for path in ("/tmp/d/f", "/tmp/d/empty", "/tmp/d", "/tmp/link"):
        remove(path)
    with pytest.raises(FileNotFoundError):
        remove("/tmp/d")
    for outside in ("/tmp", "/etc/passwd", "/tmp/../etc"):
        with pytest.raises(SandboxError):
            remove(outside)
    assert (victim / "file").read_text() == "keep"
    listing = "import os; print(os.listdir(os.environ['TMPDIR']))"
    assert sb.exec([PY, "-c", listing], timeout=30).stdout == "[]\n"


def test_closed_and_hijacked_descriptors(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = (
        "import os\n"
        "print('before', flush=True)\n"
        "for fd in range(3, 64):\n"
        "    try: os.write(fd, b'hijack')\n"
        "    except OSError: pass\n"
        "os.close(1); os.close(2)\n"
        "import time; time.sleep(0.2)\n"
    )
    code, out, _, timed_out = run(sb, prog, timeout=20)
    assert code == 0 and not timed_out and out == "before\n"


@on_docker_too
def test_a_command_inherits_no_descriptor_but_its_stdio(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A descriptor the host or its launcher left open is a channel the program did not ask
    for: a pipe's read end, a filter's bytes, a socket. Twice: the second exec of a sandbox
    must not inherit what the first one left."""
    _, sb, _ = hostile
    prog = (
        "import os\n"
        "held = []\n"
        "for fd in range(1024):\n"
        "    try: os.fstat(fd)\n"
        "    except OSError: continue\n"
        "    held.append(fd)\n"
        "print(held)\n"
    )
    for _ in range(2):
        code, out, err, _ = run(sb, prog, timeout=20)
        assert (code, out) == (0, "[0, 1, 2]\n"), err


_SCAN_MEMORY = r"""
import re, sys
prefix = bytes([0x7A, 0x71, 0x39, 0x5F])  # built at run time: not in this program's text
found = set()
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith('r') or '[vvar' in line or '[vsyscall' in line:
            continue
        start, end = (int(x, 16) for x in span.split('-'))
        try:
            mem.seek(start)
            data = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        found.update(m.decode() for m in re.findall(re.escape(prefix) + rb'[0-9a-f]{32}', data))
print(' '.join(sorted(found)))
"""


def test_a_warm_exec_finds_nothing_of_earlier_execs_in_its_memory(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A pool runs one completion after another in a sandbox: an exec must not find the API
    token an earlier one was given, a large ``-c`` program (a harness's hidden tests), a
    script, its argv or its stdin in the memory it inherits from the warm template."""
    _, sb, _ = hostile

    def secret() -> str:
        return "zq9_" + uuid.uuid4().hex

    env_token, program_text, argv_word, stdin_text, script_text = (secret() for _ in range(5))
    big_program = f"x = {program_text!r}\n" + "# padding\n" * 800  # over 4 KiB
    sb.exec([PY, "-c", "import os"], env={"API_TOKEN": env_token}, timeout=30)
    sb.exec([PY, "-c", big_program], timeout=30)
    sb.exec([PY, "-c", "import sys", argv_word], timeout=30)
    sb.exec([PY, "-c", "import sys; sys.stdin.read()"], stdin=stdin_text.encode(), timeout=30)
    sb.write_file("script.py", f"y = {script_text!r}\n")
    sb.exec([PY, "script.py"], timeout=30)
    sb.exec(["sh", "-c", "rm script.py"], timeout=30)
    r = sb.exec([PY, "-c", _SCAN_MEMORY], timeout=60)
    assert r.returncode == 0, r.stderr
    leaked = set(r.stdout.split()) & {env_token, program_text, argv_word, stdin_text, script_text}
    assert leaked == set()


@pytest.mark.parametrize(
    "program",
    [
        # Children whose parent is the process that runs the exec (the template's server).
        pytest.param(
            "import ctypes, os, time\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "for _ in range(3):\n"
            "    pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT|SIGCHLD)\n"
            "    if pid == 0:\n"
            "        time.sleep(600); os._exit(0)\n"
            "time.sleep(600)\n",
            marks=pytest.mark.slow,
        ),
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n"
        "    import time; time.sleep(600)\n"
        "os._exit(0)  # leaves its CLONE_PARENT child behind\n",
        # A FIFO named as the script: opening it blocks.
        pytest.param("MKFIFO", marks=pytest.mark.slow),
        # Ignoring every signal it can, in a new session.
        "import os, signal, time\n"
        "if os.fork(): os._exit(0)  # a daemon, in a session of its own\n"
        "os.setsid()\n"
        "for s in range(1, 32):\n"
        "    try: signal.signal(s, signal.SIG_IGN)\n"
        "    except (OSError, ValueError): pass\n"
        "while True: time.sleep(1)\n",
    ],
    ids=["clone-parent-sleeping", "clone-parent-orphan", "fifo-script", "daemon"],
)
def test_every_exec_returns_within_its_timeout(
    hostile: tuple[SandboxClient, Sandbox, str], program: str
) -> None:
    """Whatever the program does, the exec returns within its timeout plus a second, and the
    next exec of the sandbox runs as usual."""
    _, sb, _ = hostile
    if program == "MKFIFO":
        sb.exec([PY, "-c", "import os; os.mkfifo('fifo.py')"], timeout=30)
        argv = [PY, "fifo.py"]
    else:
        sb.write_file("prog.py", program)
        argv = [PY, "prog.py"]
    started = time.monotonic()
    r = sb.exec(argv, timeout=3)
    elapsed = time.monotonic() - started
    if program.endswith(("behind\n", "\nwhile True: time.sleep(1)\n")):
        assert (r.returncode, r.timed_out) == (0, False)
    else:
        assert r.timed_out
    assert elapsed < 3 + 1.5, elapsed  # the contract is timeout + 1 s; 0.5 s for a loaded CI
    assert sb.exec([PY, "-c", "print('next')"], timeout=30).stdout == "next\n"


def test_the_process_that_supervises_the_exec_is_out_of_reach(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Whatever runs as the namespace's pid 1 (bwrap's init, cold; the template's tiny init,
    warm) holds the exec's stdio and its status pipe: a program must not take its descriptors,
    forge its exit status through them, nor signal it, and its exit code is its own."""
    _, sb, _ = hostile
    prog = (
        "import os, signal, struct, time\n"
        "took = []\n"
        "try: fds = os.listdir('/proc/1/fd')\n"
        "except OSError: fds = []\n"
        "for fd in fds:\n"
        "    try:\n"
        "        f = os.open(f'/proc/1/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)\n"
        "        os.write(f, struct.pack('<Q', 42)); took.append(fd)\n"
        "    except OSError: pass\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):\n"
        "    try: os.kill(1, s)\n"
        "    except OSError: pass\n"
        "time.sleep(0.5)\n"
        "print('took', took)\n"
        "raise SystemExit(3)\n"
    )
    code, out, err, timed_out = run(sb, prog, timeout=20)
    assert (code, timed_out) == (3, False), err
    assert out == "took []\n"


_WRITABLE_KERNEL_FILES = r"""
import asyncio
import contextlib
import os
opened, written = [], []
for top in ('/proc/sys', '/sys', '/proc/sysrq-trigger', '/proc/sys/kernel/core_pattern'):
    paths = [top] if not os.path.isdir(top) else [
        os.path.join(d, f) for d, _, files in os.walk(top, followlinks=False) for f in files
    ]
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            continue
        try:  # its own value back: changes nothing, unless the kernel refuses it
            with open(path, 'rb') as f:
                value = f.read()
            os.write(fd, value)
            written.append(path)
        except OSError:
            pass
        os.close(fd)
        opened.append(path)
print(len(opened), len(written), opened[:20], written[:20])
"""


_STARTED_THEN_SLEEP = "import time; open('started', 'w').close(); time.sleep(3)"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the host is not root here")
def test_code_on_a_root_host_holds_no_host_privilege(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """On a root host (RL clusters, containers) sandboxed code runs as an unprivileged host uid:
    its processes are not root's, and nothing under /proc/sys or /sys opens for writing (a
    completion once changed a host sysctl; core_pattern leads to code run as root)."""
    client, sb, marker = hostile
    assert client.backend_as(SubprocessBackend).isolation.run_as != 0
    holder = threading.Thread(target=lambda: sb.exec([PY, "-c", _STARTED_THEN_SLEEP], timeout=30))
    holder.start()
    try:
        # Wait for the program itself: before it starts, the host's own launcher (root until
        # it applies the limits and drops its uid) carries the sandbox's environment too.
        wait_for_file(sb, "started", timeout=20)
        pids = processes_with(marker, "environ")
        assert pids, "the sandbox's process was not found on the host"
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):
                uids = Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[:4]
                assert "0" not in uids, (pid, uids)
    finally:
        holder.join()
    r = sb.exec([PY, "-c", _WRITABLE_KERNEL_FILES], timeout=120)
    assert r.returncode == 0, r.stderr
    opened, written = (int(n) for n in r.stdout.split()[:2])
    assert written == 0, r.stdout
    if tier == "namespaces":  # read-only mounts; the host's own files (rlimits) check on write
        assert opened == 0, r.stdout


_ATTACKS = {
    "host sysctl": "open('/proc/sys/kernel/core_pattern', 'w').write('|/tmp/x')",
    "drop caches": "open('/proc/sys/vm/drop_caches', 'w').write('3')",
    "host pid 1's descriptors": (
        "import os\n"
        "fds = os.listdir('/proc/1/fd')\n"
        "assert fds, 'nothing to take'\n"
        "os.write(os.open('/proc/1/fd/' + fds[0], os.O_WRONLY), b'x')"
    ),
    "a server's zombie": (
        "import ctypes, time\n"
        "if ctypes.CDLL(None).syscall(56, 0x8000 | 17, 0, 0, 0, 0) == 0:\n"
        "    time.sleep(600)\n"
        "time.sleep(600)"
    ),
    "a FIFO to block on": "import os; os.mkfifo('f'); open('f').read()",
}


@pytest.mark.slow
def test_attacks_scored_by_a_reward_function_get_nothing(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """What the attacks above reach through ``exec_reward`` as a trainer calls it: a
    completion earns 1.0 only if its attack worked, and the batch returns in time."""
    from sandboxkit.rewards import exec_reward

    client, _, _ = hostile
    reward = exec_reward(client, timeout=2, pool_size=2)
    try:
        completions = [f"```python\n{code}\n```" for code in _ATTACKS.values()]
        started = time.monotonic()
        rewards = reward(prompts=["p"] * len(completions), completions=completions)
        elapsed = time.monotonic() - started
    finally:
        reward.close()
    assert dict(zip(_ATTACKS, rewards, strict=True)) == dict.fromkeys(_ATTACKS, 0.0)
    assert elapsed < 60
    host_is_healthy()


# -- memory and disk, per sandbox --------------------------------------------------------


def last_count(out: str) -> int:
    """The last number a filling program printed (0 if it was stopped before the first)."""
    numbers = [int(word) for word in out.split() if word.isdigit()]
    return numbers[-1] if numbers else 0


def test_memfds_filled_with_write_hold_no_more_than_the_memory_limit(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Pages written into a memfd are in no process's address space: only a limit on the
    whole sandbox counts them."""
    client, sb, _ = hostile
    prog = (
        "import os\n"
        "chunk = b'x' * (4 << 20)  # under the file size limit, which holds for memfds too\n"
        "fds, held = [], 0\n"
        f"while held < {2 * MEMORY_MB}:\n"
        "    fds.append(os.memfd_create('fill'))\n"
        "    held += os.write(fds[-1], chunk) >> 20\n"
        "    print(held, flush=True)\n"
    )
    code, out, _, timed_out = run(sb, prog, timeout=60)
    assert not timed_out
    # documented: bounded per process only
    if client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        assert (code, last_count(out)) == (0, 2 * MEMORY_MB)
    else:
        assert code == 137 and last_count(out) < MEMORY_MB, out
    host_is_healthy()
    assert_next_exec_works(sb)


def test_dev_shm_holds_no_more_than_the_memory_limit(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """Files in /dev/shm live in memory (the host's own /dev/shm in the rlimits tier)."""
    client, sb, marker = hostile
    prog = (
        "import os\n"
        "chunk = b'x' * (4 << 20)\n"
        "held = 0\n"
        "try:\n"
        f"    while held < {2 * MEMORY_MB}:\n"
        f"        with open(f'/dev/shm/{marker}-{{held}}', 'wb') as f:\n"
        "            f.write(chunk)\n"
        "        held += 4\n"
        "        print(held, flush=True)\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(held)\n"
    )
    try:
        code, out, _, timed_out = run(sb, prog, timeout=60)
    finally:
        for leftover in Path("/dev/shm").glob(f"{marker}-*"):  # the rlimits tier's, on the host
            leftover.unlink()
    assert not timed_out
    if tier == "namespaces":  # a /dev/shm of the sandbox's own, of 64 MB
        assert code == 0 and "refused 28" in out and last_count(out) <= 64, out
    # documented: bounded per process only
    elif client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        assert (code, last_count(out)) == (0, 2 * MEMORY_MB)
    else:
        assert code == 137 and last_count(out) < MEMORY_MB, out
    assert_next_exec_works(sb)


@pytest.mark.slow
def test_children_together_hold_no_more_than_the_memory_limit(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Six children of 64 MB each, each under any per-process limit: only as many stay alive
    at once as the sandbox's limit holds."""
    client, sb, _ = hostile
    prog = (
        "import os, time\n"
        "children = []\n"
        "for _ in range(6):\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (64 << 20)\n"
        "        os.write(w, b'1')\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    os.read(r, 1)  # it holds its block, or was killed first\n"
        "    os.close(r)\n"
        "    children.append(pid)\n"
        "time.sleep(1)\n"
        "print(sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in children))\n"
    )
    code, out, _, timed_out = run(sb, prog, timeout=60)
    assert not timed_out
    # documented: bounded per process only
    if client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        assert (code, out) == (0, "6\n")
    elif code != 137:  # the parent itself may be the one the kernel kills
        assert code == 0 and int(out) * 64 < MEMORY_MB, out
    host_is_healthy()
    assert_next_exec_works(sb)


KERNEL_FILLS = {
    # (what queues kernel memory the program's address space never holds, how it counts it)
    "tcp": (
        "server = socket.socket()\n"
        "server.bind(('127.0.0.1', 0))\n"
        "server.listen(512)\n"
        "def pair():\n"
        "    sender = socket.create_connection(server.getsockname())\n"
        "    receiver = server.accept()[0]  # never reads\n"
        "    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)\n"
        "    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)\n"
        "    sender.setblocking(False)\n"
        "    return [sender, receiver], sender.send\n"
    ),
    "udp": (
        "def pair():\n"
        "    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)\n"
        "    receiver.bind(('127.0.0.1', 0))\n"
        "    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    def send(data):  # a datagram past a full queue is dropped: count what is queued\n"
        "        queued = lambda: receiver.getsockopt(socket.SOL_SOCKET, 55, 4)  # SO_MEMINFO\n"
        "        before = int.from_bytes(queued(), sys.byteorder)\n"
        "        sender.sendto(data[:60000], receiver.getsockname())\n"
        "        grown = int.from_bytes(queued(), sys.byteorder) - before\n"
        "        if grown <= 0:\n"
        "            raise BlockingIOError\n"
        "        return grown\n"
        "    return [sender, receiver], send\n"
    ),
    "unix": (
        "def pair():\n"
        "    sender, receiver = socket.socketpair()\n"
        "    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)\n"
        "    sender.setblocking(False)\n"
        "    return [sender, receiver], sender.send\n"
    ),
    "pipes": (
        "def pair():\n"
        "    r, w = os.pipe()\n"
        "    try:\n"
        "        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
        "    except OSError:  # past the per-user allowance of pipe pages\n"
        "        pass\n"
        "    os.set_blocking(w, False)\n"
        "    return [r, w], lambda data: os.write(w, data)\n"
    ),
}


@on_docker_too
@pytest.mark.parametrize("fill", list(KERNEL_FILLS))
def test_kernel_memory_a_program_queues_counts_toward_the_memory_limit(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, fill: str
) -> None:
    """Bytes queued in socket buffers and pipes that no one reads are the kernel's memory, in
    no process's address space; hundreds of descriptors, each filled to its own cap, would
    hold far more than the sandbox's limit, taken from the host. They count toward it: the
    program is stopped (its writes refused, or killed) before it holds the limit's worth and a
    little over (socket buffers keep a few KB per socket whatever the limit)."""
    client, sb, _ = hostile
    if tier != "docker" and client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        pytest.skip("documented: without a memory cgroup, kernel memory is not bounded")
    prog = (
        "import fcntl, os, socket, sys\n"
        f"{KERNEL_FILLS[fill]}"
        "chunk = b'x' * (1 << 16)\n"
        "held, ends = 0, []\n"
        "try:\n"
        f"    while held < {3 * MEMORY_MB} << 20:\n"
        "        both, send = pair()\n"
        "        ends.append(both)\n"
        f"        while held < {3 * MEMORY_MB} << 20:\n"
        "            try:\n"
        "                held += send(chunk)\n"
        "            except BlockingIOError:  # this one is full\n"
        "                break\n"
        "        print(held >> 20, flush=True)\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)  # out of descriptors, or memory\n"
        "print(held >> 20)\n"
    )
    code, out, err, timed_out = run(sb, prog, timeout=60)
    assert not timed_out
    assert code in (0, 137), err
    assert last_count(out) < MEMORY_MB + 16, out
    host_is_healthy()
    assert_next_exec_works(sb)


# -- CPU, per sandbox -----------------------------------------------------------------------

SPIN = """\
import os, resource, sys, time
procs, seconds = int(sys.argv[1]), float(sys.argv[2])
until = time.monotonic() + seconds
kids = []
for i in range(procs):
    pid = os.fork()
    if pid == 0:
        if i % 2:  # a session, and with autogroups a scheduling group, of its own
            os.setsid()
        while time.monotonic() < until:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{used.ru_utime + used.ru_stime:.3f}")
"""


def spin(sb: Sandbox, procs: int, seconds: float) -> float:
    """CPU seconds that ``procs`` processes spinning for ``seconds`` got in ``sb``."""
    r = sb.exec([PY, "-c", SPIN, str(procs), str(seconds)], timeout=60)
    assert r.returncode == 0, r.stderr
    return float(r.stdout)


@pytest.mark.slow
def test_a_sandboxs_processes_together_get_no_more_cpu_than_its_bound(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Two execs at once in a sandbox of half a CPU (on the namespaces tier one through its
    warm template, the other the cold way), each spinning four processes of which two made
    sessions of their own: together they get half a CPU-second per second of wall time (0.8
    allowed, for a loaded machine), not the machine's cores."""
    client, _, _ = hostile
    if client.backend_as(SubprocessBackend).cpu_limit == "rlimit":
        pytest.skip("documented: without a cpu cgroup, only CPU seconds per process hold")
    sb = client.sandbox(cpu=0.5)
    try:
        spin(sb, 1, 0)  # starts the warm template
        used: list[float] = []
        execs = [threading.Thread(target=lambda: used.append(spin(sb, 4, 2))) for _ in range(2)]
        started = time.monotonic()
        for thread in execs:
            thread.start()
        for thread in execs:
            thread.join()
        wall = time.monotonic() - started
    finally:
        sb.stop()
    assert len(used) == 2
    assert sum(used) < 0.8 * wall, (used, wall)
    host_is_healthy()


@pytest.mark.slow
def test_a_sandbox_of_one_cpu_gets_as_much_as_a_host_process_beside_it(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """The bound takes nothing from a sandbox that keeps within it: two spinning processes in
    a sandbox of one CPU get at most one CPU-second per second (1.3 allowed), and as much as
    one spinning host process at the same time (half of it at least: CI loads 2 cores
    with four workers, and a cold exec starts its spinners after bwrap)."""
    client, sb, _ = hostile
    if client.backend_as(SubprocessBackend).cpu_limit == "rlimit":
        pytest.skip("documented: without a cpu cgroup, only CPU seconds per process hold")
    spin(sb, 1, 0)  # starts the warm template
    host = subprocess.Popen([sys.executable, "-c", SPIN, "1", "2"], stdout=subprocess.PIPE)
    started = time.monotonic()
    used = spin(sb, 2, 2)
    wall = time.monotonic() - started
    host_used = float(host.communicate(timeout=60)[0])
    assert 0.5 * host_used < used < 1.3 * wall, (used, host_used, wall)


FILLS = {
    # What fills the sandbox's storage, counting in the unit of its cap (MB or inodes).
    "megabytes": (
        "chunk = b'x' * (4 << 20)\n"
        "def step(n):\n"
        "    for d in ('.', os.environ['TMPDIR']):  # /workspace and /tmp share one cap\n"
        "        with open(f'{d}/f{n}', 'wb') as f:\n"
        "            f.write(chunk)\n"
        "    return 8\n",
        DISK_MB,
    ),
    "inodes": (
        "def step(n):\n"
        "    os.mkdir(f'd{n}') if n % 2 else open(f'f{n}', 'w').close()\n"
        "    return 1\n",
        DISK_INODES,
    ),
}


@pytest.mark.parametrize("fill", list(FILLS))
def test_filling_the_sandbox_storage_gets_enospc(
    hostile: tuple[SandboxClient, Sandbox, str], fill: str
) -> None:
    """Bytes and inodes past the sandbox's cap fail with ENOSPC (bounded per file only where
    the host cannot mount, as documented); another sandbox has its own room."""
    client, sb, _ = hostile
    step, cap = FILLS[fill]
    prog = (
        f"import os\n{step}"
        "made = 0\n"
        "try:\n"
        f"    while made < {2 * cap}:\n"
        "        made += step(made)\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(made)\n"
    )
    code, out, err, _ = run(sb, prog, timeout=60)
    assert code == 0, err
    # documented: bounded per file only
    if client.backend_as(SubprocessBackend).disk_limit == "file size":
        assert last_count(out) == 2 * cap
    else:
        assert "refused 28" in out and last_count(out) < cap, out
    assert_next_exec_works(sb)
    other = client.sandbox()
    try:
        room = "for i in range(12):\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20))\nprint('ok')"
        r = other.exec([PY, "-c", room], timeout=60)
        assert (r.returncode, r.stdout) == (0, "ok\n"), r.stderr
    finally:
        other.stop()


# -- the syscall filter ---------------------------------------------------------------------

SYSCALLS_HERE = {name: syscall_number(name, native_arch() or "x86_64") for name in SYSCALLS}
"""This machine's syscall numbers (checked against the kernel's headers in test_seccomp)."""
CALLS = f"""\
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
NR = {SYSCALLS_HERE!r}
def outcome(result):
    return errno.errorcode[ctypes.get_errno()] if result == -1 else "ok"
def call(name, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return outcome(libc.syscall(NR[name], *args))
"""
"""A prelude for programs that make raw system calls: ``call(name, *args)`` says "ok" or the
error's name."""


def refusals(tier: str, errno_name: str) -> set[str]:
    """How the filter refuses a call it names with ``errno_name``. A docker sandbox's profile
    says the same in libseccomp's terms (``seccomp.docker_profile``): a call refused only by
    its argument, or one the Engine's libseccomp does not know by name, gets the profile's
    default, ``ENOSYS`` (``EPERM`` where the Engine ignores ``defaultErrnoRet``, before 23)."""
    return {errno_name, "EPERM", "ENOSYS"} if tier == "docker" else {errno_name}


def calls(sb: Sandbox, code: str) -> dict[str, str]:
    """What the calls ``code`` makes (after ``CALLS``) came to, as it prints them."""
    returncode, out, err, timed_out = run(sb, CALLS + code, timeout=60)
    assert returncode == 0 and not timed_out, err
    return dict(line.split(": ", 1) for line in out.splitlines())


@pytest.fixture
def filtered() -> None:
    if native_arch() is None or unsupported() is not None:
        pytest.skip(f"no syscall filter here: {unsupported()}")


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_kernel_keyrings_are_out_of_reach(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    """Keyrings are not namespaced: the session keyring the host runs in would be listed and
    read, and keys added to it would outlive the sandbox."""
    _, sb, _ = hostile
    found = calls(
        sb,
        "print('session keyring id:', call('keyctl', 0, -3, 0))\n"  # KEYCTL_GET_KEYRING_ID
        "print('read session keyring:', call('keyctl', 11, -3, None, 0))\n"  # KEYCTL_READ
        "print('join a named keyring:', call('keyctl', 1, b'sbx'))\n"  # KEYCTL_JOIN_SESSION_...
        "print('add a key:', call('add_key', b'user', b'sbx', b'secret', 6, -2))\n"
        "print('request a key:', call('request_key', b'user', b'sbx', None, 0))\n",
    )
    assert set(found) == {
        "session keyring id",
        "read session keyring",
        "join a named keyring",
        "add a key",
        "request a key",
    }
    assert set(found.values()) == {"EPERM"}, found


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_kernel_surface_exploits_start_from_is_closed(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """io_uring, bpf, perf events and userfaultfd fail with EPERM, whatever the arguments
    (arguments the kernel itself would reject with another error show it is the filter);
    sockets of families other than Unix, IP and netlink with EAFNOSUPPORT."""
    _, sb, _ = hostile
    found = calls(
        sb,
        "params = ctypes.create_string_buffer(120)\n"
        "print('io_uring_setup:', call('io_uring_setup', 4, params))\n"
        "print('io_uring_enter:', call('io_uring_enter', 1000, 0, 0, 0, None, 0))\n"
        "print('bpf map:', call('bpf', 0, ctypes.create_string_buffer(72), 72))\n"
        "print('bpf bad command:', call('bpf', 999, None, 0))\n"
        "print('perf_event_open:', call('perf_event_open', None, 0, -1, -1, 0))\n"
        "print('userfaultfd:', call('userfaultfd', 1 | os.O_CLOEXEC))\n"  # UFFD_USER_MODE_ONLY
        "import socket\n"
        "for family in ('AF_VSOCK', 'AF_ALG', 'AF_PACKET', 'AF_TIPC', 'AF_RDS', 'AF_KEY'):\n"
        "    kind = socket.SOCK_RAW if family == 'AF_PACKET' else socket.SOCK_SEQPACKET\n"
        "    print(family + ':', call('socket', getattr(socket, family, 0), kind, 0))\n",
    )
    sockets = {name: found.pop(name) for name in list(found) if name.startswith("AF_")}
    assert len(found) == 6 and set(found.values()) == {"EPERM"}, found
    assert len(sockets) == 6 and set(sockets.values()) <= refusals(tier, "EAFNOSUPPORT"), sockets


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_no_process_reaches_into_another(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    """Neither its own child (an exec'd program, dumpable, of its uid), nor pid 1 (bwrap's init
    on the cold path), nor itself can be traced, read, written, or robbed of descriptors."""
    _, sb, _ = hostile
    found = calls(
        sb,
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '60'], stdin=subprocess.PIPE)\n"
        "class iovec(ctypes.Structure):\n"
        "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
        "a, b = ctypes.create_string_buffer(b'abcd'), ctypes.create_string_buffer(4)\n"
        "vectors = (ctypes.byref(iovec(ctypes.addressof(a), 4)), 1)\n"
        "vectors += (ctypes.byref(iovec(ctypes.addressof(b), 4)), 1, 0)\n"
        "for name in ('process_vm_readv', 'process_vm_writev'):\n"  # its own memory, even
        "    print(name + ':', outcome(getattr(libc, name)(os.getpid(), *vectors)))\n"
        "print('attach:', outcome(libc.ptrace(16, child.pid, None, None)))\n"  # PTRACE_ATTACH
        "print('seize:', outcome(libc.ptrace(0x4206, child.pid, None, None)))\n"  # PTRACE_SEIZE
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else ctypes.get_errno())\n"  # TRACEME
        "status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
        "print('traceme:', 'ok' if status == 0 else errno.errorcode[status])\n"
        "print('pidfd_getfd child:', call('pidfd_getfd', os.pidfd_open(child.pid), 0, 0))\n"
        "print('pidfd_getfd pid 1:', call('pidfd_getfd', os.pidfd_open(1), 0, 0))\n"
        "print('kcmp:', call('kcmp', os.getpid(), child.pid, 0, 0, 0))\n"  # KCMP_FILE
        "child.kill()\n",
    )
    assert len(found) == 8 and set(found.values()) == {"EPERM"}, found


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_a_command_makes_no_namespaces_and_no_mounts(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A new user namespace is where most container escapes start (it hands out capabilities
    over new mount, network... namespaces, and with them kernel code otherwise reserved to
    root): no way to make or enter one, nor to mount, works."""
    _, sb, _ = hostile
    found = calls(
        sb,
        "import shutil, subprocess\n"
        "NEWUSER, NEWNS, NEWNET = 0x10000000, 0x00020000, 0x40000000\n"
        "print('unshare user:', call('unshare', NEWUSER))\n"
        "print('unshare user, mount, net:', call('unshare', NEWUSER | NEWNS | NEWNET))\n"
        "pid = libc.syscall(NR['clone'], ctypes.c_long(NEWUSER | 17), None, None, None, None)\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "print('clone user:', outcome(pid))\n"
        "if pid > 0:\n"
        "    os.waitpid(pid, 0)\n"
        "print('clone3:', call('clone3', ctypes.create_string_buffer(88), 88))\n"
        "print('setns:', call('setns', os.open('/proc/self/ns/user', os.O_RDONLY), 0))\n"
        "print('mount:', outcome(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)))\n"
        "print('chroot:', outcome(libc.chroot(b'/tmp')))\n"
        "if shutil.which('unshare'):\n"
        "    done = subprocess.run(['unshare', '-Ur', 'id', '-u'], capture_output=True)\n"
        "    print('unshare -Ur:', 'ok' if done.returncode == 0 else 'EPERM')\n",
    )
    assert found.pop("clone3") == "ENOSYS"  # the C library falls back to clone
    assert len(found) >= 6 and set(found.values()) == {"EPERM"}, found


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_calls_off_the_allowlist_fail(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """The allowlist: calls the table names and denies fail with EPERM, with arguments the
    kernel itself would take (secret memory, the mount listing calls, NUMA policy, the LDT,
    page-cache state, security modules); a number the table does not name, made up or newer
    than the table, with ENOSYS, as on a kernel without it."""
    _, sb, _ = hostile
    newest = max(n for n in SYSCALLS_HERE.values() if n is not None)
    found = calls(
        sb,
        "import mmap\n"
        "page = mmap.mmap(-1, 4096)\n"
        "address = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "mask = ctypes.c_ulong(1)\n"
        "print('memfd_secret:', call('memfd_secret', 0))\n"
        "request = ctypes.create_string_buffer(32)\n"  # struct mnt_id_req, version 0
        "ctypes.c_uint32.from_buffer(request).value = 24\n"
        "ctypes.c_uint64.from_buffer(request, 8).value = 1\n"  # LSMT_ROOT
        "ids = (ctypes.c_uint64 * 16)()\n"
        "print('listmount:', call('listmount', request, ids, 16, 0))\n"
        "info = ctypes.create_string_buffer(512)\n"
        "print('statmount:', call('statmount', request, info, 512, 0))\n"
        "print('set_mempolicy:', call('set_mempolicy', 0, None, 0))\n"  # MPOL_DEFAULT
        "print('get_mempolicy:', call('get_mempolicy', None, None, 0, None, 0))\n"
        "print('mbind:', call('mbind', address, 4096, 0, None, 0, 0))\n"
        "print('migrate_pages:', call('migrate_pages', 0, 64, ctypes.byref(mask),"
        " ctypes.byref(mask)))\n"
        "print('cachestat:', call('cachestat', os.open('/proc/self/exe', os.O_RDONLY),"
        " ctypes.create_string_buffer(16), ctypes.create_string_buffer(40), 0))\n"
        "print('lsm_list_modules:', call('lsm_list_modules', ctypes.create_string_buffer(64),"
        " ctypes.byref(ctypes.c_uint32(64)), 0))\n"
        "if NR['modify_ldt'] is not None:\n"  # x86-64 only
        "    print('modify_ldt:', call('modify_ldt', 0, ctypes.create_string_buffer(16), 16))\n"
        "    print('set_thread_area:', call('set_thread_area', ctypes.create_string_buffer(16)))\n"
        "def raw(number):\n"
        "    return outcome(libc.syscall(ctypes.c_long(number), 0, 0, 0, 0, 0))\n"
        f"print('newer than the table:', raw({newest + 1}))\n"
        "print('made-up number:', raw(1000))\n"
        "print('far beyond:', raw(0x3FFFFFFF))\n",
    )
    unlisted = {
        name: found.pop(name) for name in ("newer than the table", "made-up number", "far beyond")
    }
    assert set(unlisted.values()) == {"ENOSYS"}, unlisted
    assert len(found) >= 9 and set(found.values()) <= refusals(tier, "EPERM"), found


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_socketpair_is_held_to_the_families_socket_is(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """A pair of sockets of another family than Unix, IP and netlink fails as one socket
    does, with EAFNOSUPPORT, before the kernel's code for that family runs; Unix pairs work."""
    _, sb, _ = hostile
    found = calls(
        sb,
        "import socket\n"
        "pair = (ctypes.c_int * 2)()\n"
        "for family in ('AF_VSOCK', 'AF_PACKET', 'AF_ALG', 'AF_TIPC', 'AF_KEY', 'AF_NETROM',"
        " 'AF_CAN', 'AF_XDP'):\n"
        "    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n"
        "        number = getattr(socket, family, {'AF_XDP': 44, 'AF_NETROM': 6}.get(family))\n"
        "        print(f'{family} {kind}:', call('socketpair', number, kind, 0, pair))\n"
        "print('unix:', call('socketpair', socket.AF_UNIX, socket.SOCK_STREAM, 0, pair))\n",
    )
    assert found.pop("unix") == "ok"
    assert len(found) == 24 and set(found.values()) <= refusals(tier, "EAFNOSUPPORT"), found


@on_docker_too
@pytest.mark.usefixtures("filtered")
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64's other ABIs")
def test_calls_of_another_abi_kill_the_process(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    """32-bit calls (``int 0x80``) and x32 calls have numbers a filter of x86-64 numbers
    would not recognise: they kill the process (SIGSYS)."""
    _, sb, _ = hostile
    x32 = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39)"  # x32 getpid
    i386 = (
        "import ctypes, mmap\n"
        "page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "page.write(bytes.fromhex('b814000000cd80c3'))\n"  # mov eax, 20 (getpid); int 0x80; ret
        "address = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "print(ctypes.CFUNCTYPE(ctypes.c_int)(address)())\n"
    )
    code, out, err, _ = run(
        sb,
        "import subprocess, sys\n"
        f"for program in ({x32!r}, {i386!r}):\n"
        "    print(subprocess.run([sys.executable, '-c', program]).returncode)\n",
        timeout=60,
    )
    assert code == 0, err
    assert out.split() == [str(-signal.SIGSYS)] * 2


ORDINARY_C = r"""
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static void *twice(void *x) { return (void *)((long)x * 2); }
int main(void) {
    pthread_t thread; void *result; int status; pid_t pid;
    pthread_create(&thread, NULL, twice, (void *)21); pthread_join(thread, &result);
    if ((pid = fork()) == 0) _exit(3);
    waitpid(pid, &status, 0);
    char *argv[] = {"true", NULL};
    int spawned = posix_spawnp(&pid, "true", NULL, NULL, argv, environ);
    waitpid(pid, &status, 0);
    printf("%ld %d %d\n", (long)result, spawned, WEXITSTATUS(status));
    return 0;
}
"""


@on_docker_too
@pytest.mark.usefixtures("filtered")
def test_ordinary_programs_run_under_the_filter(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """Threads, thread pools, fork, subprocess, posix_spawn, multiprocessing and asyncio (the C
    library's clone3 falls back to clone), and a C program built with gcc in the sandbox."""
    _, sb, _ = hostile
    code, out, err, _ = run(
        sb,
        "import asyncio, concurrent.futures, multiprocessing, os, subprocess, threading\n"
        "seen = []\n"
        "threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(8)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "with concurrent.futures.ThreadPoolExecutor(4) as pool:\n"
        "    seen.append(sum(pool.map(abs, range(-5, 5))))\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(7)\n"
        "seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "seen.append(subprocess.run(['sh', '-c', 'echo $((6 * 7))'], capture_output=True,"
        " text=True).stdout.strip())\n"
        "pid = os.posix_spawnp('sh', ['sh', '-c', 'exit 5'], os.environ)\n"
        "seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "with multiprocessing.Pool(2) as pool:\n"
        "    seen.append(pool.map(abs, [-1, -2, -3]))\n"
        "async def main():\n"
        "    proc = await asyncio.create_subprocess_exec('echo', 'async', stdout=-1)\n"
        "    out, _ = await proc.communicate()\n"
        "    return out.decode().strip(), await asyncio.to_thread(sum, [1, 2])\n"
        "seen.append(asyncio.run(main()))\n"
        "import socket\n"
        "a, b = socket.socketpair()\n"
        "a.sendall(b'unix'); seen.append(b.recv(4).decode())\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "with socket.create_connection(server.getsockname()) as c: seen.append('inet')\n"
        "seen.append(any(name == 'lo' for _, name in socket.if_nameindex()))\n"  # netlink
        "print(sorted(seen[:8]), seen[8:])\n",
        timeout=60,
    )
    assert code == 0, err
    assert out == (
        "[0, 1, 2, 3, 4, 5, 6, 7] [25, 7, '42', 5, [1, 2, 3], ('async', 3), 'unix', 'inet', True]\n"
    )
    if shutil.which("gcc") is None or tier == "docker":  # the test image has no compiler
        return
    sb.write_file("ordinary.c", ORDINARY_C)
    built = sb.exec(
        ["sh", "-c", "gcc -O1 -pthread -o ordinary ordinary.c && ./ordinary"], timeout=120
    )
    assert (built.returncode, built.stdout) == (0, "42 0 0\n"), built.stderr


RUNTIMES: dict[str, tuple[str, dict[str, str], str, str]] = {
    "g++": (
        "g++",
        {
            "main.cpp": """
#include <future>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>
int main() {
    std::vector<std::thread> threads; std::mutex m; int sum = 0;
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&, i] { std::lock_guard<std::mutex> g(m); sum += i * 2; });
    for (auto &t : threads) t.join();
    auto seven = std::async(std::launch::async, [] { return 7; });
    std::cout << sum << " " << seven.get() << std::endl;
}
"""
        },
        "g++ -O1 -pthread -o main main.cpp && ./main",
        "12 7\n",
    ),
    "java": (
        "javac",
        {
            "Main.java": """
import java.nio.file.*; import java.util.*; import java.util.concurrent.*;
public class Main { public static void main(String[] args) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(4); int sum = 0;
    for (Future<Integer> f : pool.invokeAll(List.<Callable<Integer>>of(() -> 2, () -> 4, () -> 6)))
        sum += f.get();
    pool.shutdown();
    Files.writeString(Path.of("j.txt"), "file");
    Process child = new ProcessBuilder("echo", "child").start();
    String said = new String(child.getInputStream().readAllBytes()).trim(); child.waitFor();
    int parallel = java.util.stream.IntStream.range(0, 100).parallel().sum();
    String file = Files.readString(Path.of("j.txt"));
    System.out.println(sum + " " + parallel + " " + file + " " + said);
}}
"""
        },
        "javac -J-Xmx256m -J-XX:+UseSerialGC Main.java && java -Xmx64m -XX:+UseSerialGC Main",
        "12 4950 file child\n",
    ),
    "node": (
        "node",
        {
            "main.js": """
const {Worker} = require('worker_threads'), cp = require('child_process'), fs = require('fs');
const net = require('net'), crypto = require('crypto');
(async () => {
  const seen = [];
  await fs.promises.writeFile('n.txt', 'file');
  seen.push(await fs.promises.readFile('n.txt', 'utf8'));
  seen.push(cp.execSync('echo child').toString().trim());
  const code = "require('worker_threads').parentPort.postMessage(42)";
  seen.push(await new Promise(r => new Worker(code, {eval: true}).on('message', r)));
  const key = await new Promise(r => crypto.pbkdf2('a', 'b', 1, 4, 'sha256', (e, k) => r(k)));
  seen.push(key.toString('hex'));
  const server = net.createServer(c => c.end('tcp')).listen(0, '127.0.0.1');
  await new Promise(r => server.on('listening', r));
  const port = server.address().port;
  seen.push(await new Promise(r => net.connect(port, '127.0.0.1').on('data', d => r(`${d}`))));
  server.close();
  console.log(seen.join(' '));
})();
"""
        },
        "node main.js",
        "file child 42 ee212b01 tcp\n",
    ),
    "rustc": (
        "rustc",
        {
            "main.rs": """
use std::{fs, process::Command, thread};
fn main() {
    let handles: Vec<_> = (0..4).map(|i| thread::spawn(move || i * 2)).collect();
    let sum: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    fs::write("r.txt", "file").unwrap();
    let child = Command::new("echo").arg("child").output().unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    println!("{} {} {}", sum, fs::read_to_string("r.txt").unwrap(), said.trim());
}
"""
        },
        "rustc -O -o main main.rs && ./main",
        "12 file child\n",
    ),
    "go": (
        "go",
        {
            "main.go": """
package main
import ("fmt"; "os"; "os/exec"; "strings"; "sync")
func main() {
    var wg sync.WaitGroup; var mu sync.Mutex; sum := 0
    for i := 0; i < 4; i++ {
        wg.Add(1)
        go func(i int) { defer wg.Done(); mu.Lock(); sum += i * 2; mu.Unlock() }(i)
    }
    wg.Wait()
    os.WriteFile("g.txt", []byte("file"), 0o644)
    data, _ := os.ReadFile("g.txt")
    said, _ := exec.Command("echo", "child").Output()
    fmt.Println(sum, string(data), strings.TrimSpace(string(said)))
}
"""
        },
        "go build -o main main.go && ./main",
        "12 file child\n",
    ),
    "shell and git": (
        "git",
        {},
        "set -e; printf 'b\\na\\nb\\n' | sort | uniq -c | tr -s ' ' | tr '\\n' ';'; "
        "git init -q r && cd r && git config user.email a@b && git config user.name a && "
        "echo x > f && git add f && git commit -qm first && git log --format=%s",
        " 1 a; 2 b;first\n",
    ),
    "pip": (
        "pip3",
        {},
        "python3 -c \"import zipfile; z = zipfile.ZipFile('tiny-1.0-py3-none-any.whl', 'w'); "
        "z.writestr('tiny.py', 'X = 42'); "
        "z.writestr('tiny-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: tiny\\n"
        "Version: 1.0\\n'); "
        "z.writestr('tiny-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\n"
        "Tag: py3-none-any\\n'); "
        "z.writestr('tiny-1.0.dist-info/RECORD', ''); z.close()\" && "
        "python3 -m pip install -q --no-index --no-cache-dir --disable-pip-version-check "
        "--target lib tiny-1.0-py3-none-any.whl && "
        "cd lib && python3 -c 'import tiny; print(tiny.X)'",
        "42\n",
    ),
}
"""Each runtime's program, from the tool that must be there: threads, child processes,
files, sockets (the allowlist is built from what these call)."""


@pytest.fixture
def roomy(tier: str, local_root: Path) -> Iterator[tuple[SandboxClient, Sandbox, str]]:
    """A sandbox with room for a toolchain's work (rustc links through ~100 MB of objects)."""
    with _sandbox_of(
        tier, local_root, memory_mb=2048, disk_mb=1024, file_size_mb=512, cpu_seconds=120
    ) as made:
        yield made


@pytest.mark.slow
@pytest.mark.usefixtures("filtered")
@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_runtimes_run_under_the_filter(
    roomy: tuple[SandboxClient, Sandbox, str], runtime: str
) -> None:
    """Compilers and runtimes with their threads, pools and child processes (Java's many
    calls, libuv's thread pool, Go's and Rust's runtimes), the shell, git and pip installing a
    wheel offline, each where the sandbox has it."""
    _, sb, _ = roomy
    tool, sources, command, expected = RUNTIMES[runtime]
    found = sb.exec(["sh", "-c", f"command -v {tool}"], timeout=60)
    if found.returncode != 0:
        pytest.skip(f"{tool} is not installed where the sandbox runs programs")
    for name, text in sources.items():
        sb.write_file(name, text)
    done = sb.exec(["sh", "-c", command], timeout=180)
    assert (done.returncode, done.stdout) == (0, expected), done.stderr


# -- the host's file API against a program that rearranges its files ----------------------


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the host resolves sandbox paths: ``openat2`` where the kernel has it, else the
    walk from directory to directory (forced here, so both are tested on every kernel)."""
    if request.param == "openat2" and not files.use_openat2:
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(files, "use_openat2", request.param == "openat2")
    return str(request.param)


SWAPPER = (
    "import ctypes, os, sys, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "a, b = (os.path.expandvars(name).encode() for name in sys.argv[1:])\n"
    "print('swapping', flush=True)\n"
    "open('started', 'w').close()\n"
    "n, end = 0, time.monotonic() + 60\n"
    "while time.monotonic() < end and not os.path.exists('stop'):\n"
    "    for _ in range(1000):\n"
    "        n += libc.syscall(316, -100, a, -100, b, 2) == 0  # renameat2 RENAME_EXCHANGE\n"
    "print(n)\n"
)
"""Swaps two names for as long as the host works (x86_64: renameat2 is syscall 316)."""

RACES = {
    # What the program sets up, the names it swaps, what the host reads and writes.
    "a directory on the way": (
        "os.makedirs('race/d'); open('race/d/f', 'w').write('inside')\n"
        "os.symlink(HOST, 'race/l')\n",
        ("race/d", "race/l"),
        ("race/d/f", "race/d/new"),
    ),
    "the file itself": (
        "os.makedirs('race/d'); open('race/d/f', 'w').write('inside')\n"
        "os.symlink(HOST + '/f', 'race/d/l')\n",
        ("race/d/f", "race/d/l"),
        ("race/d/f", "race/d/f"),
    ),
    "a directory in /tmp": (
        "t = os.environ['TMPDIR']\n"
        "os.makedirs(t + '/d'); open(t + '/d/f', 'w').write('inside')\n"
        "os.symlink(HOST, t + '/l')\n",
        ("$TMPDIR/d", "$TMPDIR/l"),
        ("/tmp/d/f", "/tmp/d/new"),
    ),
}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the program calls syscall 316")
@pytest.mark.parametrize("race", list(RACES))
def test_racing_links_never_lead_the_file_api_out_of_the_sandbox(
    hostile: tuple[SandboxClient, Sandbox, str], resolution: str, race: str, tmp_path: Path
) -> None:
    """The program swaps a directory or file with a link to a host directory holding a secret
    (``renameat2(RENAME_EXCHANGE)`` in a loop) while the host reads and writes there: the
    host never reads the secret, never writes on the host."""
    _, sb, _ = hostile
    host = tmp_path / "host"
    host.mkdir()
    (host / "f").write_text("SECRET")
    setup, swapped, (read, write) = RACES[race]
    assert run(sb, f"import os\nHOST = {str(host)!r}\n{setup}")[0] == 0
    sb.write_file("swap.py", SWAPPER)
    argv = [PY, "swap.py", *swapped]
    swapper: list[str] = []
    thread = threading.Thread(target=lambda: swapper.append(sb.exec(argv, timeout=90).stdout))
    thread.start()
    try:
        # The host's reads and writes take a fraction of a second: start them once it swaps.
        assert wait_for_file(sb, "started"), "the swapper never started"
        read_back: list[bytes | str] = []
        deadline = time.monotonic() + 30
        got_through = False  # 400 reads at least, and on until one gets through the race
        while (len(read_back) < 400 or not got_through) and time.monotonic() < deadline:
            try:
                read_back.append(sb.read_file(read))
                got_through = got_through or read_back[-1] == b"inside"
            except SandboxError as exc:
                read_back.append(type(exc).__name__)
        for i in range(400):
            with contextlib.suppress(SandboxError):
                sb.write_file(write, f"written {i}")
    finally:
        sb.write_file("stop", "")
        thread.join(timeout=60)
    assert swapper and swapper[0].split()[0] == "swapping" and int(swapper[0].split()[1]) > 0
    assert b"SECRET" not in read_back
    assert b"inside" in read_back, "the race never let a read through: the test tests nothing"
    assert sorted(os.listdir(host)) == ["f"] and (host / "f").read_text() == "SECRET"


LINKS = (
    "import os\n"
    "os.makedirs('d'); open('d/f', 'w').write('inside')\n"
    "os.symlink('loop', 'loop')\n"
    "os.symlink('b', 'a'); os.symlink('a', 'b')\n"
    "os.symlink('d', 'inner'); os.symlink('d/f', 'innerfile')\n"
    "os.symlink('/workspace/d', 'absolute')\n"
    "os.makedirs(os.environ['TMPDIR'] + '/x'); os.symlink('../x', os.environ['TMPDIR'] + '/x/up')\n"
)
"""Link loops, and links that stay inside the sandbox: the host follows none of them."""


@pytest.mark.parametrize(
    "operation",
    [
        "read loop",
        "read a/f",
        "read inner/f",
        "read innerfile",
        "read absolute/f",
        "read /tmp/x/up/up/up",
        "write loop",
        "write a/f",
        "write inner/new",
        "remove /workspace/a/f",
        "cwd a",
        "cwd inner",
        "cwd /tmp/x/up",
    ],
)
def test_links_the_program_made_are_never_followed(
    hostile: tuple[SandboxClient, Sandbox, str], resolution: str, operation: str
) -> None:
    """A link loop is a ``SandboxError`` (it was a bare ``RuntimeError``), and so is a link
    that stays inside the sandbox: whether it does is only known by following it."""
    client, sb, _ = hostile
    backend = client.backend_as(SubprocessBackend)
    assert run(sb, LINKS)[0] == 0
    verb, path = operation.split()
    calls = {
        "read": lambda: sb.read_file(path),
        "write": lambda: sb.write_file(path, "x"),
        "remove": lambda: run_sync(remove_from_host(backend, sb.id, path)),
        "cwd": lambda: sb.exec([PY, "-c", "pass"], cwd=path, timeout=30),
    }
    with pytest.raises(SandboxError):
        calls[verb]()
    listing = "import os; print(sorted(os.listdir()), open('d/f').read())"
    r = sb.exec([PY, "-c", listing], timeout=30)
    expected = ["a", "absolute", "b", "d", "inner", "innerfile", "loop", "prog.py"]
    assert r.stdout == f"{expected} inside\n"


FIFOS = (
    "import os, socket\n"
    "os.mkfifo('fifo'); os.mkfifo(os.environ['TMPDIR'] + '/fifo'); os.mkfifo('notadir')\n"
    "socket.socket(socket.AF_UNIX).bind('sock')\n"
)


@pytest.mark.parametrize(
    "operation", ["read fifo", "read /tmp/fifo", "read notadir/f", "read sock", "write fifo"]
)
def test_a_fifo_or_socket_never_holds_up_the_host(
    hostile: tuple[SandboxClient, Sandbox, str],
    resolution: str,
    operation: str,
    local_root: Path,
) -> None:
    """Reading a FIFO with no writer blocked the event loop, and with it every exec of every
    other sandbox of the process: it is refused at once, and the other sandbox's exec runs."""
    client, sb, _ = hostile
    assert run(sb, FIFOS)[0] == 0
    verb, path = operation.split()
    other = client.sandbox()
    outcome: list[BaseException | bytes | None] = []
    results: list[str] = []

    def call() -> None:
        try:
            outcome.append(sb.read_file(path) if verb == "read" else sb.write_file(path, "x"))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    bystander = threading.Thread(
        target=lambda: results.append(other.exec([PY, "-c", "print(6 * 7)"], timeout=30).stdout),
        daemon=True,
    )
    try:
        caller.start()
        bystander.start()
        caller.join(timeout=30)
        bystander.join(timeout=60)
        assert not caller.is_alive(), f"{operation} blocked"
        assert results == ["42\n"], "another sandbox's exec was held up"
        assert len(outcome) == 1 and isinstance(outcome[0], SandboxError), outcome
    finally:
        for fifo in ("workspace/fifo", "tmp/fifo", "workspace/notadir"):
            with contextlib.suppress(OSError):  # let a blocked reader go
                os.close(os.open(local_root / sb.id / fifo, os.O_WRONLY | os.O_NONBLOCK))
        other.stop()


UNDELETABLE = r"""
import os, sys, subprocess
host, top = sys.argv[1], os.getcwd()
os.symlink(host, 'host')  # never followed: the host's directory stays whole
os.symlink(host, os.environ['TMPDIR'] + '/host')
for name in ('a\nb', '\udcff\udcfe', '-rf', ' ', '..x'):
    open(name, 'w').close()
os.mkdir('deep')
os.chdir('deep')
for i in range(1500):  # deeper than any recursive delete's stack
    os.mkdir('d')
    os.chdir('d')
open('f', 'w').close()
os.chdir(top)
for closed in ('deep', os.environ['TMPDIR']):
    os.chmod(closed, 0)  # the host must give itself access back to empty them
# Still writing while the sandbox is stopped: the stop deletes what appears meanwhile.
subprocess.Popen([sys.executable, '-c',
    'import os, itertools\n'
    'for i in itertools.count(): open(f"late{i}", "w").close()'], cwd='.')
open('ready', 'w').close()
import time; time.sleep(60)
"""


@pytest.mark.parametrize("storage", ["tmpfs", "directory"])
def test_stop_deletes_whatever_the_program_left(
    tier: str, storage: str, local_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree deeper than a recursive delete can go, directories without permissions, names no
    shell quotes easily, links to a host directory, a process still writing: ``stop`` leaves
    nothing of the sandbox and deletes nothing on the host. On a root host a sandbox's
    directory is a tmpfs, which goes whole; elsewhere (``directory``) it is deleted file by
    file."""
    if storage == "tmpfs" and not disk.can_mount():
        pytest.skip("this host cannot mount a tmpfs per sandbox")
    monkeypatch.setattr(disk, "can_mount", lambda: storage == "tmpfs")
    host = tmp_path / "host"
    host.mkdir()
    (host / "keep").write_text("host data")
    with _sandbox_of(tier, local_root) as (client, sb, _):
        assert client.backend.disk_limit == storage.replace("directory", "file size")  # type: ignore[attr-defined]
        sb.write_file("undeletable.py", UNDELETABLE)
        argv = [PY, "undeletable.py", str(host)]

        def hold() -> None:
            with contextlib.suppress(SandboxError):  # stopped under it
                sb.exec(argv, timeout=120)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                sb.read_file("ready")
                break
            time.sleep(0.1)
        else:
            pytest.fail("the program never got ready")
        sb.stop()
        holder.join(timeout=30)
    assert (host / "keep").read_text() == "host data"
    assert sorted(os.listdir(host)) == ["keep"]


@pytest.mark.parametrize("planted", ["world-writable", "a link"])
def test_a_local_root_another_user_could_have_made_is_refused(tmp_path: Path, planted: str) -> None:
    """In a shared /tmp, whoever makes ``sandboxkit-<uid>`` first decides what the sandboxes
    run (the interpreter links, the sandboxes' state): a root that is not ours alone is an
    error, not a place to work in."""
    root = tmp_path / "root"
    if planted == "a link":
        (tmp_path / "theirs").mkdir(mode=0o711)
        root.symlink_to(tmp_path / "theirs")
    else:
        root.mkdir()
        root.chmod(0o777)
    with pytest.raises(SandboxError, match=r"the local backend's root .* only uid"):
        get_backend("subprocess", root=root)


# -- multi-turn rollouts: what one rollout leaves for the next ---------------------------------

PLANT = r"""
mkdir -p locked/deep && echo x > locked/deep/f && chmod 000 locked
echo h > .hidden; echo d > ./-rf; echo n > "$(printf 'new\nline')"; echo t > /tmp/.left
ln -s /etc/hostname host-link
mkdir -p .sandboxkit/kernel/lib/cloudpickle
echo 'print("POISONED")' >> .sandboxkit/kernel/lib/cloudpickle/__init__.py
(setsid sh -c 'while :; do echo alive-MARK >> survivor.txt; sleep 0.05; done' &) ; sleep 0.2
"""


def test_what_a_rollout_leaves_reaches_no_later_rollout(tier: str, local_root: Path) -> None:
    """Rollout A plants files of every awkward kind (no permissions, hidden, named like an
    option, with a newline, a link to a host file, in /tmp), poisons the interpreter's copy of
    cloudpickle, keeps a variable and leaves a detached process writing: the rollout after it
    on the same lender, in the reused (wiped) sandbox or a new one, finds none of it."""
    hostname = Path("/etc/hostname").read_bytes() if Path("/etc/hostname").exists() else None
    # The rlimits tier sees the host's processes, whose command lines may quote this file:
    # the survivor is looked for by a mark made now.
    mark = uuid.uuid4().hex

    async def rollouts() -> tuple[list[str], SandboxLender]:
        lender = SandboxLender(get_backend("subprocess", root=local_root))
        first = Rollout(lender, timeout=10)
        await first.arun_python("def f(x):\n    return x\nsecret = f('planted')")
        await first.arun_shell(PLANT.replace("MARK", mark))
        await first.arelease()
        second = Rollout(lender, timeout=10)
        seen = [
            await second.arun_shell("sleep 0.3; ls -A . /tmp"),
            await second.arun_python("def g():\n    return 1\nsecret"),
            await second.arun_python("g()"),  # loads a state that needs cloudpickle
            await second.arun_shell("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"),
        ]
        await second.arelease()
        await lender.aclose()
        return seen, lender

    try:
        (listing, secret, poisoned, processes), lender = asyncio.run(rollouts())
    finally:  # the rlimits tier's /tmp is the host's, shared by every sandbox (docs/isolation.md)
        with contextlib.suppress(OSError):
            Path("/tmp/.left").unlink()
    own_tmp = tier == "namespaces"
    if own_tmp:
        assert listing.split() == [".:", "/tmp:"]
    else:
        assert listing.split(".:")[1].split("/tmp:")[0].split() == []
    assert "NameError" in secret and "planted" not in secret
    assert poisoned == "1" and "POISONED" not in secret + poisoned
    assert mark not in processes
    assert lender.stats.leases == 2
    if hostname is not None:
        assert Path("/etc/hostname").read_bytes() == hostname


async def after_a_rollout(
    local_root: Path,
    plant: Callable[[Rollout], Awaitable[str]],
    look: Callable[[Rollout], Awaitable[str]],
    **options: Any,
) -> tuple[str, str, str]:
    """What ``plant`` said in a rollout, what ``look`` sees in the next on the same lender
    (made with ``options``, closed after), and the lender's stats."""
    lender = SandboxLender(get_backend("subprocess", root=local_root), **options)
    first = Rollout(lender, timeout=10)
    planted = await plant(first)
    await first.arelease()
    second = Rollout(lender, timeout=10)
    seen = await look(second)
    await second.arelease()
    await lender.aclose()
    return planted, seen, repr(lender.stats)


def test_a_rollout_leaves_nothing_in_dev_for_the_next(tier: str, local_root: Path) -> None:
    """``/dev`` is outside the wipe (the workdir and ``/tmp``) and, under the warm template,
    the template's for its life: a file, a FIFO or a link a rollout leaves there must not
    reach the next rollout of the reused sandbox."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier has the host's /dev (docs/isolation.md)")
    mark = uuid.uuid4().hex

    async def plant(first: Rollout) -> str:
        await first.arun_shell(
            f"echo {mark} > /dev/left; mkfifo /dev/fifo; ln -s /workspace /dev/link"
        )
        return await first.arun_python(f"open('/dev/py', 'w').write('{mark}')")

    def look(second: Rollout) -> Awaitable[str]:
        return second.arun_shell("ls -A /dev; cat /dev/left /dev/py")

    _, seen, stats = asyncio.run(after_a_rollout(local_root, plant, look))
    assert "reused=1" in stats
    assert mark not in seen and "fifo" not in seen and "link" not in seen, seen


def test_a_rollout_leaves_no_marks_on_its_directories_for_the_next(
    tier: str, local_root: Path
) -> None:
    """The wipe empties the workdir and ``/tmp`` but keeps the directories themselves: data a
    rollout hides in their extended attributes, modes or times must not reach the next rollout
    of the reused sandbox."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier's sandboxes are replaced, not reused, and /tmp is the host's")
    mark = uuid.uuid4().hex
    plant = (
        "python3 -c \"import os\nfor p in (os.getcwd(), '/tmp'):\n"
        f"    os.setxattr(p, 'user.m', b'{mark}')\""
        "; chmod 1705 /tmp; touch -d @123456789 . /tmp"
    )
    show = (
        "import os\n[(os.listxattr(p), oct(s.st_mode), min(s.st_mtime, s.st_atime) < 2e8)"
        " for p in (os.getcwd(), '/tmp') for s in [os.stat(p)]]"
    )

    planted, seen, stats = asyncio.run(
        after_a_rollout(
            local_root, lambda first: first.arun_shell(plant), lambda r: r.arun_python(show)
        )
    )
    if "Error" in planted:
        pytest.skip(f"no user extended attributes on this kernel's tmpfs: {planted}")
    assert "reused=1" in stats
    unmarked = "([], '0o40700', False)"
    assert seen == f"[{unmarked}, {unmarked}]", seen


def test_a_rollout_leaves_nothing_beside_its_workdir_for_the_next(
    tier: str, local_root: Path
) -> None:
    """With a workdir below ``/workspace``, the rest of ``/workspace`` (``$HOME``: dotfiles,
    ``~/.local`` site-packages) is writable too: what a rollout leaves there must not reach
    the next rollout of the reused sandbox, whose workdir is there again."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier's sandboxes are replaced, not reused, and $HOME the host's")
    mark = uuid.uuid4().hex

    _, seen, stats = asyncio.run(
        after_a_rollout(
            local_root,
            lambda first: first.arun_shell(
                f'echo {mark} > ../left; echo {mark} > "$HOME/.profile"'
            ),
            lambda second: second.arun_shell('pwd; ls -A /workspace; cat ../left "$HOME/.profile"'),
            workdir="/workspace/project",
        )
    )
    assert "reused=1" in stats
    assert seen.startswith("/workspace/project\nproject\n"), seen
    assert mark not in seen, seen


SYSV_PLANT = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(0x5EED, 4096, 0o1666)
ctypes.memmove(libc.shmat(segment, None, 0), b"MARK", 4)
queue = libc.msgget(0x5EED, 0o1666)
message = (ctypes.c_long * 3)(1, int.from_bytes(b"MARK", "little"), 0)
print(segment >= 0, queue >= 0, libc.msgsnd(queue, message, 16, 0) == 0)
"""
SYSV_LOOK = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment, queue = libc.shmget(0x5EED, 0, 0), libc.msgget(0x5EED, 0)
seen = ctypes.string_at(libc.shmat(segment, None, 0), 4) if segment >= 0 else b""
print(segment, queue, seen)
"""


def test_a_rollout_leaves_no_ipc_objects_for_the_next(tier: str, local_root: Path) -> None:
    """System V shared memory and message queues outlive the process that made them, in the
    IPC namespace it ran in: one a rollout made (with a key the next one can guess) must not
    be there for the next rollout of the reused sandbox."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier shares the host's IPC objects (docs/isolation.md)")
    mark = uuid.uuid4().hex[:4]

    planted, seen, stats = asyncio.run(
        after_a_rollout(
            local_root,
            lambda first: first.arun_python(SYSV_PLANT.replace("MARK", mark)),
            lambda second: second.arun_python(SYSV_LOOK),
        )
    )
    assert planted.startswith("True True True"), planted
    assert "reused=1" in stats
    assert seen.startswith("-1 -1 b''"), seen


def test_a_wipe_empties_the_sandboxs_temporary_directory_not_the_hosts(
    tier: str, local_root: Path
) -> None:
    """A lender told to reuse sandboxes where /tmp is the host's (the rlimits tier) wipes the
    sandbox's own temporary directory: what another program keeps in the host's /tmp (a
    world-writable directory, as Ray's sockets are in) is not the wipe's to remove."""
    host = Path(tempfile.mkdtemp(prefix="sandboxkit-host-", dir="/tmp"))
    host.chmod(0o777)
    (host / "socket").write_text("theirs")
    (host / "socket").chmod(0o666)

    async def wipe() -> tuple[str, int]:
        lender = SandboxLender(get_backend("subprocess", root=local_root), reuse=True)
        try:
            sandbox = await lender.alease()
            made = await sandbox.aexec(["sh", "-c", 'echo x > "${TMPDIR:-/tmp}/mine"'])
            assert made.ok, made.stderr
            await lender.areturn(sandbox)
            again = await lender.alease()
            left = await again.aexec(["sh", "-c", 'ls -A "${TMPDIR:-/tmp}"'])
            return left.stdout, lender.stats.reused
        finally:
            await lender.aclose()

    try:
        left, reused = asyncio.run(wipe())
        assert (host / "socket").read_text() == "theirs"
    finally:
        shutil.rmtree(host, ignore_errors=True)
    assert left == "" and reused == 1


def test_a_rollout_released_mid_call_leaves_its_late_writes_to_no_one(
    tier: str, local_root: Path
) -> None:
    """Released while two of its calls still run (the second on the cold path while the first
    holds the warm template), rollout A's sandbox goes back only once both end: no later
    rollout can find what they write after the release."""

    async def rollouts() -> list[str]:
        lender = SandboxLender(get_backend("subprocess", root=local_root))
        first = Rollout(lender, timeout=10)
        await first.arun_shell("true")  # the sandbox is leased, the template started
        late = [
            asyncio.ensure_future(first.arun_shell(f"sleep 1; echo late > late{i}.txt"))
            for i in range(2)
        ]
        await asyncio.sleep(0.2)
        first.release()
        second = Rollout(lender, timeout=10)
        seen = [await second.arun_shell("sleep 1.5; ls -A")]
        await asyncio.gather(*late)
        await lender.asettle()
        third = Rollout(lender, timeout=10)  # the wiped sandbox of A, or B's
        seen.append(await third.arun_shell("ls -A"))
        for rollout in (second, third):
            await rollout.arelease()
        await lender.aclose()
        return seen

    for listing in asyncio.run(rollouts()):
        assert "late" not in listing, listing


@pytest.mark.slow
def test_a_release_cancelled_while_a_call_runs_still_hands_the_sandbox_back(
    tier: str, local_root: Path
) -> None:
    """A caller that gives up waiting on ``arelease`` (a timeout around it) while a call of
    the rollout still runs: that call still answers with text, and the sandbox still goes
    back to the lender (wiped for the next rollout, or replaced), rather than staying leased
    to no one."""

    async def rollouts() -> tuple[str, str, int]:
        lender = SandboxLender(get_backend("subprocess", root=local_root))
        first = Rollout(lender, timeout=10)
        await first.arun_shell("true")
        call = asyncio.ensure_future(first.arun_shell("sleep 1; echo late > late.txt; echo done"))
        await asyncio.sleep(0.2)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(first.arelease(), 0.1)
        answer = await call
        await lender.asettle()
        second = Rollout(lender, timeout=10)
        listing = await second.arun_shell("ls -A")
        reused = lender.stats.reused  # the first sandbox, wiped, or the spare replacing it
        await second.arelease()
        await lender.aclose()
        return answer, listing, reused

    answer, listing, reused = asyncio.run(rollouts())
    assert answer == "done"
    assert reused == 1
    assert "late" not in listing, listing


def test_a_release_cancelled_during_the_wipe_still_hands_the_sandbox_back(
    tier: str, local_root: Path
) -> None:
    """A caller that gives up on ``arelease`` while the sandbox is being wiped (no call in
    flight, a slow wipe of many files): the wipe goes on, and the sandbox is lent again (or
    replaced) rather than held by no one until the lender closes."""

    async def rollouts() -> tuple[int, int]:
        client = get_backend("subprocess", root=local_root)
        lender = SandboxLender(client)
        first = Rollout(lender, timeout=30)
        await first.arun_shell("mkdir d && cd d && seq 3000 | xargs touch")
        release = asyncio.ensure_future(first.arelease())
        await asyncio.sleep(0.02)
        release.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await release
        await lender.asettle()
        second = Rollout(lender, timeout=10)
        await second.arun_shell("true")
        counts = lender.stats.reused, len(await client.alist())
        await second.arelease()
        await lender.aclose()
        return counts

    reused, live = asyncio.run(rollouts())
    assert reused == 1  # the first sandbox, wiped, or the spare replacing it
    assert live == 1  # and no other


def test_concurrent_first_calls_of_a_rollout_share_one_sandbox(tier: str, local_root: Path) -> None:
    """Two calls racing to lease the rollout's sandbox get the same one (a second lease would
    be a sandbox no one gives back until the run ends)."""

    async def rollout() -> tuple[list[str], int]:
        lender = SandboxLender(get_backend("subprocess", root=local_root))
        mine = Rollout(lender, timeout=10)
        outs = await asyncio.gather(
            mine.arun_shell("echo a > a.txt; sleep 0.3; ls"),
            mine.arun_shell("echo b > b.txt; sleep 0.3; ls"),
        )
        leases = lender.stats.leases
        await mine.arelease()
        await lender.aclose()
        return list(outs), leases

    outs, leases = asyncio.run(rollout())
    assert leases == 1
    assert all(out.split() == ["a.txt", "b.txt"] for out in outs), outs


# -- what an exec leaves in the kernel's state: nothing reaches the next exec, nor rollout ------

TIME_WAIT_PLANT = r"""
import socket
server = socket.socket()
server.bind(("127.0.0.1", PORT))
server.listen()
client = socket.socket()
client.bind((ADDRESS, 0))  # the bytes to pass on, in the address and the ports
client.connect(("127.0.0.1", PORT))
peer, _ = server.accept()
peer.sendall(b"x" * 1000)
peer.close()  # closed first: TIME_WAIT on the server's port, for 60 s after the exec
while client.recv(4096):
    pass
client.close()
states = [line.split()[3] for line in open("/proc/net/tcp").readlines()[1:]]
print("planted", states.count("06"))
"""
UDP_PLANT = r"""
import socket
inbox = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
inbox.bind(("127.0.0.1", 0))
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(COUNT):  # a count and a size to pass on
    sender.sendto(b"y" * COUNT, inbox.getsockname())
    sender.sendto(b"y", ("127.0.0.1", 9))  # no one there: NoPorts
print("planted", sum(len(inbox.recv(4096)) for _ in range(COUNT)))
"""
SHM_MARK_PLANT = r"""
import os
os.chmod("/dev/shm", 0o1707)
os.utime("/dev/shm", (123456789, 123456789))
try:
    os.setxattr("/dev/shm", "user.mark", b"MARK")
except OSError as exc:  # no user extended attributes on this kernel's tmpfs
    print(exc)
print("planted", oct(os.stat("/dev/shm").st_mode))
"""
INODE_PLANT = r"""
import os
for i in range(COUNT):  # a count to pass on: made and removed, nothing left to list
    open(os.path.join(DIR, f"n{i}"), "w").close()
    os.remove(os.path.join(DIR, f"n{i}"))
print("planted", COUNT)
"""
IN_FLIGHT_PLANT = r"""
import socket
# A listening TCP socket and a Unix one bound to an abstract name, kept alive after the exec
# by a cycle of sockets in flight, each holding the other's descriptor (until the kernel's
# garbage collector runs, which may be after the next exec started).
a, b = socket.socketpair()
named = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
named.bind(b"\0sbx-MARK")
server = socket.socket()
server.bind(("127.0.0.1", PORT))
server.listen()
socket.send_fds(a, [b"x"], [a.fileno(), b.fileno(), named.fileno(), server.fileno()])
socket.send_fds(b, [b"x"], [a.fileno(), b.fileno()])
print("planted")
"""
SNMP_LOOK = r"""
def counters(section, *names):
    lines = [line.split() for line in open("/proc/net/snmp") if line.startswith(section + ":")]
    return [lines[1][lines[0].index(name)] for name in names]
print(*counters("Tcp", "ActiveOpens", "PassiveOpens", "InSegs", "OutSegs"))
print(*counters("Udp", "InDatagrams", "NoPorts", "OutDatagrams"))
"""
LOOKS = {
    "sockets": "print([open(f'/proc/net/{n}').readlines()[1:] for n in ('tcp', 'tcp6', 'udp')])",
    "port": (
        "import socket\nserver = socket.socket()\n"
        "try:\n    server.bind(('127.0.0.1', PORT))\n    server.listen()\n    print('free')\n"
        "except OSError as exc:\n    print(exc)"
    ),
    "snmp": SNMP_LOOK,
    "connect": (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT), timeout=10)\n"
        "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__)"
    ),
    "abstract": (
        "import socket\ntry:\n    socket.socket(socket.AF_UNIX).bind(b'\\0sbx-MARK')\n"
        "    print('free')\nexcept OSError as exc:\n    print(exc)"
    ),
    "lo": "print(open('/proc/net/dev').read().split('lo:')[1].split()[:10])",
    "shm": (
        "import os\ns = os.stat('/dev/shm')\n"
        "print(os.listxattr('/dev/shm'), oct(s.st_mode), min(s.st_mtime, s.st_atime) < 2e8)"
    ),
    "inode": (
        "import os\nprobe = os.path.join(DIR, 'probe')\nopen(probe, 'w').close()\n"
        "print(os.stat(probe).st_ino)\nos.remove(probe)"
    ),
}
KERNEL_STATE = {  # what an exec plants, what the next looks at, what a new sandbox shows there
    "TIME_WAIT sockets' ports and addresses": (TIME_WAIT_PLANT, "sockets", "[[], [], []]"),
    "a port left in TIME_WAIT, listened on": (TIME_WAIT_PLANT, "port", "free"),
    "TCP counters": (TIME_WAIT_PLANT, "snmp", "0 0 0 0\n0 0 0"),
    "UDP counters": (UDP_PLANT, "snmp", "0 0 0 0\n0 0 0"),
    "loopback byte and packet counters": (UDP_PLANT, "lo", str(["0"] * 10)),
    "a listening port kept open in flight, connected to": (
        IN_FLIGHT_PLANT,
        "connect",
        "ConnectionRefusedError",
    ),
    "an abstract Unix name kept bound in flight": (IN_FLIGHT_PLANT, "abstract", "free"),
    "/dev/shm's extended attributes, mode and times": (SHM_MARK_PLANT, "shm", "[] 0o40755 False"),
    "a /dev/shm inode number": (INODE_PLANT, "inode", None),
}


def kernel_state_case(case: str, mark: str, where: str = "'/dev/shm'") -> tuple[str, str]:
    """The plant and the look of ``case`` (an inode number's in the directory that the
    expression ``where`` names), with the bytes of ``mark`` to pass on."""
    plant, look_at, _ = KERNEL_STATE.get(case) or (INODE_PLANT, "inode", None)
    look = LOOKS[look_at]
    number = int(mark[:4], 16)
    values = {
        "PORT": str(20000 + number % 20000),
        "ADDRESS": repr(f"127.{number >> 8}.{number & 0xFF}.{int(mark[4:6], 16) or 1}"),
        "COUNT": str(10 + number % 50),  # datagrams that fit a socket buffer
        "MARK": mark,
        "DIR": where,
    }
    for name, value in values.items():
        plant, look = plant.replace(name, value), look.replace(name, value)
    return plant, look


@pytest.mark.parametrize("case", list(KERNEL_STATE))
def test_what_an_exec_leaves_in_the_kernel_reaches_no_later_exec(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, case: str
) -> None:
    """Warm execs of a sandbox are forked from one template: what an exec leaves in the
    network namespace (sockets in TIME_WAIT, whose ports and addresses carry bytes for 60 s,
    the TCP, UDP and loopback counters) or on /dev/shm (its metadata; its inode numbers, a
    counter even when no file is left) must not reach the next exec, which sees what an exec
    of a new sandbox sees, as on the cold path (a fresh bwrap per exec)."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier shares the host's network and /dev/shm (docs/isolation.md)")
    client, sb, _ = hostile
    plant, look = kernel_state_case(case, uuid.uuid4().hex)
    before = run(sb, look)
    planted = run(sb, plant)
    after = run(sb, look)
    assert planted[0] == 0 and "planted" in planted[1], planted
    assert client.backend_as(SubprocessBackend).last_cold_reason is None  # warm where warm
    expected = KERNEL_STATE[case][2]
    assert before[:2] == (0, f"{expected}\n" if expected else before[1]), before
    assert after == before, (before, after)


STORAGE = {"a /workspace inode number": "'.'", "a /tmp inode number": "os.environ['TMPDIR']"}
"""The sandbox's storage, which a rollout's execs share, by the expression that names it
where the program runs (the rlimits tier maps /workspace and /tmp in argv only)."""


@pytest.mark.parametrize("case", [*KERNEL_STATE, *STORAGE])
def test_what_a_rollout_leaves_in_the_kernel_reaches_no_later_rollout(
    tier: str, local_root: Path, case: str
) -> None:
    """What a rollout leaves in the kernel's state of its sandbox (the network namespace and
    /dev/shm of the warm template; the inode numbers of the sandbox's storage, which count on
    after every file is removed) must not reach the next rollout of the reused sandbox: it
    sees what the first rollout saw in the new sandbox."""
    storage = STORAGE.get(case)
    if tier == "rlimits" and storage is None:
        pytest.skip("the rlimits tier shares the host's network and /dev/shm (docs/isolation.md)")
    plant, look = kernel_state_case(case, uuid.uuid4().hex, *([storage] if storage else []))

    def shell(program: str) -> str:
        return "python3 -c " + shlex.quote(program)

    async def look_then_plant(first: Rollout) -> str:
        before = await first.arun_shell(shell(look))
        planted = await first.arun_shell(shell(plant))
        assert "planted" in planted, planted
        return before

    before, seen, stats = asyncio.run(
        after_a_rollout(local_root, look_then_plant, lambda r: r.arun_shell(shell(look)))
    )
    expected = KERNEL_STATE[case][2] if storage is None else None
    assert before == (expected or before), before
    assert "reused=1" in stats or tier == "rlimits", stats
    assert seen == before, (before, seen)


@pytest.mark.parametrize(
    "case",
    ["TIME_WAIT sockets' ports and addresses", "UDP counters", "a /workspace inode number"],
)
def test_what_a_trl_rollout_leaves_in_the_kernel_reaches_none_after_reset(
    tier: str, local_root: Path, case: str
) -> None:
    """The same through TRL's environment: after ``reset``, the next rollout on the reused
    sandbox sees what the first saw in the new sandbox."""
    storage = STORAGE.get(case)
    if tier == "rlimits" and storage is None:
        pytest.skip("the rlimits tier shares the host's network and /dev/shm (docs/isolation.md)")
    plant, look = kernel_state_case(case, uuid.uuid4().hex, *([storage] if storage else []))
    environment = sandbox_environment(get_backend("subprocess", root=local_root), timeout=10)
    try:
        env = environment()
        env.reset(prompt="first")
        before = env.run_shell("python3 -c " + shlex.quote(look))
        assert "planted" in env.run_shell("python3 -c " + shlex.quote(plant))
        env.reset(prompt="second")
        seen = env.run_shell("python3 -c " + shlex.quote(look))
        reused = environment.lender().stats.reused
    finally:
        environment.close_all()
    expected = KERNEL_STATE[case][2] if storage is None else None
    assert before == (expected or before), before
    assert reused == 1 or tier == "rlimits", reused
    assert seen == before, (before, seen)


NETWORK_SOCKETS = {  # a program, what it prints wherever an exec runs
    "a TCP echo over loopback from threads that make their sockets at once": (
        r"""
import socket, threading
echoed = []
def echo(i):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(b"%d" % i)
    peer.sendall(peer.recv(16) * 2)
    echoed.append(client.recv(16))
threads = [threading.Thread(target=echo, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sorted(echoed) == sorted(b"%d%d" % (i, i) for i in range(16)))
""",
        "True",
    ),
    "UDP and IPv6 sockets": (
        r"""
import socket
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    inbox = socket.socket(family, socket.SOCK_DGRAM)
    inbox.bind((host, 0))
    socket.socket(family, socket.SOCK_DGRAM).sendto(b"datagram", inbox.getsockname())
    print(inbox.recv(16))
""",
        "b'datagram'\nb'datagram'",
    ),
    "the kernel's errors: no capability, bad arguments, a full descriptor table": (
        r"""
import ctypes, os, resource, socket
libc = ctypes.CDLL(None, use_errno=True)
def error(*args):
    fd = libc.socket(*args)
    return os.close(fd) if fd >= 0 else ctypes.get_errno()
raw = error(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
print(raw, error(socket.AF_INET, 77, 0), error(socket.AF_INET6, socket.SOCK_STREAM, -1))
print(error(socket.AF_NETLINK, socket.SOCK_RAW, 99), error(44, socket.SOCK_STREAM, 0))
free = os.open(os.devnull, os.O_RDONLY)
os.close(free)
resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(error(socket.AF_INET, socket.SOCK_STREAM, 0))
""",
        "1 22 22\n93 97\n24",
    ),
    "close-on-exec and non-blocking as asked, and no other descriptor": (
        r"""
import ctypes, fcntl, os, socket
libc = ctypes.CDLL(None, use_errno=True)
plain = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
flags = socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
flagged = libc.socket(socket.AF_INET, socket.SOCK_DGRAM | flags, 0)
print(fcntl.fcntl(plain, fcntl.F_GETFD), os.get_blocking(plain))
print(fcntl.fcntl(flagged, fcntl.F_GETFD), os.get_blocking(flagged))
print(sorted(os.listdir("/proc/self/fd"), key=int))
""",
        "0 True\n1 False\n['0', '1', '2', '3', '4', '5']",
    ),
    "a netlink socket sees the exec's own devices": (
        "import socket\nprint(socket.if_nameindex())",
        "[(1, 'lo')]",
    ),
}


@pytest.mark.parametrize("case", list(NETWORK_SOCKETS))
def test_network_sockets_work_in_an_exec_as_in_a_new_sandbox(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, case: str
) -> None:
    """A warm exec starts in the sandbox's own network namespace and gets one of its own
    only at its first network socket, made by a supervisor with none of its capabilities:
    its sockets must be what a cold exec's are, concurrent ones included (threads racing
    the supervisor), with the kernel's errors (a raw socket needs a capability the command
    lacks; the descriptor table is the caller's), its flags, and nothing else in its hands."""
    if tier == "rlimits" and case.startswith("a netlink socket"):
        pytest.skip("the rlimits tier shares the host's network (docs/isolation.md)")
    client, sb, _ = hostile
    program, expected = NETWORK_SOCKETS[case]
    assert run(sb, program, timeout=60) == (0, f"{expected}\n", "", False)
    assert client.backend_as(SubprocessBackend).last_cold_reason is None  # warm where warm


DYING_MID_SOCKETS = {
    "killed by itself": "os.kill(os.getpid(), signal.SIGKILL)",
    "exits from a thread": "os._exit(3)",
    "exits, leaving a child that goes on": "os._exit(0) if os.fork() else flood()",
    "times out": "time.sleep(60)",
}
"""How an exec whose threads make sockets as fast as they can ends, mid-call."""


@pytest.mark.parametrize("ending", list(DYING_MID_SOCKETS))
def test_an_exec_that_ends_in_the_midst_of_socket_calls_leaves_the_next_working(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, ending: str
) -> None:
    """Each network socket of a warm exec is a notification to its supervisor: an exec that
    ends (killed, exited, timed out, or leaving a child behind) with many in flight must not
    hold up its own end nor the next exec, whose sockets work."""
    if ending == "times out" and tier != "namespaces":
        pytest.skip("a cold exec has no supervisor to time out on (its timeouts: tested above)")
    client, sb, _ = hostile
    program = f"""
import os, signal, socket, sys, threading, time
def flood():
    while True:
        for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
            except OSError:
                pass
for _ in range(8):
    threading.Thread(target=flood, daemon=True).start()
time.sleep(0.3)
print("flooding", flush=True)
{DYING_MID_SOCKETS[ending]}
"""
    code, out, _, timed_out = run(sb, program, timeout=3)
    assert out == "flooding\n" and timed_out == (ending == "times out"), (code, out)
    echo = NETWORK_SOCKETS["a TCP echo over loopback from threads that make their sockets at once"]
    assert run(sb, echo[0], timeout=60) == (0, f"{echo[1]}\n", "", False)
    assert client.backend_as(SubprocessBackend).last_cold_reason is None  # warm where warm


# -- a host uid per sandbox -------------------------------------------------------------------

root_host = pytest.mark.skipif(os.geteuid() != 0, reason="only a root host has uids to give")


# -- the judge's own uid ---------------------------------------------------------------------

JUDGE_PROBE = """
import os, resource

def reach(pid):
    # A bit per call on pid that works: calls no syscall filter stops, which the kernel
    # allows only within one uid (limits, priority, CPUs).
    got = 0
    attempts = (
        lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE),
        lambda: resource.prlimit(
            pid, resource.RLIMIT_CPU, resource.prlimit(pid, resource.RLIMIT_CPU)
        ),
        lambda: os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid)),
        lambda: os.sched_setaffinity(pid, os.sched_getaffinity(pid)),
    )
    for bit, attempt in enumerate(attempts):
        try:
            attempt()
            got |= 1 << bit
        except OSError:
            pass
    return got

def probe(judge):
    return reach(judge), reach(os.getppid())
"""
JUDGE_PROBE_TEST = "import os\nassert probe(os.getpid()) == (0, {parent})"
"""Run in the judge (the test's own code): the candidate reaches its zygote (15), not its
judge; where the zygote became the candidate's process, its parent is the judge (0)."""


@root_host
@pytest.mark.parametrize("all_or_nothing", [False, True], ids=["fraction", "all-or-nothing"])
def test_a_candidate_process_cannot_reach_its_judge_by_uid(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, all_or_nothing: bool
) -> None:
    """The judge takes a host uid of its own before any candidate process exists: the
    candidate's calls on its judge that no syscall filter stops (its limits: a lower
    RLIMIT_NOFILE or RLIMIT_CPU would end it; its priority and CPUs) fail with EPERM while
    the same calls on its zygote, of its own uid, work; warm and cold. All-or-nothing, the
    zygote becomes the candidate's process, whose parent is then the judge itself: out of
    its reach alike. The rlimits tier has one uid per sandbox (docs/isolation.md)."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier runs the judge and the candidate as one uid")
    _, sb, _ = hostile
    test = JUDGE_PROBE_TEST.format(parent=0 if all_or_nothing else 15)
    harness = AssertTests((test,), timeout=5, stop_at_first_failure=all_or_nothing)
    request = harness.request(JUDGE_PROBE)
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    outcome = harness.judge(result, request)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.PASSED, 1), outcome


@root_host
def test_a_rollouts_submission_cannot_reach_its_judge_by_uid(tier: str, local_root: Path) -> None:
    """The same through TRL's environment: a submission judged after the rollout's shell
    commands, and again after ``reset`` on the reused sandbox."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier runs the judge and the candidate as one uid")
    environment = sandbox_environment(get_backend("subprocess", root=local_root), timeout=10)
    rewards = []
    try:
        env = environment()
        for prompt in ("first", "second"):
            env.reset(prompt=prompt, test_list=[JUDGE_PROBE_TEST.format(parent=15)])
            env.run_shell("true")
            env.submit(JUDGE_PROBE)
            rewards.append(run_sync(env.get_reward()))
    finally:
        environment.close_all()
    assert rewards == [1.0, 1.0]


_TAKE_ALL_INOTIFY = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print(len(held), os.strerror(ctypes.get_errno()), flush=True)
open('started', 'w').close()
time.sleep(8)
"""
_INOTIFY_ONCE = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "print('inotify_init1:', 'ok' if libc.inotify_init1(0) >= 0 else "
    "os.strerror(ctypes.get_errno()))"
)


@contextlib.contextmanager
def _holding(
    sb: Sandbox, code: str, timeout: float = 30, env: dict[str, str] | None = None
) -> Iterator[list[Any]]:
    """Run ``code`` in ``sb`` (with ``env``) in the background until it created ``started``;
    yields the list its result lands in once the block ends."""
    done: list[Any] = []
    sb.write_file("holder.py", code)
    holder = threading.Thread(
        target=lambda: done.append(sb.exec([PY, "holder.py"], env=env, timeout=30))
    )
    holder.start()
    try:
        assert wait_for_file(sb, "started", timeout=timeout), "the holding program never started"
        yield done
    finally:
        holder.join()


def _uid_of(sb: Sandbox) -> int:
    r = sb.exec([PY, "-c", "import os; print(os.getuid(), os.geteuid(), os.getgid())"], timeout=60)
    uid, euid, gid = (int(n) for n in r.stdout.split())
    assert uid == euid == gid, r.stdout
    return uid


@root_host
def test_concurrent_sandboxes_run_as_host_uids_of_their_own(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Each sandbox holds a uid of the range no other live sandbox holds (and none is
    ``nobody``'s, which other software of the host runs as); its user namespace maps it to
    itself, so the uid a program sees is the host's."""
    client, first, _ = hostile
    uids = client.backend_as(SubprocessBackend).isolation.uids
    assert uids is not None
    with client.sandbox() as second, client.sandbox() as third:
        seen = [_uid_of(sb) for sb in (first, second, third)]
    assert len(set(seen)) == 3, seen
    assert all(uid in uids[:-1] for uid in seen), seen


@pytest.mark.slow
@root_host
def test_taking_every_inotify_instance_leaves_other_sandboxes_theirs(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """inotify instances are counted per host uid (``fs.inotify.max_user_instances``): one
    sandbox that takes them all must not make ``inotify_init`` fail in another."""
    client, sb, _ = hostile
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    with client.sandbox() as other, _holding(sb, _TAKE_ALL_INOTIFY) as done:
        r = other.exec([PY, "-c", _INOTIFY_ONCE], timeout=60)
        assert (r.returncode, r.stdout) == (0, "inotify_init1: ok\n"), r.stderr
    taken, why = done[0].stdout.split(" ", 1)
    assert (int(taken), why) == (limit, "Too many open files\n"), done[0].stdout


_SIGNAL_EVERYONE = """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
results = {}
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            if MARK not in f.read():
                continue
    except OSError:
        continue
    for name, attempt in (
        ('kill', lambda: os.kill(pid, signal.SIGKILL)),
        ('ptrace', lambda: libc.ptrace(16, pid, 0, 0) and ctypes.get_errno()),  # ATTACH
        ('pidfd', lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)),
        ('process_vm_readv', lambda: open(f'/proc/{pid}/mem', 'rb').read(1)),
    ):
        try:
            error = attempt()
            results[name] = os.strerror(error) if error else 'done'
        except OSError as exc:
            results[name] = exc.strerror
print(sorted(results.items()))
"""


@pytest.mark.slow
@root_host
def test_a_sandbox_cannot_signal_or_trace_another_that_it_can_see(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """In the rlimits tier a program sees every process of the host: it tries to kill,
    trace, pidfd-signal and read the memory of each process of another sandbox (found by a
    mark on its command line; other software of the host is spared), which lives on. In
    the namespaces tiers it finds none."""
    client, sb, _ = hostile
    mark = f"victim-{uuid.uuid4().hex}"
    with client.sandbox() as victim:
        code = "import time\nopen('started', 'w').close()\ntime.sleep(6)\n"
        victim.write_file("victim.py", code)
        outcome: list[Any] = []
        runner = threading.Thread(
            target=lambda: outcome.append(victim.exec([PY, "victim.py", mark], timeout=30))
        )
        runner.start()
        try:
            assert wait_for_file(victim, "started", timeout=30)
            sb.write_file("attack.py", f"MARK = {mark.encode()!r}\n" + _SIGNAL_EVERYONE)
            r = sb.exec([PY, "attack.py"], timeout=30)
        finally:
            runner.join()
    assert r.returncode == 0, r.stderr
    if tier == "rlimits":
        denied = "Operation not permitted"
        assert (
            r.stdout
            == str(
                [
                    ("kill", denied),
                    ("pidfd", denied),
                    ("process_vm_readv", "Permission denied"),
                    ("ptrace", denied),
                ]
            )
            + "\n"
        )
    else:
        assert r.stdout == "[]\n"
    assert (outcome[0].returncode, outcome[0].timed_out) == (0, False), outcome[0]


_SECRET_FILES = """
import os
for path in os.environ['SECRETS'].split(':'):  # not argv: the rlimits tier maps /tmp there
    try:
        print(path.rsplit('/', 1)[-1], open(path).read())
    except OSError as exc:
        print(path.rsplit('/', 1)[-1], exc.strerror)
"""


@root_host
def test_a_sandbox_cannot_read_what_another_left_where_both_can_name_it(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str, local_root: Path
) -> None:
    """Files another sandbox keeps to itself (mode 600, or in its own directories) open for
    no other sandbox: in the rlimits tier, where the host's /dev/shm and the sandboxes'
    directories are visible to all, and of course in the namespaces tiers, where they are
    not."""
    client, sb, _ = hostile
    shared = f"/dev/shm/sbx-secret-{uuid.uuid4().hex}"
    with client.sandbox() as owner:
        r = owner.exec(
            [
                PY,
                "-c",
                "import os, sys\nfor p in sys.argv[1:]:\n"
                "    os.write(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600), b's')",
                shared,
                "/workspace/mine",
                "/tmp/mine",
            ],
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        try:
            own = [str(local_root / owner.id / "workspace" / "mine")]
            own.append(str(local_root / owner.id / "tmp" / "mine"))
            secrets = ":".join([shared, *own])
            r = sb.exec([PY, "-c", _SECRET_FILES], env={"SECRETS": secrets}, timeout=60)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(shared)
    assert r.returncode == 0, r.stderr
    name = shared.rsplit("/", 1)[-1]
    gone = "No such file or directory"
    denied = "Permission denied"
    error = denied if tier == "rlimits" else gone
    assert r.stdout.splitlines() == [f"{name} {error}", f"mine {error}", f"mine {error}"]


@root_host
def test_stop_kills_every_process_of_the_sandbox_uid_and_releases_it(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """A sandbox's uid is its own while it lives; stop kills whatever still runs as it, and
    only then gives it back."""
    from sandboxkit.local import uids

    client, _, _ = hostile
    sb = client.sandbox()
    uid = _uid_of(sb)
    assert uids.holder_of(uid) is not None
    sb.stop()
    assert uids.holder_of(uid) is None
    assert uids.processes_of(uid) == []


def _claim_many(count: int, holder: str) -> list[int]:
    from sandboxkit.local import uids

    given = uids.sandbox_uids()
    assert given is not None
    return [uids.claim(given, Path(holder)) for _ in range(count)]


@root_host
def test_ranks_claiming_uids_at_once_never_share_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Training ranks create sandboxes concurrently: four processes claiming 25 sandboxes'
    uids each from a range of 201 (one kept for probes, two per sandbox: its own and its
    judge's) get 100 different pairs, and one more claim finds none left."""
    import concurrent.futures
    import multiprocessing

    from sandboxkit.errors import BackendError
    from sandboxkit.local import uids

    first = 0x70010000 + uuid.uuid4().int % 1000 * 1000  # no other test's range
    monkeypatch.setenv(uids.RANGE_VAR, f"{first}-{first + 200}")
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(4, mp_context=context) as pool:
        got = list(pool.map(_claim_many, [25] * 4, [str(tmp_path / f"r{i}") for i in range(4)]))
    try:
        claimed = sorted(uid for rank in got for uid in rank)
        assert claimed == list(range(first, first + 200, 2))
        with pytest.raises(BackendError, match="all 100 sandbox uid pairs"):
            _claim_many(1, str(tmp_path / "late"))
    finally:
        for i, rank in enumerate(got):
            for uid in rank:
                uids.release(uid, tmp_path / f"r{i}")
    assert all(uids.holder_of(uid) is None for uid in claimed)


@root_host
def test_reap_frees_the_uid_of_a_sandbox_that_is_gone_and_kills_its_processes(
    local: SandboxClient, local_root: Path
) -> None:
    """A process that died between create and stop leaves its claim: ``reap`` lists it once
    it is old, kills what still runs as the uid, and frees it."""
    from sandboxkit.local import uids

    backend = local.backend_as(SubprocessBackend)
    given = backend.isolation.uids
    assert given is not None
    holder = local_root / "sbx-crashed00000"
    uid = uids.claim(given, holder)
    claim = uids.claims_directory() / str(uid)
    name = f"uid-{uid}"
    assert name not in run_sync(backend.leftovers())  # too recent: a create may be at work
    old = time.time() - uids.STALE_AFTER_SECONDS - 1
    os.utime(claim, (old, old))
    survivor = subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[])
    try:
        assert name in run_sync(backend.leftovers())
        run_sync(backend.remove_leftover(name))
        assert survivor.wait(timeout=10) == -signal.SIGKILL
    finally:
        survivor.kill()
        survivor.wait()
    assert uids.holder_of(uid) is None and name not in run_sync(backend.leftovers())


@root_host
def test_reap_leaves_the_uid_of_a_live_sandbox_and_of_one_being_stopped(
    local: SandboxClient,
) -> None:
    """However old its claim, a live sandbox's uid is no leftover; nor is that of a sandbox
    whose stop has renamed its directory away and is still at work (the stop touches it)."""
    from sandboxkit.local import uids

    backend = local.backend_as(SubprocessBackend)
    with local.sandbox() as sb:
        uid = _uid_of(sb)
        claim = uids.claims_directory() / str(uid)
        old = time.time() - uids.STALE_AFTER_SECONDS - 1
        os.utime(claim, (old, old))
        assert f"uid-{uid}" not in run_sync(backend.leftovers())
        uids.renew(uid)  # what stop does first
        assert time.time() - claim.stat().st_mtime < uids.STALE_AFTER_SECONDS


_TAKE_THE_PIPE_ALLOWANCE = """
import fcntl, os, time
def fill():
    held = []
    while len(held) < 240:
        r, w = os.pipe()
        held += [r, w]
        if fcntl.fcntl(r, 1032) < 65536:  # F_GETPIPE_SZ: the allowance is spent
            return True, held
    return False, held
children = []
for _ in range(40):
    spent, held = fill()
    if spent:
        break
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
    for fd in held:
        os.close(fd)
print(spent, flush=True)
open('started', 'w').close()
time.sleep(8)
"""
_PIPE_SIZE = "import fcntl, os\nr, w = os.pipe()\nprint(fcntl.fcntl(r, 1032))"


@pytest.mark.slow
@root_host
def test_spending_the_pipe_buffer_allowance_leaves_other_sandboxes_full_pipes(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """Pipe buffers are counted per host uid (``fs.pipe-user-pages-soft``): past it, new pipes
    get one page, and an exec's large stdin no longer fits. One sandbox that spends it (pipes
    held open by children) must leave another's pipes their 64 KiB."""
    client, sb, _ = hostile
    with client.sandbox() as other, _holding(sb, _TAKE_THE_PIPE_ALLOWANCE) as done:
        r = other.exec([PY, "-c", _PIPE_SIZE], timeout=60)
        assert (r.returncode, r.stdout) == (0, "65536\n"), r.stderr
    assert done[0].stdout == "True\n", done[0]


def test_a_toolchain_outside_usr_is_on_path_and_read_only(
    tier: str, local_root: Path, toolchain: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SANDBOXKIT_LOCAL_TOOLCHAINS`` shows a compiler's directory (rustup's, Go's in
    /usr/local) to every tier's sandboxes, its ``bin`` on their ``PATH``; a namespaced one
    sees it read-only, whatever the host's permissions let it write (every user's here)."""
    for path in (toolchain, *toolchain.rglob("*")):
        path.chmod(0o777)
    monkeypatch.setenv("SANDBOXKIT_LOCAL_TOOLCHAINS", f"{toolchain}")
    with _sandbox_of(tier, local_root) as (_, sb, _):
        built = sb.exec(["sh", "-c", "echo greet > prog.sh && sbx-cc prog.sh && ./main"])
        assert (built.returncode, built.stdout) == (0, "hello from the toolchain\n"), built
        found = sb.exec(["sh", "-c", "command -v sbx-cc"])
        assert found.stdout.strip() == f"{toolchain}/bin/sbx-cc"
        if tier == "namespaces":
            for target in ("lib/prelude.sh", "bin/sbx-cc", "bin/gcc"):
                tamper = sb.exec(["sh", "-c", f"echo 'exit 0' > {toolchain}/{target}"])
                assert "Read-only file system" in tamper.stderr, (target, tamper)
    assert sorted(p.name for p in toolchain.rglob("*")) == ["bin", "lib", "prelude.sh", "sbx-cc"]
    assert (toolchain / "bin" / "sbx-cc").read_text().startswith("#!/bin/sh\n# sbx-cc")


# -- kernel state and files every sandbox shares -------------------------------------------

_SHARED_FILES = """
import os, sys
PATHS = [os.__file__, os.path.dirname(os.__file__), os.path.realpath(sys.executable)]
PATHS += [p for p in ('/etc/ld.so.cache', '/etc/ld.so.conf.d', '/etc/alternatives')
          if os.path.exists(p)]
PATHS += [p for p in os.environ.get('NODES', '').split(':') if p]
"""
"""Files every sandbox opens from the host: the standard library, a directory of it, the
interpreter, the loader's cache and directories of /etc; where each sandbox has nodes of its
own (``NODES``), devices and kernel settings too."""
_LOCK_THEM = (
    _SHARED_FILES
    + """
import fcntl, struct, time
held = []
for path in PATHS:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ofd = os.open(path, os.O_RDONLY)
    fcntl.fcntl(ofd, 37, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0, 0, 0))  # F_OFD_SETLK
    held += [fd, ofd]
print(len(PATHS), flush=True)
open('started', 'w').close()
time.sleep(10)
"""
)
_SEE_LOCKS = (
    _SHARED_FILES
    + """
import fcntl, struct
for path in PATHS:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen = 'free'
    except BlockingIOError:
        seen = 'flock held'
    asked = struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)
    kind = struct.unpack('hhqqi4x', fcntl.fcntl(fd, 36, asked))[0]  # F_OFD_GETLK
    print(path, seen, 'and read-locked' if kind == fcntl.F_RDLCK else 'and unlocked')
"""
)


def _files_of_its_own(client: SandboxClient, tier: str) -> dict[str, str]:
    """The environment of a program that opens the files every sandbox opens from the host
    (``_SHARED_FILES``), with the devices and kernel settings that are the sandbox's own where
    a root host gives each sandbox its own (elsewhere they are the host's, docs/isolation.md);
    skips where the sandboxes share even their view of /usr."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier shares the host's files (docs/isolation.md)")
    if not client.backend_as(SubprocessBackend).isolation.overlays:
        pytest.skip("no overlays in a user namespace here: /usr is the host's (docs/isolation.md)")
    if os.geteuid() != 0 or not disk.can_mount():
        return {"NODES": ""}
    return {"NODES": "/dev/null:/dev/urandom:/proc/sys/kernel/ostype"}


def test_a_lock_on_a_file_every_sandbox_opens_is_seen_by_no_other(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """Every sandbox opens the host's /usr, the loader's files of /etc, /dev/null: a lock one
    takes there (``flock``, an open file description's ``fcntl`` lock) must not be what
    another finds, or the two could talk through it, a bit per file. Each sandbox sees files
    of its own (an overlay per sandbox, its own device nodes and kernel settings)."""
    client, sb, _ = hostile
    env = _files_of_its_own(client, tier)
    with client.sandbox() as other, _holding(sb, _LOCK_THEM, env=env) as done:
        seen = other.exec([PY, "-c", _SEE_LOCKS], env=env, timeout=60)
    assert done[0].returncode == 0, done[0].stderr
    count = int(done[0].stdout)
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert len(lines) == count >= 5, seen.stdout
    assert all(line.endswith(" free and unlocked") for line in lines), seen.stdout


_WATCH_THEM = (
    _SHARED_FILES
    + """
import ctypes, struct, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
watched = {libc.inotify_add_watch(fd, path.encode(), 0xFFF): path for path in PATHS}
assert fd >= 0 and min(watched) >= 0, os.strerror(ctypes.get_errno())
open('started', 'w').close()
deadline = time.monotonic() + 25
while not os.path.exists('done') and time.monotonic() < deadline:
    time.sleep(0.05)
try:
    events = os.read(fd, 1 << 16)
except BlockingIOError:
    events = b''
fired = set()
while events:
    wd, _, _, length = struct.unpack_from('iIII', events)
    fired.add(watched[wd])
    events = events[16 + length:]
print(len(PATHS), sorted(fired))
"""
)
_TOUCH_THEM = (
    _SHARED_FILES
    + """
for path in PATHS:
    if os.path.isdir(path):
        os.listdir(path)
    elif path.startswith('/dev/'):
        with open(path, 'r+b', buffering=0) as f:
            f.write(b'x')
    else:
        with open(path, 'rb') as f:
            f.read(4096)
print('touched')
"""
)


def test_inotify_on_files_every_sandbox_opens_sees_no_other_sandbox(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """A watch on a file of /usr or /etc, or on /dev/null, reports every open, read and write
    of that inode: one sandbox watching them must see nothing of another that opens, reads
    and writes each (nor of the host's processes)."""
    client, sb, _ = hostile
    env = _files_of_its_own(client, tier)
    with client.sandbox() as other, _holding(sb, _WATCH_THEM, env=env) as done:
        touched = other.exec([PY, "-c", _TOUCH_THEM], env=env, timeout=60)
        sb.write_file("done", "")
    assert (touched.returncode, touched.stdout) == (0, "touched\n"), touched.stderr
    assert done[0].returncode == 0, done[0].stderr
    count, fired = done[0].stdout.split(" ", 1)
    assert int(count) >= 5 and fired == "[]\n", done[0].stdout


_PAGE_CACHE_PROBE = """
import ctypes, errno, os
fd = os.open(os.environ['PROBED'], os.O_RDONLY)
try:
    os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
    print('preadv2 RWF_NOWAIT: cached')
except BlockingIOError:
    print('preadv2 RWF_NOWAIT: not cached')
except OSError as exc:
    print('preadv2 RWF_NOWAIT:', errno.errorcode[exc.errno])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
address = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
resident = ctypes.create_string_buffer(1)
assert libc.mincore(ctypes.c_void_p(address), 4096, resident) == 0
print('mincore:', resident.raw[0] & 1)
"""
_PAGE_CACHE_LOAD = """
import os
with open(os.environ['PROBED'], 'rb') as f:
    f.read()
print('loaded')
"""
_PAGE_CACHE_EVICT = """
import ctypes, os
fd = os.open(os.environ['PROBED'], os.O_RDONLY)
size = os.fstat(fd).st_size
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
address = ctypes.c_void_p(libc.mmap(None, size, 1, 2, fd, 0))  # PROT_READ, MAP_PRIVATE
bytes(ctypes.string_at(address, size))  # mapped here alone, as MADV_PAGEOUT wants
for advice in (20, 21):  # MADV_COLD, MADV_PAGEOUT
    assert libc.madvise(address, size, advice) == 0, os.strerror(ctypes.get_errno())
libc.munmap(address, ctypes.c_size_t(size))
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
print('evicted')
"""


def test_no_sandbox_can_tell_what_another_did_to_the_page_cache(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """The page cache of the host's files is every sandbox's: one that pushes a file's pages
    out (``posix_fadvise(DONTNEED)``, ``madvise(MADV_COLD, MADV_PAGEOUT)``) and another that
    asks whether they are in memory (a read that must not wait, ``preadv2(RWF_NOWAIT)``) would
    talk through it. What the second sees must not depend on what the first did."""
    client, sb, _ = hostile
    where = sb.exec([PY, "-c", "import pydoc_data.topics as t; print(t.__file__)"], timeout=60)
    assert where.returncode == 0, where.stderr
    env = {"PROBED": where.stdout.strip()}
    with client.sandbox() as other:

        def step(box: Sandbox, code: str) -> str:
            r = box.exec([PY, "-c", code], env=env, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout

        assert step(sb, _PAGE_CACHE_LOAD) == "loaded\n"
        after_load = step(other, _PAGE_CACHE_PROBE)
        assert step(sb, _PAGE_CACHE_EVICT) == "evicted\n"
        after_eviction = step(other, _PAGE_CACHE_PROBE)
    assert after_eviction == after_load, (after_load, after_eviction)


_TAKE_ALL_AIO = f"""
import ctypes, errno, time
libc = ctypes.CDLL(None, use_errno=True)
held, error = 0, 0
while held < 100000:
    context = ctypes.c_ulong(0)
    if libc.syscall({syscall_number("io_setup", native_arch() or "x86_64")}, 64,
                    ctypes.byref(context)) != 0:
        error = ctypes.get_errno()
        break
    held += 1
print(held, errno.errorcode.get(error), flush=True)
open('started', 'w').close()
time.sleep(8)
"""


def _host_io_setup() -> str:
    """Whether this process (the host) can still make an AIO context: 'ok' or the error."""
    libc = ctypes.CDLL(None, use_errno=True)
    context = ctypes.c_ulong(0)
    number = syscall_number("io_setup", native_arch() or "x86_64")
    if libc.syscall(number, 1, ctypes.byref(context)) != 0:
        return os.strerror(ctypes.get_errno())
    libc.syscall(syscall_number("io_destroy", native_arch() or "x86_64"), context)
    return "ok"


@pytest.mark.usefixtures("filtered")
def test_taking_every_aio_event_leaves_the_host_its_own(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """AIO contexts come from one pool of the whole machine (``fs.aio-max-nr``) that no limit
    of a sandbox bounds: a sandbox that takes it all would leave the host and every other
    sandbox ``EAGAIN``. Sandboxes get no AIO (``ENOSYS``, as a kernel built without it: the C
    library's ``aio_*`` run on threads), so the host keeps its own."""
    _, sb, _ = hostile
    assert _host_io_setup() == "ok"
    with _holding(sb, _TAKE_ALL_AIO) as done:
        assert _host_io_setup() == "ok"
    assert done[0].stdout == "0 ENOSYS\n", done[0].stdout


_TAKE_ALL_PTYS = """
import errno, os, time
def grab():
    held = []
    while len(held) < 100000:
        try:
            held.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))
        except OSError as exc:
            return held, exc.errno
    return held, 0
total, why = 0, 0
ends = os.pipe()
for _ in range(40):
    if os.fork() == 0:
        held, code = grab()
        os.write(ends[1], f'{len(held)} {code}\\n'.encode())
        time.sleep(30)
        os._exit(0)
    count, why = (int(n) for n in os.read(ends[0], 64).split())
    total += count
    if why != errno.EMFILE:
        break
print(total, errno.errorcode.get(why), flush=True)
open('started', 'w').close()
time.sleep(8)
"""
_OPEN_A_PTY = """
import errno
try:
    import os
    os.openpty()
    print('ok')
except OSError as exc:
    print(errno.errorcode[exc.errno])
"""


def test_taking_every_pty_leaves_other_sandboxes_as_they_were(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """Pseudo-terminals of every devpts instance but the host's first come from one pool of
    the machine (``kernel.pty.max`` less ``kernel.pty.reserve``): a sandbox that opens them
    all would leave every other ``ENOSPC``. A sandbox has no pseudo-terminals (no
    ``/dev/ptmx``, as in a container without devpts): none to take, none to lack."""
    if tier == "rlimits":
        pytest.skip("the rlimits tier opens the host's /dev/ptmx (docs/isolation.md)")
    client, sb, _ = hostile
    with client.sandbox() as other:
        before = other.exec([PY, "-c", _OPEN_A_PTY], timeout=60)
        with _holding(sb, _TAKE_ALL_PTYS) as done:
            during = other.exec([PY, "-c", _OPEN_A_PTY], timeout=60)
    assert (during.returncode, during.stdout) == (before.returncode, before.stdout), during
    assert done[0].stdout.split()[0] == "0", done[0].stdout


# -- the host's own names and objects beside the rlimits tier ------------------------------

_TAKE_THE_NAMES = """
import os
for path in os.environ['NAMES'].split(':'):
    try:
        os.mkdir(path, 0o777)
        os.chmod(path, 0o777)
        os.symlink('/', os.path.join(path, 'planted'))
        print(path, 'taken')
    except OSError as exc:
        print(path, exc.strerror)
"""
_C_CHECKER = "int main(void) { return 0; }\n"


def _keep_host_state(unreachable: str, uid: int) -> None:
    """What the host keeps on disk across calls, each made (or found) once: a checker's
    compile, the local backend's root, a budget shared by ranks, the uid claims, and a copy of
    a program the sandbox uids cannot reach (bwrap in a virtualenv under /root)."""
    from sandboxkit.local import isolation, uids

    compile_checker(_C_CHECKER, "c")
    SubprocessBackend()
    SharedBudget(f"squat-{uuid.uuid4().hex}", 1).close()
    uids.claims_directory()
    isolation.reachable_copy.cache_clear()
    isolation.reachable_copy(unreachable, uid)


def _world_writable() -> Path:
    """A fresh directory anyone can make names in, as /tmp."""
    made = Path(tempfile.mkdtemp(prefix="sbx-shared-", dir="/tmp"))
    made.chmod(0o1777)
    return made


@root_host
def test_names_the_host_keeps_state_under_cannot_be_taken_first(
    hostile: tuple[SandboxClient, Sandbox, str],
    tier: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the rlimits tier a program can make names in the host's world-writable directories
    before the host does: a checker cache, a backend's root, a budget's directory, a copy of
    bwrap taken first (as a directory of its own, with a link planted in it) would make every
    later checker, backend or budget fail (a completion's None, a batch that raises) or
    redirect the host's writes. The host keeps its state where no sandbox uid can make a
    name: each of these still works after a program took every name the host used."""
    _, sb, _ = hostile
    for var in ("XDG_RUNTIME_DIR", "SANDBOXKIT_COORDINATION_DIR", "SANDBOXKIT_LOCAL_ROOT"):
        monkeypatch.delenv(var, raising=False)
    hidden = tmp_path / "hidden"  # pytest's 0700 directory: no sandbox uid can run this
    hidden.mkdir()
    shutil.copy("/usr/bin/true", hidden / "true")
    uid = _uid_of(sb)
    first, second = _world_writable(), _world_writable()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(tempfile, "tempdir", str(first))
            _keep_host_state(str(hidden / "true"), uid)
            names = [str(second / name) for name in os.listdir(first)]
            patched.setattr(tempfile, "tempdir", str(second))
            names += [str(default_cache_dir()), str(coordination_root())]
            r = sb.exec([PY, "-c", _TAKE_THE_NAMES], env={"NAMES": ":".join(names)}, timeout=60)
            assert r.returncode == 0, r.stderr
            _keep_host_state(str(hidden / "true"), uid)
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(second, ignore_errors=True)


_IPC_PLANT = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
key, name = int(os.environ['KEY']), os.environ['NAME']
made = [libc.shmget(key, 4096, 0o1600), libc.semget(key, 1, 0o1600), libc.msgget(key, 0o1600)]
made.append(libc.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, None))
made.append(os.open('/dev/shm' + name, os.O_CREAT | os.O_WRONLY, 0o600))
print(all(m >= 0 for m in made), os.strerror(ctypes.get_errno()))
"""


def _ipc_objects(key: int) -> dict[str, list[int]]:
    """The ids of the System V objects of ``key`` on the host, by kind."""
    found: dict[str, list[int]] = {}
    for kind in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{kind}") as table:
            rows = [line.split() for line in table.readlines()[1:]]
        found[kind] = [int(row[1]) for row in rows if int(row[0]) == key]
    return found


@root_host
def test_stop_leaves_none_of_the_ipc_objects_a_program_made(tier: str, local_root: Path) -> None:
    """System V shared memory, semaphores and message queues, POSIX message queues and
    shared memory outlive the process that made them. In the rlimits tier a program makes
    them in the host's own IPC namespace and /dev/shm: its sandbox's stop must remove them
    (its uid names them), or they hold the host's memory and reach later sandboxes. (In the
    namespaces tiers they go with the exec's IPC namespace.)"""
    key, name = 0x5B000000 | uuid.uuid4().int % 0xFFFFFF, f"/sbx-{uuid.uuid4().hex}"
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        with _sandbox_of(tier, local_root) as (_, sb, _):
            env = {"KEY": str(key), "NAME": name}
            r = sb.exec([PY, "-c", _IPC_PLANT], env=env, timeout=60)
            assert (r.returncode, r.stdout.split()[0]) == (0, "True"), (r.stdout, r.stderr)
        assert _ipc_objects(key) == {"shm": [], "sem": [], "msg": []}
        assert libc.mq_open(name.encode(), os.O_RDONLY) == -1
        assert ctypes.get_errno() == errno.ENOENT
        assert not os.path.exists(f"/dev/shm{name}")
    finally:  # what a failed run left
        for kind, ids in _ipc_objects(key).items():
            for id_ in ids:
                getattr(libc, f"{kind}ctl")(id_, 0, None)  # IPC_RMID
        libc.mq_unlink(name.encode())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm{name}")


# -- a pooled sandbox: nothing of one completion reaches the next -------------------------------

NEEDY = """
import os, tempfile

def solve():
    with open("answer.txt", "w") as out:  # the working directory's disk
        out.write("x" * (8 << 20))
    os.remove("answer.txt")
    with tempfile.TemporaryFile() as scratch:  # $TMPDIR's
        scratch.write(b"y" * (24 << 20))
    block = bytearray(96 << 20)  # and memory, with the rest far within the sandbox's limits
    return len(block)
"""
NEEDY_TESTS = ["assert solve() == 96 << 20"]
POOLED_LIMITS = {"memory_mb": MEMORY_MB, "disk_mb": 200, "disk_inodes": DISK_INODES}
"""A fresh sandbox has room for ``NEEDY`` many times over; what one completion may leave
takes that room."""
LEFTOVERS = {
    "files filling its memory in $TMPDIR": (
        "import tempfile\nfor i in range(190):\n"
        "    open(f'{tempfile.gettempdir()}/m{i}', 'wb').write(b'x' * (1 << 20))"
    ),
    "files filling its disk in the workdir": (
        "for i in range(300):\n    open(f'd{i}', 'wb').write(b'x' * (1 << 20))"
    ),
    "files filling its memory in /dev/shm": (
        "for i in range(190):\n    open(f'/dev/shm/MARK-{i}', 'wb').write(b'x' * (1 << 20))"
    ),
    "files taking every inode": (
        "import tempfile\nfor i in range(5000):\n"
        "    open(f'{tempfile.gettempdir()}/i{i}', 'w').close()"
    ),
    "a FIFO where it writes": "import os\nos.mkfifo('answer.txt')",
    "a socket where it writes": "import socket\nsocket.socket(socket.AF_UNIX).bind('answer.txt')",
    "an unwritable file where it writes": (
        "import os\nopen('answer.txt', 'w').close()\nos.chmod('answer.txt', 0)"
    ),
    "a directory where it writes": "import os\nos.mkdir('answer.txt')\nos.chmod('answer.txt', 0)",
    "no workdir": "import os, shutil\nhere = os.getcwd()\nos.chdir('/')\nshutil.rmtree(here)",
}
"""What a completion leaves in its pooled sandbox (at its module's load, before its tests
run), each a way to fail the next completion there: memory and disk taken, the names it
writes taken by what cannot be written, its workdir gone (``/workspace/job``)."""


@contextlib.contextmanager
def _pooled_judge(tier: str, local_root: Path, leftover: str) -> Iterator[tuple[str, Any]]:
    """The ``LEFTOVERS`` program (marked for clean-up: the rlimits tier's ``/dev/shm`` is
    the host's) and keywords for a reward function that judges in one sandbox, with room for
    ``NEEDY`` only where nothing was left."""
    if tier == "namespaces" and (reason := namespaces_failure()) is not None:
        pytest.skip(f"no namespaces on this machine: {reason}")
    mark = f"sbx-left-{uuid.uuid4().hex}"
    workdir = "/workspace/job" if leftover == "no workdir" else "/workspace"
    client = get_backend("subprocess", root=local_root, **POOLED_LIMITS)
    try:
        yield (
            LEFTOVERS[leftover].replace("MARK", mark),
            {
                "backend": client,
                "pool_size": 1,
                "timeout": 3,
                "workdir": workdir,
            },
        )
    finally:
        client.close()
        for left in Path("/dev/shm").glob(f"{mark}-*"):
            left.unlink()


@pytest.mark.parametrize("leftover", LEFTOVERS)
def test_a_pooled_sandbox_keeps_nothing_of_one_completion_for_the_next(
    tier: str, local_root: Path, leftover: str
) -> None:
    """A reward function's pool serves its completions in a few sandboxes: a correct
    completion that the one before it in the same sandbox tried to fail with what it left
    there still scores 1.0. The namespaced tiers renew the sandbox in place (nothing of an
    exec outlives it); the rlimits tier, where a process may, replaces it."""
    from sandboxkit.rewards import assert_tests_reward

    with _pooled_judge(tier, local_root, leftover) as (hostile, options):
        reward = assert_tests_reward(**options)
        try:
            assert reward([""], [NEEDY], test_list=[NEEDY_TESTS]) == [1.0]  # room for it
            reward([""], [hostile + NEEDY], test_list=[NEEDY_TESTS])
            assert reward([""], [NEEDY], test_list=[NEEDY_TESTS]) == [1.0], reward.last_batch
            stats = reward.pool.stats
            renewed = reward.metrics(reward.last_batch)["assert_tests_reward/sandboxes_renewed"]
        finally:
            reward.close()
    assert stats.failures == stats.replaced == 0
    if tier == "rlimits":
        assert stats.recycled >= 2 and renewed == 0
    else:
        assert stats.created == 1 and renewed >= 2


@pytest.mark.parametrize("leftover", ["files filling its memory in $TMPDIR", "no workdir"])
def test_the_judge_of_rollouts_keeps_nothing_of_one_submission_for_the_next(
    tier: str, local_root: Path, leftover: str
) -> None:
    """TRL's ``get_reward`` judges each rollout's submission on a pool of the environment's
    own, which no tool call touches: one submission leaves nothing there for the next."""
    from sandboxkit.rewards import assert_tests_reward

    with _pooled_judge(tier, local_root, leftover) as (hostile, options):
        reward = assert_tests_reward(**options)
        environment = sandbox_environment(options["backend"], reward=reward, name="PooledJudge")
        rewards = []
        try:
            for code in (hostile + NEEDY, NEEDY):
                env = environment()
                env.reset(prompt="", test_list=NEEDY_TESTS)
                env.submit(code)
                rewards.append(asyncio.run(env.get_reward()))
        finally:
            environment.close_all()
    assert rewards[1] == 1.0, rewards


# -- a renewal: new storage under the idle warm template ----------------------------------------

LEAVINGS = (
    "mkfifo fifo && mkdir -p d/e && echo x > d/e/f && chmod 000 d && echo y > /tmp/y && "
    "chmod 1777 /tmp && for i in $(seq 300); do : > /tmp/n$i && rm /tmp/n$i; done"
)
FOUND = (
    'ls -A /workspace /tmp | grep -v ":$"; : > /tmp/probe && stat -c "%i %a" /tmp/probe /tmp; '
    "df -k /workspace | tail -1 | awk '{print $3}'"
)


def test_a_renewal_shows_an_idle_template_new_storage(tier: str, local_root: Path) -> None:
    """A renewal keeps the sandbox's idle warm template (starting one costs several times the
    rest) and shows it the new tmpfs, again and again: an exec after each finds nothing of
    the ones before, not even the inode numbers they used up or their marks on ``/tmp``."""
    if tier != "namespaces" or os.environ["SANDBOXKIT_WARM"] == "0":
        pytest.skip("only a warm template serves on across renewals")
    with _sandbox_of(tier, local_root) as (client, sb, _):
        local = client.backend_as(SubprocessBackend)
        assert sb.exec(["sh", "-c", "true"]).ok
        template = local.warm_template(sb.id)
        seen = []
        for _ in range(3):
            assert sb.exec(["sh", "-c", LEAVINGS], timeout=60).ok
            run_sync(local.renew(sb.id))
            assert local.warm_template(sb.id) is template and template.grafted
            seen.append(sb.exec(["sh", "-c", FOUND], timeout=60).stdout.split())
        assert len({tuple(s) for s in seen}) == 1, seen  # the same, renewal after renewal
        probe, probe_mode, _, tmp_mode, used = seen[0]
        assert (probe_mode, tmp_mode) == ("644", "700") and int(probe) < 50 and int(used) < 100


def test_a_renewal_under_a_running_exec_ends_it_and_the_template(
    tier: str, local_root: Path
) -> None:
    """A renewal while an exec runs (no pool or lender does that) cannot keep the template
    serving it: the exec ends, killed, the template with it, and the sandbox comes back new
    with a template of its own, started before the next exec."""
    if tier != "namespaces" or os.environ["SANDBOXKIT_WARM"] == "0":
        pytest.skip("only a warm template serves on across renewals")
    with _sandbox_of(tier, local_root) as (client, sb, _):
        local = client.backend_as(SubprocessBackend)

        async def renew_under(command: str) -> ExecResult:
            running = asyncio.ensure_future(sb.aexec(["sh", "-c", command], timeout=60))
            while local.warm_template(sb.id) is None or not local.warm_template(sb.id).busy:
                await asyncio.sleep(0.01)
            await local.renew(sb.id)
            return await running

        sb.exec(["true"])
        first = local.warm_template(sb.id)
        killed = run_sync(renew_under("echo x > left; sleep 50"))
        assert killed.returncode == KILLED_RETURNCODE and not killed.ok
        second = local.warm_template(sb.id)
        assert second is not None and second is not first and not second.grafted
        assert sb.exec(["ls", "-A"]).stdout == ""


def test_a_sandbox_being_renewed_never_looks_stopped(tier: str, local_root: Path) -> None:
    """While its storage is made again, a sandbox still exists for every reader (``list``,
    ``get``, ``stop`` find it by its ``sandbox.json``): a ``stop`` that found none would do
    nothing, and the sandbox would outlive its session (at SIGTERM, say)."""
    with _sandbox_of(tier, local_root) as (client, sb, _):
        local = client.backend_as(SubprocessBackend)
        assert sb.exec(["true"]).ok
        marker = local_root / sb.id / "sandbox.json"
        done, missing = threading.Event(), []

        def watch() -> None:
            while not done.is_set():
                if not marker.is_file():
                    missing.append(time.monotonic())

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for _ in range(30):
                run_sync(local.renew(sb.id))
        finally:
            done.set()
            watcher.join()
        assert missing == []


def test_a_stop_during_a_renewal_stops_the_sandbox(tier: str, local_root: Path) -> None:
    """A stop that comes while a renewal makes the sandbox's storage again (a session's at
    SIGTERM, say) still stops it and leaves nothing of it; the renewal then fails, or had
    already ended."""
    if tier == "namespaces" and (reason := namespaces_failure()) is not None:
        pytest.skip(f"no namespaces on this machine: {reason}")
    client = get_backend("subprocess", root=local_root)
    local = client.backend_as(SubprocessBackend)
    try:
        for delay in [0.0005 * i for i in range(12)]:
            sb = client.sandbox()
            assert sb.exec(["sh", "-c", "echo x > left"]).ok
            renewal = threading.Thread(target=_renew_quietly, args=(local, sb.id))
            renewal.start()
            time.sleep(delay)
            sb.stop()
            renewal.join()
            with pytest.raises(SandboxNotFoundError):
                client.get(sb.id)
    finally:
        client.close()
    assert [p.name for p in local_root.iterdir() if "sbx-" in p.name] == []
    assert mounts_under(local_root) == []


def _renew_quietly(local: SubprocessBackend, sandbox_id: str) -> None:
    with contextlib.suppress(Exception):  # it may find its sandbox stopped under it
        run_sync(local.renew(sandbox_id))
