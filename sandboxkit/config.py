"""Settings read from the environment, with a ``.env`` file in the working directory as backup.

Real environment variables always win over ``.env``; the file is read once, lazily, when a
backend is first asked for, so importing sandboxkit has no side effects.
"""

from __future__ import annotations

import os
import site
from pathlib import Path

from dotenv import load_dotenv

BACKEND_VAR = "SANDBOXKIT_BACKEND"
ISOLATION_VAR = "SANDBOXKIT_ISOLATION"
DEFAULT_BACKEND = "subprocess"

_dotenv_loaded = False


def load_env_file(path: Path | None = None) -> None:
    """Load ``.env`` from the working directory (once) without overriding the environment."""
    global _dotenv_loaded
    if path is None:
        if _dotenv_loaded:
            return
        _dotenv_loaded = True
        path = Path.cwd() / ".env"
    if path.is_file():
        load_dotenv(path, override=False)


def setting(name: str, default: str | None = None) -> str | None:
    """An environment setting; empty values count as unset."""
    load_env_file()
    value = os.environ.get(name, "").strip()
    return value or default


def child_pythonpath() -> str:
    """``PYTHONPATH`` for a child process of ``sys.executable`` that must import this very
    ``sandboxkit``: the directory holding it (a checkout, or an editable install's source)
    ahead of this process's ``PYTHONPATH``, unless it is a site directory, which the child has
    anyway and which must not come before the standard library."""
    holder = str(Path(__file__).resolve().parent.parent)
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    first = None if holder in sites else holder
    return os.pathsep.join(filter(None, [first, os.environ.get("PYTHONPATH")]))
