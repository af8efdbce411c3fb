"""Hostile programs against the local backend, in each isolation tier this machine offers.

Each case is a real program doing what model-written code may do, and states what must happen:
the host stays healthy, the program is stopped, nothing of it keeps running, and nothing of the
host's leaks in. The rlimits tier is the documented fallback: where it cannot defend (network,
world-writable paths) the test states that as the expected outcome.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxkit import Sandbox, SandboxClient, SandboxError, get_backend
from sandboxkit.local.isolation import Tier
from sandboxkit.portal import run_sync

PY = "python3"
CAP = 64 * 1024
MEMORY_MB = 256
DISK_MB = 64
DISK_INODES = 2000


def _marked_processes(marker: str) -> list[int]:
    """Host pids whose initial environment carries ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture(params=["namespaces", "namespaces-cold", "rlimits"])
def tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tier; ``namespaces`` runs Python through the warm template, ``-cold`` one bwrap per
    exec."""
    tier, _, cold = str(request.param).partition("-")
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", tier)
    monkeypatch.setenv("SANDBOXKIT_WARM", "0" if cold else "1")
    if tier == "rlimits" and os.geteuid() != 0:
        pytest.skip("the rlimits expectations below assume the switch to an unprivileged uid")
    return tier


@pytest.fixture
def hostile(tier: str, local_root: Path) -> Iterator[tuple[SandboxClient, Sandbox, str]]:
    try:
        client = get_backend(
            "subprocess",
            root=local_root,
            memory_mb=MEMORY_MB,
            disk_mb=DISK_MB,
            disk_inodes=DISK_INODES,
            file_size_mb=8,
            processes=64,
            cpu_seconds=20,
            output_bytes=CAP,
        )
    except Exception as exc:  # namespaces unavailable on this machine
        pytest.skip(f"{tier} tier unavailable: {exc}")
    assert client.isolation.tier == Tier(tier)
    assert client.warm == (tier == "namespaces" and os.environ["SANDBOXKIT_WARM"] == "1")
    marker = f"SBX_MARK_{uuid.uuid4().hex}"
    sb = client.sandbox(env={marker: "1"})
    yield client, sb, marker
    sb.stop()
    assert not any(local_root.glob("sbx-*")), "a stopped sandbox left its directory"
    assert mounts_under(local_root) == [], "a stopped sandbox left its storage mounted"
    assert _marked_processes(marker) == [], "processes of the sandbox are still running"
    client.close()


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


def host_is_healthy() -> None:
    """The host can still start processes and allocate memory."""
    assert os.system("true") == 0
    assert len(bytearray(50 * 1024 * 1024)) == 50 * 1024 * 1024


def test_infinite_loop_times_out(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    t0 = time.monotonic()
    code, _, _, timed_out = run(sb, "while True: pass", timeout=2)
    assert timed_out and code != 0
    assert time.monotonic() - t0 < 30


def test_sleep_ignoring_sigterm_is_killed(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"
    code, _, _, timed_out = run(sb, prog, timeout=2)
    assert timed_out and code != 0


def test_fork_bomb_is_contained(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    prog = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    _, _, _, timed_out = run(sb, prog, timeout=4)
    assert timed_out
    host_is_healthy()


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


def test_memory_bomb_fails_inside(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    """Killed by the sandbox's memory cgroup (exit 137), or, where only the address space of
    each process is bounded, failing with MemoryError; the sandbox still works."""
    client, sb, _ = hostile
    prog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
    code, _, err, timed_out = run(sb, prog, timeout=20)
    assert not timed_out
    if client.memory_limit == "rlimit":
        assert code == 1 and "MemoryError" in err
    else:
        assert code == 137
    host_is_healthy()
    assert_next_exec_works(sb)


def test_output_flood_is_capped(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    sb.write_file("flood.py", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    r = sb.exec([PY, "flood.py"], timeout=2)
    assert r.timed_out and r.truncated
    assert len(r.stdout_bytes) == CAP


def test_bounded_flood_keeps_exit_status(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    _, sb, _ = hostile
    sb.write_file("flood.py", "import sys\nsys.stderr.write('e' * 5_000_000)\nprint('done')")
    r = sb.exec([PY, "flood.py"], timeout=30)
    assert r.returncode == 0 and not r.timed_out and r.truncated
    assert r.stdout == "done\n" and len(r.stderr_bytes) == CAP


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


def test_network_to_host_loopback(hostile: tuple[SandboxClient, Sandbox, str], tier: str) -> None:
    _, sb, _ = hostile
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
            accepted.append(True)
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    prog = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        "print('connected')\n"
    )
    code, out, _, _ = run(sb, prog, timeout=10)
    server.close()
    thread.join(timeout=15)
    if tier == "namespaces":
        assert code != 0 and "connected" not in out and not accepted
    else:  # documented: the rlimits tier has no network isolation
        assert code == 0 and accepted


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


def test_private_tmp(hostile: tuple[SandboxClient, Sandbox, str], tier: str) -> None:
    _, sb, _ = hostile
    host_tmp_file = Path("/tmp") / f"sandboxkit-host-{uuid.uuid4().hex[:8]}"
    host_tmp_file.write_text("host")
    try:
        code, out, _, _ = run(sb, f"import os; print(os.path.exists({str(host_tmp_file)!r}))")
        assert code == 0
        # Only a mount namespace gives a private /tmp.
        assert out.strip() == ("False" if tier == "namespaces" else "True")
    finally:
        host_tmp_file.unlink()


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

    def remove(path: str) -> None:
        run_sync(client.backend.remove(sb.id, path))  # type: ignore[attr-defined]

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
        "import ctypes, os, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for _ in range(3):\n"
        "    pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT|SIGCHLD)\n"
        "    if pid == 0:\n"
        "        time.sleep(600); os._exit(0)\n"
        "time.sleep(600)\n",
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n"
        "    import time; time.sleep(600)\n"
        "os._exit(0)  # leaves its CLONE_PARENT child behind\n",
        # A FIFO named as the script: opening it blocks.
        "MKFIFO",
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


@pytest.mark.skipif(os.geteuid() != 0, reason="the host is not root here")
def test_code_on_a_root_host_holds_no_host_privilege(
    hostile: tuple[SandboxClient, Sandbox, str], tier: str
) -> None:
    """On a root host (RL clusters, containers) sandboxed code runs as an unprivileged host uid:
    its processes are not root's, and nothing under /proc/sys or /sys opens for writing (a
    completion once changed a host sysctl; core_pattern leads to code run as root)."""
    client, sb, marker = hostile
    assert client.isolation.run_as != 0
    holder = threading.Thread(
        target=lambda: sb.exec([PY, "-c", "import time; time.sleep(3)"], timeout=30)
    )
    holder.start()
    try:
        deadline = time.monotonic() + 20
        while not (pids := _marked_processes(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
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
    if client.memory_limit == "rlimit":  # documented: bounded per process only
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
    elif client.memory_limit == "rlimit":  # documented: bounded per process only
        assert (code, last_count(out)) == (0, 2 * MEMORY_MB)
    else:
        assert code == 137 and last_count(out) < MEMORY_MB, out
    assert_next_exec_works(sb)


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
    if client.memory_limit == "rlimit":  # documented: bounded per process only
        assert (code, out) == (0, "6\n")
    elif code != 137:  # the parent itself may be the one the kernel kills
        assert code == 0 and int(out) * 64 < MEMORY_MB, out
    host_is_healthy()
    assert_next_exec_works(sb)


def test_files_past_the_disk_limit_get_enospc(
    hostile: tuple[SandboxClient, Sandbox, str],
) -> None:
    """/workspace and /tmp share one cap; another sandbox has its own room."""
    client, sb, _ = hostile
    prog = (
        "import os\n"
        "chunk = b'x' * (4 << 20)\n"
        "written = 0\n"
        "try:\n"
        f"    while written < {2 * DISK_MB}:\n"
        "        for d in ('.', os.environ['TMPDIR']):\n"
        "            with open(f'{d}/f{written}', 'wb') as f:\n"
        "                f.write(chunk)\n"
        "            written += 4\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(written)\n"
    )
    code, out, err, _ = run(sb, prog, timeout=60)
    assert code == 0, err
    if client.disk_limit == "file size":  # documented: bounded per file only
        assert last_count(out) == 2 * DISK_MB
    else:
        assert "refused 28" in out and last_count(out) < DISK_MB, out
    assert_next_exec_works(sb)
    other = client.sandbox()
    try:
        room = "for i in range(12):\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20))\nprint('ok')"
        r = other.exec([PY, "-c", room], timeout=60)
        assert (r.returncode, r.stdout) == (0, "ok\n"), r.stderr
    finally:
        other.stop()


def test_an_inode_flood_gets_enospc(hostile: tuple[SandboxClient, Sandbox, str]) -> None:
    client, sb, _ = hostile
    prog = (
        "import os\n"
        "made = 0\n"
        "try:\n"
        f"    while made < {2 * DISK_INODES}:\n"
        "        os.mkdir(f'd{made}') if made % 2 else open(f'f{made}', 'w').close()\n"
        "        made += 1\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(made)\n"
    )
    code, out, err, _ = run(sb, prog, timeout=60)
    assert code == 0, err
    if client.disk_limit == "file size":  # documented: bounded per file only
        assert last_count(out) == 2 * DISK_INODES
    else:
        assert "refused 28" in out and last_count(out) < DISK_INODES, out
    assert_next_exec_works(sb)
