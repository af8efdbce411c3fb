"""The warm template runs Python programs as a fresh interpreter would.

Each program runs twice in the same sandbox, through the template (warm) and through one
bwrap and a new interpreter per exec (cold); what the program can observe must match.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit import get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.local import forkserver, isolation, seccomp
from sandboxkit.local import warm as warm_templates
from sandboxkit.local.forkserver import MAX_SCRIPT
from sandboxkit.local.warm import LearntSite, site_stamp
from sandboxkit.testing.remote import processes_with, wait_until

SCRIPT = """\
import sys
print(sys.argv, __name__, __file__, sys.path[0])
"""


@pytest.fixture(scope="module", params=["tiny init", "forked init"])
def clients(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient]]:
    """A warm and a cold client on one root; every test runs with each way of starting an
    exec's init (the tiny program where it runs, a fork of the template where it does not)."""
    if isolation.namespaces_failure() is not None:
        pytest.skip("no user namespaces here: no warm template")
    import shutil
    import tempfile

    spawn_init = request.param == "tiny init"
    if spawn_init and os.uname().machine != "x86_64":
        pytest.skip("the tiny init is x86-64 code")
    noexec = Path("/proc/sys/vm/memfd_noexec")
    if spawn_init and noexec.exists() and noexec.read_text().strip() != "0":
        pytest.skip("vm.memfd_noexec forbids running the tiny init from memory")
    root = tempfile.mkdtemp(prefix="sandboxkit-warm-", dir="/tmp")
    os.chmod(root, 0o711)
    try:
        with (
            pytest.MonkeyPatch.context() as patch,
            get_backend("subprocess", root=root, warm=True) as warm,
            get_backend("subprocess", root=root, warm=False) as cold,
        ):
            patch.setattr(warm_templates, "SPAWN_INIT", spawn_init)
            backend = warm.backend_as(SubprocessBackend)
            assert backend.warm and not cold.backend_as(SubprocessBackend).warm
            with warm.sandbox() as sb:
                sb.exec(["true"], timeout=60)
                assert backend._templates[sb.id].spawned_init is spawn_init
            yield warm, cold
    finally:
        shutil.rmtree(root, ignore_errors=True)


def both(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    argv: list[str],
    *,
    files: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[sandboxkit.ExecResult, sandboxkit.ExecResult]:
    """Run ``argv`` warm, then cold, in one sandbox (the warm client owns it)."""
    warm, cold = clients
    with warm.sandbox() as sb:
        for name, text in (files or {}).items():
            sb.write_file(name, text.encode())
        assert isinstance(warm.backend, SubprocessBackend)
        warm_result = sb.exec(argv, env=env, timeout=timeout)
        assert sb.id in warm.backend._templates, "the warm run did not use the template"
        cold_result = cold.get(sb.id).exec(argv, env=env, timeout=timeout)
    return warm_result, cold_result


def same(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    argv: list[str],
    **options: object,
) -> sandboxkit.ExecResult:
    warm, cold = both(clients, argv, **options)  # type: ignore[arg-type]
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )
    return warm


PROGRAMS = {
    "sys.path": ["python3", "-c", "import sys; print(sys.path)"],
    "isolated sys.path": ["python3", "-I", "-c", "import sys; print(sys.path)"],
    "no-site sys.path": ["python3", "-S", "-c", "import sys; print(sys.path)"],
    "safe-path": ["python3", "-P", "-c", "import sys; print(sys.path[0])"],
    "combined flags": ["python3", "-Ic", "import sys; print(sys.argv, sys.path[:1])", "a"],
    "exit()": ["python3", "-c", "print('bye'); exit(3)"],
    "quit()": ["python3", "-c", "quit()"],
    "no exit under -S": ["python3", "-S", "-c", "exit(3)"],
    "site builtins": ["python3", "-c", "print(callable(help), str(copyright)[:9])"],
    "uncaught exception": ["python3", "-c", "def f():\n    return 1 / 0\nf()"],
    "syntax error": ["python3", "-c", "def f(:\n    pass"],
    "syntax error in a large program": ["python3", "-c", "x = 1\n" * 1000 + "def f(:\n"],
    "excepthook": [
        "python3",
        "-c",
        "import sys\nsys.excepthook = lambda t, v, tb: print('hooked', t.__name__)\n"
        "raise KeyError('k')",
    ],
    "SystemExit(str)": ["python3", "-c", "raise SystemExit('failed here')"],
    "streams": [
        "python3",
        "-c",
        "import sys\nfor s in (sys.stdin, sys.stdout, sys.stderr):\n"
        "    print(s.encoding, s.errors, s.line_buffering, file=sys.stderr)",
    ],
    "threads are joined": [
        "python3",
        "-c",
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()",
    ],
    "atexit": ["python3", "-c", "import atexit; atexit.register(print, 'at exit')"],
    "fresh random": ["python3", "-c", "import random, sys; sys.exit(random.random() == 0.5)"],
    "kills itself": ["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
    "sys.executable": ["python3", "-c", "import sys; print(sys.executable)"],
    "sys.orig_argv": ["python3", "-c", "import sys; print(sys.orig_argv)", "a"],
    "sys.executable named by path": [
        "/opt/sandboxkit/bin/python",
        "-c",
        "import sys; print(sys.executable)",
    ],
    "ids": [
        "python3",
        "-c",
        "import os; print(os.getuid(), os.geteuid(), os.getgid(), os.getegid())",
    ],
    "ids of an exec'd command": ["sh", "-c", "id; touch mine; ls -ln mine"],
    "environment, Python's and libc's": [
        "python3",
        "-c",
        "import ctypes, os\nprint(sorted(os.environ.items()))\n"
        "environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), 'environ')\n"
        "print(sorted(environ[i] for i in range(len(os.environ))), environ[len(os.environ)])",
    ],
    "environment of an exec'd command": ["sh", "-c", "env | sort"],
    "capabilities and permissions": [
        "python3",
        "-c",
        "import os, tempfile\n"
        "print([l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm'))])\n"
        "fd, name = tempfile.mkstemp(dir='.'); os.close(fd); os.chmod(name, 0)\n"
        "try: open(name).close()\n"
        "except PermissionError as e: print(e.strerror)",
    ],
    "capabilities of an exec'd command": [
        "sh",
        "-c",
        "grep -E 'Cap(Eff|Prm)' /proc/self/status; f=$(mktemp -p .); chmod 0 $f; cat $f 2>&1 |"
        " sed 's/.*: //'",
    ],
    "script": ["python3", "prog.py", "x", "y"],
    "script in a directory": ["python3", "-B", "sub/prog.py"],
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_what_a_program_sees_matches_a_fresh_interpreter(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient], name: str
) -> None:
    files = {"prog.py": SCRIPT, "sub/prog.py": SCRIPT}
    same(clients, PROGRAMS[name], files=files)


@pytest.mark.slow
def test_unbuffered_output_survives_a_timeout(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    program = "import time\nprint('before', flush=False)\ntime.sleep(60)"
    unbuffered = same(clients, ["python3", "-u", "-c", program], timeout=1)
    assert unbuffered.timed_out and unbuffered.stdout == "before\n"
    buffered = same(clients, ["python3", "-c", program], timeout=1)
    assert buffered.timed_out and buffered.stdout == ""


def test_pythonpath_in_the_environment_is_honoured(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    result = same(
        clients,
        ["python3", "-c", "import helper; print(helper.VALUE)"],
        files={"lib/helper.py": "VALUE = 42\n"},
        env={"PYTHONPATH": "/workspace/lib"},
    )
    assert result.stdout == "42\n"


def test_another_interpreter_named_by_path_is_not_replaced(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    other = Path("/usr/bin/python3")
    if not other.exists():
        pytest.skip("no /usr/bin/python3")
    same(clients, [str(other), "-c", "import sys; print(sys.version, sys.executable)"])


SYSCALL_FILTER = {
    "in the template's process": [
        "python3",
        "-c",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "status = open('/proc/self/status').readlines()\n"
        "print([l for l in status if l.startswith(('NoNewPrivs', 'Seccomp:'))])\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())",  # CLONE_NEWUSER
    ],
    "exec'd": ["sh", "-c", "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; unshare -U id -u"],
}


CREDENTIALS = "^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):"
"""The lines of ``/proc/self/status`` that say what a process may do."""


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", f"grep -E '{CREDENTIALS}' /proc/self/status"],
        [
            "python3",
            "-c",
            f"import re\nfor line in open('/proc/self/status'):\n"
            f"    if re.match({CREDENTIALS!r}, line): print(line, end='')",
        ],
    ],
    ids=["exec'd", "in the template's process"],
)
def test_commands_run_with_the_credentials_and_capability_sets_of_cold_ones(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient], argv: list[str]
) -> None:
    """Every capability set, the bounding set included, is empty in both, as are the ambient
    and inheritable ones: a warm exec's own user namespace gives its first process a full
    bounding set, which it must drop as bwrap does for a cold exec."""
    result = same(clients, argv)
    lines = dict(line.split(":\t", 1) for line in result.stdout.splitlines())
    empty = "0000000000000000"
    assert [lines[f"Cap{s}"] for s in ("Inh", "Prm", "Eff", "Bnd", "Amb")] == [empty] * 5
    assert lines["NoNewPrivs"] == "1"


@pytest.mark.parametrize("name", list(SYSCALL_FILTER))
def test_commands_run_under_the_syscall_filter_as_cold_ones(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient], name: str
) -> None:
    """The template, which runs under the sandbox's base filter, stacks the commands' one on
    each command (whichever init its exec has), as bwrap gives cold ones both: the same calls
    fail the same way."""
    if seccomp.host_filter() is None:
        pytest.skip(f"no syscall filter here: {seccomp.unsupported()}")
    result = same(clients, SYSCALL_FILTER[name])
    if name == "exec'd":
        assert result.stdout == "NoNewPrivs:\t1\nSeccomp:\t2\n" and result.returncode != 0
        assert "Operation not permitted" in result.stderr
    else:
        assert result.stdout == "['NoNewPrivs:\\t1\\n', 'Seccomp:\\t2\\n']\n-1 1\n"


IN_PROCESS = "import sys; print('json' in sys.modules)"
"""True only in the template's process, which imported json before forking."""


@pytest.mark.parametrize(
    ("argv", "env", "in_process"),
    [
        (["python3", "-c", IN_PROCESS], None, True),
        (["python", "-I", "-S", "-u", "-B", "-c", IN_PROCESS], None, True),
        (["/opt/sandboxkit/bin/python3", "-Sc", IN_PROCESS], None, True),
        (["python3", "-c", IN_PROCESS], {"PYTHONPATH": "/workspace"}, False),
        (["python3", "-E", "-c", IN_PROCESS], {"PYTHONPATH": "/workspace"}, True),
        (["python3", "-c", IN_PROCESS], {"LC_ALL": "C"}, False),
        (["python3", "-X", "dev", "-c", IN_PROCESS], None, False),
    ],
)
def test_which_programs_run_in_the_template(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    argv: list[str],
    env: dict[str, str] | None,
    in_process: bool,
) -> None:
    warm, _ = both(clients, argv, env=env)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == f"{in_process}\n"


@pytest.mark.parametrize(("padding", "in_process"), [(0, True), (MAX_SCRIPT, False)])
def test_a_script_too_large_for_the_server_runs_in_a_fresh_interpreter(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    padding: int,
    in_process: bool,
) -> None:
    """The template's server reads a script before it forks; a larger one than it takes goes
    to a fresh interpreter."""
    script = f"{IN_PROCESS}\n{'#' * padding}\n"
    warm, _ = both(clients, ["python3", "big.py"], files={"big.py": script})
    assert (warm.returncode, warm.stdout) == (0, f"{in_process}\n"), warm.stderr


def test_a_public_programs_text_reaches_the_command_as_itself(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The host sends the test runner's text to a template as a short handle, which the
    command's own process resolves: an argument that is that text (not the program run)
    arrives whole, as in a fresh interpreter."""
    from sandboxkit.harness.records import RUNNER_SOURCE

    digest = "import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())"
    warm = same(clients, ["python3", "-c", digest, RUNNER_SOURCE])
    assert warm.stdout == hashlib.sha256(RUNNER_SOURCE.encode()).hexdigest() + "\n"


def test_the_runner_travels_without_its_docstrings_leaving_a_quarter_of_its_argument_free() -> None:
    """The runner goes to a sandbox as one argument, and to a template JSON-escaped in one;
    Linux refuses a command with an argument over 128 KiB (``MAX_ARG_STRLEN``), and with its
    docstrings the runner had come within 1 KB of it (every warm exec failed once it passed).
    What travels is the same program: its syntax trees differ in docstrings alone."""
    from sandboxkit.harness import runner
    from sandboxkit.harness.records import RUNNER_SOURCE

    def docless(source: str) -> str:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            note = node.value if isinstance(node, ast.Expr) else None
            if isinstance(note, ast.Constant) and isinstance(note.value, str):
                note.value = ""
        return ast.dump(tree)

    written = Path(runner.__file__).read_text()
    assert docless(RUNNER_SOURCE) == docless(written) and written != RUNNER_SOURCE
    assert len(warm_templates.PUBLIC_PROGRAMS.encode()) < 0.75 * 128 * 1024


def test_stdin_and_output_larger_than_a_pipe(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    data = bytes(range(256)) * 400  # 100 KiB: more than a pipe holds, less than one request
    warm, _ = clients
    with warm.sandbox() as sb:
        echo = ["python3", "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"]
        result = sb.exec(echo, stdin=data, timeout=60)
        assert result.returncode == 0 and result.stdout_bytes == data
        # A program that never reads its stdin ends anyway.
        ignored = sb.exec(["python3", "-c", "print('done')"], stdin=data, timeout=60)
        assert (ignored.returncode, ignored.stdout) == (0, "done\n")


def test_a_request_of_several_packets_runs_warm(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """Stdin of several of the socket's packets (contest inputs, the runner's tests) still runs
    in the template; a request past what a pipe holds goes the cold way, with the same result."""
    warm, _ = clients
    backend = warm.backend_as(SubprocessBackend)
    digest = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    with warm.sandbox() as sb:
        for size, warm_path in ((900 * 1024, True), (1100 * 1024, False)):
            data = bytes(range(251)) * (size // 251)
            backend.last_cold_reason = None
            result = sb.exec(["python3", "-c", digest], stdin=data, timeout=60)
            assert result.stdout == hashlib.sha256(data).hexdigest() + "\n", (size, result)
            assert (backend.last_cold_reason is None) is warm_path, backend.last_cold_reason
        # The template still serves the next exec after both.
        backend.last_cold_reason = None
        assert sb.exec(["python3", "-c", "print(1)"]).stdout == "1\n"
        assert backend.last_cold_reason is None


async def running_in_template(
    backend: SubprocessBackend, sb: sandboxkit.Sandbox, marker: str
) -> tuple[warm_templates.WarmTemplate, asyncio.Future[sandboxkit.ExecResult]]:
    """The sandbox's template, and an exec of a long command marked ``marker`` that it runs,
    once the command is seen running."""
    await sb.aexec(["true"], timeout=60)
    running = asyncio.ensure_future(sb.aexec(["sh", "-c", f"sleep 300; : {marker}"], timeout=600))
    deadline = time.monotonic() + 30
    while not processes_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_with(marker), "the command never started"
    return backend._templates[sb.id], running


def test_a_cancelled_exec_kills_its_command_and_keeps_the_template(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    import uuid

    marker = f"cancel-{uuid.uuid4().hex}"
    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)

    async def main() -> None:
        sb = await warm.asandbox()
        try:
            template, running = await running_in_template(backend, sb, marker)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            deadline = time.monotonic() + 30
            while processes_with(marker) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not processes_with(marker)
            after = await sb.aexec(["python3", "-c", "print('still warm')"], timeout=60)
            assert after.stdout == "still warm\n"
            assert backend._templates[sb.id] is template and not template.broken
        finally:
            await sb.astop()

    asyncio.run(main())


def test_a_cancelled_exec_whose_template_dies_leaves_no_exception_unretrieved(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exec is cancelled (a batch deadline) and its template dies before it is told to
    kill the command (the sandbox stopped): the background drain meets a dead socket, which
    breaks the template and nothing else; asyncio logs no exception never retrieved."""
    import gc
    import socket
    import threading
    import uuid

    from sandboxkit.portal import portal

    marker = f"cancel-{uuid.uuid4().hex}"
    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)

    async def main() -> None:
        sb = await warm.asandbox()
        try:
            template, running = await running_in_template(backend, sb, marker)
            # The template's loop (the portal's) is held while the cancel reaches it and the
            # template dies, so that the drain starts on a dead socket.
            held, release = threading.Event(), threading.Event()
            portal().loop.call_soon_threadsafe(lambda: (held.set(), release.wait(60)))
            assert held.wait(30)
            running.cancel()
            await asyncio.sleep(0.1)  # the cancel is queued on the held loop
            template.spawned.kill()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if template.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                        break
                except BlockingIOError:
                    time.sleep(0.05)
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await running
            for _ in range(200):
                if template.broken and not template._draining:
                    break
                await asyncio.sleep(0.05)
            assert template.broken and not template._draining
        finally:
            await sb.astop()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_request_the_server_cannot_prepare_fails_in_the_command_alone(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The server takes each command's environment and cwd before forking; one it cannot
    take (sent past the client's checks) fails that command only, as a fresh one would."""
    import asyncio

    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    with warm.sandbox() as sb:
        sb.exec(["true"], timeout=60)
        template = backend._templates[sb.id]
        for env, cwd in (({"A=B": "1"}, "/workspace"), ({}, "/workspace/missing")):
            request = template.run(
                ["python3", "-c", "pass"], cwd=cwd, env=env, timeout=60, stdin=None
            )
            result = asyncio.run_coroutine_threadsafe(request, template.loop).result(60)
            assert result.returncode in (126, 127) and result.stderr, result
        after = sb.exec(["python3", "-c", "print('still warm')"], timeout=60)
        assert after.stdout == "still warm\n"
        assert backend._templates[sb.id] is template and not template.broken


def test_a_command_cannot_stop_the_template(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """Of what runs its exec, a command can name the init of the pid namespace the template's
    server made for it (pid 1; also its parent where the init is forked; with the tiny init,
    its parent is outside the namespace and its ppid 0): the signals it sends there, a reboot
    of that namespace and tracing the init must fail, the command run on, the template serve."""
    prog = (
        "import ctypes, os, signal\n"
        "for sig in ('SIGINT', 'SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGCHLD', 'SIGSTOP', 'SIGKILL'):\n"
        "    for pid in {1, os.getppid()} - {0}:\n"
        "        os.kill(pid, getattr(signal, sig))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('reboot', libc.reboot(0x01234567), ctypes.get_errno())\n"  # RB_AUTOBOOT
        "print('ptrace', libc.ptrace(16, 1, None, None), ctypes.get_errno())\n"  # PTRACE_ATTACH
    )
    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    with warm.sandbox() as sb:
        result = sb.exec(["python3", "-c", prog], timeout=60)
        expected = "reboot -1 1\nptrace -1 1\n"  # EPERM
        assert (result.returncode, result.stdout) == (0, expected), result.stderr
        template = backend._templates[sb.id]
        after = sb.exec(["python3", "-c", "print('still warm')"], timeout=60)
        assert after.stdout == "still warm\n"
        assert backend._templates[sb.id] is template and not template.broken


def test_a_command_sees_nothing_of_the_processes_that_serve_later_execs(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The sandbox's /proc lists the template, its server and bwrap's init (pids of the
    sandbox's outer pid namespace, whose /proc a command sees): their directories must be
    empty to a command, so that it can neither read them nor raise their ``oom_score_adj`` or
    renice their ``autogroup`` (which a command running as root, as on a root host, could
    otherwise do) and so slow down or get killed what serves the next completions. Neither may
    it uncover them, in place or from a user and mount namespace of its own (which the syscall
    filter denies it: were it allowed, the kernel's lock on the covers would hold)."""
    prog = (
        "import ctypes, os\n"
        "def nspid(p):  # its pid in each pid namespace, outermost first\n"
        "    try: lines = open(f'/proc/{p}/status').read().splitlines()\n"
        "    except OSError: return []\n"
        "    return next(line.split()[1:] for line in lines if line.startswith('NSpid'))\n"
        "mine = nspid('self')\n"
        "def ours(p):  # this process, or its exec's init: pid 1 of a namespace as deep\n"
        "    return nspid(p) == mine or (len(nspid(p)) == len(mine) and nspid(p)[-1] == '1')\n"
        "others = sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and not ours(p))\n"
        "seen = {p: os.listdir(f'/proc/{p}') for p in others}\n"
        "print(len(others) >= 3, {p: names for p, names in seen.items() if names})\n"
        "writable = []\n"
        "for p in others:\n"
        "    for name in ('oom_score_adj', 'autogroup'):\n"
        "        try: os.close(os.open(f'/proc/{p}/{name}', os.O_WRONLY))\n"
        "        except OSError: pass\n"
        "        else: writable.append((p, name))\n"
        "print(writable)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print({libc.umount2(f'/proc/{p}'.encode(), 2) for p in others}, ctypes.get_errno())\n"
        "print(libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())\n"  # user, mount
        "print({libc.umount2(f'/proc/{p}'.encode(), 2) for p in others}, ctypes.get_errno())\n"
        "print({p: os.listdir(f'/proc/{p}') for p in others if os.listdir(f'/proc/{p}')})\n"
    )
    warm, _ = clients
    with warm.sandbox() as sb:
        result = sb.exec(["python3", "-c", prog], timeout=60)
        expected = "True {}\n[]\n{-1} 1\n-1 1\n{-1} 1\n{}\n"  # EPERM
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected


def test_what_an_exec_leaves_in_dev_shm_does_not_reach_the_next(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """A cold exec gets a fresh /dev/shm (64 MiB), and so does a warm one, in a mount
    namespace of its own: what an exec leaves there (here: fills it) is gone for the next, and
    the template serves on."""
    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    fill = (
        "open('/dev/shm/x', 'wb').write(b'x' * (8 << 20))\n"
        "open('/dev/shm/y', 'wb').write(b'y' * (60 << 20))\n"  # no space left
    )
    check = "import os, multiprocessing\nmultiprocessing.Lock()\nprint(os.listdir('/dev/shm'))"
    with warm.sandbox() as sb:
        assert sb.exec(["python3", "-c", check], timeout=60).stdout == "[]\n"
        template = backend._templates[sb.id]
        filled = sb.exec(["python3", "-c", fill], timeout=60)
        assert "No space left on device" in filled.stderr, filled.stderr
        result = sb.exec(["python3", "-c", check], timeout=60)
        assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr
        assert backend._templates[sb.id] is template and not template.broken


def test_ipc_objects_of_an_exec_do_not_outlast_it(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """SysV shared memory, semaphores and message queues an exec makes are gone with it, as
    with a cold exec: each exec gets an IPC namespace of its own."""
    make = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(4242, 4096, 0o1600) >= 0, libc.semget(4242, 1, 0o1600) >= 0,"
        " libc.msgget(4242, 0o1600) >= 0)\n"
    )
    find = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(4242, 0, 0), libc.semget(4242, 0, 0), libc.msgget(4242, 0))\n"
        "for kind in ('shm', 'sem', 'msg'):\n"
        "    print(len(open(f'/proc/sysvipc/{kind}').read().splitlines()))\n"
    )
    for client in clients:
        with client.sandbox() as sb:
            assert sb.exec(["python3", "-c", make], timeout=60).stdout == "True True True\n"
            result = sb.exec(["python3", "-c", find], timeout=60)
            assert result.stdout == "-1 -1 -1\n1\n1\n1\n", result.stderr  # headers only


def test_the_command_that_runs_its_sandbox_out_of_memory_is_killed_not_the_template(
    local_root: Path,
) -> None:
    """Memory taken without being touched (``posix_fallocate`` of memfds) leaves the command
    no larger than the processes of its template: the kernel must still kill the command, so
    that its output comes back and the next exec finds the same template."""
    fill = (
        "import os\n"
        "fds = []\n"
        "while True:\n"
        "    fds.append(os.memfd_create('fill'))\n"
        "    os.posix_fallocate(fds[-1], 0, 4 << 20)\n"
        "    print(len(fds) * 4, flush=True)\n"
    )
    with get_backend("subprocess", root=local_root, warm=True, memory_mb=128) as client:
        backend = client.backend
        assert isinstance(backend, SubprocessBackend)
        if isolation.namespaces_failure() is not None or backend.memory_limit == "rlimit":
            pytest.skip("no warm template or no memory cgroup here")
        assert backend.warm
        with client.sandbox() as sb:
            sb.exec(["true"], timeout=60)
            template = backend._templates[sb.id]
            for _ in range(3):
                result = sb.exec(["python3", "-c", fill], timeout=60)
                assert result.returncode == 137 and 0 < int(result.stdout.split()[-1]) < 128
                assert backend._templates[sb.id] is template and not template.broken
            assert sb.exec(["python3", "-c", "print('next')"], timeout=60).stdout == "next\n"
            assert backend._templates[sb.id] is template


MEMORY_SCAN = (
    "import ctypes, sys\n"
    "needle, found = sys.argv[1].encode(), 0\n"
    "for line in open('/proc/self/maps'):\n"
    "    fields = line.split()\n"
    "    low, high = (int(x, 16) for x in fields[0].split('-'))\n"
    "    if 'r' in fields[1] and not fields[-1].startswith('[v'):\n"
    "        found += ctypes.string_at(low, high - low).count(needle)\n"
    "print(found)\n"
)
"""Counts the copies of ``argv[1]`` in the process's memory (its own argv among them)."""


def test_no_exec_finds_stdin_or_output_in_the_memory_it_inherits(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The server receives each request (stdin: the test runner's tests) before it forks the
    command, and reads its output: neither that command (before it reads its stdin: the
    runner forks the candidate's zygote first) nor a later exec in the sandbox may find them
    in its memory."""
    warm, _ = clients
    needle = "tests-" + "f3b1c9"
    stdin = ("assert solve() == 42  # " + needle + "\n").encode() * 2000  # ~100 kB
    with warm.sandbox() as sb:
        scan = ["python3", "-c", MEMORY_SCAN, needle]
        baseline = sb.exec(scan, timeout=60)
        assert baseline.returncode == 0 and int(baseline.stdout) > 0, baseline.stderr
        echo = "import sys; data = sys.stdin.read(); print(data); print(data, file=sys.stderr)"
        earlier = sb.exec(["python3", "-c", echo], stdin=stdin, timeout=60)
        assert needle in earlier.stdout and needle in earlier.stderr
        after = sb.exec(scan, stdin=stdin, timeout=60)  # and its own, unread
        assert after.stdout == baseline.stdout, after.stderr


PARSE_TOKENS = (
    "import gc, sys\n"
    "gc.unfreeze()\n"
    "literal = sys.argv[1].encode()\n"
    "print(sum(\n"
    "    any(type(item) is bytes and literal in item for item in holder)\n"
    "    for holder in gc.get_objects()\n"
    "    if type(holder) is list\n"
    "))\n"
)
"""Counts the lists in the process's heap that hold ``argv[1]`` among bytes: as the parser's
list of tokens does (a string literal's raw text), while it lives."""


def test_no_exec_inherits_the_parse_of_its_templates_source(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The template's server lives on in its start's ``-c`` program, whose parse (syntax tree,
    tokens: some 3 MB) the interpreter frees only when that program ends: never, were the
    module's text given as ``-c`` itself. Every fork would copy a page-table entry for each
    page of it."""
    warm, _ = clients
    literal = '"""' + forkserver.__doc__.splitlines()[0]  # the module docstring's raw token
    with warm.sandbox() as sb:
        result = sb.exec(["python3", "-c", PARSE_TOKENS, literal], timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "0\n", "")


PUBLIC_PROGRAM = """import os, sys
BODY_PID = os.getpid()


def main():
    print(BODY_PID != os.getpid(), sys.modules["__main__"].main is main, flush=True)
    raise ValueError("from main")
{guard}"""
RUN_PREPARED = """
import os, sys
from sandboxkit.local import forkserver
source = sys.stdin.read()
forkserver.prepare_public(source)
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        command = [sys.executable, "-c", source]
        program = forkserver.Program(source, "<string>", ["-c"], set(), sys.executable, command)
        os._exit(forkserver.run_python(program))
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.mark.parametrize(
    ("guard", "body_ran_once"),
    [
        ('\n\nif __name__ == "__main__":\n    main()\n', True),
        ('\n\nif __name__ == "__main__":\n    main()\nprint("after")\n', False),
        ("\n\nmain()\n", False),
        ('\nraise SystemExit(3)\n\nif __name__ == "__main__":\n    main()\n', False),
    ],
    ids=["main guard", "code after the guard", "no guard", "a body that raises"],
)
def test_a_template_runs_a_public_programs_body_once_and_each_exec_its_main_guard(
    guard: str, body_ran_once: bool
) -> None:
    """What a warm template does with the runner's text (``prepare_public``): a program that
    ends in a main guard has its body run once, where it is prepared, and each exec runs only
    the guard's block, in its own copy of that ``__main__``, with the line numbers of the
    program's text; any other program (or one whose body raises there) runs whole in each."""
    source = PUBLIC_PROGRAM.format(guard=guard)
    result = subprocess.run(
        [sys.executable, "-c", RUN_PREPARED], input=source, capture_output=True, text=True
    )
    if "SystemExit(3)" in guard:
        assert result.stdout == "3\n3\n", result.stderr
        return
    line = f"{body_ran_once} True\n"
    assert result.stdout == line + "1\n" + line + "1\n", result.stderr
    call = 1 + source.splitlines().index("    main()" if "if __name__" in guard else "main()")
    raised = f'"<string>", line {call}, in <module>\n  File "<string>", line 7, in main\nValueE'
    assert result.stderr.count(raised) == 2, result.stderr


def test_a_template_loads_the_hosts_compile_where_its_interpreter_takes_that_bytecode(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compiling the template's source is some 10 ms of each template's start: a template whose
    interpreter takes this host's bytecode loads the host's compile of it; another (here: a
    magic number no interpreter has), or one whose host could make no sealed memfd, compiles
    the source itself, and serves alike."""
    warm, _ = clients
    backend = warm.backend_as(SubprocessBackend)
    outputs = []
    compiled = warm_templates.compiled_source
    for magic, memfd in (
        (warm_templates.MAGIC_NUMBER, compiled),
        (b"\xff\xff\r\n", compiled),
        (warm_templates.MAGIC_NUMBER, lambda: None),
    ):
        monkeypatch.setattr(warm_templates, "MAGIC_NUMBER", magic)
        monkeypatch.setattr(warm_templates, "compiled_source", memfd)
        with warm.sandbox() as sb:
            result = sb.exec(["python3", "-c", "import sys; print(sys.argv, __name__)"], timeout=60)
            template = backend.warm_template(sb.id)
            assert template is not None
            outputs.append((template.host_compiled, result.returncode, result.stdout))
    assert outputs == [
        (True, 0, "['-c'] __main__\n"),
        (False, 0, "['-c'] __main__\n"),
        (False, 0, "['-c'] __main__\n"),
    ]


def _server_pid(root: int) -> int:
    """The host pid of the template server under ``root`` (the sandbox's bwrap): pid 1 of its
    own pid namespace, nested once in the sandbox's (an exec's processes are nested deeper)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid"))
        if len(nspid) == 3 and nspid[-1] == "1":
            found.append(pid)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow
def test_a_command_that_ends_in_time_is_no_timeout_when_its_server_is_late(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server held up past the deadline (a loaded machine) reports how a command that ended
    in time really ended, not a timeout: the reward must not depend on the server's luck."""
    import signal
    import threading
    import time

    monkeypatch.setattr(warm_templates, "_STUCK_AFTER", 30.0)  # late, but not given up on

    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    with warm.sandbox() as sb:
        sb.exec(["true"], timeout=60)
        server = _server_pid(backend._templates[sb.id].spawned.proc.pid)
        results: list[sandboxkit.ExecResult] = []
        command = ["sh", "-c", "sleep 0.3; echo done in time"]
        run = threading.Thread(target=lambda: results.append(sb.exec(command, timeout=2.0)))
        run.start()
        assert wait_until(lambda: processes_with("echo done in time"), timeout=30)
        os.kill(server, signal.SIGSTOP)  # the command still runs, and ends, meanwhile
        try:
            time.sleep(3.0)
        finally:
            os.kill(server, signal.SIGCONT)
        run.join(60)
        (result,) = results
        assert (result.returncode, result.stdout, result.timed_out) == (0, "done in time\n", False)


@pytest.mark.slow
def test_a_stuck_server_still_answers_within_the_timeout_and_a_second(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """The host's backstop: a template that never answers is killed, and the exec answered
    as timed out, a second after the exec's timeout; the next exec gets a fresh template."""
    import signal
    import threading
    import time

    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    with warm.sandbox() as sb:
        sb.exec(["true"], timeout=60)
        template = backend._templates[sb.id]
        server = _server_pid(template.spawned.proc.pid)
        results: list[sandboxkit.ExecResult] = []
        run = threading.Thread(
            target=lambda: results.append(sb.exec(["sh", "-c", "sleep 90"], timeout=6))
        )
        started = time.monotonic()
        run.start()
        assert wait_until(lambda: processes_with("sleep 90"), timeout=30)
        os.kill(server, signal.SIGSTOP)
        run.join(80)
        elapsed = time.monotonic() - started
        (result,) = results
        assert result.timed_out and result.returncode == 137
        # Answered by the backstop (timeout + 1 s), not by the end of the sleep or of a 60 s
        # wait: the bound leaves a loaded machine its slack, no exact timing.
        assert elapsed < 6 + 20, elapsed
        assert template.broken
        assert sb.exec(["echo", "next"], timeout=60).stdout == "next\n"


@pytest.mark.slow
def test_an_exec_returns_within_its_timeout_counted_from_its_call_when_its_template_starts_late(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sandbox's first exec starts its template, which a loaded machine can make slow: that
    start is the exec's time too. A batch deadline counts on it: a run ended two seconds before
    the deadline must come back before the deadline, with the runner's records so far."""
    import time

    start = warm_templates.WarmTemplate.start.__func__  # type: ignore[attr-defined]

    async def late_start(cls: type[warm_templates.WarmTemplate], *a: Any, **k: Any) -> Any:
        await asyncio.sleep(4.0)  # a template whose start took 4 s
        return await start(cls, *a, **k)

    monkeypatch.setattr(warm_templates.WarmTemplate, "start", classmethod(late_start))
    warm, _ = clients
    with warm.sandbox() as sb:
        started = time.monotonic()
        result = sb.exec(["sh", "-c", "echo begun; sleep 90"], timeout=6)
        elapsed = time.monotonic() - started
        assert (result.returncode, result.timed_out, result.stdout) == (137, True, "begun\n")
        # Within the contract (timeout + 1 s) and some slack, where counting from the
        # template's start took 4 s more.
        assert elapsed < 6 + 2.5, elapsed
        assert sb.exec(["echo", "next"], timeout=60).stdout == "next\n"


REPORT = (
    "import os, resource\n"
    "print(os.getpriority(os.PRIO_PROCESS, 0), len(os.sched_getaffinity(0)),\n"
    "      [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS)])\n"
)
"""What a command inherits from whatever forks it: priority, CPUs, limits."""


def test_an_exec_cannot_change_what_the_next_one_inherits(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """Whatever a command can name by pid (same uid: it may lower limits, priority and CPUs of
    those) dies with its exec: in a pool, one completion must not slow down or starve the
    next one in the same sandbox (a GRPO group would reward the saboteur)."""
    sabotage = (
        "import os, resource\n"
        "for pid in {1, os.getppid()} - {0}:\n"
        "    for attempt in (\n"
        "        lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (8, 8)),\n"
        "        lambda: resource.prlimit(pid, resource.RLIMIT_AS, (1 << 24, 1 << 24)),\n"
        "        lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),\n"
        "        lambda: os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))}),\n"
        "    ):\n"
        "        try:\n"
        "            attempt()\n"
        "        except OSError as exc:\n"
        "            print('refused', exc)\n"
        "try:\n"
        "    os.setpriority(os.PRIO_USER, os.getuid(), 19)\n"
        "except OSError as exc:  # the tiny init holds capabilities: it cannot be reniced\n"
        "    print('refused', exc)\n"
    )
    warm, _ = clients
    backend = warm.backend
    assert isinstance(backend, SubprocessBackend)
    with warm.sandbox() as sb:
        before = sb.exec(["python3", "-c", REPORT], timeout=60)
        assert before.returncode == 0, before.stderr
        template = backend._templates[sb.id]
        attack = sb.exec(["python3", "-c", sabotage], timeout=60)
        assert attack.returncode == 0, attack.stderr
        after = sb.exec(["python3", "-c", REPORT], timeout=60)
        assert (after.returncode, after.stdout) == (0, before.stdout), after.stderr
        assert backend._templates[sb.id] is template and not template.broken


@pytest.mark.slow
def test_orphans_are_reaped_while_the_command_runs(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """A command that leaves orphans (``cmd &`` in a shell, a double fork) does not run out of
    processes by them: whatever runs its namespace reaps them as they end, as an init does.
    300 orphans, more than the process limit: unreaped, the program would wait forever."""
    prog = (
        "import os, time\n"
        "def fork():\n"
        "    while True:\n"
        "        try:\n"
        "            return os.fork()\n"
        "        except BlockingIOError:\n"
        "            time.sleep(0.01)\n"
        "for _ in range(300):\n"
        "    pid = fork()\n"
        "    if pid == 0:\n"
        "        if fork() == 0:\n"
        "            os._exit(0)\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "print('done')\n"
    )
    warm, cold = both(clients, ["python3", "-c", prog], timeout=120)
    for result in (warm, cold):
        assert (result.returncode, result.stdout, result.timed_out) == (0, "done\n", False)


def test_later_templates_take_the_site_path_the_first_learnt(
    clients: tuple[sandboxkit.SandboxClient, sandboxkit.SandboxClient],
) -> None:
    """Learning site's sys.path is most of a template's start; the backend's next templates
    are handed it, and programs still see what a fresh interpreter sees."""
    _, cold = clients
    program = ["python3", "-c", "import sys; print(sys.path)"]
    root = cold.backend_as(SubprocessBackend).root
    with get_backend("subprocess", root=root, warm=True) as fresh:
        backend = fresh.backend
        assert isinstance(backend, SubprocessBackend)
        seen = []
        for _ in range(2):
            with fresh.sandbox() as sb:
                warm = sb.exec(program, timeout=60)
                seen.append((backend._templates[sb.id].learnt_site, warm.stdout))
                assert warm.stdout == cold.get(sb.id).exec(program, timeout=60).stdout
        assert [learnt for learnt, _ in seen] == [True, False]
        assert seen[0][1] == seen[1][1]


def test_a_changed_site_directory_is_learnt_again(tmp_path: Path) -> None:
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    (site_dir / "a.pth").write_text("/opt/a\n")
    learnt = LearntSite()
    learnt.learnt([str(site_dir), str(tmp_path / "missing")])
    assert learnt.known() == [str(site_dir), str(tmp_path / "missing")]
    stamp = site_stamp([str(site_dir)])
    os.utime(site_dir / "a.pth", ns=(1, 1))  # a .pth file rewritten in place
    assert site_stamp([str(site_dir)]) != stamp
    assert learnt.known() is None
    learnt.learnt([str(site_dir)])
    assert learnt.known() == [str(site_dir)]
    (site_dir / "b.pth").write_text("/opt/b\n")  # a package installed
    assert learnt.known() is None


UNPRIVILEGED_RUN = """
import sandboxkit
client = sandboxkit.get_backend("subprocess")
with client.sandbox() as sb:
    result = sb.exec(["python3", "-c", "import os; print(os.getuid())"], timeout=60)
    template = client.backend.warm_template(sb.id)
    print(result.stdout.strip(), template is not None, client.backend.last_cold_reason)
"""


def test_the_template_starts_for_an_unprivileged_user(
    as_nobody: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Most users do not run as root, where the template's /proc files are another owner's
    once it is not dumpable: run as ``nobody`` (from root), with the system's interpreter
    where this one is under a home ``nobody`` cannot enter, an exec must run warm."""
    done = as_nobody("-c", UNPRIVILEGED_RUN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["65534", "True", "None"]


NETWORK_VIEW = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
client = socket.create_connection(server.getsockname())
print(sum(line.split()[3] == "0A" for line in open("/proc/net/tcp").readlines()[1:]))
"""
"""An exec that listens and counts the listening sockets its own ``/proc/net`` shows."""


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "ahead"])
def test_an_exec_gets_a_network_namespace_of_its_own_lazily_or_ahead(
    local_root: Path, lazy: bool
) -> None:
    """Where the kernel can hand a socket over, a warm exec's sockets live in a network
    namespace its supervisor made at its first, while its own ``/proc/net`` shows the
    sandbox's, in which no process makes a network socket; elsewhere (before Linux 5.9) the
    template makes every exec one ahead, which its ``/proc/net`` shows."""
    if isolation.namespaces_failure() is not None:
        pytest.skip("no user namespaces here: no warm template")
    syscall_filter = seccomp.host_filter()
    if syscall_filter is None or (lazy and not syscall_filter.lazy_network):
        pytest.skip(f"no socket can be handed over here: {seccomp.user_notification()}")
    with get_backend("subprocess", root=str(local_root), warm=True) as client:
        backend = client.backend_as(SubprocessBackend)
        if not lazy:  # as the host builds it where the kernel cannot hand sockets over
            command = seccomp.program(seccomp.COMMAND, syscall_filter.arch, seccomp.RET_ALLOW)
            eager = dataclasses.replace(syscall_filter, command=command, lazy_network=False)
            backend.confinement = dataclasses.replace(backend.confinement, syscall_filter=eager)
        with client.sandbox() as sb:
            seen = [sb.exec(["python3", "-c", NETWORK_VIEW], timeout=60) for _ in range(2)]
            assert backend.last_cold_reason is None
    assert [(r.returncode, r.stdout, r.stderr) for r in seen] == [(0, f"{int(not lazy)}\n", "")] * 2
