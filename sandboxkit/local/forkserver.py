"""The warm template of a namespaced sandbox: forks one fresh process per exec.

Runs inside the sandbox's bwrap namespaces (standard library only, shipped as source), so it
holds nothing of the caller's. Starting an interpreter costs tens of milliseconds; forking this
warm one costs about one. Every exec is still a new process tree that cannot see the previous
one:

- the template forks C, which unshares a new user and pid namespace and forks G, the init of
  that namespace (it dies with C, and its death kills everything in the namespace), which forks
  H, the command: limits, a new session, its own stdio, cwd and environment;
- a Python command (``python[3] [-IEsSBuq] -c CODE | SCRIPT ...``) runs in H directly, from the
  already-started interpreter; anything else is exec'd;
- the template is non-dumpable, so commands cannot read its memory or descriptors.

Protocol on the SOCK_SEQPACKET socket whose fd is ``argv[1]``: the template sends
``{"ready": true}`` (or ``{"ready": false, "reason"}``); each request
``{"argv", "cwd", "env", "limits"}`` is answered by ``{"started": true}`` carrying the fds
(stdin write end, stdout and stderr read ends), later by ``{"exit": code}``; ``{"kill": true}``
kills the running command.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import traceback
import types
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PYTHON_FLAGS = set("IEsSBuq")
libc = ctypes.CDLL(None, use_errno=True)


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def python_program(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """(source, filename, sys.argv) when ``argv`` runs Python code this interpreter can run."""
    if os.path.basename(argv[0]) not in ("python", "python3") and argv[0] != sys.executable:
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("-") and len(argv[i]) > 1:
        flags = argv[i][1:]
        if flags == "c" and i + 1 < len(argv):
            return argv[i + 1], "<string>", ["-c", *argv[i + 2 :]]
        if not set(flags) <= PYTHON_FLAGS:
            return None
        i += 1
    if i >= len(argv) or argv[i] == "-":
        return None
    try:
        with open(argv[i], "rb") as f:
            source = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return source, argv[i], argv[i:]


def run_python(source: str, filename: str, args: list[str]) -> int:
    """Run a program in this process as ``python`` would, and return its exit status."""
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
    )
    sys.argv = args
    sys.path[0] = "" if filename == "<string>" else os.path.dirname(os.path.abspath(filename))
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if filename != "<string>":
        main.__file__ = filename
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(source, filename, "exec"), main.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        # As the interpreter prints it: without this function's own frame.
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        status = 130 if isinstance(exc, KeyboardInterrupt) else 1
    try:
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return status


def command(request: dict[str, Any], stdin_r: int, out_w: int, err_w: int) -> None:
    """H: become the command. Never returns."""
    try:
        os.setsid()
        for which, (soft, hard) in request["limits"]:
            _, current = resource.getrlimit(which)
            if current != resource.RLIM_INFINITY:
                soft, hard = min(soft, current), min(hard, current)
            resource.setrlimit(which, (soft, hard))
        for fd, target in ((stdin_r, 0), (out_w, 1), (err_w, 2)):
            os.dup2(fd, target)
        os.closerange(3, 65536)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        program = python_program(argv)
        if program is not None:
            os._exit(run_python(*program))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.execvpe(argv[0], argv, request["env"])
    except FileNotFoundError as exc:
        os.write(2, f"{exc}\n".encode())
        os._exit(127)
    except BaseException as exc:
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode())
        os._exit(126)


def new_namespace_init(request: dict[str, Any], fds: tuple[int, int, int]) -> None:
    """C: make a fresh pid namespace whose init runs the command. Never returns."""
    try:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        init = os.fork()
        if init:
            _, status = os.waitpid(init, 0)
            os._exit(exit_code(status))
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        child = os.fork()
        if child == 0:
            command(request, *fds)
        while True:  # G, the namespace's init: reap until the command ends
            pid, status = os.wait()
            if pid == child:
                os._exit(exit_code(status))
    except BaseException as exc:
        os.write(fds[2], f"sandbox template: {type(exc).__name__}: {exc}\n".encode())
        os._exit(126)


def serve(sock: socket.socket, request: dict[str, Any]) -> bool:
    """Run one request to its end; False when the host has gone."""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:  # out of processes: the host runs this one the cold way
        for fd in (stdin_r, stdin_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        send(sock, {"error": str(exc)})
        return True
    if pid == 0:
        sock.close()
        for fd in (stdin_w, out_r, err_r):
            os.close(fd)
        new_namespace_init(request, (stdin_r, out_w, err_w))
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    send(sock, {"started": True}, [stdin_w, out_r, err_r])
    for fd in (stdin_w, out_r, err_r):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    alive = True
    while True:
        ready, _, _ = select.select([sock.fileno(), pidfd], [], [])
        if pidfd in ready:
            break
        message = sock.recv(1 << 16)
        if not message or json.loads(message).get("kill"):
            os.kill(pid, signal.SIGKILL)
            alive = bool(message)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    if alive:
        send(sock, {"exit": exit_code(status)})
    return alive


def probe() -> str | None:
    """Why forking a fresh namespace per exec is impossible here, or None."""
    pid = os.fork()
    if pid == 0:
        ok = libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "nested user and pid namespaces are not allowed"
    return None


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    reason = probe()
    send(sock, {"ready": reason is None, "reason": reason or ""})
    if reason is not None:
        return
    while True:
        message = sock.recv(1 << 20)
        if not message:
            return
        request = json.loads(message)
        if "argv" in request and not serve(sock, request):
            return


if __name__ == "__main__":
    main()
