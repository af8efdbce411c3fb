"""SandboxPool against the real local backend, made flaky on purpose with FaultyBackend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandboxkit import (
    Sandbox,
    SandboxClient,
    SandboxLostError,
    SandboxPool,
    TransientBackendError,
)
from sandboxkit.errors import INFRASTRUCTURE_ERRORS, BackendMisconfiguredError
from sandboxkit.testing.faults import Faults, FaultyBackend


@pytest.fixture
def faulty(local: SandboxClient) -> FaultyBackend:
    """The local backend, with no faults until a test sets some."""
    return FaultyBackend(local.backend, Faults(seed=1234))


@pytest.fixture
def pool_factory(faulty: FaultyBackend) -> Iterator[type[SandboxPool]]:
    """Pools over ``faulty`` with short backoff; every pool is closed at the end."""
    pools: list[SandboxPool] = []

    class Pool(SandboxPool):
        def __init__(self, **kw: object) -> None:
            kw.setdefault("backoff", 0.01)
            super().__init__(SandboxClient(faulty), **kw)  # type: ignore[arg-type]
            pools.append(self)

    yield Pool
    for pool in pools:
        pool.close()


def leftovers(client: SandboxClient, root: Path, pool: SandboxPool) -> list[str]:
    """Sandboxes of the pool's run still listed, and sandbox directories left on disk."""
    listed = [info.id for info in client.list(tags=[pool.session.run_tag])]
    on_disk = [p.name for p in root.iterdir() if "sbx-" in p.name]
    return listed + on_disk


def eventually(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for background work (generously: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


async def square(sandbox: Sandbox, n: int) -> int:
    """An evaluation: upload, run, parse. Files are per ``n``, as leases may share a sandbox."""
    await sandbox.awrite_file(f"n{n}.txt", str(n))
    code = f"print(int(open('n{n}.txt').read()) ** 2)"
    result = await sandbox.aexec(["python3", "-c", code], timeout=60)
    assert result.ok, result.stderr
    return int(result.stdout)


def test_start_creates_size_sandboxes_concurrently_and_reuses_them(
    pool_factory: type[SandboxPool], faulty: FaultyBackend
) -> None:
    faulty.faults.create_latency_ms = 200
    pool = pool_factory(size=4, progress=False)
    pool.start()
    assert faulty.calls["create"] == 4
    assert faulty.peak["create"] == 4
    assert pool.stats.size == 4

    results = [pool.run(lambda sb, n=n: square(sb, n)) for n in range(20)]

    assert results == [n * n for n in range(20)]
    assert faulty.calls["create"] == 4, "no sandbox per evaluation"
    stats = pool.stats
    assert (stats.created, stats.leases, stats.in_use, stats.retries) == (4, 20, 0, 0)


def test_lazy_start_on_first_run(pool_factory: type[SandboxPool], faulty: FaultyBackend) -> None:
    pool = pool_factory(size=2)
    assert faulty.calls["create"] == 0
    assert pool.run(lambda sb: square(sb, 3)) == 9
    assert pool.stats.created == 2


def test_per_sandbox_leases_and_max_concurrency(pool_factory: type[SandboxPool]) -> None:
    pool = pool_factory(size=2, per_sandbox=3, max_concurrency=5)
    holders: list[str] = []
    release = asyncio.Event()

    async def hold(sandbox: Sandbox) -> str:
        holders.append(sandbox.id)
        await release.wait()
        return sandbox.id

    async def main() -> list[str]:
        runs = [asyncio.ensure_future(pool.arun(hold)) for _ in range(8)]
        while len(holders) < 5:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # room for a sixth lease, which must not come
        assert len(holders) == 5
        assert pool.stats.in_use == 5
        assert sorted(holders.count(i) for i in set(holders)) == [2, 3]
        release.set()
        return await asyncio.gather(*runs)

    ids = asyncio.run(main())
    assert len(set(ids)) == 2
    assert pool.stats.in_use == 0


def test_recycles_after_max_uses(
    pool_factory: type[SandboxPool], local: SandboxClient, local_root: Path
) -> None:
    pool = pool_factory(size=1, max_uses=3)

    async def sandbox_id(sandbox: Sandbox) -> str:
        return sandbox.id

    ids = [pool.run(sandbox_id) for _ in range(7)]

    assert ids[0:3] == [ids[0]] * 3 and ids[3:6] == [ids[3]] * 3
    assert len({ids[0], ids[3], ids[6]}) == 3
    assert (pool.stats.recycled, pool.stats.created) == (2, 3)
    eventually(lambda: pool.stats.renewed == 5)  # after each lease but the worn ones
    eventually(
        lambda: len(local.list(tags=[pool.session.run_tag])) == 1
    )  # stopped in the background
    assert [i.id for i in local.list(tags=[pool.session.run_tag])] == [ids[6]]
    pool.close()
    assert leftovers(local, local_root, pool) == []


@pytest.mark.slow
def test_flaky_provider_never_crashes_nor_leaks(
    pool_factory: type[SandboxPool],
    faulty: FaultyBackend,
    local: SandboxClient,
    local_root: Path,
) -> None:
    faulty.faults = Faults(error_rate=0.3, die_rate=0.1, seed=7)
    # Two faultable calls per attempt: with 6 attempts about 2 of 64 evaluations run out.
    pool = pool_factory(size=4, per_sandbox=2, health_check_after=0, retries=5)

    async def main() -> list[int | BaseException]:
        runs = [pool.arun(lambda sb, n=n: square(sb, n)) for n in range(64)]
        return await asyncio.gather(*runs, return_exceptions=True)

    results = asyncio.run(main())

    for n, result in enumerate(results):
        if isinstance(result, BaseException):
            assert isinstance(result, INFRASTRUCTURE_ERRORS), repr(result)
        else:
            assert result == n * n
    stats = pool.stats
    assert stats.failures == sum(isinstance(r, BaseException) for r in results)
    assert stats.failures < 16
    assert faulty.injected["died"] > 0 and stats.replaced > 0 and stats.retries > 0
    pool.close()
    assert leftovers(local, local_root, pool) == []


def test_sandboxes_created_by_a_failed_create_are_stopped_on_close(
    pool_factory: type[SandboxPool],
    faulty: FaultyBackend,
    local: SandboxClient,
    local_root: Path,
) -> None:
    faulty.faults = Faults(error_rate=1.0, seed=3)
    pool = pool_factory(size=2, retries=2)

    with pytest.raises(TransientBackendError):
        pool.start()

    assert faulty.calls["create"] == 6
    made = (
        faulty.injected["rate_limited after create"] + faulty.injected["server_error after create"]
    )
    assert made > 0
    assert len(local.list(tags=[pool.session.run_tag])) == made  # the provider made them
    pool.close()
    assert leftovers(local, local_root, pool) == []


def test_evaluations_fail_rather_than_wait_when_every_create_fails(
    pool_factory: type[SandboxPool], faulty: FaultyBackend
) -> None:
    """More evaluations than sandboxes, a provider that is gone: each evaluation gets an error
    (which a reward turns into None) once its retries are spent, none waits for ever."""
    faulty.faults = Faults(error_rate=1.0, seed=5, operations=frozenset({"create"}))
    pool = pool_factory(size=2, retries=1)

    async def evaluate(sandbox: Sandbox) -> int:
        return 1

    async def batch() -> list[object]:
        runs = (pool.arun(evaluate) for _ in range(5))
        return await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 120)

    outcomes = asyncio.run(batch())
    assert all(isinstance(o, TransientBackendError) for o in outcomes), outcomes
    assert pool.stats.failures == 5


def test_a_failed_create_wakes_the_waiters_of_every_image(
    pool_factory: type[SandboxPool], faulty: FaultyBackend
) -> None:
    """Leases of several images the provider lacks, waiting behind a full pool busy with
    another's: each create that fails must wake the waiters of every image, not its own only
    (each then makes room for its own, or fails), so that every lease ends, with its image's
    error or its result, and none waits for ever (a dataset row must not hang a batch)."""
    faulty.faults = Faults(missing_images=frozenset({"img-a", "img-b", "img-c"}), seed=5)
    pool = pool_factory(size=1, retries=0)

    async def slow(sandbox: Sandbox) -> str:
        await sandbox.aexec(["sleep", "1"], timeout=60)
        return "ran"

    async def quick(sandbox: Sandbox) -> str:
        return "ran"

    images = [None, "img-a", "img-b", "img-c", None, "img-b"]

    async def batch() -> list[object]:
        runs = [pool.arun(slow)] + [pool.arun(quick, image=image) for image in images[1:]]
        return await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 120)

    outcomes = asyncio.run(batch())
    assert [o if o == "ran" else type(o) for o in outcomes] == [
        "ran" if image is None else BackendMisconfiguredError for image in images
    ]


def test_transient_errors_are_retried_with_backoff(
    pool_factory: type[SandboxPool], faulty: FaultyBackend
) -> None:
    """Each attempt runs on a sandbox renewed since the attempt before ran in it."""
    pool = pool_factory(size=1, retries=3, backoff=0.05)
    pool.start()
    faulty.faults.error_rate = 1.0
    started = time.monotonic()

    with pytest.raises(TransientBackendError):
        pool.run(lambda sb: square(sb, 2))

    assert faulty.calls["write_file"] == 4  # one attempt and three retries
    assert time.monotonic() - started >= 0.05 + 0.1 + 0.2  # exponential waits
    assert (pool.stats.retries, pool.stats.failures) == (3, 1)
    eventually(lambda: pool.stats.renewed == 4)
    assert pool.stats.created == 1
    faulty.faults.error_rate = 0.0
    assert pool.run(lambda sb: square(sb, 2)) == 4


def test_lost_sandboxes_are_replaced_and_retried(
    pool_factory: type[SandboxPool], faulty: FaultyBackend, local: SandboxClient
) -> None:
    pool = pool_factory(size=2, retries=2)
    pool.start()
    faulty.faults.die_rate = 1.0

    with pytest.raises(SandboxLostError):
        pool.run(lambda sb: square(sb, 5))

    assert faulty.injected["died"] == 3
    assert pool.stats.replaced == 3
    faulty.faults.die_rate = 0.0
    assert pool.run(lambda sb: square(sb, 5)) == 25
    eventually(lambda: pool.stats.size == 2 and pool.stats.renewed == 1)
    assert pool.stats.created == 2 + 3
    assert len(local.list(tags=[pool.session.run_tag])) == 2


def test_dead_sandbox_fails_health_check_and_is_replaced(
    pool_factory: type[SandboxPool], local: SandboxClient
) -> None:
    pool = pool_factory(size=1, health_check_after=0)
    first = pool.run(lambda sb: asyncio.sleep(0, sb.id))
    local.stop(first)  # the provider stopped it behind our back

    second = pool.run(lambda sb: asyncio.sleep(0, sb.id))

    assert second != first
    assert (pool.stats.replaced, pool.stats.retries, pool.stats.failures) == (1, 0, 0)


def test_program_errors_are_not_retried(
    pool_factory: type[SandboxPool], faulty: FaultyBackend
) -> None:
    pool = pool_factory(size=1)
    calls = []

    async def broken(sandbox: Sandbox) -> None:
        calls.append(sandbox.id)
        raise ValueError("a bug in the reward function")

    with pytest.raises(ValueError):
        pool.run(broken)
    assert len(calls) == 1
    assert pool.stats.failures == 0 and pool.stats.in_use == 0


def test_misconfiguration_surfaces_instead_of_hanging(pool_factory: type[SandboxPool]) -> None:
    pool = pool_factory(size=1, workdir="/etc")  # the local backend refuses this workdir
    with pytest.raises(INFRASTRUCTURE_ERRORS):
        pool.run(lambda sb: square(sb, 1))


def test_usable_from_user_loops_and_sync_code(pool_factory: type[SandboxPool]) -> None:
    pool = pool_factory(size=1)
    assert asyncio.run(pool.arun(lambda sb: square(sb, 3))) == 9  # home: this loop
    assert pool.run(lambda sb: square(sb, 4)) == 16  # that loop is closed: moves to the portal
    assert asyncio.run(pool.arun(lambda sb: square(sb, 5))) == 25  # forwarded to the portal
    assert pool.stats.created == 1


def test_closed_pool_refuses_work(pool_factory: type[SandboxPool]) -> None:
    pool = pool_factory(size=1)
    pool.start()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(lambda sb: square(sb, 1))


def test_validates_arguments(local: SandboxClient) -> None:
    with pytest.raises(ValueError):
        SandboxPool(local, size=0)


@pytest.mark.parametrize("progress", [True, None])
def test_progress_bar_only_when_asked_or_on_a_terminal(
    pool_factory: type[SandboxPool], capsys: pytest.CaptureFixture[str], progress: bool | None
) -> None:
    pool_factory(size=3, progress=progress).start()
    err = capsys.readouterr().err
    if progress:
        assert "sandboxes" in err and "3/3" in err
    else:
        assert err == ""  # pytest's stderr is no terminal


# -- between leases: nothing of one evaluation reaches the next -------------------------------

LEAVE = 'echo left > left.txt && echo left > "${TMPDIR:-/tmp}/left.txt" && mkfifo fifo'
LOOK = 'ls -A "$(pwd)" "${TMPDIR:-/tmp}" | grep -v "^/" | grep -v "^\\.sandboxkit$"; true'
"""What is left in the workdir and ``$TMPDIR`` (but Daytona's exec scratch, ``/tmp/.sandboxkit``,
where the backend keeps its own files)."""


async def leave(sandbox: Sandbox) -> str:
    result = await sandbox.aexec(["sh", "-c", LEAVE], timeout=60)
    assert result.ok, result.stderr
    return sandbox.id


async def look(sandbox: Sandbox) -> tuple[str, list[str]]:
    result = await sandbox.aexec(["sh", "-c", LOOK], timeout=60)
    return sandbox.id, result.stdout.split()


def test_a_sandbox_is_renewed_between_leases(pool_factory: type[SandboxPool]) -> None:
    """The local backend makes a sandbox as new in place once its lease has ended: the next
    lease gets the same sandbox with nothing of the last in it."""
    pool = pool_factory(size=1)
    first = pool.run(leave)
    second, left = pool.run(look)
    assert (second, left) == (first, [])
    eventually(lambda: pool.stats.renewed == 2)
    assert (pool.stats.created, pool.stats.recycled, pool.stats.replaced) == (1, 0, 0)


def test_without_reuse_each_lease_gets_a_fresh_sandbox(pool_factory: type[SandboxPool]) -> None:
    pool = pool_factory(size=1, reuse=False)
    first = pool.run(leave)
    second, left = pool.run(look)
    assert second != first and left == []
    eventually(lambda: pool.stats.recycled == 2)
    assert pool.stats.renewed == 0


def test_a_shared_sandbox_takes_no_new_lease_once_one_has_ended(
    pool_factory: type[SandboxPool],
) -> None:
    """With ``per_sandbox`` > 1 leases share a sandbox while they run; once one has ended, a
    later one waits for the others to end and the sandbox to be renewed, and finds nothing
    of them."""
    pool = pool_factory(size=1, per_sandbox=2)

    async def main() -> tuple[str, str, tuple[str, list[str]]]:
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold(sandbox: Sandbox) -> str:
            holding.set()
            await release.wait()
            return sandbox.id

        held = asyncio.ensure_future(pool.arun(hold))
        await holding.wait()
        beside = await pool.arun(leave)  # the second lease, while ``hold`` holds the first
        later = asyncio.ensure_future(pool.arun(look))
        await asyncio.sleep(0.3)
        assert not later.done()  # the sandbox is spent: it waits for its renewal
        release.set()
        return await held, beside, await later

    held, beside, (later, left) = asyncio.run(main())
    assert held == beside == later and left == []


def test_a_sandbox_that_cannot_be_renewed_is_replaced_charging_no_one(
    pool_factory: type[SandboxPool], local: SandboxClient
) -> None:
    """A sandbox the provider lost between two leases cannot be renewed: it is replaced
    before the next lease, which is neither retried nor failed for it."""
    pool = pool_factory(size=1)

    async def lost_as_it_ends(sandbox: Sandbox) -> str:
        await local.backend.stop(sandbox.id)
        return sandbox.id

    first = pool.run(lost_as_it_ends)
    assert pool.run(lambda sb: square(sb, 7)) == 49
    stats = pool.stats
    assert (stats.created, stats.replaced, stats.retries, stats.failures) == (2, 1, 0, 0)
    assert first not in [info.id for info in local.list(tags=[pool.session.run_tag])]


@pytest.mark.slow
@pytest.mark.parametrize("reuse", [None, True])
def test_each_backend_renews_wipes_or_replaces_a_sandbox_between_leases(
    backend_client: SandboxClient, reuse: bool | None
) -> None:
    """What each backend gets (docs/isolation.md): the local backend's, Ray's and Docker's
    sandboxes are renewed in place; the others' replaced by fresh ones, or, with
    ``reuse=True``, wiped (their workdir and ``$TMPDIR`` emptied, the caller's risk)."""
    renews = backend_client.name in ("subprocess", "ray", "docker")
    with SandboxPool(backend_client, size=1, reuse=reuse, progress=False) as pool:
        first = pool.run(leave)
        second, left = pool.run(look)
        eventually(lambda: pool.stats.renewed + pool.stats.recycled == 2)
        stats = pool.stats
    assert left == []
    if renews or reuse:
        assert second == first and stats.renewed == 2
    else:
        assert second != first and stats.recycled == 2


def test_closing_while_a_replacement_is_made_leaves_no_sandbox(
    pool_factory: type[SandboxPool], faulty: FaultyBackend, local: SandboxClient, local_root: Path
) -> None:
    """A pool that replaces its sandbox after each lease is usually creating one when it is
    closed: that sandbox, made after its creation was given up, is stopped before ``close``
    returns."""
    faulty.faults.create_latency_ms = 300
    pool = pool_factory(size=1, reuse=False)
    assert pool.run(lambda sb: square(sb, 2)) == 4  # then its replacement is under way
    faulty.faults.latency_ms = 200  # and every stop takes a while
    pool.close()
    assert leftovers(local, local_root, pool) == []
