"""Sandboxes as containers on a Docker Engine: the user's own images, on their own machine.

One container per sandbox, from the spec's ``image`` (default :data:`DEFAULT_IMAGE`, which
``scripts/docker-setup`` builds offline), hardened as careful Docker users run untrusted code:
no network, every capability dropped, ``no-new-privileges``, the local backend's syscall
allowlist as the seccomp profile, a read-only root filesystem, commands as uid 65534, limits
on memory (socket buffers included, no swap), CPUs and processes, and per command on open
files, file size and CPU seconds. Every place a command can write (the workdir, ``/tmp``,
``/dev/shm``, the image's volumes) is a tmpfs volume of ``disk_mb`` (the local volume
driver's, so files move through the Engine's archive API on every storage driver);
``runtime=`` passes an OCI runtime through (``runsc``: gVisor).

Its pid 1 runs as a uid of its own (:data:`PID1_UID`), out of every command's reach: the
container server where the image has python3, else a tiny static program
(``forkserver.INIT_X86_64``'s kind) bind-mounted from this machine, which holds nothing and
reaps orphans. Either exits at ``lifetime_seconds``, which stops the container (``stop`` or
``reap`` removes it). So the Engine must run on this machine (a unix socket), which the bind
mount, the host-side kill of an exec and the TCP limit of a container's memory group need.

Every container carries sandboxkit's labels (its id, tags, start time, workdir), so ``list``
and ``reap`` in any process find what a killed run left; a label counts only where it names
its own container. Images are never pulled implicitly: :meth:`DockerBackend.pull` (or
``docker pull``) does it, with progress; an image the Engine lacks is a
:class:`~sandboxkit.errors.BackendMisconfiguredError` naming it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import io
import json
import logging
import os
import posixpath
import select
import signal
import socket
import struct
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from ..errors import (
    BackendError,
    BackendMisconfiguredError,
    SandboxError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxIsADirectoryError,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
    installed_for,
)
from ..hostdirs import private_directory
from ..local import forkserver, seccomp
from ..local.cgroup import count_socket_memory
from ..local.forkserver import init_executable
from ..local.limits import Limits, MiB
from ..local.warm import _STUCK_AFTER, PUBLIC_PROGRAMS, _result
from ..protocol import (
    KILLED_RETURNCODE,
    ExecResult,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    check_env,
)

with installed_for("the 'docker' backend", "pip install 'sandboxkit[docker]'"):
    import docker
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound
    from docker.types import DriverConfig, LogConfig, Mount, Ulimit

DEFAULT_IMAGE = "sandboxkit-python:bookworm-2"
"""Debian bookworm's minbase with python3 and patch (SWE-style tasks apply the model's diff),
which ``scripts/docker-setup`` builds offline (``mmdebstrap --variant=minbase
--include=python3,patch bookworm`` + ``docker import``); its tag changes with its packages."""
COMMANDS_UID = 65534
USER = f"{COMMANDS_UID}:{COMMANDS_UID}"
"""Who runs every command: ``nobody``, whatever the image names (a numeric uid needs no
passwd entry)."""
PID1_UID = 65533
"""Pid 1's uid (and gid), which no command has: a process may lower the limits and priority
of, signal or trace, the processes of its own uid, and later commands are forked from pid 1
(the server) or it holds the container's life (the tiny init)."""
SERVER_CAPABILITIES = ["SETUID", "SETGID", "SETPCAP", "KILL"]
"""All the container server keeps (it starts as root with these, then takes ``PID1_UID``):
to make each command's identity, empty its bounding set, and kill what an exec leaves."""
LABEL = "sandboxkit.sandbox"
"""Every sandbox's container carries it: ``{"id", "tags", "started_at", "workdir"}`` as JSON,
``id`` its container's name."""
MAX_LABEL = 64 * 1024
"""The longest ``LABEL`` read (one this backend writes is a few hundred bytes)."""
CREATOR_LABEL = "sandboxkit.creator"
"""``host:pid`` of the process that made the container (what a test session cleans up)."""
INIT_PATH = "/.sandboxkit-init"
SERVER = ["python3", "-I", "-S", "-c", forkserver.LAUNCHER, Path(forkserver.__file__).read_text()]
SERVER += ["", ""]  # no compile of the host's: the image's interpreter compiles it
"""Pid 1 where the image has python3: the warm template's container server
(``forkserver.container_main``), which runs each exec for one request and one answer over
the container's attached stdio, instead of an Engine exec per command. Started through the
launcher, as a template is, so that no parse of the module stays in the heap every exec's
fork copies."""
LIMITED = ["python3", "-I", "-S", "-c"]
LIMITED += [
    "import json, os, resource, sys\n"
    "for which, (soft, hard) in json.loads(sys.argv[1]):\n"
    "    resource.setrlimit(which, (soft, hard))\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'{sys.argv[2]}: {e.strerror}\\n')\n"
    "    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)\n"
]
"""An Engine exec in a container whose server could not run it (its stdin past the server's
request size, its server gone): the exec's limits, then its program. A server's container
has no limits of its own, which would bound the server: it sets each command's."""
RENEW = r"""
import os, signal, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(100_000):  # what an abandoned exec still runs
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        break
with open('/proc/net/dev') as f:
    lo = [line.partition(':')[2].split() for line in f if line.strip().startswith('lo:')]
if any(int(count) for counters in lo for count in counters):
    sys.exit('the network was used: its namespace keeps what a reset cannot undo')
for kind, remove in (('shm', libc.shmctl), ('sem', libc.semctl), ('msg', libc.msgctl)):
    with open(f'/proc/sysvipc/{kind}') as f:
        ids = [int(line.split()[1]) for line in list(f)[1:]]
    for number in ids:  # IPC_RMID: its creator may, whoever it now names its owner
        remove(number, 0, *([0, None] if kind == 'sem' else [None]))
for name in os.listdir('/dev/mqueue'):
    os.unlink(os.path.join('/dev/mqueue', name))
for root in sys.argv[1:]:
    os.chmod(root, 0o700)
    os.chdir(root)
    down = []  # the directories entered: names, not descriptors, however deep
    while True:
        with os.scandir('.') as entries:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for name, directory in found:
            if not directory:
                os.unlink(name)
        entered = next((name for name, directory in found if directory), None)
        if entered is not None:
            os.chmod(entered, 0o700)
            os.chdir(entered)
            down.append(entered)
        elif found:
            continue  # its files are gone: once more, to see it empty
        elif down:
            os.chdir('..')
            os.rmdir(down.pop())
        else:
            break
    os.chdir('/')
    for name in os.listxattr(root):  # default ACLs would shape the next user's files
        os.removexattr(root, name)
    os.chmod(root, 0o755)
    os.utime(root)
left = [k for k in ('shm', 'sem', 'msg') if len(open(f'/proc/sysvipc/{k}').readlines()) > 1]
left += os.listdir('/dev/mqueue') + [root for root in sys.argv[1:] if os.listdir(root)]
if left:
    sys.exit(f'left: {left}')
print('renewed')
"""
"""A used sandbox made as new for its next user, in its container as the commands' uid
(:meth:`DockerBackend.renew`): every process of theirs killed, SysV IPC objects and POSIX
message queues removed, the tmpfs volumes (``argv``) emptied however deep and unreadable,
their roots' mode, ACLs and extended attributes as made. Refused where the network was used
since the container was made: its namespace keeps sockets in TIME_WAIT (ports taken for a
minute) and counters that nothing in the container can reset."""
RENEW_TIMEOUT = 30.0
SERVED_PROGRAMS = json.dumps([*json.loads(PUBLIC_PROGRAMS), RENEW])
"""The ``-c`` programs a container's server compiles at its start: the test runner, and
``RENEW`` (which runs between every two completions of a pooled sandbox)."""
REAP_PATH = "/.sandboxkit-reap"
ENGINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The ``PATH`` the Engine gives an exec whose container's environment has none."""
DRAIN_SECONDS = 2.0
"""How long an exec's output is read after its process ended and the rest were killed."""
REAP_CODE = bytes.fromhex(
    "41bc10270000"  # mov r12d, 10000 (rounds at most)
    "bfffffffff"  # loop: mov edi, -1 (every process it may signal: all of its uid but pid 1)
    "be09000000"  # mov esi, 9 (SIGKILL)
    "b83e000000"  # mov eax, 62 (kill)
    "0f05"  # syscall
    "85c0"  # test eax, eax
    "7505"  # jne done (ESRCH: none left)
    "41ffcc"  # dec r12d
    "75e6"  # jnz loop
    "31ff"  # done: xor edi, edi
    "b8e7000000"  # mov eax, 231 (exit_group)
    "0f05"  # syscall
)
"""Run after each exec, as the sandbox's uid: kill every process of the container but pid 1
and itself, until none is left (what a fork bomb forks meanwhile dies in the next round), so
nothing of an exec (a double-forked daemon) outlives it to tamper with the next one."""
_T = TypeVar("_T")
logger = logging.getLogger("sandboxkit.docker")
_STOP_SIGNALS = (signal.SIGKILL,)


def init_code(lifetime: float | None) -> bytes:
    """Pid 1: undumpable, SIGCHLD ignored (the kernel reaps what is orphaned to it), then a
    sleep of ``lifetime`` seconds and an exit, or a pause forever. x86-64 Linux."""
    code = bytes.fromhex(
        "bf04000000"  # mov edi, 4 (PR_SET_DUMPABLE)
        "31f6"  # xor esi, esi
        "b89d000000"  # mov eax, 157 (prctl)
        "0f05"  # syscall
        "bf11000000"  # mov edi, 17 (SIGCHLD)
        "488d3528000000"  # lea rsi, [rip + 40]: the action, at 66
        "31d2"  # xor edx, edx
        "41ba08000000"  # mov r10d, 8 (the size of a sigset)
        "b80d000000"  # mov eax, 13 (rt_sigaction)
        "0f05"  # syscall
    )
    if lifetime is None:
        code += bytes.fromhex("b8220000000f05ebf7")  # loop: pause(); jmp loop
    else:
        code += bytes.fromhex(
            "488d3d32000000"  # lea rdi, [rip + 50]: the timespec, at 98
            "31f6"  # xor esi, esi
            "b823000000"  # mov eax, 35 (nanosleep)
            "0f05"  # syscall
            "31ff"  # xor edi, edi
            "b8e7000000"  # mov eax, 231 (exit_group)
            "0f05"  # syscall
        )
    code = code.ljust(66, b"\0")
    seconds = int(lifetime or 0)
    nanos = int(((lifetime or 0) - seconds) * 1e9)
    action = struct.pack("<QQQQ", 1, 0, 0, 0)  # SIG_IGN, no flags, no restorer, empty mask
    return code + action + struct.pack("<qq", seconds, nanos)


def _program_file(name: str, code: bytes) -> str:
    """The host file of a tiny program the containers bind-mount (written once per content)."""
    data = init_executable(code)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = private_directory(base / "sandboxkit" / "docker-init", "the docker init's home")
    path = directory / name
    if not path.exists() or path.read_bytes() != data:
        part = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
        part.write_bytes(data)
        part.chmod(0o555)
        os.replace(part, path)
    return str(path)


def _label(sandbox_id: str, tags: Sequence[str], started: datetime, workdir: str) -> str:
    return json.dumps(
        {
            "id": sandbox_id,
            "tags": list(tags),
            "started_at": started.isoformat(),
            "workdir": workdir,
        }
    )


_STATES = {
    "created": SandboxStatus.PENDING,
    "restarting": SandboxStatus.PENDING,
    "running": SandboxStatus.RUNNING,
    "paused": SandboxStatus.RUNNING,
}


def _sandbox_label(labels: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, Any] | None:
    """The ``LABEL`` of a container with ``names`` (as the Engine reports them: ``/name``) as
    this backend writes it, or None: not one of its sandboxes. Anyone with the Engine's
    socket writes labels: one of another shape (too long, nested too deep to parse, other
    types) is no sandbox's, and one whose ``id`` is not the container's own name (the name
    the backend made it under) names no sandbox, whatever it claims."""
    text = (labels or {}).get(LABEL)
    if not isinstance(text, str) or len(text) > MAX_LABEL:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or f"/{data.get('id')}" not in names:
        return None
    tags, started, workdir = data.get("tags"), data.get("started_at"), data.get("workdir")
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        return None
    if not isinstance(started, str) or not isinstance(workdir, str):
        return None
    try:
        data["started_at"] = datetime.fromisoformat(started)
    except ValueError:
        return None
    return data


def _info(labels: Mapping[str, Any] | None, names: Sequence[str], state: str) -> SandboxInfo | None:
    """A container's sandbox, from its labels (None: not one of sandboxkit's)."""
    data = _sandbox_label(labels, names)
    if data is None:
        return None
    status = _STATES.get(state, SandboxStatus.STOPPED)
    return SandboxInfo(data["id"], status, tuple(data["tags"]), data["started_at"])


def _inspected_label(found: Mapping[str, Any], sandbox_id: str) -> dict[str, Any] | None:
    """The label of an inspected container if it is the sandbox ``sandbox_id`` (the Engine
    also finds containers by id prefix)."""
    if found.get("Name") != f"/{sandbox_id}":
        return None
    return _sandbox_label(found["Config"].get("Labels"), [found["Name"]])


@functools.cache
def _security_options() -> tuple[str, ...]:
    """``no-new-privileges`` and, where the syscall filter covers this machine, the local
    backend's (``seccomp.WHOLE``) as the Engine's profile (else the Engine's default)."""
    arch = seccomp.native_arch()
    if arch is None:
        return ("no-new-privileges",)
    profile = json.dumps(seccomp.docker_profile(seccomp.WHOLE, arch), separators=(",", ":"))
    return ("no-new-privileges", f"seccomp={profile}")


def _tmpfs_volume(target: str, limits: Limits) -> Mount:
    """A tmpfs of ``disk_mb`` (and ``disk_inodes``) that uid 65534 owns, as a volume of the
    local driver: the Engine's archive API (files in and out) reaches volumes on a read-only
    root filesystem, not ``--tmpfs`` mounts. Anonymous: removed with its container."""
    options = f"size={limits.disk_mb}m,nr_inodes={limits.disk_inodes},uid=65534,gid=65534,mode=0755"
    driver = DriverConfig("local", {"type": "tmpfs", "device": "tmpfs", "o": options})
    return Mount(target, None, type="volume", driver_config=driver)


def _not_found(sandbox_id: str) -> SandboxNotFoundError:
    return SandboxNotFoundError(f"no sandbox {sandbox_id!r} (stopped, or never created)")


def _api_error(exc: DockerException, what: str) -> BackendError:
    """An Engine failure as sandboxkit's: 5xx and dropped connections may pass, the rest is
    the configuration's."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is None or status >= 500:
        return TransientBackendError(f"{what}: {exc}")
    return BackendMisconfiguredError(f"{what}: {exc}")


class DockerBackend:
    """Sandboxes as hardened containers on the Docker Engine of this machine."""

    name = "docker"
    sandbox_options: frozenset[str] = frozenset({"runtime"})
    """``runtime``: the OCI runtime of the sandbox's container (``runsc``), else the Engine's
    default."""
    execs_leave_no_processes = True
    """Each exec ends by killing every other process of the commands' uid in its container
    (the server's, or the tiny program after an Engine exec): a renewed sandbox is as new."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        image: str = DEFAULT_IMAGE,
        runtime: str | None = None,
        timeout: float = 120.0,
        exec_server: bool = True,
        **limits: Any,
    ) -> None:
        """``base_url`` of the Engine (else ``DOCKER_HOST``, else its unix socket);
        ``image`` for specs that name none; ``runtime`` for sandboxes whose options name
        none; ``timeout`` of each Engine call; ``exec_server``: the container server as
        pid 1 where the image has python3 (else every exec is an Engine exec); ``limits``: fields of
        :class:`~sandboxkit.local.limits.Limits` (else ``SANDBOXKIT_LIMIT_*``, else its
        defaults), which a spec's ``cpu``, ``memory_mb`` and ``disk_mb`` override."""
        self.base_url = base_url
        self.image = image
        self.runtime = runtime
        self.timeout = timeout
        self.exec_server = exec_server
        self.limits = Limits.from_env(**limits)
        self._rlimits = [
            [which, list(value)]
            for which, value in self.limits.rlimits(with_nproc=False, with_as=False).items()
        ]
        """Each command's, set by the container's server (or ``LIMITED``): the container
        holds them only where pid 1 is the tiny init."""
        self._client: docker.DockerClient | None = None
        self._threads = ThreadPoolExecutor(64, thread_name_prefix="sandboxkit-docker")
        self._inflight: dict[str, int] = {}
        """Execs running per sandbox (from this backend): a reap waits for the last."""
        self._counting = threading.Lock()
        self._servers: dict[str, _Server] = {}
        self._told_sockets = False
        self._inspected: dict[str, dict[str, Any]] = {}

    # -- the Engine ----------------------------------------------------------------------------

    @property
    def api(self) -> docker.APIClient:
        if self._client is None:
            try:
                if self.base_url:
                    client = docker.DockerClient(base_url=self.base_url, timeout=int(self.timeout))
                else:
                    client = docker.from_env(timeout=int(self.timeout))
            except DockerException as exc:
                raise TransientBackendError(f"no Docker Engine answers: {exc}") from exc
            self._client = client
        api: docker.APIClient = self._client.api
        return api

    async def _run(self, work: Callable[[], _T], what: str) -> _T:
        """``work`` (blocking Engine calls) in a thread; its SDK errors as sandboxkit's."""

        def guarded() -> _T:
            try:
                return work()
            except SandboxError:
                raise
            except DockerException as exc:
                raise _api_error(exc, what) from exc
            except OSError as exc:  # the socket: no Engine, or it went away
                raise TransientBackendError(f"{what}: the Docker Engine: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._threads, guarded)

    def _container(self, sandbox_id: str) -> dict[str, Any]:
        """The container of ``sandbox_id``, inspected when this backend first uses it (its
        labels, environment and mounts never change; one that stopped since answers its
        next call as stopped); raises not found unless it is a running sandbox."""
        cached = self._inspected.get(sandbox_id)
        if cached is not None:
            return cached
        try:
            found: dict[str, Any] = self.api.inspect_container(sandbox_id)
        except NotFound:
            raise _not_found(sandbox_id) from None
        if _inspected_label(found, sandbox_id) is None or not found["State"].get("Running"):
            raise _not_found(sandbox_id)
        self._inspected[sandbox_id] = found
        return found

    # -- images --------------------------------------------------------------------------------

    def pull(self, image: str, progress: Callable[[str], None] = print) -> None:
        """Pull ``image`` from its registry, saying each layer's progress to ``progress``:
        sandboxes never pull by themselves."""
        repository, _, tag = (
            image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        )
        try:
            for event in self.api.pull(repository, tag or "latest", stream=True, decode=True):
                if "error" in event:
                    raise BackendMisconfiguredError(f"pulling {image}: {event['error']}")
                line = " ".join(str(event[k]) for k in ("id", "status", "progress") if event.get(k))
                progress(line)
        except DockerException as exc:
            raise _api_error(exc, f"pulling {image}") from exc

    # -- Backend protocol ----------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        check_env(spec.env)
        unknown = set(spec.options) - self.sandbox_options
        if unknown:
            raise TypeError(f"unknown docker sandbox options: {sorted(unknown)}")
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        started = datetime.now(timezone.utc)
        image = spec.image or self.image
        limits = self.limits
        cpus = spec.cpu if spec.cpu is not None else limits.cpus
        memory_mb = spec.memory_mb if spec.memory_mb is not None else limits.memory_mb
        if spec.disk_mb is not None:
            limits = Limits.from_env(**{**vars(limits), "disk_mb": spec.disk_mb})
        workdir = spec.workdir
        env = {"HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp", **spec.env}
        lifetime = spec.lifetime_seconds
        init = _program_file(f"init-{lifetime or 'forever'}", init_code(lifetime))
        reap = _program_file("reap", REAP_CODE)

        def work() -> None:
            try:
                found = self.api.inspect_image(image)
            except ImageNotFound:
                raise BackendMisconfiguredError(
                    f"image {image!r} is not on the Docker Engine and sandboxes never pull: "
                    f"pull it first (`docker pull {image}`, or DockerBackend.pull)"
                    + (", or build it with scripts/docker-setup" if image == DEFAULT_IMAGE else "")
                ) from None
            runtime = spec.options.get("runtime", self.runtime)
            # Every place a command can write is a tmpfs of disk_mb: /dev/shm too (not the
            # Engine's, of 64 MB), and each VOLUME the image declares (else a volume on the
            # Engine's disk, bounded by nothing).
            declared = (found.get("Config") or {}).get("Volumes") or {}
            writable = list(dict.fromkeys([workdir, "/tmp", "/dev/shm", *sorted(declared)]))

            def host_config(served: bool) -> dict[str, Any]:
                """The server sets each command's limits, which would bound it too (its CPU
                seconds grow with every exec it serves); the tiny init uses none of them."""
                ulimits = [Ulimit(name="core", soft=0, hard=0)]
                if not served:
                    ulimits += [Ulimit(name=name, soft=soft, hard=hard) for name, soft, hard in (
                        ("nofile", limits.open_files, limits.open_files),
                        ("fsize", limits.file_size_mb * MiB, limits.file_size_mb * MiB),
                        ("cpu", limits.cpu_seconds, limits.cpu_seconds + 1),
                    )]  # fmt: skip
                made: dict[str, Any] = self.api.create_host_config(
                    network_mode="none",
                    log_config=LogConfig(type="none"),  # the server's answers stay unlogged
                    cap_drop=["ALL"],
                    cap_add=SERVER_CAPABILITIES if served else None,
                    security_opt=list(_security_options()),
                    read_only=True,
                    mounts=[
                        Mount(INIT_PATH, init, type="bind", read_only=True),
                        Mount(REAP_PATH, reap, type="bind", read_only=True),
                        *(_tmpfs_volume(path, limits) for path in writable),
                    ],
                    mem_limit=memory_mb * MiB,
                    memswap_limit=memory_mb * MiB,
                    nano_cpus=int(cpus * 1e9),
                    pids_limit=limits.processes,
                    ulimits=ulimits,
                    runtime=runtime,
                )
                return made

            label = _label(sandbox_id, spec.tags, started, workdir)
            until = str(lifetime) if lifetime is not None else ""
            ids = [str(PID1_UID), str(COMMANDS_UID)]
            served = [*SERVER, "container", until, SERVED_PROGRAMS, *ids]
            # The server is made for runc's kernel: under another runtime (gVisor's runsc, whose
            # Debian build of 2022 lacks calls it makes) every exec is an Engine exec.
            serving = self.exec_server and runtime in (None, "runc")
            commands = [served, [INIT_PATH]] if serving else [[INIT_PATH]]
            for command in commands:  # without python3: no server
                self.api.create_container(
                    image,
                    command=command,
                    entrypoint=[],
                    name=sandbox_id,
                    user="0:0" if command is served else f"{PID1_UID}:{PID1_UID}",
                    environment=env,
                    working_dir=workdir,
                    labels={LABEL: label, CREATOR_LABEL: creator()},
                    healthcheck={"Test": ["NONE"]},  # no exec of the image's own in it
                    host_config=host_config(command is served),
                    network_disabled=True,
                    stdin_open=command is served,
                )
                try:
                    self.api.start(sandbox_id)
                    pid = int(self.api.inspect_container(sandbox_id)["State"]["Pid"] or 0)
                    self._count_sockets(pid, memory_mb * MiB)
                    return
                except APIError as exc:
                    with contextlib.suppress(DockerException):
                        self.api.remove_container(sandbox_id, force=True, v=True)
                    if command is not served or "python3" not in str(exc):
                        raise
                except BaseException:
                    with contextlib.suppress(DockerException):
                        self.api.remove_container(sandbox_id, force=True, v=True)
                    raise

        await self._run(work, f"creating a sandbox from {image}")
        return SandboxInfo(sandbox_id, SandboxStatus.RUNNING, tuple(spec.tags), started)

    def _count_sockets(self, pid: int, limit: int) -> None:
        """Before any command runs: socket buffers count toward the sandbox's memory, as a
        local sandbox's (on cgroup v1 only with a TCP limit, which runc leaves unset
        whatever the Engine asks: set here, as much again, on the container's group)."""
        if not count_socket_memory(pid, limit) and not self._told_sockets:
            self._told_sockets = True
            logger.warning(
                "sandboxkit: docker sandboxes' socket buffers are not counted toward their "
                "memory here (cgroup v1, and this process cannot set the TCP limit of their "
                "memory groups: run as root); docs/isolation.md"
            )

    def _workdir(self, container: Mapping[str, Any]) -> str:
        data = _sandbox_label(container["Config"].get("Labels"), [container["Name"]])
        assert data is not None  # a container found by _container
        return str(data["workdir"])

    async def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if isinstance(argv, (str, bytes)) or not argv:
            raise TypeError("argv must be a non-empty list of strings")
        if env:
            check_env(env)
        return await self._run(
            functools.partial(self._exec, sandbox_id, list(argv), timeout, stdin, cwd, env),
            f"exec in sandbox {sandbox_id}",
        )

    def _exec(
        self,
        sandbox_id: str,
        argv: list[str],
        timeout: float | None,
        stdin: bytes | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
    ) -> ExecResult:
        container = self._container(sandbox_id)
        workdir = posixpath.join(self._workdir(container), cwd or "")
        if container["Config"].get("OpenStdin"):
            # One at a time: each exec ends by killing every other process of the sandbox.
            server = self._servers.setdefault(sandbox_id, _Server())
            with server.lock:
                full_env = {**_env_of(container), **(env or {})}
                result = server.run(self, sandbox_id, argv, workdir, full_env, timeout, stdin)
            if result is not None:
                return result
            argv = [*LIMITED, json.dumps(self._rlimits), *argv]
        started = time.monotonic()
        self._count(sandbox_id)  # before the exec exists: no reap may kill it
        try:
            created = self.api.exec_create(
                sandbox_id,
                argv,
                stdin=True,
                user=USER,
                environment=dict(env or {}),
                workdir=workdir,
            )
        except NotFound:
            self._uncount(sandbox_id)
            raise _not_found(sandbox_id) from None
        except BaseException as exc:
            self._uncount(sandbox_id)
            if isinstance(exc, APIError) and exc.status_code == 409:  # stopped under us
                raise _not_found(sandbox_id) from None
            raise
        exec_id = created["Id"]
        try:
            sock = self.api.exec_start(exec_id, socket=True)
            pidfd = _pidfd(self.api, exec_id)
            try:
                out, err, truncated, timed_out = _pump(
                    sock._sock,
                    stdin or b"",
                    self.limits.output_bytes,
                    None if timeout is None else started + timeout,
                    pidfd,
                    functools.partial(self._kill_tree, exec_id),
                )
            finally:
                sock.close()
                if pidfd >= 0:
                    os.close(pidfd)
            self._reap(sandbox_id)
        finally:
            self._uncount(sandbox_id)
        try:
            state = self.api.exec_inspect(exec_id)
        except NotFound:
            state = {}  # gone with its container
        deadline = time.monotonic() + 10
        while state.get("Running") and time.monotonic() < deadline:
            time.sleep(0.02)
            state = self.api.exec_inspect(exec_id)
        code = state.get("ExitCode")
        if code in (None, KILLED_RETURNCODE) or timed_out:  # killed: by its sandbox's end too
            self._check_alive(sandbox_id)
            code = KILLED_RETURNCODE if code is None else code
        return ExecResult(
            int(code),
            out,
            err,
            timed_out=timed_out,
            duration=time.monotonic() - started,
            truncated=truncated,
        )

    def _check_alive(self, sandbox_id: str, *, settle: float = 0.0) -> bool:
        """After an exec killed or with no status: whether the container still runs (waiting
        up to ``settle`` seconds for it to stop, where its pid 1 is known to be ending). One
        stopped under the exec is a lost sandbox, on the Engine's word (a program cannot stop
        pid 1), unless the Engine says its memory group ran out: the sandbox's own memory,
        which only its programs fill (False: a failure of the program, as a memory bomb's
        exit 137 is)."""
        until = time.monotonic() + settle
        try:
            state = self.api.inspect_container(sandbox_id)["State"]
            while state.get("Running") and time.monotonic() < until:
                time.sleep(0.05)
                state = self.api.inspect_container(sandbox_id)["State"]
        except NotFound:
            raise SandboxLostError(
                f"sandbox {sandbox_id} was removed while a program ran"
            ) from None
        if not state.get("Running") and state.get("ExitCode") == 0:
            raise _not_found(sandbox_id)  # its pid 1 ended at the sandbox's lifetime
        if not state.get("Running") and not state.get("OOMKilled"):
            raise SandboxLostError(
                f"sandbox {sandbox_id} stopped while a program ran: {state.get('Status')}, "
                f"exit {state.get('ExitCode')} {state.get('Error') or ''}".rstrip()
            )
        return bool(state.get("Running"))

    def _count(self, sandbox_id: str) -> None:
        with self._counting:
            self._inflight[sandbox_id] = self._inflight.get(sandbox_id, 0) + 1

    def _uncount(self, sandbox_id: str) -> None:
        with self._counting:
            self._inflight[sandbox_id] -= 1

    def _kill_tree(self, exec_id: str) -> None:
        """An exec's process ended or ran out of time: kill its process tree from this
        machine (the Engine has no call for it), by host pid."""
        try:
            pid = int(self.api.exec_inspect(exec_id).get("Pid") or 0)
        except APIError:
            return  # the container is gone or stopped (NotFound, 409): _check_alive says which
        for victim in [pid, *_descendants(pid)] if pid > 0 else []:
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)

    def _reap(self, sandbox_id: str) -> None:
        """After an exec's output is read: unless another exec runs in the sandbox, kill
        every process of the sandbox's uid (``REAP_CODE``), which catches what left its tree
        (a double-forked daemon). No exec starts meanwhile."""
        with self._counting:
            if self._inflight.get(sandbox_id) == 1:
                try:
                    reaper = self.api.exec_create(sandbox_id, [REAP_PATH], user=USER)
                    self.api.exec_start(reaper["Id"])
                except APIError:
                    pass  # gone or stopped: _check_alive says which

    # -- files ---------------------------------------------------------------------------------

    def _path(self, container: Mapping[str, Any], path: str) -> str:
        return posixpath.normpath(posixpath.join(self._workdir(container), path))

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        def work() -> None:
            container = self._container(sandbox_id)
            target = self._path(container, path)
            base = next(
                (
                    m["Destination"]
                    for m in container["Mounts"]
                    if _under(target, m["Destination"]) and m["Destination"] != INIT_PATH
                ),
                posixpath.dirname(target),
            )
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w") as tar:
                parts = posixpath.relpath(target, base).split("/")
                for depth in range(1, len(parts)):
                    entry = tarfile.TarInfo("/".join(parts[:depth]))
                    entry.type, entry.mode, entry.uid, entry.gid = (
                        tarfile.DIRTYPE,
                        0o755,
                        65534,
                        65534,
                    )
                    tar.addfile(entry)
                entry = tarfile.TarInfo("/".join(parts))
                entry.size, entry.mode, entry.uid, entry.gid = len(data), 0o644, 65534, 65534
                entry.mtime = int(time.time())
                tar.addfile(entry, io.BytesIO(data))
            try:
                self.api.put_archive(sandbox_id, base, archive.getvalue())
            except NotFound:
                raise SandboxFileNotFoundError(
                    2, f"no directory {base} in the sandbox", path
                ) from None
            except APIError as exc:
                if exc.status_code in (400, 403, 500):
                    raise SandboxFileError(
                        30, f"cannot write {target}: {exc.explanation}", path
                    ) from None
                raise

        await self._run(work, f"writing {path} in sandbox {sandbox_id}")

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        def work() -> bytes:
            container = self._container(sandbox_id)
            target = self._path(container, path)
            try:
                stream, stat = self.api.get_archive(sandbox_id, target)
            except NotFound:
                raise SandboxFileNotFoundError(
                    2, f"no such file in the sandbox: {target}", path
                ) from None
            if stat.get("linkTarget"):
                raise SandboxFileError(40, f"{target} is a link (never followed)", path)
            mode = int(stat.get("mode", 0))
            if mode & (1 << 31):  # Go's os.ModeDir
                raise SandboxIsADirectoryError(21, f"{target} is a directory", path)
            tar_bytes = b"".join(stream)
            with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
                member = tar.next()
                if member is None or not member.isreg():
                    raise SandboxFileError(22, f"{target} is not a regular file", path)
                extracted = tar.extractfile(member)
                assert extracted is not None
                return extracted.read()

        return await self._run(work, f"reading {path} in sandbox {sandbox_id}")

    # -- lifecycle -----------------------------------------------------------------------------

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        self._inspected.pop(sandbox_id, None)
        server = self._servers.pop(sandbox_id, None)
        if server is not None:
            server.close()

        def work() -> None:
            try:
                found = self.api.inspect_container(sandbox_id)
                if _inspected_label(found, sandbox_id) is None:
                    raise NotFound(sandbox_id)
                self.api.remove_container(found["Id"], force=True, v=True)
            except NotFound:
                if not missing_ok:
                    raise _not_found(sandbox_id) from None
            except APIError as exc:
                if exc.status_code != 409:  # already being removed
                    raise

        await self._run(work, f"stopping sandbox {sandbox_id}")

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        wanted = set(tags)

        def work() -> builtins.list[SandboxInfo]:
            found = self.api.containers(all=True, filters={"label": LABEL})
            infos = [
                info
                for c in found
                if (info := _info(c.get("Labels"), c.get("Names") or [], c.get("State", "")))
                is not None
            ]
            return sorted(
                (
                    i
                    for i in infos
                    if wanted <= set(i.tags) and (status is None or i.status is status)
                ),
                key=lambda i: i.id,
            )

        return await self._run(work, "listing sandboxes")

    async def renew(self, sandbox_id: str) -> None:
        """Make a used sandbox as new for its next user (:mod:`sandboxkit.renewal`), in place:
        ``RENEW`` in an exec of its own, which the exec's end follows by killing whatever is
        left. Much cheaper than a new container (benchmarks/README.md), and as good for what
        an outcome depends on; what it cannot undo is information only: the counters of its
        tmpfs inode numbers, IPC ids and pids, and its volumes' change times. Raises where it
        cannot (no python3 in the image, the network used, anything left): the sandbox is
        then replaced."""

        def work() -> ExecResult:
            mounts = self._container(sandbox_id)["Mounts"]
            roots = [m["Destination"] for m in mounts if m.get("Type") == "volume"]
            argv = ["python3", "-I", "-S", "-c", RENEW, *roots]
            return self._exec(sandbox_id, argv, RENEW_TIMEOUT, None, "/", None)

        result = await self._run(work, f"renewing sandbox {sandbox_id}")
        if (result.returncode, result.stdout) != (0, "renewed\n"):
            raise BackendError(
                f"sandbox {sandbox_id} could not be renewed (exit {result.returncode}): "
                f"{result.stderr.strip()[-500:]}"
            )

    async def get(self, sandbox_id: str) -> SandboxInfo:
        def work() -> SandboxInfo:
            try:
                found = self.api.inspect_container(sandbox_id)
            except NotFound:
                raise _not_found(sandbox_id) from None
            labels = found["Config"].get("Labels") if found.get("Name") == f"/{sandbox_id}" else {}
            info = _info(labels, [found.get("Name", "")], found["State"]["Status"])
            if info is None or info.status is SandboxStatus.STOPPED:
                raise _not_found(sandbox_id)
            return info

        return await self._run(work, f"getting sandbox {sandbox_id}")

    async def aclose(self) -> None:
        """Close the Engine connection and the servers' attaches; the sandboxes outlive the
        client until stopped (their servers wait for the next attach)."""
        servers, self._servers = self._servers, {}
        for server in servers.values():
            server.close()
        self._inspected.clear()
        client, self._client = self._client, None
        if client is not None:
            client.close()


def _env_of(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment (the image's and the spec's) as an Engine exec gets it:
    with the Engine's ``PATH`` where the image sets none (an imported image sets nothing),
    so that ``python3`` is found, and is the server's own interpreter (its warm path)."""
    pairs = (item.partition("=") for item in container["Config"].get("Env") or [])
    found = {key: value for key, _, value in pairs}
    return {"PATH": ENGINE_PATH, "HOSTNAME": container["Config"]["Hostname"], **found}


class _Server:
    """This process's connection to a sandbox's container server (its attached stdio)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.holder: Any = None
        self.broken = False
        self.buffer = bytearray()
        """What the Engine sent of the server's stdout, its frame headers taken off."""

    def run(
        self,
        backend: DockerBackend,
        sandbox_id: str,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult | None:
        """The exec's result from the server; None where it cannot serve (an Engine exec
        then runs it). A server that stops answering is given up for this sandbox."""
        if self.broken:
            return None
        job = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
        body = b"".join((struct.pack("<I", len(job)), job, stdin or b""))
        header = {
            "limits": backend._rlimits,
            "cap": backend.limits.output_bytes,
            "timeout": timeout,
        }
        request = b"r" + json.dumps({**header, "size": len(body)}).encode() + b"\n" + body
        if len(request) > forkserver.MAX_REQUEST:
            return None
        backend._count(sandbox_id)
        try:
            if self.sock is None:
                self.holder = backend.api.attach_socket(
                    sandbox_id, params={"stdin": 1, "stdout": 1, "stream": 1}
                )
                self.sock = self.holder._sock
            assert self.sock is not None
            self.sock.settimeout(None if timeout is None else timeout + _STUCK_AFTER + 5)
            self.sock.sendall(struct.pack("<I", len(request)) + request)
            out, err = [], []
            while True:
                packet = self._packet()
                tag, data = packet[:1], packet[1:]
                if tag == b"o":
                    out.append(data)
                elif tag == b"e":
                    err.append(data)
                else:
                    answer = json.loads(data)
                    break
        except TimeoutError:  # the program's time and more, and no answer: given up
            self.close()
            backend._check_alive(sandbox_id)
            return ExecResult(KILLED_RETURNCODE, timed_out=True, duration=timeout or 0.0)
        except (OSError, ValueError, EOFError, DockerException) as exc:
            self.close()
            ending = 5.0 if isinstance(exc, EOFError) else 0.0  # the server's end: it stops
            if backend._check_alive(sandbox_id, settle=ending):
                return None
            return ExecResult(KILLED_RETURNCODE)  # its memory group ran out: the program's
        finally:
            backend._uncount(sandbox_id)
        if answer.get("ended"):  # the sandbox's lifetime: its server ends, and the container
            self.close()
            backend._check_alive(sandbox_id, settle=10.0)
            raise _not_found(sandbox_id)
        if "error" in answer:
            return None
        return _result(answer, b"".join(out), b"".join(err))

    def _packet(self) -> bytes:
        """The server's next ``o``/``e``/``x`` packet (4 bytes of length, then itself)."""
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack("<I", self.buffer[:4])
                if len(self.buffer) >= 4 + size:
                    packet = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return packet
            self.buffer += self._frame()

    def _frame(self) -> bytes:
        """The next frame of the Engine's multiplexed stream (8 bytes: stream, size)."""
        header = self._exactly(8)
        _, size = struct.unpack(">BxxxL", header)
        return self._exactly(size)

    def _exactly(self, size: int) -> bytes:
        assert self.sock is not None
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError("the container's server is gone")
            data += chunk
        return data

    def close(self) -> None:
        self.broken = True
        if self.holder is not None:
            with contextlib.suppress(OSError):
                self.holder.close()


def creator() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _descendants(pid: int) -> builtins.list[int]:
    """The host pids of ``pid``'s descendants, from /proc."""
    children: dict[int, builtins.list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _pidfd(api: Any, exec_id: str) -> int:
    """A pidfd of the exec's process on this machine (-1 if it is gone already)."""
    for _ in range(200):
        pid = int(api.exec_inspect(exec_id).get("Pid") or 0)
        if pid > 0:
            try:
                return os.pidfd_open(pid)
            except OSError:
                return -1
        time.sleep(0.005)
    return -1


def _pump(
    sock: socket.socket,
    stdin: bytes,
    cap: int,
    deadline: float | None,
    pidfd: int,
    end: Callable[[], None],
) -> tuple[bytes, bytes, bool, bool]:
    """Feed ``stdin`` to an attached exec and read its multiplexed output (8-byte frame
    headers: stream, size) until it ends; each stream kept up to ``cap`` bytes. When its
    process ends (``pidfd``) or at ``deadline``, ``end()`` kills its tree, and output is
    read for ``DRAIN_SECONDS`` more at most. Returns stdout, stderr, whether cut, whether
    timed out."""
    streams: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
    truncated = timed_out = False
    pending = memoryview(stdin)
    if not pending:
        sock.shutdown(socket.SHUT_WR)
    buffer = bytearray()
    sock.setblocking(False)
    drain_until: float | None = None
    if pidfd < 0:
        end()
        drain_until = time.monotonic() + DRAIN_SECONDS
    while True:
        until = drain_until if drain_until is not None else deadline
        wait = None if until is None else until - time.monotonic()
        if wait is not None and wait <= 0:
            if drain_until is not None:
                break
            timed_out = True
            end()
            drain_until = time.monotonic() + DRAIN_SECONDS
            continue
        watched = [sock.fileno()] if drain_until is not None else [sock.fileno(), pidfd]
        readable, writable, _ = select.select(watched, [sock.fileno()] if pending else [], [], wait)
        if pidfd in readable:
            end()
            drain_until = time.monotonic() + DRAIN_SECONDS
        if writable:
            try:
                sent = sock.send(pending[:65536])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # the command closed its stdin
                sent, pending = 0, memoryview(b"")
            pending = pending[sent:]
            if not pending:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
        if sock.fileno() in readable:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 8:
                kind, size = struct.unpack(">BxxxL", buffer[:8])
                if len(buffer) < 8 + size:
                    break
                payload, buffer = bytes(buffer[8 : 8 + size]), buffer[8 + size :]
                kept = streams.setdefault(kind, bytearray())
                room = cap - len(kept)
                kept += payload[: max(room, 0)]
                truncated = truncated or len(payload) > room
    return bytes(streams[1]), bytes(streams[2]), truncated, timed_out


def probe_docker(url: str, timeout: float) -> str:
    """``sandboxkit doctor``'s check: the Engine answers; its version, runtimes, whether user
    namespaces remap root, and the storage driver."""
    api = docker.APIClient(base_url=url, timeout=max(1, int(timeout)), version="auto")
    try:
        info = api.info()
    finally:
        api.close()
    runtimes = ", ".join(sorted(info.get("Runtimes") or {}))
    userns = any("userns" in option for option in info.get("SecurityOptions") or [])
    return (
        f"Engine {info.get('ServerVersion')}, runtimes {runtimes} (default "
        f"{info.get('DefaultRuntime')}), user namespaces {'on' if userns else 'off'}, "
        f"storage {info.get('Driver')}"
    )
