"""Directories of the host that sandboxkit keeps state in, refused unless private.

A shared temporary directory lets any user make a path first: a directory someone else owns or
can write could hold links that turn sandboxkit's writes into writes elsewhere (as root, too),
state that throttles or misleads it, or binaries it would run. Checking the directory itself
is enough: nobody else can add anything below a directory only this user can write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


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
