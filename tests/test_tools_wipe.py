"""The lender's wipe on every backend: what a rollout leaves is gone and the sandbox is
reused. On Daytona the wipe used to remove its own exec wrapper's files (under
``/tmp/.sandboxkit``), failed, and every returned sandbox was replaced."""

from __future__ import annotations

import pytest

from sandboxkit import SandboxClient
from sandboxkit.portal import run_sync
from sandboxkit.renewal import leaves_no_processes
from sandboxkit.tools import SandboxLender

LEAVE = (
    "mkdir -p d/e /tmp/.sandboxkit/planted && echo 1 >d/e/f && chmod 000 d && echo 1 >a.txt "
    "&& echo 1 >/tmp/x && echo 1 >/tmp/.sandboxkit/planted/f"
)
LEFT = 'find "$(pwd)" /tmp -mindepth 1'


async def _wipe_and_reuse(client: SandboxClient) -> tuple[str, str, str]:
    lender = SandboxLender(client, reuse=True)
    try:
        first = await lender.alease()
        assert (await first.aexec(["sh", "-c", LEAVE])).ok
        await lender.areturn(first)
        second = await lender.alease()
        left = await second.aexec(["sh", "-c", LEFT])
        assert lender.stats.replaced == 0
        return first.id, second.id, left.stdout
    finally:
        await lender.aclose()


@pytest.mark.slow
def test_a_returned_sandbox_is_wiped_and_reused(backend_client: SandboxClient) -> None:
    first, second, left = run_sync(_wipe_and_reuse(backend_client))
    assert second == first
    outside = [n for n in left.splitlines() if not n.startswith("/tmp/.sandboxkit")]
    assert outside == [], left
    if leaves_no_processes(backend_client.backend):  # the backend's scratch is wiped too
        assert "planted" not in left, left
