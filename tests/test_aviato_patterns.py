"""The usage patterns of Aviato's examples, written against sandboxkit: parallel creation, the
first N results with the rest cancelled, orphans found by tag, age-based cleanup, and counting
a run's sandboxes. They run on Aviato's emulator and, where cheap, on Daytona's."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from sandboxkit import Sandbox, SandboxClient, SandboxStatus, Session, await_first, spawn, wait
from sandboxkit.testing.remote import (
    Emulator,
    client_for,
    processes_with,
    sleeper_argv,
    start_emulator,
    wait_until,
)

PY = "python3"


@pytest.fixture
def client(remote_provider: str, remote_emulator: Emulator) -> Iterator[SandboxClient]:
    with client_for(remote_provider, remote_emulator.url) as c:
        yield c


@pytest.fixture
def session(client: SandboxClient) -> Iterator[Session]:
    with Session(client, handle_signals=False) as s:
        yield s


def test_parallel_creation_then_wait(session: Session, remote_emulator: Emulator) -> None:
    creating = [spawn(session.asandbox(tags=["pattern=parallel"])) for _ in range(4)]
    done, pending = wait(creating, timeout=300)
    assert pending == [] and len({f.result().id for f in done}) == 4
    assert remote_emulator.live_sandboxes() == 4

    runs = [
        spawn(f.result().aexec([PY, "-c", f"print({i} * {i})"], timeout=120))
        for i, f in enumerate(done)
    ]
    finished, _ = wait(runs, timeout=300)
    assert [f.result().stdout for f in finished] == ["0\n", "1\n", "4\n", "9\n"]
    assert session.count(status="running", tags=["pattern=parallel"]) == 4
    session.close()
    assert remote_emulator.live_sandboxes() == 0


# -- the first N, cancelling the rest -----------------------------------------------------------


@pytest.fixture(params=["aviato", "daytona"])
def aviato_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox on a private emulator: Aviato cancels an exec's stream; Daytona's HTTP exec
    has no cancel, so its backend kills a cancelled command with a second exec."""
    provider = str(request.param)
    with (
        start_emulator(provider) as emu,
        client_for(provider, emu.url) as c,
        c.sandbox() as sb,
    ):
        yield sb


def test_wait_for_the_first_n_cancels_the_rest(aviato_sandbox: Sandbox) -> None:
    marker = f"slow-{uuid.uuid4().hex}"
    slow = [spawn(aviato_sandbox.aexec(sleeper_argv(marker), timeout=600)) for _ in range(3)]
    assert wait_until(lambda: len(processes_with(marker)) >= 3)
    quick = [spawn(aviato_sandbox.aexec([PY, "-c", f"print({i})"], timeout=120)) for i in (1, 2)]

    done, pending = wait([*slow, *quick], num_returns=2, timeout=300, cancel_pending=True)

    assert done == quick and [f.result().stdout for f in done] == ["1\n", "2\n"]
    assert pending == slow and all(f.cancelled() for f in slow)
    assert wait_until(lambda: not processes_with(marker)), "cancelled commands still run"
    assert aviato_sandbox.exec(["true"], timeout=120).ok  # the sandbox itself is fine


def test_await_first_cancels_the_rest(aviato_sandbox: Sandbox) -> None:
    marker = f"slow-{uuid.uuid4().hex}"

    async def best_of() -> list[str]:
        slow = [aviato_sandbox.aexec(sleeper_argv(marker), timeout=600) for _ in range(3)]
        quick = aviato_sandbox.aexec([PY, "-c", "print('first')"], timeout=120)
        return [r.stdout for r in await await_first([*slow, quick])]

    assert asyncio.run(best_of()) == ["first\n"]
    assert wait_until(lambda: not processes_with(marker)), "cancelled commands still run"


# -- finding and cleaning up ----------------------------------------------------------------------


def test_orphans_are_listed_and_reaped_by_tag(client: SandboxClient, session: Session) -> None:
    """A run that died left sandboxes tagged with its id; the next run finds and stops them."""
    dead_run = f"run={uuid.uuid4().hex}"
    orphans = {client.sandbox(tags=[dead_run, "step=7"]).id for _ in range(3)}
    mine = session.sandbox()

    assert {i.id for i in client.list(tags=[dead_run])} == orphans
    assert {i.id for i in client.list(tags=[dead_run, "step=7"])} == orphans
    assert client.list(tags=[dead_run, "step=8"]) == []
    assert {i.id for i in session.reap(tags=[dead_run], dry_run=True)} == orphans
    assert {i.id for i in client.list(tags=[dead_run])} == orphans

    assert {i.id for i in session.reap(tags=[dead_run])} == orphans
    assert client.list(tags=[dead_run]) == []
    assert mine.info().status is SandboxStatus.RUNNING


def started(client: SandboxClient, ids: set[str]) -> list[datetime]:
    found = [info.started_at for info in client.list() if info.id in ids]
    assert len(found) == len(ids) and all(t is not None for t in found), found
    return [t for t in found if t is not None]


@pytest.mark.slow
def test_reap_only_what_is_older_than_a_threshold(client: SandboxClient, session: Session) -> None:
    tag = f"job={uuid.uuid4().hex}"
    old = {client.sandbox(tags=[tag]).id for _ in range(2)}
    time.sleep(3)  # a gap between the two generations, which the threshold falls into
    new = {client.sandbox(tags=[tag]).id for _ in range(2)}
    newest_old, oldest_new = max(started(client, old)), min(started(client, new))
    assert oldest_new > newest_old

    cutoff = newest_old + (oldest_new - newest_old) / 2
    reaped = session.reap(tags=[tag], older_than=datetime.now(timezone.utc) - cutoff)

    assert {i.id for i in reaped} == old
    assert {i.id for i in client.list(tags=[tag])} == new
    for sandbox_id in new:
        client.stop(sandbox_id)


def test_count_a_runs_sandboxes_across_ranks(
    client: SandboxClient, remote_emulator: Emulator
) -> None:
    run_id = uuid.uuid4().hex
    options: dict[str, Any] = {"run_id": run_id, "handle_signals": False}
    outsider = client.sandbox()
    with Session(client, **options) as rank0, Session(client, **options) as rank1:
        rank0.sandbox(tags=["step=1"])
        for _ in range(2):
            rank1.sandbox(tags=["step=2"])
        assert rank0.count() == rank1.count(status="running") == 3
        assert rank0.count(status="pending") == 0
        assert rank0.count(status="running", tags=["step=2"]) == 2
        rank1.close()
        assert rank0.count(status="running") == 1
    assert rank0.count() == 0
    assert remote_emulator.live_sandboxes() == 1
    outsider.stop()
