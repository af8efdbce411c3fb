"""What a namespaced sandbox sees of the host: files and devices that are its own inodes.

Every sandbox opens the host's ``/usr``, a few files of ``/etc``, ``/dev/null`` and
``/proc/sys``. Bound into each as they are, they would be the same inodes in all, and an inode
carries state that anyone who opens it can set and others can read: its locks (``flock``,
``fcntl``), the events of watches on it (inotify, dnotify). Two sandboxes would talk through
them, a bit per file. So each sandbox gets them as inodes of its own, from its directory's
``view`` (made with the sandbox, gone with it):

- directories through a read-only overlay per sandbox (over ``view/empty``: overlayfs wants
  two layers), which shares the host's page cache and none of its inodes;
- the files of ``/etc`` it needs, as copies in ``view/etc``;
- where the host can mount (a root host), device nodes of its own in ``view/dev`` and a proc
  of its own in ``view/proc``, whose ``sys`` it sees (what ``/proc/sys`` shows depends on the
  reader's namespaces, not on the mount), on a small read-only tmpfs;
- where the sandbox has a judge's uid, its judge's cache in ``view/cache`` (a tmpfs of its
  own at :data:`JUDGE_CACHE`, which only the judge writes: a compiler's precompiled header),
  which a renewal under a warm template keeps (the template's mounts hold it).

Elsewhere a sandbox's devices and ``/proc/sys`` are the host's; where overlays cannot be
mounted in a user namespace (bwrap before 0.9, Linux before 5.11), so are its directories; and
a directory with mounts below it is bound as it is (an overlay would hide them). A sandbox
has no pseudo-terminals (no ``/dev/ptmx``): they come from one pool of the machine
(``kernel.pty.max``) that no limit of a sandbox bounds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from ..harness.runner import JUDGE_CACHE
from . import disk

SANDBOX_BIN = "/opt/sandboxkit/bin"
"""Where ``python`` and ``python3`` are found inside a namespaced sandbox."""
CACHE = "cache"
"""The judge's cache, in a view (at :data:`JUDGE_CACHE` in the sandbox)."""
CACHE_MB = 512
"""The judge's cache's size at most (a precompiled ``bits/stdc++.h`` takes about 100 MiB)."""
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives")
"""What a sandbox sees of ``/etc``: the dynamic loader's files, the toolchains' links (and the
JDK's configuration, ``java-*``: without it no JVM starts), nothing of the host's own."""
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
"""bwrap's ``--dev`` set, less its devpts."""


def etc_names() -> list[str]:
    """The entries of ``/etc`` a sandbox sees that exist here."""
    names = [*ETC, *sorted(p.name for p in Path("/etc").glob("java-*") if p.is_dir())]
    return [name for name in names if os.path.exists(f"/etc/{name}")]


def make(view: Path, *, devices: bool, judge: int | None = None) -> None:
    """Lay out a new sandbox's ``view`` (a directory that must not exist yet): its empty layer
    and its copies of ``/etc``'s files and, with ``devices`` (the host can mount), its own
    device nodes and proc on a tmpfs of their own, read-only once made (a node or a proc the
    kernel refuses leaves the sandbox the host's), and with a ``judge`` uid too, the judge's
    cache, a tmpfs of that uid's."""
    copied = [name for name in etc_names() if not os.path.isdir(f"/etc/{name}")]
    view.mkdir(mode=0o755)
    if devices:
        # Room for the copies twice over (ldconfig may rewrite its cache meanwhile).
        size = 65536 + 2 * sum(os.stat(f"/etc/{name}").st_size for name in copied)
        options = f"size={size},nr_inodes=64,mode=0755"
        disk.mount_filesystem("sandboxkit", view, "tmpfs", disk.MS_NOSUID, options)
    (view / "empty").mkdir(mode=0o755)
    (view / "etc").mkdir(mode=0o755)
    for name in copied:
        shutil.copyfile(f"/etc/{name}", view / "etc" / name)
        os.chmod(view / "etc" / name, 0o644)
    if not devices:
        return
    (view / "dev").mkdir(mode=0o755)
    for name in DEVICES:
        with contextlib.suppress(OSError):
            node = view / "dev" / name
            os.mknod(node, stat.S_IFCHR | 0o666, os.stat(f"/dev/{name}").st_rdev)
            os.chmod(node, 0o666)  # whatever the umask took
    (view / "proc").mkdir(mode=0o555)
    with contextlib.suppress(OSError):
        disk.mount_filesystem(
            "proc", view / "proc", "proc", disk.MS_NOSUID | disk.MS_NODEV | disk.MS_NOEXEC
        )
    if judge is not None:
        (view / CACHE).mkdir(mode=0o755)
        options = f"size={CACHE_MB}m,nr_inodes=64,mode=0755,uid={judge},gid={judge}"
        disk.mount_filesystem("sandboxkit", view / CACHE, "tmpfs", disk.MS_NOSUID, options)
    flags = disk.MS_REMOUNT | disk.MS_RDONLY | disk.MS_NOSUID
    disk.mount_filesystem("sandboxkit", view, "tmpfs", flags)


@functools.cache
def _submounts() -> tuple[str, ...]:
    """The mount points of this process's mount namespace, read once."""
    with open("/proc/self/mountinfo") as f:
        return tuple(line.split()[4] for line in f)


def _has_mounts_below(path: str) -> bool:
    return any(point.startswith(path.rstrip("/") + "/") for point in _submounts())


def _read_only(source: str, dest: str, view: Path | None, overlays: bool) -> list[str]:
    """bwrap arguments that show the host's ``source`` read-only at ``dest``: a directory as
    an overlay of the sandbox's own where it can be one, else (a file too) as it is."""
    if (
        view is not None
        and overlays
        and os.path.isdir(source)
        and not _has_mounts_below(os.path.realpath(source))
    ):
        return ["--overlay-src", str(view / "empty"), "--overlay-src", source, "--ro-overlay", dest]
    return ["--ro-bind", source, dest]


def cache_args(view: Path | None) -> list[str]:
    """bwrap arguments for the judge's cache, where the sandbox's view holds one: ahead of
    anything else under ``/opt``, whose directories the judge must be able to pass (bwrap
    makes them under the sandbox's umask, and the judge has no capability over its files)."""
    cache = view / CACHE if view is not None else None
    if cache is None or not cache.is_dir():
        return []
    parents = [str(p) for p in reversed(PurePosixPath(JUDGE_CACHE).parents) if str(p) != "/"]
    made = [arg for parent in parents for arg in ("--perms", "0755", "--dir", parent)]
    return [*made, "--bind", str(cache), JUDGE_CACHE]


def system_args(
    python: str, prefix: str, read_only: tuple[str, ...], view: Path | None, overlays: bool
) -> list[str]:
    """bwrap arguments for the read-only view of the host: ``/usr`` and the merged-usr links,
    the few entries of ``/etc``, the Python installation (``prefix``) and ``read_only``, each
    as inodes of the sandbox's own where ``view`` (None: the host's) and ``overlays`` allow."""
    args = _read_only("/usr", "/usr", view, overlays)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += _read_only(top, top, view, overlays)
    for name in etc_names():
        copy = view / "etc" / name if view is not None else None
        if copy is not None and copy.is_file():
            args += ["--ro-bind", str(copy), f"/etc/{name}"]
        else:
            args += _read_only(f"/etc/{name}", f"/etc/{name}", view, overlays)
    if not prefix.startswith("/usr/") and prefix != "/usr":
        args += _read_only(prefix, prefix, view, overlays)
    if not python.startswith((prefix + "/", "/usr/")):
        args += ["--ro-bind", python, python]
    for path in read_only:
        args += _read_only(path, path, view, overlays)
    for name in ("python", "python3"):
        args += ["--symlink", python, f"{SANDBOX_BIN}/{name}"]
    return args


def proc_sys_source(view: Path | None) -> str:
    """The ``/proc/sys`` a sandbox sees (read-only): its own proc's where it has one."""
    own = view / "proc" / "sys" if view is not None else None
    return str(own) if own is not None and own.is_dir() else "/proc/sys"


def _device(view: Path | None, name: str) -> str:
    """The node a sandbox gets as ``/dev/<name>``: its own where it has one."""
    own = view / "dev" / name if view is not None else None
    return str(own) if own is not None and own.is_char_device() else f"/dev/{name}"


def device_args(view: Path | None) -> list[str]:
    """bwrap arguments for ``/dev``: a tmpfs with the sandbox's own device nodes (else the
    host's), the links bwrap's ``--dev`` makes, and no devpts."""
    args = ["--tmpfs", "/dev"]
    for name in DEVICES:
        args += ["--dev-bind", _device(view, name), f"/dev/{name}"]
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        args += ["--symlink", f"/proc/self/fd/{fd}", f"/dev/{name}"]
    args += ["--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/kcore", "/dev/core"]
    return args


def host_inodes(view: Path | None, overlays: bool) -> list[str]:
    """What a sandbox of ``view`` opens as the host's own inodes, where a lock or watch reaches
    every other sandbox (empty: nothing)."""
    found = []
    if view is None or not overlays:
        found.append("/usr and the other directories")
    if _device(view, "null") == "/dev/null":
        found.append("device nodes")
    if proc_sys_source(view) == "/proc/sys":
        found.append("/proc/sys")
    return found
