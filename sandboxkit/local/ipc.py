"""What a sandbox's uid left in the host's IPC: removed when the sandbox stops.

The rlimits tier has no IPC namespace: a program makes System V shared memory, semaphores and
message queues, POSIX message queues, and POSIX shared memory and semaphores (files of
``/dev/shm``) in the host's own, where they outlive its processes, hold the host's memory and
are there for later sandboxes. On a root host each sandbox has a uid of its own (``uids``),
which names what it made (as owner or creator: an owner can give an object away, never its
creator's uid), so its ``stop`` removes them, once no process of the uid is left to make more.
(The namespaces tier makes them in each exec's IPC namespace and ``/dev/shm``, which go with
the exec.)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from . import disk, files

_IPC_RMID = 0
SHARED_MEMORY = Path("/dev/shm")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def remove_objects_of(uids: Collection[int]) -> None:
    """Remove every IPC object of the host's IPC namespace that one of ``uids`` owns or made."""
    wanted = {str(uid) for uid in uids}
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                header, *rows = (line.split() for line in table)
        except (OSError, ValueError):
            continue
        uid, cuid = header.index("uid"), header.index("cuid")
        for row in rows:
            if row[uid] in wanted or row[cuid] in wanted:
                _remove_object(kind, int(row[1]))
    with _message_queues() as queues:
        for directory in (queues, SHARED_MEMORY):
            if directory is not None:
                _remove_entries_of(directory, set(uids))


def _remove_object(kind: str, id_: int) -> None:
    """``IPC_RMID`` the System V object ``id_`` of ``kind`` (gone already is done)."""
    control = getattr(_libc(), f"{kind}ctl")
    if kind == "sem":
        control(id_, 0, _IPC_RMID)
    else:
        control(id_, _IPC_RMID, None)


def _remove_entries_of(directory: Path, uids: set[int]) -> None:
    """Remove the entries of ``directory`` that one of ``uids`` owns, following no link."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid in uids:
                    files.remove_tree(Path(entry.path))


@contextlib.contextmanager
def _message_queues() -> Iterator[Path | None]:
    """A directory that lists the host's POSIX message queues (an ``mqueue`` mount, made for
    the while where none is), or None where none can be had."""
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[fields.index("-") + 1] == "mqueue":
                yield Path(fields[4])
                return
    try:
        scratch = Path(tempfile.mkdtemp(prefix="sandboxkit-mqueue-"))
    except OSError:
        yield None
        return
    try:
        disk.mount_filesystem("mqueue", scratch, "mqueue", disk.MS_NOSUID | disk.MS_NODEV)
    except OSError:
        scratch.rmdir()
        yield None
        return
    try:
        yield scratch
    finally:
        disk.unmount(scratch)
        scratch.rmdir()
