"""A pids cgroup per command: a process limit root cannot escape, and a reliable tree kill.

RLIMIT_NPROC is ignored for processes whose real uid is root (also inside a user namespace
that maps to root), so when sandboxkit runs as root a fork bomb is contained only by the pids
controller. Used wherever a writable pids hierarchy exists (cgroup v2 or v1); elsewhere the
supervisor falls back to RLIMIT_NPROC.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import uuid
from pathlib import Path


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


def _candidate_bases() -> list[Path]:
    own = _own_paths()
    bases = []
    for mount, fstype, opts in _mounts():
        if fstype == "cgroup2":
            bases.append(Path(mount) / own.get("", "/").lstrip("/"))
        elif "pids" in opts.split(","):
            key = next((k for k in own if "pids" in k.split(",")), None)
            if key is not None:
                bases.append(Path(mount) / own[key].lstrip("/"))
    return bases


class PidsCgroups:
    """A private parent cgroup under which each command gets a child with ``pids.max``."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    @classmethod
    def create(cls) -> PidsCgroups | None:
        """A usable parent, or None where no writable pids controller exists."""
        for base in _candidate_bases():
            parent = base / f"sandboxkit-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                parent.mkdir()
            except OSError:
                continue
            if not (parent / "pids.max").exists():
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+pids")
                    (parent / "cgroup.subtree_control").write_text("+pids")
            probe = parent / "probe"
            try:
                probe.mkdir()
                ok = (probe / "pids.max").exists()
                probe.rmdir()
            except OSError:
                ok = False
            if ok:
                return cls(parent)
            with contextlib.suppress(OSError):
                parent.rmdir()
        return None

    @staticmethod
    @functools.cache
    def shared() -> PidsCgroups | None:
        """The process's one parent cgroup, removed at interpreter exit."""
        cgroups = PidsCgroups.create()
        if cgroups is not None:
            atexit.register(cgroups.close)
        return cgroups

    def new(self, max_pids: int) -> Path:
        group = self.parent / uuid.uuid4().hex
        group.mkdir()
        (group / "pids.max").write_text(str(max_pids))
        return group

    @staticmethod
    def add(group: Path, pid: int) -> None:
        (group / "cgroup.procs").write_text(str(pid))

    @staticmethod
    def kill_all(group: Path) -> None:
        """SIGKILL every process in ``group`` until it is empty, then remove it."""
        kill_file = group / "cgroup.kill"
        for _ in range(1000):
            try:
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except OSError:  # gone, or being removed by a concurrent kill (ENODEV)
                return
            if not pids:
                break
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            else:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
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
        with contextlib.suppress(OSError):
            for child in self.parent.iterdir():
                if child.is_dir():
                    self.kill_all(child)
            self.parent.rmdir()
