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
from sandboxkit.local import files
from sandboxkit.local.isolation import Tier
from sandboxkit.portal import run_sync

PY = "python3"
CAP = 64 * 1024


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
            memory_mb=512,
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
    assert _marked_processes(marker) == [], "processes of the sandbox are still running"
    client.close()


def run(sb: Sandbox, code: str, timeout: float = 5) -> tuple[int, str, str, bool]:
    sb.write_file("prog.py", code)
    r = sb.exec([PY, "prog.py"], timeout=timeout)
    return r.returncode, r.stdout, r.stderr, r.timed_out


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
    _, sb, _ = hostile
    prog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
    code, _, err, timed_out = run(sb, prog, timeout=20)
    assert code != 0 and not timed_out
    assert "MemoryError" in err
    host_is_healthy()


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
        read_back: list[bytes | str] = []
        deadline = time.monotonic() + 30
        while len(read_back) < 400 and time.monotonic() < deadline:
            try:
                read_back.append(sb.read_file(read))
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
        "remove a/f",
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
    assert run(sb, LINKS)[0] == 0
    verb, path = operation.split()
    calls = {
        "read": lambda: sb.read_file(path),
        "write": lambda: sb.write_file(path, "x"),
        "remove": lambda: run_sync(client.backend.remove(sb.id, path)),  # type: ignore[attr-defined]
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
