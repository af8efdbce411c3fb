"""Local stand-ins for provider APIs, so the real provider SDKs run offline.

Each emulator serves the subset of its provider's API that the SDK uses, on loopback, and runs
commands with the local ``subprocess`` backend (so it inherits its isolation). Faults are
injected by :class:`~sandboxkit.testing.faults.Faults`, shared by all emulators.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from ..backends.subprocess import sandbox_parts
from ..errors import SandboxError
from ..local import files

if TYPE_CHECKING:
    from ..backends.subprocess import SubprocessBackend

PYTHONS = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")
"""Commands an emulator may run directly rather than behind its backend's shell wrapper, so
that the local backend's warm template serves them instead of an interpreter started by sh."""


async def remove_from_host(backend: SubprocessBackend, sandbox_id: str, path: str) -> None:
    """Remove the file, link or empty directory at the absolute ``path`` of the local
    sandbox ``sandbox_id`` (one ``backend`` made), as ``os.remove`` or ``os.rmdir`` would
    (:class:`~sandboxkit.errors.SandboxFileError`, an ``OSError``, otherwise): an emulator
    cleans up after a command it ran itself from the host, without the cost of a command.
    Resolved as the backend's own file operations are, beneath the sandbox's directory and
    through no link, whatever the program in it rearranged."""
    parts = sandbox_parts(path, "/")[1:]
    if len(parts) < 2:
        raise SandboxError(f"{path!r}: cannot remove a sandbox's /workspace or /tmp")
    await asyncio.to_thread(files.remove, backend.root / sandbox_id, parts)
