"""Directories of the host that sandboxkit keeps state in, refused unless private.

A shared temporary directory lets any user make a path first: a directory someone else owns or
can write could hold links that turn sandboxkit's writes into writes elsewhere (as root, too),
state that throttles or misleads it, or binaries it would run. Checking the directory itself
is enough: nobody else can add anything below a directory only this user can write.

Refusing such a directory is safe, but on a root host it would be a failure a sandbox could
cause: code of the rlimits tier sees the host's files as the sandbox's uid, and could make a
name in ``/tmp`` before the host does (a checker cache taken first fails every later
checker). So a root host keeps its state where only root can make a name (``state_path``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

ROOT_ONLY = ("/run", "/var/lib")
"""Where a root host keeps its state: the first of these that only root can write (and root
can: not a read-only filesystem)."""


def state_path(name: str) -> Path:
    """Where this uid keeps its state ``name`` (to be made with ``private_directory``): in a
    directory only root can write on a root host (``ROOT_ONLY``), else (or where none is) in
    the temporary directory, with the uid in its name."""
    if os.geteuid() == 0:
        for base in ROOT_ONLY:
            try:
                info = os.lstat(base)
            except OSError:
                continue
            private = stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022
            if private and os.access(base, os.W_OK):  # not on a read-only filesystem
                return Path(base) / name
    return Path(tempfile.gettempdir()) / f"{name}-{os.getuid()}"


def private_directory(path: Path, what: str, mode: int = 0o700) -> Path:
    """``path``, made with ``mode`` if missing; raises ``PermissionError`` naming ``what``
    unless it is a directory (not a link to one) of this user that no one else can write."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise PermissionError(
            f"{what} {path} is not a directory only uid {os.getuid()} can write; remove it or "
            "choose another place"
        )
    return path
