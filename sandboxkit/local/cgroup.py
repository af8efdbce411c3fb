"""The local backend's cgroups: memory and CPU bounded per sandbox, processes per command.

A sandbox's memory group bounds everything its processes charge: their own memory, memfds,
/dev/shm and the tmpfs of its storage (``disk.py``), none of which a per-process limit sees
whole (``RLIMIT_AS`` counts one process's mappings only), and the kernel's memory they cause:
pipes, socket buffers, kernel objects. On v2 all of it counts toward ``memory.max``; v1 counts
socket buffers only once a TCP limit is set (``memory.kmem.tcp.limit_in_bytes``, a counter of
its own: there they are bounded apart, to as much again), and kernel objects since Linux 4.6.
A sandbox's cpu group bounds the CPU time of all its processes together (CFS bandwidth),
whatever sessions or autogroups they make: one sandbox cannot take a machine's cores. A
command's pids group bounds its processes: RLIMIT_NPROC is ignored for processes whose real
uid is root (also inside a user namespace that maps to root), so when sandboxkit runs as root a
fork bomb is contained only by the pids controller; the group also makes a reliable tree kill.

All live under private parents of this process, in whichever hierarchy offers the controller
and is writable: cgroup v2, or v1, where each controller may be a hierarchy of its own and a
process joins a group in each. In one hierarchy (v2, where only leaves hold processes), a
command's group is a child of its sandbox's. Where a controller is missing, the supervisor
falls back to RLIMIT_AS and RLIMIT_NPROC; CPU time is then bounded per process only
(RLIMIT_CPU).

A sandbox's groups belong to the process that runs its commands: two processes running
commands in one sandbox bound theirs separately.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import re
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

_LIMIT_FILES = {
    "pids": ("pids.max",),
    "memory": ("memory.max", "memory.limit_in_bytes"),
    "cpu": ("cpu.max", "cpu.cfs_quota_us"),
}
"""The file a group gets where its controller is on (v2, v1; v1's cpu only with CFS
bandwidth control)."""
CPU_PERIOD_US = 100_000
"""The period of a sandbox's CPU quota (the kernel's default): its processes may use
``cpus`` times this in every period."""
_WEIGHTS = {1: ("cpu.shares", 1024, 262_144), 2: ("cpu.weight", 100, 10_000)}
"""The weight file of a cpu group (v1, v2), a process's default weight there, and the most
the kernel takes."""
_PARENT_NAME = re.compile(r"sandboxkit-(?P<namespace>\d+)-(?P<pid>\d+)-[0-9a-f]{8}")
"""A private parent's name: its maker's pid namespace (inode) and pid, and a random part."""
_V1_TCP = "memory.kmem.tcp.limit_in_bytes"
_V1_CHARGE_SLACK = 1 << 20
"""Bytes below its limit at which a v1 group's peak counts as the limit reached: the kernel
charges pages in batches (64 pages per CPU), so a refused charge may leave the peak short of
the limit by a batch or so."""


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _source, super_opts = [*right.split(), "", ""][:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, super_opts))
    return found


def _own_paths() -> dict[str, str]:
    """Our cgroup path per hierarchy key ('' for v2, else the v1 controller list)."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            paths[controllers] = path
    return paths


def _candidate_bases(controller: str) -> list[Path]:
    own = _own_paths()
    bases = []
    for mount, fstype, opts in _mounts():
        if fstype == "cgroup2":
            bases.append(Path(mount) / own.get("", "/").lstrip("/"))
        elif controller in opts.split(","):
            key = next((k for k in own if controller in k.split(",")), None)
            if key is not None:
                bases.append(Path(mount) / own[key].lstrip("/"))
    return bases


def _offers(parent: Path, controller: str) -> bool:
    """Whether groups made under ``parent`` get ``controller``'s limit, turning it on where v2
    needs that (in the parent's parent, then in the parent)."""
    for level in (parent.parent, parent):
        with contextlib.suppress(OSError):  # no such file in v1; refused, or already on
            (level / "cgroup.subtree_control").write_text(f"+{controller}")
    with _probe(parent) as probe:
        return probe is not None and any((probe / n).exists() for n in _LIMIT_FILES[controller])


def _takes(parent: Path, name: str, value: str) -> bool:
    """Whether a group made under ``parent`` accepts ``value`` in its file ``name``."""
    with _probe(parent) as probe:
        if probe is None:
            return False
        try:
            (probe / name).write_text(value)
        except OSError:
            return False
        return True


@contextlib.contextmanager
def _probe(parent: Path) -> Iterator[Path | None]:
    """A new, empty group under ``parent`` while the block runs (None if none can be made)."""
    probe = parent / f"probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        yield None
        return
    try:
        yield probe
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _pid_namespace() -> int:
    """Our pid namespace's inode (0 where /proc does not say): the pid in a parent's name
    means a process only in the namespace named beside it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _owner_gone(name: str, namespace: int) -> bool:
    """Whether the parent ``name`` was made by a process of our pid namespace that has
    exited. A pid in use again counts as its owner (its parent stays until that one exits
    too), and a parent named for another namespace, or in an older form, is never ours to
    judge."""
    match = _PARENT_NAME.fullmatch(name)
    if match is None or namespace == 0 or int(match["namespace"]) != namespace:
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, as another user's process
        return False
    return False


def _sweep(base: Path, namespace: int) -> None:
    """Remove the parents that processes killed before their exit (by the OOM killer, a
    node's preemption) left in ``base``, each with its groups, unless a process is still in
    one: the kernel keeps every group, and a group's memory accounting outlives it, until
    someone removes it, so a host that restarts killed runs would gather them without
    end. What is still running there is left alone."""
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            if _owner_gone(entry.name, namespace) and all(
                _procs(g) == [] for g in _groups_in(Path(entry.path))
            ):
                _rmdir_all(Path(entry.path))


def _private_parent(controller: str) -> Path | None:
    """A new group of ours whose children get ``controller``'s limit, or None. Parents that
    exited processes left beside it are swept first (:func:`_sweep`)."""
    namespace = _pid_namespace()
    for base in _candidate_bases(controller):
        _sweep(base, namespace)
        parent = base / f"sandboxkit-{namespace}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            parent.mkdir()
        except OSError:
            continue
        if _offers(parent, controller):
            return parent
        with contextlib.suppress(OSError):
            parent.rmdir()
    return None


def _limit_memory(group: Path, limit: int, *, tcp: bool) -> None:
    """``limit`` bytes of memory and no swap beyond it; on v1 kernel memory too, and socket
    buffers (``tcp``) to as much again."""
    if (group / "memory.max").exists():  # v2: kernel memory, sockets included, counts here
        (group / "memory.max").write_text(str(limit))
        swap = group / "memory.swap.max"
    else:  # v1; memsw (memory + swap) only with swap accounting, and never below the first
        (group / "memory.limit_in_bytes").write_text(str(limit))
        # Kernel objects (pipes, slab) count in it since 4.6, with no kmem limit: the one
        # older kernels needed to count them leaked memory there (runc dropped it). Socket
        # buffers count only with a TCP limit, set before any task joins.
        if tcp:
            (group / _V1_TCP).write_text(str(limit))
        swap = group / "memory.memsw.limit_in_bytes"
    if swap.exists():
        swap.write_text("0" if swap.name == "memory.swap.max" else str(limit))


def _limit_cpu(group: Path, cpus: float) -> None:
    """``cpus`` CPUs' worth of time in every period, for all of the group's processes."""
    quota = max(1000, round(cpus * CPU_PERIOD_US))  # the kernel's least quota is 1 ms
    if (group / "cpu.max").exists():  # v2
        (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
    else:
        (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        try:
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as exc:  # v1 refuses more than a group above has: that one bounds it
            if exc.errno != errno.EINVAL:
                raise


def _version(parent: Path | None) -> int | None:
    """The cgroup version of ``parent`` (v1 has no ``cgroup.controllers``)."""
    if parent is None:
        return None
    return 2 if (parent / "cgroup.controllers").exists() else 1


def count_socket_memory(pid: int, limit: int) -> bool:
    """Make the socket buffers of the memory group of process ``pid`` (of this machine: a
    container's pid 1) count, as a sandbox's do: on v1 a TCP limit of ``limit`` bytes, which
    holds for the sockets its processes make from now on; on v2 they count already. False
    where this process may not set it (the group is root's)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return False
    path = next((p for _, names, p in lines if "memory" in names.split(",")), None)
    if path is None:
        return any(names == "" for _, names, _ in lines)  # v2: counted in memory.max
    for mount, fstype, opts in _mounts():
        if fstype == "cgroup" and "memory" in opts.split(","):
            try:
                (Path(mount) / path.lstrip("/") / _V1_TCP).write_text(str(limit))
            except OSError:
                return False
            return True
    return False


def _memory_options() -> set[str]:
    """The kernel's ``cgroup.memory=`` options (``nokmem``, ``nosocket``): what it never
    counts, whatever a group's limits say."""
    try:
        words = Path("/proc/cmdline").read_text().split()
    except OSError:
        return set()
    return {o for w in words if w.startswith("cgroup.memory=") for o in w[14:].split(",")}


def kernel_before(version: tuple[int, int]) -> bool:
    """Whether the running kernel is older than ``version`` (major, minor)."""
    found = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return found is not None and (int(found[1]), int(found[2])) < version


class Cgroups:
    """This process's private parents: ``memory`` and ``cpu`` for sandbox groups, ``pids`` for
    command groups (one directory where one hierarchy has several); None where none is
    writable."""

    def __init__(self, pids: Path | None, memory: Path | None, cpu: Path | None) -> None:
        self.pids = pids
        self.memory = memory
        self.cpu = cpu
        self.nested = pids is not None and pids in (memory, cpu)
        """One hierarchy: a command's group is made inside its sandbox's."""
        self._sandboxes: dict[str, list[Path]] = {}
        """Each sandbox's groups, one per hierarchy."""
        self._counts: dict[str, _MemoryCounts] = {}
        """Each sandbox's memory counts, where the kernel keeps them."""
        self._dying: list[Path] = []
        """Groups of stopped sandboxes whose killed processes were still exiting."""

    @classmethod
    def create(cls) -> Cgroups:
        pids = _private_parent("pids")
        memory = pids if pids is not None and _offers(pids, "memory") else _private_parent("memory")
        made = [p for p in dict.fromkeys((pids, memory)) if p is not None]
        cpu = next((p for p in made if _offers(p, "cpu")), None) or _private_parent("cpu")
        return cls(pids, memory, cpu)

    @staticmethod
    @functools.cache
    def shared() -> Cgroups:
        """The process's one set of parents, removed at interpreter exit."""
        cgroups = Cgroups.create()
        atexit.register(cgroups.close)
        return cgroups

    @functools.cached_property
    def memory_version(self) -> int | None:
        """The cgroup version that bounds sandbox memory."""
        return _version(self.memory)

    @functools.cached_property
    def cpu_version(self) -> int | None:
        """The cgroup version that bounds sandbox CPU time (None: only RLIMIT_CPU per
        process)."""
        return _version(self.cpu)

    @functools.cached_property
    def uncounted(self) -> tuple[str, ...]:
        """The kernel memory a sandbox's memory limit leaves out here: 'socket buffers'
        (v1 without TCP accounting, or the kernel's ``nosocket``), 'kernel objects' (pipes,
        slab: ``nokmem``, or v1 before Linux 4.6); empty where all of it counts."""
        if self.memory is None:
            return ()
        options = _memory_options()
        v1 = self.memory_version == 1
        tcp = not v1 or _takes(self.memory, _V1_TCP, str(1 << 30))
        kmem = "nokmem" not in options and not (v1 and kernel_before((4, 6)))
        return (
            *(() if tcp and "nosocket" not in options else ("socket buffers",)),
            *(() if kmem else ("kernel objects",)),
        )

    def sandbox(self, name: str, *, memory_bytes: int, cpus: float) -> None:
        """Make the sandbox's groups with their limits, unless they are made: before its
        commands run here (:meth:`confine` joins them)."""
        if name in self._sandboxes:
            return
        groups = []
        tcp = self.memory_version == 1 and "socket buffers" not in self.uncounted
        for parent in dict.fromkeys((self.memory, self.cpu)):
            if parent is None:
                continue
            group = parent / name
            with contextlib.suppress(FileExistsError):
                group.mkdir()
            if parent == self.memory:
                _limit_memory(group, memory_bytes, tcp=tcp)
                with contextlib.suppress(OSError, ValueError):  # then no counts: None
                    self._counts[name] = _MemoryCounts(group)
            if parent == self.cpu:
                _limit_cpu(group, cpus)
            if parent == self.pids:  # command groups inside get pids.max (v2)
                with contextlib.suppress(OSError):
                    (group / "cgroup.subtree_control").write_text("+pids")
            groups.append(group)
        self._sandboxes[name] = groups
        self._weigh()

    def memory_events(self, sandbox: str, *, restart: bool = False) -> tuple[int, int] | None:
        """How often ``sandbox``'s memory group has reached its own limit and how many of its
        processes an OOM killer killed, whichever (``oom_kill``); None where the kernel keeps
        no such counts. Kills the first count does not explain were for memory outside the
        sandbox's: the host's, or a group's above it, ran out. The kernel's counts, which no
        process in the sandbox can write. v2 counts each time (``max``, ``oom``); v1's
        ``failcnt`` stays 0 on recent kernels, so there the first count is whether the peak
        usage reached the limit (1 or 0), since the peak was last ``restart``ed (here, to the
        usage now)."""
        counts = self._counts.get(sandbox)
        return None if counts is None else counts.read(restart=restart)

    def confine(self, pid: int, *, sandbox: str, max_pids: int) -> Path | None:
        """Move ``pid`` (a command not yet started) into its sandbox's groups (made by
        :meth:`sandbox`; FileNotFoundError once it is dropped) and into a new group of its
        own; returns the latter, to kill the command with (None without a pids controller)."""
        groups = self._sandboxes.get(sandbox)
        if groups is None:
            raise FileNotFoundError(f"sandbox {sandbox} has no cgroups here (stopped)")
        command = None
        if self.pids is not None:
            under = next((g for g in groups if g.parent == self.pids), self.pids)
            command = under / uuid.uuid4().hex
            command.mkdir()
            (command / "pids.max").write_text(str(max_pids))
        joined = [g for g in groups if command is None or g != command.parent]
        for group in (command, *joined):
            if group is not None:
                (group / "cgroup.procs").write_text(str(pid))
        return command

    def drop(self, sandbox: str) -> None:
        """Kill what is left in a stopped sandbox's groups, and remove them: at once if they
        are empty, else once the killed processes are gone (freeing their memory takes a
        while), retried on later calls and at exit, never waiting for them."""
        counts = self._counts.pop(sandbox, None)
        if counts is not None:
            counts.close()
        for group in self._sandboxes.pop(sandbox, []):
            for inner in _groups_in(group):
                if pids := _procs(inner):
                    _signal(inner, pids)
            self._dying.append(group)
        self._dying = [g for g in self._dying if not _rmdir_all(g)]
        self._weigh()

    def _weigh(self) -> None:
        """Weigh the cpu parent as one process per sandbox in it against the rest of the
        machine: each sandbox, whatever sessions its processes make, competes as one process
        of the host's would (as each exec's session did before sandboxes had cpu groups), and
        a pool is not squeezed into one process's share when the machine is busy. Inside, the
        sandboxes weigh alike, and each stays within its quota."""
        if self.cpu is None or self.cpu_version is None:
            return
        name, one, most = _WEIGHTS[self.cpu_version]
        with contextlib.suppress(OSError):
            (self.cpu / name).write_text(str(min(most, one * max(1, len(self._sandboxes)))))

    @staticmethod
    def kill_all(group: Path) -> None:
        """SIGKILL every process in ``group`` until it is empty, then remove it. Each process
        is signalled once: it stays listed until it has exited, and with SIGKILL pending it
        can fork no more (a fork under way fails), so only what appears later is new."""
        killed: set[int] = set()
        for _ in range(1000):
            pids = _procs(group)
            if pids is None:  # gone, or being removed by a concurrent kill (ENODEV)
                return
            if not pids:
                break
            if fresh := [pid for pid in pids if pid not in killed]:
                _signal(group, fresh)
                killed.update(fresh)
            else:  # let the killed ones run to their exit
                os.sched_yield()
        # Killed processes leave the group once reaped; give their parents a moment.
        for _ in range(200):
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                os.sched_yield()

    def close(self) -> None:
        for counts in self._counts.values():
            counts.close()
        for parent in {p for p in (self.pids, self.memory, self.cpu) if p is not None}:
            for group in _groups_in(parent):
                self.kill_all(group)


class _MemoryCounts:
    """A sandbox memory group's count files, held open from its making to its drop: the
    kernel opens a cgroup file at several times the cost of reading an open one, and every
    exec reads them before and after. Reads and the close take a lock, so that a drop in
    another thread never leaves a read on a descriptor number the process reuses."""

    def __init__(self, group: Path) -> None:
        self._lock = threading.Lock()
        self._fds: list[int] = []
        self._peak: int | None = None
        """v1: the peak usage of memory + swap where swap is accounted (never below that of
        memory alone, which every charge to memory charges too), else of memory."""
        self._oom: int | None = None
        self._limit = 0
        try:
            self._events = self._open(group / "memory.events")  # v2
            if self._events is None:
                self._peak = self._open(group / "memory.memsw.max_usage_in_bytes", os.O_RDWR)
                if self._peak is None:
                    self._peak = self._open(group / "memory.max_usage_in_bytes", os.O_RDWR)
                self._oom = self._open(group / "memory.oom_control")
                self._limit = int((group / "memory.limit_in_bytes").read_text())
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, flags: int = os.O_RDONLY) -> int | None:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        self._fds.append(fd)
        return fd

    def read(self, *, restart: bool) -> tuple[int, int] | None:
        """See :meth:`Cgroups.memory_events`; None once closed."""
        with self._lock:
            if not self._fds:
                return None
            try:
                if self._events is not None:
                    counts = _counts(_pread(self._events))
                    return counts["max"] + counts["oom"], counts["oom_kill"]
                if self._peak is None or self._oom is None:
                    return None
                if restart:
                    os.pwrite(self._peak, b"0", 0)
                reached = int(int(_pread(self._peak)) + _V1_CHARGE_SLACK >= self._limit)
                return reached, _counts(_pread(self._oom))["oom_kill"]
            except (OSError, KeyError, ValueError):
                return None

    def close(self) -> None:
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()


def _pread(fd: int) -> str:
    """A cgroup file's whole text, read afresh (from offset 0) through its open ``fd``."""
    return os.pread(fd, 4096, 0).decode()


def _counts(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``name value`` per line) as numbers."""
    return {name: int(value) for name, value in (line.split() for line in text.splitlines())}


def _procs(group: Path) -> list[int] | None:
    """The processes in ``group`` (None if it cannot be read)."""
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return None


def _signal(group: Path, pids: list[int]) -> None:
    """SIGKILL ``pids`` of ``group``: all at once where the kernel can (v2's ``cgroup.kill``,
    which also reaches the groups inside)."""
    kill_file = group / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            kill_file.write_text("1")
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _groups_in(group: Path) -> list[Path]:
    """``group`` and the groups inside it, innermost first."""
    inner: list[Path] = []
    with contextlib.suppress(OSError), os.scandir(group) as entries:
        for entry in entries:  # the directory's own types: no stat of each of its files
            if entry.is_dir(follow_symlinks=False):
                inner += _groups_in(Path(entry.path))
    return [*inner, group]


def _rmdir_all(group: Path) -> bool:
    """Remove ``group`` and the groups inside it, unless a process is still there; whether
    they are gone."""
    for inner in _groups_in(group):
        try:
            inner.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return True
