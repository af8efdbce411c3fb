"""A cap on a sandbox's storage: its directory is a tmpfs of its own.

RLIMIT_FSIZE bounds each file a program writes, not how many it writes. A tmpfs of
``disk_mb`` and ``disk_inodes`` mounted on the sandbox's directory (its /workspace, /tmp and
metadata) bounds them all together (ENOSPC beyond), keeps one sandbox's files from taking
another's room, and goes at once when it is detached, however deep the tree in it. Its pages
are memory, charged to the memory cgroup of whoever writes them: for the sandbox's code, its
sandbox's. Mounting needs CAP_SYS_ADMIN in the host's mount namespace (a root host); elsewhere
storage is bounded per file only.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
import tempfile
from pathlib import Path

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8


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


def unmount(path: Path) -> None:
    """Detach the tmpfs on ``path``, if one is there, with every mount below it: it is freed
    when the last process that still uses it (a dying command with a file open) is gone. A
    mount point cannot be renamed, so this comes before a stopped sandbox's directory is
    moved away."""
    result = _libc().umount2(os.fsencode(path), _MNT_DETACH | _UMOUNT_NOFOLLOW)
    if result != 0 and ctypes.get_errno() in (errno.EINVAL, errno.ENOENT):
        return  # no mount there (a sandbox made without one), or no directory
    _check(result, "unmount", path)


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
