"""A cap on a sandbox's storage: its directory is a tmpfs of its own.

RLIMIT_FSIZE bounds each file a program writes, not how many it writes. A tmpfs of
``disk_mb`` and ``disk_inodes`` mounted on the sandbox's directory (its /workspace, /tmp and
metadata) bounds them all together (ENOSPC beyond), keeps one sandbox's files from taking
another's room, and goes at once when it is detached, however deep the tree in it. Its pages
are memory, charged to the memory cgroup of whoever writes them: for the sandbox's code, its
sandbox's. Mounting needs CAP_SYS_ADMIN in the host's mount namespace (a root host); elsewhere
storage is bounded per file only.

A sandbox made as new (``SubprocessBackend.renew``) gets a fresh tmpfs; its warm template,
whose mount namespaces hold the old one at ``/workspace`` and ``/tmp``, is shown the new one
there too (:func:`graft`) rather than started again.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from .seccomp import native_arch, syscall_number

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
_MS_MOVE = 0x2000
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8
_OPEN_TREE_CLONE = 0x1
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_AT_FDCWD = -100
_CLONE_FS = 0x200
_CLONE_NEWNS = 0x20000
PLACES = ("workspace", "tmp")
"""What a sandbox's storage holds and its namespaces show at ``/workspace`` and ``/tmp``."""


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str, path: Path) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what} {path}: {os.strerror(code)}")


def mount_filesystem(source: str, path: Path, kind: str, flags: int, options: str = "") -> None:
    """``mount(2)`` a filesystem of ``kind`` on the directory ``path``."""
    result = _libc().mount(
        source.encode(), os.fsencode(path), kind.encode(), flags, options.encode() or None
    )
    _check(result, "mount", path)


def mount(path: Path, *, size_mb: int, inodes: int) -> None:
    """Mount a fresh tmpfs of ``size_mb`` and ``inodes`` on the directory ``path``."""
    options = f"size={size_mb}m,nr_inodes={inodes},mode=0711"
    mount_filesystem("sandboxkit", path, "tmpfs", MS_NOSUID | MS_NODEV, options)


def move(source: Path, target: Path) -> None:
    """Move the mount on ``source``, with every mount below it, to ``target`` (``EINVAL``
    where the host's mounts propagate to others: a shared parent)."""
    mount_filesystem(os.fsdecode(source), target, "", _MS_MOVE)


def unmount(path: Path) -> None:
    """Detach the tmpfs on ``path``, if one is there, with every mount below it: it is freed
    when the last process that still uses it (a dying command with a file open) is gone. A
    mount point cannot be renamed, so this comes before a stopped sandbox's directory is
    moved away."""
    result = _libc().umount2(os.fsencode(path), _MNT_DETACH | _UMOUNT_NOFOLLOW)
    if result != 0 and ctypes.get_errno() in (errno.EINVAL, errno.ENOENT):
        return  # no mount there (a sandbox made without one), or no directory
    _check(result, "unmount", path)


def graft(storage: Path, processes: Sequence[int], *, again: bool) -> None:
    """Show the storage laid out on ``storage`` (its :data:`PLACES`) at ``/workspace`` and
    ``/tmp`` of the mount namespace of each of ``processes`` (pidfds: a warm template's, which
    no reuse of their pids can swap for another's), over what they show now; ``again``: take
    off the graft made there before first, which would otherwise stay beneath, holding its
    tmpfs. Raises ``OSError`` where the kernel cannot (before Linux 5.8) or will not (no
    CAP_SYS_ADMIN over them): then what the namespaces show is undefined, and their processes
    must end.

    The new mount API clones the host's mounts, which a thread of its own then moves into each
    namespace: only a thread that shares no filesystem context with the others may enter
    another mount namespace, and this one ends there, with its context."""
    arch = native_arch()
    numbers = [syscall_number(name, arch) if arch else None for name in ("open_tree", "move_mount")]
    open_tree, move_mount = numbers
    if open_tree is None or move_mount is None:
        raise OSError(errno.ENOSYS, "no open_tree or move_mount on this machine")
    libc = _libc()
    clones: list[int] = []
    failed: list[OSError] = []

    def clone(place: str) -> int:
        flags = _OPEN_TREE_CLONE | os.O_CLOEXEC
        fd = int(libc.syscall(open_tree, _AT_FDCWD, os.fsencode(storage / place), flags))
        _check(0 if fd >= 0 else -1, "clone", storage / place)
        clones.append(fd)
        return fd

    def enter_and_mount(moves: list[tuple[int, list[tuple[bytes, int]]]]) -> None:
        try:
            _check(libc.unshare(_CLONE_FS), "unshare the filesystem context of", storage)
            for process, mounts in moves:
                _check(libc.setns(process, _CLONE_NEWNS), "enter the namespace of", storage)
                for target, fd in mounts:
                    if again:
                        _check(libc.umount2(target, _MNT_DETACH), "unmount", Path(target.decode()))
                    moved = libc.syscall(
                        move_mount, fd, b"", _AT_FDCWD, target, _MOVE_MOUNT_F_EMPTY_PATH
                    )
                    _check(moved, "graft", Path(target.decode()))
        except OSError as exc:
            failed.append(exc)

    try:
        moves = [
            (process, [(b"/" + place.encode(), clone(place)) for place in PLACES])
            for process in processes
        ]
        worker = threading.Thread(target=enter_and_mount, args=(moves,), name="sandboxkit-graft")
        worker.start()
        worker.join()
    finally:
        for fd in clones:
            os.close(fd)
    if failed:
        raise failed[0]


@functools.cache
def can_mount() -> bool:
    """Whether this process may mount a tmpfs (tried once, on a scratch directory)."""
    if not sys.platform.startswith("linux"):
        return False
    with tempfile.TemporaryDirectory(prefix="sandboxkit-mount-") as scratch:
        try:
            mount(Path(scratch), size_mb=1, inodes=16)
        except OSError:
            return False
        unmount(Path(scratch))
    return True
