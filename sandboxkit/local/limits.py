"""Resource limits of local sandboxes and their commands.

Per command, rlimits applied with ``prlimit(2)`` before it starts: the supervisor starts each
command blocked, applies them to the blocked process from the host, then releases it, so they
hold from the first instruction of untrusted code, and no ``preexec_fn`` (unsafe with threads)
or extra interpreter start is needed. Per sandbox, where the host allows: memory and CPU in
cgroups (``cgroup.py``), storage on a tmpfs of its own (``disk.py``).
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass, fields, replace
from typing import Any

from ..config import setting
from ..errors import InvalidLimitError

MiB = 1024 * 1024
MIN_CPUS = 0.01
"""The least CPU share the kernel can bound (1 ms per 100 ms period)."""


def _check(name: str, value: Any, source: str) -> None:
    """Refuse a limit no sandbox could run under; ``source`` is how the user gave it
    (``SANDBOXKIT_LIMIT_MEMORY_MB='lots'``, ``memory_mb=-5``)."""
    if name == "cpus":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and math.isfinite(value) and value >= MIN_CPUS:
            return
        allowed = f"a number of CPUs, at least {MIN_CPUS}"
    else:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return
        allowed = "a whole number, at least 1"
    raise InvalidLimitError(f"{source}: the {name} limit must be {allowed}")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 60
    cpus: float = 1.0
    """CPUs that all processes of a sandbox together may keep busy (a cpu cgroup per sandbox;
    a spec's ``cpu`` sets it for its sandbox). Where no cpu cgroup is writable, only
    ``cpu_seconds`` per process holds."""
    memory_mb: int = 2048
    """Memory of the whole sandbox, its processes, /dev/shm and files on its tmpfs included
    (a memory cgroup per sandbox); where no memory cgroup is writable, the address space of
    each process (RLIMIT_AS)."""
    processes: int = 128
    """Processes and threads (pids cgroup where one is available, else RLIMIT_NPROC)."""
    file_size_mb: int = 256
    """Per file: room for a precompiled C++ header (about 100 MB for bits/stdc++.h)."""
    disk_mb: int = 512
    """/workspace and /tmp of a sandbox together (a tmpfs of its own, where the host can mount
    one; elsewhere only ``file_size_mb`` holds)."""
    disk_inodes: int = 32768
    """Files and directories in them (the same tmpfs)."""
    open_files: int = 256
    output_bytes: int = 1 * MiB
    """Kept per stream (stdout, stderr); the rest is read and dropped, and ``truncated`` set."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            _check(f.name, value, f"{f.name}={value!r}")

    @classmethod
    def from_env(cls, **overrides: Any) -> Limits:
        """Defaults, then ``SANDBOXKIT_LIMIT_<FIELD>`` variables, then ``overrides``; an
        invalid one is an :class:`InvalidLimitError` naming the variable or keyword."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = f"SANDBOXKIT_LIMIT_{f.name.upper()}"
            raw = setting(var)
            if raw is None:
                continue
            parse = float if isinstance(f.default, float) else int
            try:
                values[f.name] = parse(raw)
            except ValueError:
                values[f.name] = raw
            _check(f.name, values[f.name], f"{var}={raw!r}")
        return replace(cls(**values), **overrides)

    def rlimits(self, *, with_nproc: bool, with_as: bool) -> dict[int, tuple[int, int]]:
        limits = {
            # Soft limit sends SIGXCPU, the hard one a second later SIGKILL.
            resource.RLIMIT_CPU: (self.cpu_seconds, self.cpu_seconds + 1),
            resource.RLIMIT_FSIZE: (self.file_size_mb * MiB, self.file_size_mb * MiB),
            resource.RLIMIT_NOFILE: (self.open_files, self.open_files),
            resource.RLIMIT_CORE: (0, 0),
        }
        if with_as:
            limits[resource.RLIMIT_AS] = (self.memory_mb * MiB, self.memory_mb * MiB)
        if with_nproc:
            limits[resource.RLIMIT_NPROC] = (self.processes, self.processes)
        return limits


def check_cpus(cpus: float) -> None:
    """A sandbox's CPUs must be a positive number the kernel can bound (1 ms per 100 ms)."""
    if not cpus >= MIN_CPUS:
        raise InvalidLimitError(f"cpus must be at least {MIN_CPUS}, got {cpus!r}")


def apply_rlimits(pid: int, rlimits: dict[int, tuple[int, int]]) -> None:
    """Lower ``pid``'s limits; never above its current hard limit (raising needs
    CAP_SYS_RESOURCE, which even root may lack in a container)."""
    for which, (soft, hard) in rlimits.items():
        _, current = resource.prlimit(pid, which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.prlimit(pid, which, (soft, hard))
