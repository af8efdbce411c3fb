"""What an emulator does to its local sandboxes from the host, without running a command."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from ..backends.subprocess import SubprocessBackend, sandbox_parts
from ..errors import SandboxError
from ..local import files

IMAGE_VARIABLE = "SANDBOXKIT_EMULATED_IMAGE"
"""Where an emulated sandbox's programs find the image (or snapshot) it was made from: every
emulated sandbox runs on this machine's local backend, so this variable is what tells one
image's sandboxes from another's (what a real provider's image would, by its contents)."""


def image_env(env: Mapping[str, str], image: str | None) -> dict[str, str]:
    """``env`` for the local sandbox of an emulated one made from ``image``, which names it
    in :data:`IMAGE_VARIABLE` (none for the provider's default)."""
    return {**env, IMAGE_VARIABLE: image} if image else dict(env)


def base_image(dockerfile: Iterable[str]) -> str | None:
    """The image a Dockerfile's lines build on (its first ``FROM``): what an SDK that builds
    a sandbox's image from a Dockerfile (Daytona's, Modal's ``from_registry``) names."""
    for line in dockerfile:
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            return words[1]
    return None


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
