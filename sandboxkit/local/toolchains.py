"""Toolchains outside ``/usr`` for local sandboxes: rustup's, ``/usr/local/go``, a JDK in
``/opt``.

A namespaced sandbox sees only ``/usr`` of this machine's files, and every sandbox's ``PATH`` is
the system's, so a compiler installed elsewhere is missing there. The directories named in
``SANDBOXKIT_LOCAL_TOOLCHAINS`` (or the backend's ``toolchains=``) are shown read-only at their
own paths, and the ``bin`` of each (the directory itself where it has none) goes on the
sandbox's ``PATH`` ahead of the system's. Everything in them becomes readable by the
sandboxes' code, so each must hold a toolchain and nothing of the host's own: a directory that
holds the sandboxes' root, or lies in the sandbox's own ``/tmp``, ``/workspace``, ``/proc``
or ``/dev``, or above what the sandbox is given there, is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import setting
from ..errors import BackendMisconfiguredError
from .view import SANDBOX_BIN

TOOLCHAINS_VAR = "SANDBOXKIT_LOCAL_TOOLCHAINS"
SANDBOX_OWN = ("/tmp", "/workspace", "/proc", "/dev", SANDBOX_BIN)
"""What a sandbox gets of its own: a toolchain may lie neither in one nor above one."""


@dataclass(frozen=True)
class Toolchains:
    directories: tuple[str, ...] = ()
    """Shown read-only at their own paths (resolved: no link on the way)."""
    bins: tuple[str, ...] = ()
    """On the sandbox's ``PATH``, in this order, ahead of the system's."""


def configured_toolchains(given: Sequence[str] | None, *, root: Path, uid: int) -> Toolchains:
    """The toolchain directories: ``given`` (the backend's ``toolchains=``), else those of
    ``SANDBOXKIT_LOCAL_TOOLCHAINS`` (``:``-separated). Each must be an absolute path of a
    directory that ``uid`` (the sandboxes' code's) can read, holding neither the sandboxes'
    ``root`` nor anything of the sandbox's own; else a :class:`BackendMisconfiguredError`
    names it and why."""
    source = "toolchains="
    if given is None:
        text = setting(TOOLCHAINS_VAR) or ""
        given = [entry for entry in text.split(":") if entry]
        source = f"{TOOLCHAINS_VAR}={text!r}"
    directories, bins = [], []
    for entry in given:
        why = _refused(entry, root.resolve(), uid)
        if why:
            raise BackendMisconfiguredError(
                f"{source}: {entry!r} {why}; expected absolute paths of toolchain directories "
                "(rustup's toolchain, /usr/local/go, a JDK), separated by ':'"
            )
        directory = os.path.realpath(entry)
        if directory not in directories:
            directories.append(directory)
            bin_dir = os.path.join(directory, "bin")
            bins.append(bin_dir if os.path.isdir(bin_dir) else directory)
    return Toolchains(tuple(directories), tuple(bins))


def _refused(entry: str, root: Path, uid: int) -> str:
    """Why ``entry`` cannot be a toolchain directory ("" when it can)."""
    if not os.path.isabs(entry):
        return "is not an absolute path"
    if ":" in entry:
        return "has a ':', which PATH cannot hold"
    if not os.path.isdir(entry):
        return "is no directory"
    directory = Path(os.path.realpath(entry))
    for own in (*SANDBOX_OWN, str(root)):
        if directory == Path(own) or Path(own).is_relative_to(directory):
            return f"holds {own}"
        if directory.is_relative_to(own):
            return f"lies in {own}"
    if uid != os.getuid() and not _reachable(directory):
        return f"cannot be read by uid {uid}, which sandboxes run as (it needs o+rx, and o+x above)"
    return ""


def _reachable(directory: Path) -> bool:
    """Whether a uid of no user or group of this host can list ``directory`` and enter each
    directory on the way (what every other user may do)."""
    if directory.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in directory.parents)
