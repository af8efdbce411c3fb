"""Making a sandbox that served one user as new for the next: a pool's next completion, a
lender's next rollout.

Nothing of one user may reach the next: files, their metadata, processes, what the sandbox's
memory and disk hold. So a sandbox is used again only where the backend can make it as new in
place (its ``renew``: the local backend makes its storage again, under its warm template) and
guarantees that nothing an exec starts outlives it; elsewhere it is stopped and a fresh one
takes its place. A caller may ask for reuse where the backend cannot renew (``reuse=True``):
the sandbox is then wiped, and what the wipe cannot reach (processes, files outside the
workdir and ``$TMPDIR``, metadata) is the caller's risk. A renewal or wipe that fails leaves
the sandbox to be stopped and replaced, never to be used again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

from .client import Sandbox

logger = logging.getLogger("sandboxkit.renewal")

SCRATCH = "/tmp/.sandboxkit"
"""Where remote backends' exec wrappers keep their files while an exec runs (Daytona's, one
directory per exec: the wipe's own too)."""

WIPE = (
    'w=$(pwd) && t=${TMPDIR:-/tmp} && [ "$w" != / ] && [ "$t" != / ] || exit 1; '
    'chmod -R u+rwX -- "$w" "$t" 2>/dev/null; '
    f'find "$w" "$t" -mindepth 1 -maxdepth 1 ! -path {SCRATCH} -exec rm -rf -- {{}} + 2>/dev/null; '
    f'[ -z "$(find "$w" "$t" -mindepth 1 -maxdepth 1 ! -path {SCRATCH} -print -quit 2>/dev/null)" ]'
)
"""For a backend that cannot renew a sandbox: empty the workdir and the sandbox's temporary
directory (``$TMPDIR`` where the backend sets one), giving back the permissions a program took
away first, but :data:`SCRATCH` (wiping it took the wipe's own exec wrapper's files on
Daytona, which failed every wipe); fails unless both are empty after. Processes may outlive
an exec there, so reuse is the caller's choice, and what the wipe cannot reach (metadata,
inode numbers, anything outside the two directories) its risk."""

TIMEOUT = 30.0
"""Seconds a wipe, or a new sandbox's first exec (:func:`prime`), may take."""


def leaves_no_processes(sandbox_backend: object) -> bool:
    """Whether the backend says nothing an exec starts outlives it (then a renewed sandbox is
    as good as new)."""
    return bool(getattr(sandbox_backend, "execs_leave_no_processes", False))


def renewer(sandbox_backend: object) -> Callable[[str], Awaitable[None]] | None:
    """The backend's ``renew(sandbox_id)``, which makes a sandbox as new in place, if it has
    one (the local backend)."""
    renew: Callable[[str], Awaitable[None]] | None = getattr(sandbox_backend, "renew", None)
    return renew


async def prime(sandbox: Sandbox) -> None:
    """A first exec starts what execs need (the local backend's warm template), so that the
    next user does not wait for it (nor spend its exec's timeout on it)."""
    with contextlib.suppress(Exception):
        await sandbox.aexec(["true"], timeout=TIMEOUT)


class Renewal:
    """How one backend's sandboxes are made as new between users (see the module's
    docstring); ``reuse``: None, where the backend can renew them and no process outlives an
    exec; True, also where a wipe is all it can do (the caller's risk); False, never."""

    def __init__(self, sandbox_backend: object, reuse: bool | None = None) -> None:
        self._renew = renewer(sandbox_backend)
        self.reuse = (
            self._renew is not None and leaves_no_processes(sandbox_backend)
            if reuse is None
            else reuse
        )
        """Whether a sandbox is used again once renewed (else stopped, and a fresh one made)."""

    @property
    def renews(self) -> bool:
        """Whether the backend makes sandboxes as new in place (which also ends whatever
        still runs in them)."""
        return self._renew is not None

    async def renewed(self, sandbox: Sandbox) -> bool:
        """Renew the sandbox (which leaves it ready for its next exec) or, where the backend
        cannot, wipe it; False if that failed: the sandbox must then be stopped, not used
        again."""
        try:
            if self._renew is not None:
                await self._renew(sandbox.id)
                return True
            result = await sandbox.aexec(["sh", "-c", WIPE], timeout=TIMEOUT)
        except Exception as exc:
            logger.info("could not renew %s (%r); replacing it", sandbox.id, exc)
            return False
        if not result.ok:
            logger.info("%s was not left empty by its wipe; replacing it", sandbox.id)
        return result.ok
