"""The warm template of a namespaced sandbox: forks one fresh process per exec.

Runs inside the sandbox's bwrap namespaces (standard library only, shipped as source), so it
holds nothing of the caller's. Forking this warm one costs a small part of what starting an
interpreter does. Every exec is still a new process tree that cannot see the previous
one:

- the template moves into a user and a mount namespace of its own and forks the server S,
  pid 1 of a pid namespace owned by that user namespace (see ``become_server``);
- per exec, S makes a fresh pid namespace whose init G is a tiny static program
  (``INIT_X86_64``, a few instructions that sleep), started with ``posix_spawn`` (no copy of
  S's memory) and SIGCHLD ignored (so the kernel reaps whatever is orphaned to it), and forks
  H, the command, into it as pid 2: H takes a user namespace of its own (so it has no
  capability over S's namespaces) and an IPC one, inherits the mount namespace S made for it
  alone (``fresh_namespaces``: a new /dev/shm), drops its capabilities
  (``enter_exec_namespaces``), takes limits and its OOM score, a new session, its own stdio,
  cwd and environment, and the commands' syscall filter. Its network namespace is the
  sandbox's own, where no process makes a network socket: the filter sends each one to the
  exec's supervisor P, which S forks at the first (``supervise_sockets``), and which makes the
  exec's own network namespace (lo up) and the socket there. An exec that makes none has
  nothing to leave in a network namespace: a command cannot change one without a network
  socket (its routes, devices and sysctls need capabilities it lacks), and its Unix sockets
  (their abstract names included) go with its processes. Where the kernel cannot hand a
  socket over (before Linux 5.9), S makes each exec's network namespace ahead instead. When
  H ends, S kills G, and the death of G
  kills everything left in the namespace (as does a kill of G on timeout). All the command
  can name by pid is G and its own processes, which die with its exec: S as the commands'
  init would save G, but a command can lower the limits, priority and CPUs of any process of
  its uid it can name, and S passes those on to every later exec.
  Where the tiny init cannot run (not x86-64, no executable memfd), G is a fork of S instead,
  which forks H (``namespace_init``): one more copy of the template per exec;
- a Python command (``python [-IEsSPBuq] -c CODE | SCRIPT ...`` that names this interpreter,
  with no ``PYTHON*`` variables and the template's locale) runs in H directly, from the
  already-started interpreter, set up as a fresh one would be (streams, argv, ``sys.path``
  with site-packages, site's builtins); anything else is exec'd. What still differs from a
  fresh interpreter: ``sys.flags``, the hash seed (shared by a sandbox's execs), .pth import
  lines and ``sitecustomize``, which never run here (``SANDBOXKIT_WARM=0`` runs them), and,
  with the tiny init, ``os.getppid()``: 0 (the parent, S, is outside the namespace), not 1;
- the template is non-dumpable, so commands cannot read its memory or descriptors, and its
  processes' /proc directories are covered (``hide_serving_processes``); what a command
  inherits of the server's memory holds nothing of any request but its limits (argv, env,
  cwd, program text and stdin go unread through a pipe to the command, see ``main``) nor any
  earlier output (see ``Output``); only public programs are made ready ahead, at the first
  exec that runs one (the runner: ``prepare_public_programs``).

The template also feeds the command's stdin, collects its output (capped) and enforces its
timeout, so an exec costs the host one request and one answer.

Protocol on the SOCK_SEQPACKET socket whose fd is ``argv[1]`` (``argv[2]``: ``spawn`` to use
the tiny init where it runs, ``fork`` not to; ``argv[3]``: a JSON list of public ``-c``
programs, compiled at the first exec that runs one; ``argv[4]``: the seccomp program each
command gets, in hex, or nothing; ``argv[5]``: ``lazy`` where that filter sends network sockets
to a supervisor (``LAZY_NETWORK``), else ``eager``; ``argv[6]``, if given: a site ``sys.path``
to take instead of learning it): the template sends ``{"ready": true, "site_path", "learnt",
"init"}`` (``init``: whether the tiny init is used) or ``{"ready": false, "reason"}``. A
request is ``r`` + a JSON header ``{"limits", "cap", "timeout", "capabilities", "judge",
"size"}`` (``capabilities``: the numbers of those the command keeps, see
``enter_exec_namespaces``; ``judge``: the command is the trusted runner, which keeps the
server's OOM score) + a newline + the body: the job's length (4 bytes, little-endian) + the job
``{"argv", "cwd", "env"}`` as JSON + the stdin bytes, ``size`` bytes in all, of which what does
not fit the first packet (``MAX_PACKET``) follows in packets of its own; it is answered by
packets ``o`` + stdout bytes and ``e`` + stderr bytes (none when empty), then ``x`` +
``{"exit", "timed_out", "truncated", "duration", "last"}`` (``last``: the template ends after
this exec, having no fresh namespaces for the next; the host starts a new one), or ``x`` +
``{"error"}`` when it could not start (the host runs it the cold way). ``k`` kills the running
command, which is then answered as usual.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's own: no enum conversions per call
import _socket
import atexit
import builtins
import contextlib
import ctypes
import fcntl
import gc
import io
import json
import mmap
import os
import resource
import select
import signal
import site
import socket
import struct
import sys
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported here: every program would find typing already loaded
    from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
EXEC_NAMESPACES = CLONE_NEWIPC
"""Namespaces each exec's command gets fresh, with its user namespace (``enter_exec_namespaces``):
IPC, as a cold exec's (SysV shared memory, semaphores and message queues and POSIX message
queues would otherwise outlast the exec in the template's). Its network and mount namespaces
are fresh too: its mount namespace made ahead by the server (``fresh_namespaces``), its
network namespace made by its supervisor at its first network socket (``supervise_sockets``), or
ahead by the server where the kernel cannot hand sockets over (``LAZY_NETWORK``)."""
MS_NOSUID_NODEV = 0x2 | 0x4
MS_RDONLY_NOSUID_NODEV_NOEXEC = 0x1 | MS_NOSUID_NODEV | 0x8
SIOCSIFFLAGS = 0x8914
IFF_UP_LOOPBACK_RUNNING = 0x1 | 0x8 | 0x40
LAZY_NETWORK: list[bool] = []
"""Holds True where the command filter sends network sockets to a supervisor
(``supervise_sockets``, ``argv[5]``: ``lazy``): then an exec starts in the sandbox's own network
namespace, which no process ever makes a network socket in, and gets one of its own only at its
first. Else the server makes each exec a new one ahead (``fresh_namespaces``)."""
SOCKSTAT: list[int] = []
"""With ``LAZY_NETWORK``: the fd of the sandbox's network namespace's ``sockstat`` (opened
before the server's /proc is covered) and the number of sockets in use there when the first
exec could start (``sockets_left``)."""
SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}
SECCOMP_SET_MODE_FILTER = 1  # seccomp()'s operation (prctl's mode is SECCOMP_MODE_FILTER)
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8
NOTIF_RECV, NOTIF_SEND, NOTIF_ADDFD = 0xC0502100, 0xC0182101, 0x40182103  # SECCOMP_IOCTL_*
ADDFD_FLAG_SEND = [2]
"""SECCOMP_ADDFD_FLAG_SEND (Linux 5.14: install and answer at once), emptied by a supervisor
whose kernel lacks it (it then answers after installing)."""
SOCK_CLOEXEC = 0o2000000
SHARED_MEMORY: list[bytes] = []
"""The options of the template's /dev/shm (bwrap's: size and mode), learnt before any command
ran, with which each exec gets a fresh one (``fresh_namespaces``)."""
BASE_MOUNT_NS: list[int] = []
"""The fd of the server's mount namespace (with the covers of ``hide_serving_processes``),
of which each exec's is a fresh copy."""
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
SECCOMP_MODE_FILTER = 2
PYTHON_FLAGS = set("IEsSPBuq")
WARM_UP_PROGRAM = """
import sys
class A:
    def f(self, x: int = 1, *a, **k) -> list[int]:
        return [i * x for i in range(3) if i] + [*a] + list({**k})
try:
    print(f"{A().f(2)!r:>10}", lambda y: y, (z := 1), file=sys.stderr)
except Exception as e:
    raise SystemExit(1) from e
"""
OOM_SCORE_ADJ = 1000
"""Each command's (the trusted runner's test processes take it themselves): the first process
the kernel kills when its sandbox's memory runs out (never the template nor the runner; and
sandboxes before the host's processes when the host's does)."""
OOM_SCORE = str(OOM_SCORE_ADJ).encode()
LAUNCHER = """\
import sys
def load(source, magic, fd):
    if fd:
        import marshal, os
        data = os.pread(int(fd), os.fstat(int(fd)).st_size, 0)
        os.close(int(fd))
        importer = sys.modules.get("_frozen_importlib_external")
        if magic == getattr(importer, "MAGIC_NUMBER", b"").hex():
            return marshal.loads(data), True
    return compile(source, "<string>", "exec"), False
CODE, HOST_COMPILED = load(sys.argv.pop(1), sys.argv.pop(1), sys.argv.pop(1))
exec(CODE)
"""
"""How a host starts this module: ``python -I -S -c LAUNCHER SOURCE MAGIC FD ARGS...``, where
``FD`` (if not empty) holds the host's compile of ``SOURCE`` (``marshal``), which the template
loads if its interpreter's bytecode is the host's (``MAGIC``, as ``.pyc`` files say it), else it
compiles ``SOURCE`` (some 10 ms of its start); this module's ``sys.argv`` is then ``-c ARGS...``,
as with ``-c SOURCE ARGS...``. Given as ``-c SOURCE``, the interpreter would keep the parse of all
of this module (its syntax tree, with every name and constant in it: some 3 MB of heap) until
the ``-c`` program ends, which for a server is never; each exec's fork copies a page-table
entry for every page of it, and each exec's exit unmaps them. ``compile`` frees its parse as
soon as the code is made."""
MAX_REQUEST = 1024 * 1024
"""Largest request (header, job and stdin): a pipe must hold it whole (``pipe_holding``), and
an unprivileged pipe holds at most ``/proc/sys/fs/pipe-max-size`` (1 MiB by default)."""
LENGTH = struct.Struct("<I")
"""A job's length before it (``read_job``), and a container packet's (``write_packet``): made
here once, not looked up in struct's cache (and made there) in every exec."""
MAX_PACKET = 128 * 1024
"""A request longer than this comes in several packets (one must fit the socket's buffer)."""
MAX_SCRIPT = 1024 * 1024
"""Larger scripts run in a fresh interpreter: the server reads a script before it forks."""
CHUNK = 60 * 1024
"""Output goes back in packets of at most this much (a SEQPACKET message must fit the socket
buffer)."""
PIPE_DEFAULT_SIZE = 64 * 1024
DRAIN_SECONDS = 2.0
"""How long to read the pipes after the command's namespace died (they close at once)."""
LOCALE_VARIABLES = ("LC_ALL", "LC_CTYPE", "LANG")
START_LOCALE = {name: os.environ.get(name) for name in LOCALE_VARIABLES}
_stdout = sys.__stdout__
STDIO_ENCODING: str = _stdout.encoding if _stdout else "utf-8"
STDIO_ERRORS: str = (_stdout.errors if _stdout else None) or "strict"
"""What this interpreter's locale made of stdio: a fresh one with the same locale agrees."""
SITE_BUILTINS = ("exit", "quit", "help", "copyright", "credits", "license")
EXECUTABLE = os.path.realpath(sys.executable)
BASE_PATH = list(sys.path)
"""sys.path without site (the template runs with ``-I -S``)."""
SITE_PATH: list[str] = []
"""sys.path after a normal start's ``site.main()``, learnt by ``learn_site``."""
OUTER_IDS = (os.geteuid(), os.getegid())
"""The sandbox's uid and gid, kept in every user namespace the template makes."""
OWN_MAPS = [
    ("uid_map", f"{OUTER_IDS[0]} {OUTER_IDS[0]} 1"),
    ("setgroups", "deny"),
    ("gid_map", f"{OUTER_IDS[1]} {OUTER_IDS[1]} 1"),
]
"""The maps of a user namespace that keeps only those ids (``new_user_namespace``)."""
PUBLIC_MODULES: dict[str, tuple[types.ModuleType, types.CodeType]] = {}
"""Public ``-c`` programs (the test runner) the host named at start, made ready before any
command ran (``prepare_public``): each one's ``__main__`` module, and the code an exec of it
still runs there. Only what every sandbox may read is kept between execs."""
MAIN_GUARD = '\nif __name__ == "__main__":\n'
PUBLIC: dict[str, str] = {}
"""The public programs' texts by their handles (:func:`public_handle`, in the host's order),
by which its requests name them."""
HANDLE = "\0public program "


def public_handle(index: int) -> str:
    """What stands in a request's argv for the ``index``-th public program's text (resolved
    in the command's own process: ``read_job``). No real argument holds a NUL, so no command
    of the host's means it otherwise, and it names only what every command may run."""
    return f"{HANDLE}{index}"


SERVER_PID_NS: list[int] = []
"""The fd of the server's own pid namespace, once it is the server."""
INIT: list[str] = []
"""The path of the tiny init (``INIT_X86_64``) once it proved to run here; else empty and each
exec's init is a fork of the server (``namespace_init``)."""
INIT_X86_64 = bytes.fromhex(
    "bf04000000"  # mov edi, 4 (PR_SET_DUMPABLE)
    "31f6"  # xor esi, esi
    "b89d000000"  # mov eax, 157 (prctl)
    "0f05"  # syscall: prctl(PR_SET_DUMPABLE, 0)
    "b822000000"  # loop: mov eax, 34 (pause)
    "0f05"  # syscall: pause()
    "ebf7"  # jmp loop
)
"""The code of each exec's init where the tiny one runs (x86-64 Linux): it holds nothing, can
neither be signalled from its namespace (an init gets only the signals it handles) nor traced,
and the kernel reaps what is orphaned to it (it starts with SIGCHLD ignored)."""
libc = ctypes.CDLL(None, use_errno=True)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


CAPABILITY_VERSION_3 = 0x20080522
CapSets = CapData * 2
"""The two words of each capability set that ``capset`` takes, as a type made once here: ctypes
makes an array type the first time it is named, and each exec would make its own (a new
class, a fifth of a millisecond and some 80 pages of the server's heap copied)."""
NO_CAPABILITIES = (CapHeader(CAPABILITY_VERSION_3, 0), CapSets())
"""``capset``'s arguments for a command that keeps no capability, made once: each ctypes
instance an exec made would write to pages of the server's heap it shares (a copy of each,
some 3 us apiece)."""


class SeccompProgram(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


COMMAND_FILTER: list[SeccompProgram] = []
"""The syscall filter each command gets on top of the template's (``argv[4]``), if any."""
SECCOMP_NUMBER = SECCOMP_SYSCALL.get(os.uname().machine, -1)


class SeccompData(ctypes.Structure):
    _fields_ = [
        ("nr", ctypes.c_int),
        ("arch", ctypes.c_uint32),
        ("instruction_pointer", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    ]


class Notification(ctypes.Structure):  # struct seccomp_notif
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("data", SeccompData),
    ]


class Response(ctypes.Structure):  # struct seccomp_notif_resp
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("val", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class AddFd(ctypes.Structure):  # struct seccomp_notif_addfd
    _fields_ = [
        (name, ctypes.c_uint64 if name == "id" else ctypes.c_uint32)
        for name in ("id", "flags", "srcfd", "newfd", "newfd_flags")
    ]


def exit_code(status: int) -> int:
    """A wait status as ``protocol.shell_returncode`` reports it (repeated here: this module
    runs in the sandbox with the standard library only)."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Program:
    """A Python program this interpreter runs in place of a fresh ``python``."""

    def __init__(
        self,
        source: str,
        filename: str,
        args: list[str],
        flags: set[str],
        executable: str,
        command: list[str],
    ) -> None:
        self.source = source
        self.filename = filename
        self.args = args
        self.flags = flags
        self.executable = executable
        self.command = command
        """The command line as given (``sys.orig_argv``)."""


def this_interpreter(name: str, path: str) -> str | None:
    """The path by which ``name``, looked up as ``execvp`` would, is this interpreter (an
    explicit ``/usr/bin/python3`` may be another Python), as a fresh one's ``sys.executable``
    would say it (links not resolved); else None."""
    candidates = [name] if "/" in name else [os.path.join(d or ".", name) for d in path.split(":")]
    for candidate in candidates:
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            if os.path.realpath(candidate) == EXECUTABLE:
                return os.path.abspath(candidate)
            return None
    return None


def python_program(argv: list[str], env: dict[str, str]) -> Program | None:
    """The program when ``argv`` is ``python [-IEsSPBuq] -c CODE | SCRIPT ...`` for this
    interpreter and nothing in ``env`` changes how Python starts; else None (exec it)."""
    executable = this_interpreter(argv[0], env.get("PATH", ""))
    if executable is None:
        return None
    flags: set[str] = set()
    code = None
    i = 1
    while i < len(argv) and argv[i].startswith("-") and len(argv[i]) > 1:
        option = argv[i][1:]
        if option[-1] == "c" and set(option[:-1]) <= PYTHON_FLAGS and i + 1 < len(argv):
            flags |= set(option[:-1])
            code = argv[i + 1]
            break
        if not set(option) <= PYTHON_FLAGS:
            return None
        flags |= set(option)
        i += 1
    if not flags & {"E", "I"} and any(key.startswith("PYTHON") for key in env):
        return None  # PYTHONPATH and friends: the real interpreter reads them
    if any(env.get(name) != START_LOCALE[name] for name in LOCALE_VARIABLES):
        return None  # another locale: other stdio encodings
    if code is not None:
        return Program(code, "<string>", ["-c", *argv[i + 2 :]], flags, executable, argv)
    if i >= len(argv) or argv[i] == "-":
        return None
    try:
        with open(argv[i], "rb") as f:
            data = f.read(MAX_SCRIPT + 1)
        if len(data) > MAX_SCRIPT:
            return None
        source = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return Program(source, argv[i], argv[i:], flags, executable, argv)


def text_stream(fd: int, flags: set[str], *, errors: str = STDIO_ERRORS) -> io.TextIOWrapper:
    """sys.stdout or sys.stderr as Python makes them: block-buffered, stderr line-buffered,
    nothing buffered under ``-u``."""
    raw = io.FileIO(fd, "w", closefd=False)
    if "u" in flags:
        return io.TextIOWrapper(raw, encoding=STDIO_ENCODING, errors=errors, write_through=True)
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=STDIO_ENCODING, errors=errors, line_buffering=fd == 2
    )


def start_up(program: Program) -> None:
    """What the interpreter's start-up would have given this program: streams, argv, sys.path
    (with the site-packages of a normal start unless ``-S``, the user site unless ``-s``,
    ``-I`` or ``-S``, the script's directory unless ``-I`` or ``-P``) and site's builtins."""
    flags = program.flags
    sys.stdin = open(0, encoding=STDIO_ENCODING, errors=STDIO_ERRORS, closefd=False)  # noqa: SIM115
    sys.stdout = text_stream(1, flags)
    sys.stderr = text_stream(2, flags, errors="backslashreplace")
    sys.argv = program.args
    sys.orig_argv = program.command
    sys.executable = program.executable
    sys.dont_write_bytecode = "B" in flags
    sys.path[:] = BASE_PATH
    if "S" in flags:
        for name in SITE_BUILTINS:
            builtins.__dict__.pop(name, None)
    else:
        if not flags & {"s", "I"}:
            site.USER_BASE = site.USER_SITE = None  # from this exec's HOME
            user_site = site.getusersitepackages()
            if os.path.isdir(user_site):
                site.addsitedir(user_site)
        sys.path += [entry for entry in SITE_PATH if entry not in sys.path]
    if not flags & {"I", "P"}:
        script = program.filename
        first = "" if script == "<string>" else os.path.dirname(os.path.realpath(script))
        sys.path.insert(0, first)


def new_main() -> types.ModuleType:
    """A fresh ``__main__`` module, as the interpreter makes for a program."""
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    return main


def compile_program(source: str, filename: str) -> types.CodeType:
    """As the interpreter compiles ``-c`` code or a script (not with this module's
    ``from __future__`` flags)."""
    return compile(source, filename, "exec", dont_inherit=True)


def run_python(program: Program) -> int:
    """Run a program in this process as ``python`` would, and return its exit status."""
    start_up(program)
    prepared = PUBLIC_MODULES.get(program.source) if program.filename == "<string>" else None
    if prepared is None:
        main = new_main()
        if program.filename != "<string>":
            main.__file__ = os.path.abspath(program.filename)
    else:
        main = prepared[0]
    sys.modules["__main__"] = main
    status = 0
    try:
        if prepared is None:
            exec(compile_program(program.source, program.filename), main.__dict__)
        else:
            exec(prepared[1], main.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        # As the interpreter reports it: through sys.excepthook, without the template's frames.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code in (
            run_python.__code__,
            compile_program.__code__,
        ):
            tb = tb.tb_next
        exc.__traceback__ = tb
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except BaseException:
            sys.__excepthook__(type(exc), exc, exc.__traceback__)
        status = 130 if isinstance(exc, KeyboardInterrupt) else 1
    try:
        # The interpreter's shutdown: join non-daemon threads (if the program made any),
        # run atexit handlers, flush the streams.
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return status


def read_job(fd: int) -> dict[str, Any]:
    """The command's argv, env and cwd, read by H from the front of its stdin pipe, where the
    server put them unread: nothing of them passes through the server's memory, which later
    execs inherit. What follows in the pipe is the command's stdin."""
    (size,) = LENGTH.unpack(read_exactly(fd, 4))
    job: dict[str, Any] = json.loads(read_exactly(fd, size).decode())
    job["argv"] = [PUBLIC.get(arg, arg) for arg in job["argv"]]
    return job


def read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("the request ended early")
        data += chunk
    return data


LISTENER_FD = struct.pack("i", 4)
"""The ancillary data that passes a command's fd 4 (its filter's listener, ``command``)."""


def command(
    limits: list[Any],
    fds: tuple[int, int, int],
    judge: bool = False,
    *,
    pwd: bool = False,
    control: int = -1,
) -> None:
    """H: become the command whose job is at the front of ``fds[0]``; the trusted runner
    (``judge``) keeps the server's OOM score, below every other command's. With ``pwd``, its
    environment's ``PWD`` is its cwd, as bwrap's ``--chdir`` sets it for a cold exec. With
    ``control`` (``LAZY_NETWORK``), the listener of its syscall filter goes to the server on
    that socket, before any of the command's code runs. Never returns."""
    try:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # as a fresh interpreter
        os.setsid()
        # Readable by itself, as a fresh process would be (the server is not dumpable): with
        # its own uid mapped to no one's root, /proc/self/mem and /proc/self/fd would not open.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        for which, (soft, hard) in limits:
            _, current = resource.getrlimit(which)
            if current != resource.RLIM_INFINITY:
                soft, hard = min(soft, current), min(hard, current)
            resource.setrlimit(which, (soft, hard))
        if not judge:  # no text stream: its first open would look up the locale's codec
            with contextlib.suppress(OSError):
                adj = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
                try:
                    os.write(adj, OOM_SCORE)
                finally:
                    os.close(adj)
        job = read_job(fds[0])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        if control >= 0:
            os.dup2(control, 3)
        os.closerange(3 if control < 0 else 4, 65536)
        for seccomp in COMMAND_FILTER:  # no_new_privs: set by bwrap, inherited
            if control >= 0:  # the listener is fd 4, sent and closed below
                failed = libc.syscall(
                    SECCOMP_NUMBER,
                    SECCOMP_SET_MODE_FILTER,
                    SECCOMP_FILTER_FLAG_NEW_LISTENER,
                    ctypes.byref(seccomp),
                )
            else:
                failed = libc.prctl(
                    PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(seccomp), 0, 0
                )
            if failed < 0:
                code = ctypes.get_errno()
                raise OSError(code, f"seccomp: {os.strerror(code)}")
        if control >= 0:  # the listener to the server, then closed, as is the socket
            server = _socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, 3)
            server.sendmsg([b"l"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, LISTENER_FD)])
            server.close()
            os.close(4)
        argv, env = job["argv"], job["env"] | ({"PWD": job["cwd"]} if pwd else {})
        if os.environ:  # empty: the server cleared its own (``settle_heap``)
            os.environ.clear()
        set_variable = os.environ.__setitem__  # not update(): its checks touch more pages
        for name, value in env.items():
            set_variable(name, value)
        os.chdir(job["cwd"])
        program = python_program(argv, env)
        if program is not None:
            os._exit(run_python(program))
        _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError as exc:
        os.write(2, f"{exc}\n".encode())
        os._exit(127)
    except BaseException as exc:
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode())
        os._exit(126)


def namespace_init(
    limits: list[Any], keep: list[int], fds: tuple[int, int, int], judge: bool, control: int
) -> None:
    """G, pid 1 of the exec's fresh pid namespace: run the command, reap, exit with its status
    (and so kill whatever it left). Never returns. (Should the server die, the kernel kills
    G with the server's own pid namespace, of which G's is a part.)"""
    try:
        enter_exec_namespaces(keep)
        child = os.fork()
        if child == 0:
            command(limits, fds, judge, pwd=True, control=control)
        while True:
            pid, status = os.wait()
            if pid == child:
                os._exit(exit_code(status))
    except BaseException as exc:
        setup_failed(fds[2], exc)


def setup_failed(err_fd: int, exc: BaseException) -> NoReturn:
    """End an exec whose processes could not be set up, saying why on its stderr."""
    os.write(err_fd, f"sandbox template: {type(exc).__name__}: {exc}\n".encode())
    os._exit(126)


def enter_exec_namespaces(keep: list[int]) -> None:
    """Take the exec's own user namespace (so the command has no capability over the
    server's namespaces) and ``EXEC_NAMESPACES``, then drop the capabilities the new user
    namespace gave: a cold exec has none (bwrap drops them all), and with them a command would
    see other permissions than cold (a mode 000 file of its own would still open); the
    bounding set too. bwrap's ``no_new_privs`` keeps an exec'd program from getting them
    back.

    ``keep`` (the trusted runner's, ``local.judge``): capabilities to keep, as bwrap's
    ``--cap-add`` keeps them for a cold exec (the bounding, permitted, effective, inheritable
    and ambient sets); such a command stays in the server's user namespace, the one that maps
    the judge's uid."""
    if keep:
        if libc.unshare(EXEC_NAMESPACES) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"unshare: {os.strerror(errno)}")
    else:
        new_user_namespace(EXEC_NAMESPACES)
    # A new user namespace also fills the bounding set, which bwrap empties for a cold exec.
    drop_bounding_set(keep)
    header, sets = NO_CAPABILITIES
    if keep:
        header, sets = CapHeader(CAPABILITY_VERSION_3, 0), CapSets()
    for capability in keep:
        word, bit = sets[capability // 32], 1 << capability % 32
        word.effective, word.permitted, word.inheritable = (word.effective | bit,) * 3
    if libc.capset(ctypes.byref(header), sets) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset: {os.strerror(errno)}")
    for capability in keep:
        if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, capability, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"ambient capabilities: {os.strerror(errno)}")


def drop_bounding_set(keep: list[int]) -> None:
    """Empty the bounding set but ``keep``, while CAP_SETPCAP is held, up to the kernel's last
    capability."""
    capability = 0
    while capability in keep or libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) == 0:
        capability += 1


def fresh_namespaces() -> None:
    """S: move into a new copy of the server's mount namespace with a new tmpfs on /dev/shm
    (the options of bwrap's), and (unless ``LAZY_NETWORK``) a new network namespace, its
    loopback device up, as bwrap makes them for a cold exec. The next exec inherits them, and
    no later exec: S moves on as soon as it has started an exec's command, so that this work
    (with a network namespace about 1 ms of CPU, most of it the kernel's making the loopback
    device) overlaps the command's run rather than delaying the next request, and the
    namespaces die with the last process of the exec (their teardown runs in a kernel worker).
    Both belong to S's user namespace, in which commands hold no capability: they cannot
    reconfigure them either. So nothing an exec leaves there (sockets in TIME_WAIT, whose
    ports and addresses carry bytes for 60 s, the counters of ``/proc/net``, /dev/shm's files,
    metadata and inode numbers) reaches the next."""
    flags = CLONE_NEWNS if LAZY_NETWORK else CLONE_NEWNET | CLONE_NEWNS
    if libc.setns(BASE_MOUNT_NS[0], CLONE_NEWNS) != 0 or libc.unshare(flags):
        errno = ctypes.get_errno()
        raise OSError(errno, f"namespaces: {os.strerror(errno)}")
    if not LAZY_NETWORK:
        loopback_up()
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID_NODEV, SHARED_MEMORY[0]) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount /dev/shm: {os.strerror(errno)}")


def loopback_up() -> None:
    """Bring up this process's network namespace's loopback device, as bwrap does."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP_LOOPBACK_RUNNING))


POLL_LISTENER = select.poll()
"""Tells a notification (POLLIN) on an exec's listener from the end of its processes (POLLHUP,
which may come before the server sees the command's end), made once: not an object per exec."""


class SocketSupervision:
    """The server's side of an exec's network sockets (``LAZY_NETWORK``): ``control``, on which
    the command sends the listener of its syscall filter (``command``), then that listener,
    and from the exec's first network socket the supervisor P that makes them
    (``supervise_sockets``), forked then (an exec that makes none pays for no fork, and no
    network namespace), and killed at the exec's end."""

    def __init__(self) -> None:
        self.control: socket.socket | None
        self.control, self.command_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener = -1
        self.pid = 0

    def watched(self) -> list[int]:
        if self.control is not None:
            return [self.control.fileno()]
        return [self.listener] if self.listener >= 0 else []

    def read(self, readable: list[int]) -> None:
        """Take the listener, or fork P for the notification it holds."""
        if self.control is not None and self.control.fileno() in readable:
            with contextlib.suppress(OSError):  # no listener: the command ended first
                _, fds, _, _ = socket.recv_fds(self.control, 1, 1)
                if fds:
                    self.listener = fds[0]
                    POLL_LISTENER.register(self.listener, select.POLLIN)
            self.control.close()
            self.control = None
        elif self.listener >= 0 and self.listener in readable:
            events = dict(POLL_LISTENER.poll(0)).get(self.listener, 0)
            if not events & select.POLLIN:
                if events & select.POLLHUP:  # the exec's processes are gone: none will come
                    self.end()
                return  # else withdrawn: its caller was killed

            try:
                pid = os.fork()
            except OSError as exc:  # out of memory or processes: this socket fails as it would
                notification = Notification()
                if libc.ioctl(self.listener, NOTIF_RECV, ctypes.byref(notification)) == 0:
                    respond(self.listener, notification.id, 0, -(exc.errno or 12))  # ENOMEM
                return
            if pid == 0:
                supervise_sockets(self.listener)
            self.pid = pid
            POLL_LISTENER.unregister(self.listener)
            os.close(self.listener)
            self.listener = -1

    def end(self) -> None:
        """At the exec's end, before its init is reaped (``reap``): kill P."""
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.listener >= 0:
            POLL_LISTENER.unregister(self.listener)
            os.close(self.listener)
            self.listener = -1
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0


def supervise_sockets(listener: int) -> NoReturn:
    """P, forked by the server at an exec's first network socket: make the exec's network
    namespace (loopback up, as ``fresh_namespaces`` would), drop every capability, then make
    each network socket the exec asks for (the notifications of its syscall filter's
    ``listener``) there, and install it in the caller. Never returns; the server kills it.

    Made without capabilities and as the command's uid and gid, a socket is what the command
    would get itself: a raw socket fails (EPERM), a bogus type or protocol with the kernel's
    errno, a full descriptor table with EMFILE (the caller's own limit: the kernel installs
    the socket in the caller's context). Nothing of the caller's memory is read (the
    arguments are values), so no check that its notification is still valid is needed before
    acting: installing and answering fail with ENOENT once the caller is gone, and the kernel
    wakes a caller that is killed or signalled. P holds nothing but the listener, is not
    dumpable and is in the server's pid namespace, where commands cannot name it."""
    try:
        os.closerange(0, listener)
        os.closerange(listener + 1, 65536)
        failure = 0
        try:
            if libc.unshare(CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            loopback_up()
        except OSError as exc:  # every socket of this exec fails as the kernel said
            failure = exc.errno or 12
        header, sets = NO_CAPABILITIES
        if libc.capset(ctypes.byref(header), sets) != 0:
            os._exit(1)  # the listener closes: the exec's network sockets fail (ENOSYS)
        notification = Notification()
        while True:
            ctypes.memset(ctypes.byref(notification), 0, ctypes.sizeof(notification))
            if libc.ioctl(listener, NOTIF_RECV, ctypes.byref(notification)) != 0:
                if ctypes.get_errno() in (2, 4):  # ENOENT (its caller is gone), EINTR
                    continue
                os._exit(1)
            hand_over_socket(listener, notification, failure)
    finally:
        os._exit(1)


def hand_over_socket(listener: int, notification: Notification, failure: int) -> None:
    """Make the socket ``notification`` asks for (``socket(domain, type, protocol)``, the
    kernel's ints) and install it in the caller (close-on-exec as its type says), or answer
    with the error; ``failure``: this exec has no network namespace, for that reason."""
    domain, kind, protocol = (ctypes.c_int(arg).value for arg in notification.data.args[:3])
    fd = libc.socket(domain, kind, protocol) if not failure else -1
    code = failure or (ctypes.get_errno() if fd < 0 else 0)
    if fd >= 0:
        flags = os.O_CLOEXEC if kind & SOCK_CLOEXEC else 0
        while True:
            add = AddFd(notification.id, ADDFD_FLAG_SEND[0] if ADDFD_FLAG_SEND else 0, fd, 0, flags)
            installed = libc.ioctl(listener, NOTIF_ADDFD, ctypes.byref(add))
            code = ctypes.get_errno() if installed < 0 else 0
            if code == 22 and ADDFD_FLAG_SEND:  # EINVAL: a kernel before 5.14
                ADDFD_FLAG_SEND.clear()
                continue
            break
        os.close(fd)
        if installed >= 0:
            if not ADDFD_FLAG_SEND:
                respond(listener, notification.id, installed, 0)
            return
    if code != 2:  # ENOENT: the caller is gone
        respond(listener, notification.id, 0, -code)


def respond(listener: int, notification_id: int, value: int, error: int) -> None:
    """Answer a notification (failing with ENOENT, ignored, once its caller is gone)."""
    libc.ioctl(listener, NOTIF_SEND, ctypes.byref(Response(notification_id, value, error, 0)))


def new_user_namespace(flags: int = 0, *, every_id: bool = False) -> None:
    """Unshare a user namespace (and ``flags``) in which this process keeps its uid and gid:
    unmapped, programs would see themselves as nobody, unlike a cold exec. With ``every_id``,
    every other id of this namespace is mapped as itself too (the judge's, ``local.judge``):
    only a process that stays here, with CAP_SETUID and CAP_SETGID, may write such maps, so a
    helper forked first writes them."""
    if every_id:
        maps = [(name, identity_map(name)) for name in ("uid_map", "gid_map")]
        if maps[0][1].count("\n") > 1:
            ready_r, ready_w = os.pipe()
            helper = os.fork()
            if helper == 0:
                os.close(ready_w)
                code = 1
                with contextlib.suppress(BaseException):
                    if os.read(ready_r, 1):
                        write_maps(str(os.getppid()), maps)
                        code = 0
                os._exit(code)
            os.close(ready_r)
            try:
                with DUMPABLE:
                    unshare_user(flags)
                    os.write(ready_w, b"\n")
                    os.close(ready_w)
                    ready_w = -1
                    if os.waitstatus_to_exitcode(os.waitpid(helper, 0)[1]) != 0:
                        raise OSError(1, "the helper could not write the user namespace's maps")
            finally:
                if ready_w >= 0:
                    os.close(ready_w)
                    os.waitpid(helper, 0)
            return
    with DUMPABLE:
        unshare_user(flags)
        write_maps("self", OWN_MAPS)


def unshare_user(flags: int) -> None:
    if libc.unshare(CLONE_NEWUSER | flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


class Dumpable:
    """While this process is not dumpable, its /proc files (the maps of its new user
    namespace) belong to root, so only a sandbox run by root could write them: dumpable for as
    long as that takes (``with DUMPABLE``). A class, not a generator's context manager: each
    exec enters it, and the generator's machinery is some 60 more of the server's pages for
    the exec to copy (about 90 us of its CPU)."""

    def __enter__(self) -> None:
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)

    def __exit__(self, *_: object) -> None:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


DUMPABLE = Dumpable()


def identity_map(name: str) -> str:
    """A map of every id this process's user namespace maps (``uid_map`` or ``gid_map``) to
    itself, for a user namespace made inside it."""
    with open(f"/proc/self/{name}") as found:
        lines = [line.split() for line in found]
    return "".join(f"{inside} {inside} {count}\n" for inside, _, count in lines)


def write_maps(pid: str, maps: list[tuple[str, str]]) -> None:
    """Write the user namespace maps of ``pid`` (or ``self``), each once, in this order."""
    for name, text in maps:
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def init_executable(code: bytes) -> bytes:
    """A static x86-64 ELF executable of one segment that runs ``code``."""
    base, headers = 0x400000, 64 + 56
    size = headers + len(code)
    elf_header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)  # 64-bit, little-endian, version 1
    # ET_EXEC for x86-64, entry after the headers, program headers at 64 (one of 56 bytes).
    elf_header += struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, base + headers, 64, 0, 0, 64, 56, 1, 0, 0, 0
    )
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)  # r-x, all of it
    return elf_header + segment + code


def start_exec() -> tuple[int, int]:
    """Start an exec's processes in a fresh pid namespace; returns ``(init, child)``, where
    ``child`` is 0 in the child. With the tiny init (``INIT``), the child is the command's
    process, pid 2, and ``init`` must be killed when it ends; else the child is the init itself
    (``init == child``), which exits when its command does. The server's own pid namespace is
    restored for its next fork."""
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    init = child = -1
    try:
        if INIT:
            # The init keeps SIGCHLD ignored, and so the kernel reaps its orphans. (No other
            # child of the server is running: none of those is reaped behind its back.)
            _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
            try:
                init = os.posix_spawn(INIT[0], ["sandbox-init"], {})
            finally:
                _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        child = os.fork()
        return (init if INIT else child), child
    except OSError:
        if init > 0:
            os.kill(init, signal.SIGKILL)
            os.waitpid(init, 0)
        raise
    finally:
        if child != 0 and libc.setns(SERVER_PID_NS[0], CLONE_NEWPID) != 0:
            os._exit(70)  # cannot fork into its own namespace any more: the host sees it gone


class Output:
    """One stream of the command, read from its pipe into a private mapping of ``cap`` bytes
    (what comes after is read and dropped, and ``truncated`` set) that is unmapped once the
    answer is sent: nothing the command wrote stays in this process, whose memory later
    execs inherit."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.cap = cap
        self.kept = 0
        self.truncated = False
        self.memory = mmap.mmap(-1, cap + CHUNK, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self.memory)

    def read(self) -> bool:
        """Read what is there; False at end of stream (the fd is then closed)."""
        room = self.cap - self.kept
        size = os.readv(
            self.fd, [self.view[self.kept : self.cap] if room else self.view[self.cap :]]
        )
        if not size:
            os.close(self.fd)
            self.fd = -1
            return False
        if room:
            self.kept += size
        else:
            self.truncated = True
        return True

    def send(self, sock: socket.socket, tag: bytes) -> None:
        for start in range(0, self.kept, CHUNK):
            sock.sendmsg([tag, self.view[start : min(start + CHUNK, self.kept)]])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.view.release()
        self.memory.close()


def serve(sock: socket.socket, request: dict[str, Any], stdin_r: int) -> bool:
    """Run one request to its end and send its output and exit status; False when the
    template must end (the host has gone, or no fresh namespaces for the next exec).
    ``stdin_r``: a pipe that already holds all of the command's stdin (``pipe_holding``). The
    command's pipes stay here: the host gets one answer, not three streams."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    sockets = SocketSupervision() if LAZY_NETWORK else None
    control = sockets.command_end.fileno() if sockets is not None else -1
    try:
        init, pid = start_exec()
    except OSError as exc:  # out of processes: the host runs this one the cold way
        for fd in (stdin_r, out_r, out_w, err_r, err_w):
            os.close(fd)
        if sockets is not None:
            sockets.command_end.close()
            sockets.end()
        sock.send(b"x" + json.dumps({"error": str(exc)}).encode())
        return True
    if pid == 0:
        sock.close()
        for fd in (out_r, err_r):
            os.close(fd)
        keep = request.get("capabilities", [])
        judge = request.get("judge") is True
        if not INIT:
            namespace_init(request["limits"], keep, (stdin_r, out_w, err_w), judge, control)
        try:
            enter_exec_namespaces(keep)
        except BaseException as exc:
            setup_failed(err_w, exc)
        command(request["limits"], (stdin_r, out_w, err_w), judge, pwd=True, control=control)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    if sockets is not None:
        sockets.command_end.close()
    try:  # the next exec's, made while this command runs
        fresh_namespaces()
        fresh = True
    except OSError:
        fresh = False  # never an exec in the namespaces of the last: the host starts a new template
    pidfd = os.pidfd_open(pid)
    outputs = [Output(out_r, request["cap"]), Output(err_r, request["cap"])]
    timeout = request["timeout"]
    deadline = started + timeout if timeout is not None else None
    status: int | None = None
    drain_until = 0.0
    timed_out = host_gone = False
    while True:
        streams = [o.fd for o in outputs if o.fd >= 0]
        if status is not None and (not streams or time.monotonic() > drain_until):
            break  # the namespace died with its init: its pipes close at once
        wait = None
        if status is not None:
            wait = max(0.0, drain_until - time.monotonic())
        elif deadline is not None:
            wait = max(0.0, deadline - time.monotonic())
        watched = [pidfd, *(sockets.watched() if sockets is not None else [])]
        readable, _, _ = select.select(
            [*streams, sock.fileno(), *(watched if status is None else [])], [], [], wait
        )
        ended = pidfd in readable  # in time, unless the server itself ran late: still its end
        if sockets is not None and status is None and not ended:
            sockets.read(readable)
        if status is None and not ended and deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            deadline = None
            os.kill(init, signal.SIGKILL)
        for output in outputs:
            if output.fd in readable:
                output.read()
        if sock.fileno() in readable:
            message = sock.recv(MAX_REQUEST)
            if not message:
                host_gone = True
            if message in (b"", b"k"):
                os.kill(init, signal.SIGKILL)
        if ended:
            _, wait_status = os.waitpid(pid, 0)
            status = exit_code(wait_status)
            if sockets is not None:
                sockets.end()
            if init != pid:  # the tiny init: its death ends whatever the command left
                os.kill(init, signal.SIGKILL)
                reap(init)
            drain_until = time.monotonic() + DRAIN_SECONDS
    os.close(pidfd)
    if not host_gone:
        outputs[0].send(sock, b"o")
        outputs[1].send(sock, b"e")
    for output in outputs:
        output.close()
    if host_gone:
        return False
    fresh = fresh and not (sockets is not None and sockets_left())
    answer = {
        "exit": status,
        "timed_out": timed_out,
        "truncated": outputs[0].truncated or outputs[1].truncated,
        "duration": time.monotonic() - started,
        "last": not fresh,
    }
    sock.send(b"x" + json.dumps(answer).encode())
    return fresh


def reap(init: int) -> None:
    """Wait for an exec's tiny init, reaping every other child of the server on the way: a
    command's ``clone(CLONE_PARENT)`` children are the server's own, and a dying init waits
    until everything of its namespace is reaped (waiting on the init alone deadlocks)."""
    while os.waitpid(-1, 0)[0] != init:
        pass


def become_server(sock: socket.socket, *, spawn_init: bool) -> str | None:
    """Move into a user namespace of our own (capabilities there, none outside), with a mount
    namespace of its own, and fork the server S as pid 1 of a pid namespace it owns: S can then
    unshare a fresh pid namespace per exec and return to its own, so an exec costs one fork (H)
    and the tiny init, which S sets up here unless ``spawn_init`` is false or it does not run,
    and hides the serving processes from commands. The process bwrap started stays
    as S's parent. Returns (in S) why a pid namespace per exec is impossible here, or None.

    bwrap keeps CAP_SETFCAP for this process alone, because the kernel lets a user namespace
    map uid 0 (a sandbox run by root) only if its creator had it; the capability belongs to
    the sandbox's outer user namespace and is gone with the unshare, before any other code
    runs."""
    try:
        new_user_namespace(CLONE_NEWPID | CLONE_NEWNS, every_id=True)
    except OSError as exc:
        return f"nested user, pid and mount namespaces are not allowed ({exc})"
    server = os.fork()
    if server:
        sock.close()  # the host sees the server's end only
        _, status = os.waitpid(server, 0)
        os._exit(exit_code(status))
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # An init gets from its namespace only the signals it handles: with none handled, its
    # forks (each exec's init G, where it is forked) cannot be stopped by their commands either.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    SERVER_PID_NS.append(os.open("/proc/self/ns/pid", os.O_RDONLY))
    BASE_MOUNT_NS.append(os.open("/proc/self/ns/mnt", os.O_RDONLY))  # hidden, once covered
    size, mode = os.statvfs("/dev/shm"), os.stat("/dev/shm").st_mode & 0o7777
    SHARED_MEMORY.append(f"size={size.f_blocks * size.f_frsize},mode={mode:o}".encode())
    sock.set_inheritable(False)  # the tiny init must not hold the host's socket
    if spawn_init and os.uname().machine == "x86_64":
        with contextlib.suppress(OSError):
            fd = os.memfd_create("sandbox-init")
            os.write(fd, init_executable(INIT_X86_64))
            INIT.append(f"/proc/self/fd/{fd}")
        if INIT and not exec_namespace_works():
            INIT.clear()  # e.g. no exec from a memfd here: the init is forked instead
    if not INIT and not exec_namespace_works():  # (with INIT, proved just now)
        return "a fresh pid namespace per exec does not work here"
    try:
        hide_serving_processes()
    except OSError as exc:
        return f"the template's processes cannot be hidden from commands ({exc})"
    try:
        fresh_namespaces()
    except OSError as exc:
        return f"a fresh network and /dev/shm per exec cannot be made here ({exc})"
    if LAZY_NETWORK:
        SOCKSTAT.append(sockets_in_use())
    return None


def sockets_in_use() -> int:
    """The sockets alive in the sandbox's own network namespace (``sockets: used``)."""
    return int(os.pread(SOCKSTAT[0], 64, 0).split()[2])


def sockets_left() -> bool:
    """Whether an exec that has ended (every process of it reaped) left a socket alive in the
    sandbox's network namespace, which the next exec shares (``LAZY_NETWORK``): a Unix socket
    can outlive its processes, in flight in a cycle of sockets that hold each other's
    descriptors, until the kernel's garbage collector runs, which may be after the next exec
    has started (its abstract name, were it bound to one, would then be taken). The template
    then ends, and the host starts a new one (in a new sandbox network namespace) for the
    next exec."""
    return sockets_in_use() != SOCKSTAT[1]


def hide_serving_processes() -> None:
    """Cover the /proc directories of this server and of its ancestors (the template, bwrap's
    init) with empty read-only mounts, in the mount namespace the template made for its execs.

    A command sees the /proc of the sandbox's pid namespace (one of the exec's own cannot be
    mounted under bwrap's covers of /proc/sys and the like), which lists the processes that
    serve the next execs: a command running as their uid (root, on a root host) could raise
    their ``oom_score_adj`` or renice their ``autogroup``, and so get the sandbox's later
    completions killed or starved. The kernel locks these mounts in any namespace a command
    makes, so it cannot take them off. The directories of each exec's own processes (its init
    included, which dies with it) stay as they are."""
    pid = int(os.readlink("/proc/self"))
    while pid > 1:  # bwrap's init, pid 1, is covered already (``isolation.bwrap_argv``)
        with open(f"/proc/{pid}/stat", "rb") as f:
            parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        target = f"/proc/{pid}".encode()
        if libc.mount(b"none", target, b"tmpfs", MS_RDONLY_NOSUID_NODEV_NOEXEC, b"size=4k") != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mount over /proc/{pid}: {os.strerror(errno)}")
        pid = parent


def exec_namespace_works() -> bool:
    """Whether ``start_exec`` gives a child in a fresh pid namespace under a working init, that
    can take a user namespace of its own keeping its uid."""
    try:
        init, pid = start_exec()
    except OSError:
        return False
    if pid == 0:
        try:
            enter_exec_namespaces([])
            expected = 2 if INIT else 1
            os._exit(0 if os.getpid() == expected and os.getuid() == OUTER_IDS[0] else 1)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    works = os.waitstatus_to_exitcode(status) == 0
    if init != pid:
        works = works and os.waitpid(init, os.WNOHANG) == (0, 0)  # still there: it runs
        os.kill(init, signal.SIGKILL)
        os.waitpid(init, 0)
    return works


def warm_up() -> None:
    """Do once here what every exec would otherwise pay for in its fresh fork: the first
    ``compile`` builds the compiler's AST types, the first text stream looks up its
    codec, the test runner imports ``base64`` and ``_blake2``, and typed code (HumanEval's
    prompts, most completions) imports ``typing``, 2 to 3 ms in every exec otherwise; each
    command calls libc's ``capset`` (and ``syscall`` for its filter's listener). (Nothing
    here may import ``threading``: its at-fork hook would run in every fork.)"""
    import _blake2  # noqa: F401
    import base64  # noqa: F401
    import typing  # noqa: F401

    compile(WARM_UP_PROGRAM, "<warm-up>", "exec")
    with open(0, encoding="utf-8", closefd=False), open(1, "w", encoding="utf-8", closefd=False):
        pass
    for name in ("capset", "syscall"):  # ctypes finds a C function at its first use and keeps
        getattr(libc, name)  # it: here, rather than in every command (the server calls neither)


def learn_site(known: list[str] | None) -> None:
    """Learn the sys.path a normal start gives (site-packages and .pth path lines) in a
    throw-away child: whatever .pth files and sitecustomize import (often much, sometimes
    ``threading``) stays out of this process and so out of every fork. ``known``: what an
    earlier template of this interpreter learnt, which the host still finds valid; it saves
    the child (site's imports are most of a template's start). Site's builtins (``exit``,
    ``quit``, ``help``...) are cheap and made here."""
    if known is not None:
        SITE_PATH[:] = known
    else:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                site.main()
                os.write(write_end, json.dumps(sys.path).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with open(read_end, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        SITE_PATH[:] = json.loads(data)
    site.setquit()
    site.setcopyright()
    site.sethelper()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if sys.argv[5] == "lazy":
        LAZY_NETWORK.append(True)
        SOCKSTAT.append(os.open("/proc/self/net/sockstat", os.O_RDONLY))
    # First: nothing may run while this process holds the capability bwrap kept for it.
    reason = become_server(sock, spawn_init=sys.argv[2] == "spawn")
    if sys.argv[4]:
        code = bytes.fromhex(sys.argv[4])
        COMMAND_FILTER.append(SeccompProgram(len(code) // 8, code))
    known = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
    if reason is None:
        learn_site(known)
        warm_up()
        for index, source in enumerate(json.loads(sys.argv[3])):
            PUBLIC[public_handle(index)] = source
        settle_heap()
    ready = {"ready": reason is None, "reason": reason or ""}
    ready |= {"site_path": SITE_PATH, "learnt": known is None, "init": bool(INIT)}
    ready["host_compiled"] = globals().get("HOST_COMPILED") is True  # see LAUNCHER
    sock.send(json.dumps(ready).encode())
    if reason is not None:
        return
    # Requests are received here and nowhere else, and this memory is dropped (zero pages)
    # before each fork. The server parses only the request's limits, cap and timeout; the
    # command's argv, env and cwd go unread into its stdin pipe, ahead of its stdin, and are
    # parsed by the command's own process (``read_job``): a command finds nothing of an earlier
    # exec (nor its own tests) in the memory it inherits from the server.
    received = mmap.mmap(-1, MAX_REQUEST, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    while True:
        size = sock.recv_into(received, MAX_PACKET)
        if not size:
            return
        if received[:1] != b"r":
            continue  # a kill that came after its command ended
        end = received.find(b"\n", 1, size)
        header = json.loads(received[1:end])
        if header.get("judge") is True:
            prepare_public_programs()
        with memoryview(received) as view:
            while size - end - 1 < header.get("size", 0):  # the rest of a long request
                more = sock.recv_into(view[size:], MAX_PACKET)
                if not more:
                    return
                size += more
            try:
                stdin_r = pipe_holding(view[end + 1 : size])
            except OSError as exc:
                stdin_r = -1
                sock.send(b"x" + json.dumps({"error": f"stdin: {exc}"}).encode())
        received.madvise(mmap.MADV_DONTNEED)
        if stdin_r >= 0 and not serve(sock, header, stdin_r):
            return


def prepare_public_programs() -> None:
    """Make the public programs (the runner) ready here (``prepare_public``), once, at the
    first exec that runs one (its request says ``judge``), before it is forked: every later
    exec finds them ready (``run_python``). A template whose execs run none (plain programs,
    as in most pools) pays neither their compiling (some 20 ms of its start) nor their code
    in its heap (some 3 MB: an entry for each page copied by every fork and unmapped by every
    exit)."""
    if len(PUBLIC_MODULES) < len(PUBLIC):
        for source in PUBLIC.values():
            prepare_public(source)
        settle_heap()


def prepare_public(source: str) -> None:
    """Make a public program ready to run (``run_python``). One that ends in a main guard
    (``if __name__ == "__main__":`` and only its block) has all before the guard run here,
    once, in its ``__main__`` module: an exec then runs only the guard's block, in its fork's
    copy of that module, rather than define the runner's hundreds of functions and constants
    again (a write to each page of its code, copied from this process's) in every exec. Its
    body must do at import only what gives every exec the same (definitions, the standard
    library's imports but ``threading``, whose at-fork hook would run in every fork); one
    whose body raises here is compiled whole instead."""
    head, guard, block = source.rpartition(MAIN_GUARD)
    if guard and all(line[:1] in ("", " ", "\t") for line in block.splitlines()):
        main = new_main()
        with contextlib.suppress(BaseException):
            exec(compile_program(head, "<string>"), main.__dict__)
            # The block keeps its line numbers, for tracebacks.
            padded = "\n" * (head.count("\n") + 1) + guard.lstrip("\n") + block
            PUBLIC_MODULES[source] = (main, compile_program(padded, "<string>"))
            return
    PUBLIC_MODULES[source] = (new_main(), compile_program(source, "<string>"))


def settle_heap() -> None:
    """Once started, and once the public programs are ready (``prepare_public_programs``):
    leave the server's heap as small and as still as it can be, since every exec's fork copies
    an entry for each of its pages, its exit unmaps them, and it copies each page it writes to.

    What the template holds now lives as long as it: frozen, the cyclic collector of every
    command forked from it leaves it alone, rather than write to each object's header to find no
    garbage. (A frozen object is invisible to gc's walks: the runner's bans unfreeze first.) The
    start's arguments (this module's and the runner's text, and their copies in
    ``sys.orig_argv``) are dropped, each exec sets its own; so is the environment, which each
    exec replaces (``command``) and would otherwise first unset, variable by variable. Then the
    heap the start freed is given back to the kernel (compiling this module and the runner leave
    about 5 MB of free pages, a third of the heap): glibc's ``malloc_trim``; another libc keeps
    them."""
    del sys.argv[1:]
    sys.orig_argv = sys.orig_argv[:1]
    os.environ.clear()
    gc.collect()
    gc.freeze()
    with contextlib.suppress(AttributeError):
        libc.malloc_trim(0)


def pipe_holding(data: memoryview | bytes) -> int:
    """The read end of a pipe that holds all of ``data`` and then ends: here, a request's job
    and stdin, written before the command is forked so that nothing of it need stay in this
    process (raises OSError where a pipe cannot hold it: the host then runs the exec the cold
    way); for the host, a seccomp program for bwrap."""
    read_end, write_end = os.pipe()
    try:
        if len(data) > PIPE_DEFAULT_SIZE:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, len(data))
        os.set_blocking(write_end, False)
        if data and os.write(write_end, data) != len(data):
            raise OSError(f"{len(data)} bytes do not fit in a pipe")
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


def kill_the_rest() -> None:
    """In a container whose pid 1 is this server (``container_main``): kill every other
    process of our uid (``kill(-1)`` spares pid 1), round after round until none is left,
    reaping what is orphaned to us on the way. No fork: a program that used up the
    container's processes must not keep us from ending it."""
    for _ in range(100_000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            break
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def write_packet(tag: bytes, data: bytes | memoryview) -> None:
    """One ``o``/``e``/``x`` packet on stdout (to the Engine's attach), whole; ``data`` is
    written from where it lies (an output's mapping): no copy of it stays in this process."""
    for part in (LENGTH.pack(len(data) + 1) + tag, data):
        with memoryview(part) as left:
            while left:
                left = left[os.write(1, left) :]


def take_server_identity(uid: int) -> None:
    """Pid 1 of a container, started as root with only the capabilities it needs: become
    ``uid`` (and the gid of that number, no groups), which no command has, keeping those
    capabilities (to make each command's identity and to kill what it leaves). No process of
    the commands' uid can then lower its limits or priority, move it to other CPUs, signal it
    or trace it."""
    libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)
    header, sets = CapHeader(CAPABILITY_VERSION_3, 0), CapSets()
    if libc.capget(ctypes.byref(header), sets) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capget: {os.strerror(errno)}")
    for word in sets:  # the permitted set the change of uid kept, effective again
        word.effective = word.permitted
    if libc.capset(ctypes.byref(header), sets) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset: {os.strerror(errno)}")
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def become_commands_user(uid: int) -> None:
    """A fork of a container's server: become the commands' ``uid`` (and gid), with no
    capability left, in any set."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    drop_bounding_set([])
    header, sets = NO_CAPABILITIES
    if libc.capset(ctypes.byref(header), sets) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capset: {os.strerror(errno)}")


def container_serve(
    header: dict[str, Any], stdin_r: int, commands_uid: int, end: float | None
) -> bool:
    """One exec in a container: fork the command as ``commands_uid``, read its output
    (capped), end it at its timeout, then kill everything else it started; answer with
    ``o``/``e``/``x`` packets. At ``end`` (the sandbox's lifetime) the command is killed and
    the answer says the sandbox ``ended``: returns False, and the server ends."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    try:
        pid = os.fork()
    except OSError as exc:  # no process left to fork: the host runs it as an Engine exec
        for fd in (stdin_r, out_r, out_w, err_r, err_w):
            os.close(fd)
        write_packet(b"x", json.dumps({"error": str(exc)}).encode())
        return True
    if pid == 0:
        for fd in (out_r, err_r):
            os.close(fd)
        try:
            become_commands_user(commands_uid)
        except BaseException as exc:
            setup_failed(err_w, exc)
        command(header["limits"], (stdin_r, out_w, err_w))
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    outputs = [Output(out_r, header["cap"]), Output(err_r, header["cap"])]
    timeout = header["timeout"]
    deadline = started + timeout if timeout is not None else None
    ended = end is not None and (deadline is None or end < deadline)
    if ended:
        deadline = end
    status: int | None = None
    timed_out = False
    drain_until = 0.0
    while True:
        streams = [o.fd for o in outputs if o.fd >= 0]
        if status is not None and (not streams or time.monotonic() > drain_until):
            break
        wait = max(0.0, (drain_until if status is not None else deadline or 0) - time.monotonic())
        watched = [*streams, *([pidfd] if status is None else [])]
        readable, _, _ = select.select(
            watched, [], [], None if deadline is None and status is None else wait
        )
        for output in outputs:
            if output.fd in readable:
                output.read()
        late = deadline is not None and time.monotonic() >= deadline
        if status is None and pidfd not in readable and late:
            if ended:  # the sandbox's life is over: nothing of the exec is answered
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                kill_the_rest()
                write_packet(b"x", json.dumps({"ended": True}).encode())
                return False
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            readable.append(pidfd)
        if status is None and pidfd in readable:
            status = exit_code(os.waitpid(pid, 0)[1])
            kill_the_rest()
            drain_until = time.monotonic() + DRAIN_SECONDS
    os.close(pidfd)
    for tag, output in ((b"o", outputs[0]), (b"e", outputs[1])):
        if output.kept:
            with output.view[: output.kept] as kept:
                write_packet(tag, kept)
    truncated = outputs[0].truncated or outputs[1].truncated
    for output in outputs:
        output.close()
    result = {"exit": status, "timed_out": timed_out, "truncated": truncated}
    write_packet(b"x", json.dumps({**result, "duration": time.monotonic() - started}).encode())
    return True


def container_main() -> None:
    """Pid 1 of a docker sandbox whose image has Python: requests on stdin (4 bytes of
    length, then ``r`` + header + newline + body as on the socket above), answers on stdout
    (each ``o``/``e``/``x`` packet after 4 bytes of its length), until ``argv[2]`` seconds
    (the sandbox's lifetime) pass or stdin ends; ``argv[3]``: the public programs (as
    ``main`` takes them) to compile now (requests carry them whole: no handles); ``argv[4]``
    and ``argv[5]``: its own uid (``take_server_identity``) and the commands'. Only the
    Engine's attach reaches its stdio; as pid 1 it gets no signal it does not handle (none:
    SIGINT is reset), and no command can act on it (another uid, not dumpable): nothing in
    the container can stop, trace, read or slow it, and each command starts from limits and
    a priority that no earlier one touched."""
    take_server_identity(int(sys.argv[4]))
    commands_uid = int(sys.argv[5])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    end = time.monotonic() + float(sys.argv[2]) if sys.argv[2] else None
    learn_site(None)
    warm_up()
    for source in json.loads(sys.argv[3]):
        prepare_public(source)
    settle_heap()
    received = mmap.mmap(-1, MAX_REQUEST + 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with memoryview(received) as view:
        while True:
            wait = None if end is None else end - time.monotonic()
            if wait is not None and (wait <= 0 or not select.select([0], [], [], wait)[0]):
                return
            try:
                (size,) = LENGTH.unpack(read_exactly(0, 4))
                got = 0
                while got < size:
                    n = os.readv(0, [view[got:size]])
                    if not n:
                        return
                    got += n
            except (EOFError, struct.error):
                return
            end_of_header = received.find(b"\n", 1, size)
            header = json.loads(received[1:end_of_header])
            try:
                stdin_r = pipe_holding(view[end_of_header + 1 : size])
            except OSError as exc:
                stdin_r = -1
                write_packet(b"x", json.dumps({"error": f"stdin: {exc}"}).encode())
            received.madvise(mmap.MADV_DONTNEED)
            if stdin_r >= 0 and not container_serve(header, stdin_r, commands_uid, end):
                return


if __name__ == "__main__":
    container_main() if sys.argv[1] == "container" else main()
