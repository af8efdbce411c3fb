"""The host's hands on a sandbox's files, which the program in it may rearrange at any moment.

The program can swap any directory of its sandbox for a link to a host directory, in a loop
(``renameat2(RENAME_EXCHANGE)``), while the host reads, writes or deletes there. Checking a path
and then using it loses that race, so nothing here uses a path twice: each path is resolved from
a descriptor of the sandbox's directory without following any link on the way or at the end,
with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | ...)`` where the kernel has it (5.6+) and
else one component at a time with ``O_NOFOLLOW`` (:func:`_walk`); what is found is then used
through its descriptor. A FIFO or device is opened ``O_NONBLOCK`` and refused after ``fstat``,
so nothing here blocks. Failures are :class:`~sandboxkit.errors.SandboxFileError`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import os
import platform
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from ..errors import SandboxFileError, SandboxFileNotFoundError, SandboxIsADirectoryError

_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A directory to resolve from (``O_PATH``: no read permission needed, nothing opened)."""
_LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
"""``O_NONBLOCK``: opening a FIFO with no writer returns at once (and is then refused)."""
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# openat2(2): <linux/openat2.h>
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine(), -1)
"""Elsewhere -1, which the kernel answers with ENOSYS: the walk is used."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_syscall = ctypes.CDLL(None, use_errno=True).syscall
_syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags, mode, _RESOLVE)
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _openat2_works() -> bool:
    """Whether this kernel (and any seccomp filter this process runs under) has openat2 with
    every resolve flag used here."""
    try:
        os.close(_openat2(-100, ".", _DIRECTORY))  # AT_FDCWD
    except OSError:  # ENOSYS before 5.6, EPERM from a filter, EINVAL for unknown flags
        return False
    return True


use_openat2 = _openat2_works()
"""Resolve with ``openat2`` (else by :func:`_walk`). Tests turn it off to test the walk."""


# -- resolving ----------------------------------------------------------------------------


def _open_directory(parent: int, name: str) -> int:
    return os.open(name, _DIRECTORY, dir_fd=parent)


def _walk(top: int, parts: Sequence[str], step: Callable[[int, str], int] = _open_directory) -> int:
    """A new descriptor of the directory at ``parts`` beneath ``top``, each part opened by
    ``step`` from the descriptor of the last (by default with ``O_NOFOLLOW``: ``OSError``
    for a part that is gone, a link or no directory). One descriptor open at a time, besides
    ``top`` (which it never closes: no ``dup`` of it for a walk that opens anything)."""
    fd = top
    try:
        for part in parts:
            fd, parent = step(fd, part), fd
            if parent != top:
                os.close(parent)
    except BaseException:
        if fd != top:
            os.close(fd)
        raise
    return os.dup(top) if fd == top else fd


def _open_beneath(top: int, parts: Sequence[str], flags: int, mode: int = 0) -> int:
    """``parts`` opened beneath the directory ``top`` with ``flags``, through no link."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if use_openat2:
        return _openat2(top, "/".join(parts), flags, mode)
    parent = _walk(top, parts[:-1])
    try:
        return os.open(parts[-1], flags, mode, dir_fd=parent)
    finally:
        os.close(parent)


_REASONS = {
    errno.ELOOP: "a symbolic link, which is not followed",
    errno.ENOTDIR: "not a directory (links on the way are not followed)",
    errno.EXDEV: "crosses a mount point",
}
_ERRORS: dict[int, type[SandboxFileError]] = {
    errno.ENOENT: SandboxFileNotFoundError,
    errno.EISDIR: SandboxIsADirectoryError,
}


@contextlib.contextmanager
def _beneath(sandbox_dir: Path, parts: Sequence[str]) -> Iterator[int]:
    """A descriptor of ``sandbox_dir`` (the host's own path, which the program cannot
    change) to resolve ``parts`` from; an ``OSError`` becomes a :class:`SandboxFileError`
    naming the path as the sandbox sees it."""
    try:
        top = os.open(sandbox_dir, _DIRECTORY)
        try:
            yield top
        finally:
            os.close(top)
    except SandboxFileError:
        raise
    except OSError as exc:
        shown = PurePosixPath("/", *parts)
        kind = _ERRORS.get(exc.errno or 0, SandboxFileError)
        raise kind(exc.errno, f"{shown}: {_REASONS.get(exc.errno or 0, exc.strerror)}") from None


def _refuse_unless_regular(mode: int, parts: Sequence[str]) -> None:
    if stat.S_ISDIR(mode):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
    if not stat.S_ISREG(mode):
        # A FIFO would block, a device could be anything: neither is ever read.
        raise SandboxFileError(f"{PurePosixPath('/', *parts)}: not a regular file")


# -- the operations -----------------------------------------------------------------------


def read_file(sandbox_dir: Path, parts: Sequence[str]) -> bytes:
    """The regular file at ``parts`` beneath ``sandbox_dir`` (``("workspace", "a.py")``)."""
    with _beneath(sandbox_dir, parts) as top:
        fd = _open_beneath(top, parts, _READ)
        with io.FileIO(fd, "rb") as file:
            _refuse_unless_regular(os.fstat(fd).st_mode, parts)
            return file.readall()


def write_file(sandbox_dir: Path, parts: Sequence[str], data: bytes, owner: int | None) -> None:
    """Create or replace the regular file at ``parts``, making missing directories on the way
    (owned by ``owner`` if given, as the file is). The file appears whole or not at all: it is
    written under a temporary name in its directory and renamed over the old one."""
    with _beneath(sandbox_dir, parts) as top:
        parent = _make_directories(top, parts[:-1], owner)
        try:
            with contextlib.suppress(FileNotFoundError):
                old = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                _refuse_unless_regular(old.st_mode, parts)  # never replace a link by a file
            temporary = f".sandboxkit-{uuid.uuid4().hex[:12]}"
            fd = os.open(temporary, _CREATE, 0o666, dir_fd=parent)
            try:
                with io.FileIO(fd, "wb") as file:
                    if owner is not None:
                        os.fchown(fd, owner, owner)
                    view = memoryview(data)
                    while view:
                        view = view[file.write(view) or 0 :]
                os.replace(temporary, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent)
                raise
        finally:
            os.close(parent)


def _make_directories(top: int, parts: Sequence[str], owner: int | None) -> int:
    """A descriptor of the directory at ``parts``, made where missing."""

    def step(parent: int, name: str) -> int:
        try:
            return _open_directory(parent, name)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):  # made meanwhile: by the program, say
                os.mkdir(name, dir_fd=parent)
                if owner is not None:
                    os.chown(name, owner, owner, dir_fd=parent, follow_symlinks=False)
            return _open_directory(parent, name)

    if use_openat2:
        with contextlib.suppress(FileNotFoundError):  # the common case: they all exist
            return _open_beneath(top, parts, _DIRECTORY)
    return _walk(top, parts, step)


def remove(sandbox_dir: Path, parts: Sequence[str]) -> None:
    """Remove the file, link or empty directory at ``parts``, as ``os.remove`` or
    ``os.rmdir`` would."""
    with _beneath(sandbox_dir, parts) as top:
        parent = _open_beneath(top, parts[:-1], _DIRECTORY)
        try:
            os.unlink(parts[-1], dir_fd=parent)
        except IsADirectoryError:
            os.rmdir(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)


def give_owner_access(sandbox_dir: Path, parts: Sequence[str], *others: Sequence[str]) -> None:
    """Give the owner back read, write and search on each directory of ``parts``, and of
    ``others`` where they are directories: a program that took them away (``chmod 000
    /workspace``) would make every later exec there fail to start, and so score the next
    completions a pool runs in the sandbox 0. Raises for a part of ``parts`` that is gone, a
    link or no directory (so it checks an exec's ``cwd`` too)."""
    with _beneath(sandbox_dir, parts) as top:
        for other in others:
            with contextlib.suppress(OSError):
                _give_owner_access_at(top, other)
        _give_owner_access_at(top, parts)


def _give_owner_access_at(top: int, parts: Sequence[str]) -> None:
    """:func:`give_owner_access` for one path beneath ``top``. The directories on the way are
    opened (walked through no link); the last is only looked at (``lstat``), and opened
    where its mode needs mending, which is rare."""

    def step(parent: int, name: str) -> int:
        fd = _open_directory(parent, name)
        try:
            _give_owner_rwx(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    if not parts:
        return
    parent = _walk(top, parts[:-1], step) if len(parts) > 1 else top
    try:
        mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
        if not stat.S_ISDIR(mode):
            code = errno.ELOOP if stat.S_ISLNK(mode) else errno.ENOTDIR
            raise OSError(code, os.strerror(code))
        if mode & 0o700 != 0o700:
            os.close(step(parent, parts[-1]))
    finally:
        if parent != top:
            os.close(parent)


def _give_owner_rwx(fd: int) -> None:
    mode = os.stat(fd).st_mode
    if mode & 0o700 != 0o700:
        # An O_PATH descriptor takes no fchmod; its /proc link names exactly this directory.
        os.chmod(f"/proc/self/fd/{fd}", (mode & 0o7777) | 0o700)


# -- deleting a whole sandbox -------------------------------------------------------------


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything under it, however deep (no recursion), whatever the
    names, following no link, giving the owner back ``rwx`` on each directory before emptying
    it. One descriptor open at a time: going back up, ``..`` must still be the directory
    come down from (its device and inode), else this stops with ``OSError`` rather than
    delete elsewhere (the check GNU ``rm`` makes). Gone already is done."""
    parent = os.open(path.parent, _DIRECTORY)
    try:
        _remove_entry(parent, path.name)
    finally:
        os.close(parent)


def _remove_entry(parent: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=parent)
        return
    except FileNotFoundError:
        return
    except IsADirectoryError:
        pass
    here = _open_listable(parent, name)
    # One frame per directory above ``here`` below ``name``: its identity, the entries it has
    # left to delete, and the name of the directory below it that is being emptied.
    above: list[tuple[tuple[int, int], list[str], str]] = []
    try:
        entries = os.listdir(here)
        while True:
            if entries:
                entry = entries.pop()
                try:
                    os.unlink(entry, dir_fd=here)
                    continue
                except FileNotFoundError:
                    continue
                except IsADirectoryError:
                    pass
                below = _open_listable(here, entry)
                above.append((_identity(here), entries, entry))
                here, below = below, here
                os.close(below)
                entries = os.listdir(here)
                continue
            if not above:
                break
            identity, entries, emptied = above.pop()
            up = os.open("..", _LISTABLE, dir_fd=here)
            try:
                if _identity(up) != identity:
                    raise OSError(errno.EBUSY, f"{emptied} was moved while being deleted")
                os.rmdir(emptied, dir_fd=up)
            except BaseException:
                os.close(up)
                raise
            here, up = up, here
            os.close(up)
    finally:
        os.close(here)
    os.rmdir(name, dir_fd=parent)


def _open_listable(parent: int, name: str) -> int:
    """The directory ``name``, opened to list and delete in, its owner given ``rwx`` first."""
    fd = _open_directory(parent, name)
    try:
        _give_owner_rwx(fd)
        return os.open(".", _LISTABLE, dir_fd=fd)
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino
