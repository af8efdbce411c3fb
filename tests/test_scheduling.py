"""Scheduling under pressure: the concurrency budget that backs off on rate limits, and the
per-batch deadline that cuts off stragglers. Real local sandboxes and real SDKs against the
emulators; the faults are injected by ``FaultyBackend`` and the emulators' ``Faults``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxkit import (
    DeadlineExceededError,
    ExecResult,
    RateLimitedError,
    Sandbox,
    SandboxClient,
    SandboxPool,
)
from sandboxkit import retry as retry_module
from sandboxkit.budget import ConcurrencyBudget
from sandboxkit.pool import PoolStats
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.faults import Faults, FaultyBackend
from sandboxkit.testing.remote import Emulator, client_for, processes_with, start_emulator

# -- the budget on its own ----------------------------------------------------------------------


def test_budget_halves_once_per_wave_of_rate_limits() -> None:
    budget = ConcurrencyBudget(16)
    wave = budget.epoch
    assert budget.rate_limited(wave) is True
    for _ in range(5):  # the rest of the burst: calls sent at the old limit
        assert budget.rate_limited(wave) is False
    assert (budget.limit, budget.signals) == (8, 6)
    assert budget.rate_limited(budget.epoch) is True  # a call sent at the new limit
    assert budget.limit == 4


def test_budget_grows_by_one_per_round_of_successes_at_the_limit() -> None:
    budget = ConcurrencyBudget(8)
    budget.rate_limited(budget.epoch)
    assert budget.limit == 4
    for _ in range(3):
        budget.succeeded(in_flight=4)
    assert budget.limit == 4
    budget.succeeded(in_flight=4)
    assert budget.limit == 5
    for _ in range(20):  # calls below the limit say nothing about more
        budget.succeeded(in_flight=3)
    assert budget.limit == 5
    for _ in range(5):
        budget.succeeded(in_flight=5)
    assert budget.limit == 6


def test_budget_stays_between_one_and_its_maximum() -> None:
    budget = ConcurrencyBudget(5)
    for _ in range(10):
        budget.rate_limited(budget.epoch)
    assert budget.limit == 1
    for _ in range(1000):
        budget.succeeded(in_flight=budget.limit)
    assert budget.limit == 5
    with pytest.raises(ValueError):
        ConcurrencyBudget(0)


def test_fixed_budget_counts_rate_limits_but_keeps_its_limit() -> None:
    budget = ConcurrencyBudget(6, adaptive=False)
    assert budget.rate_limited(budget.epoch) is False
    assert (budget.limit, budget.signals) == (6, 1)


# -- rate limits --------------------------------------------------------------------------------


@pytest.fixture
def faulty(local: SandboxClient) -> FaultyBackend:
    return FaultyBackend(local.backend, Faults(seed=5))


def rate_limited_batch(
    faulty: FaultyBackend, *, adaptive: bool, n: int
) -> tuple[list[float | None], PoolStats]:
    """``n`` trivial programs through a pool allowing 16 leases at once."""
    reward = exec_reward(
        faulty,
        timeout=60,
        pool_size=8,
        per_sandbox=2,
        retries=8,
        backoff=0.05,
        adaptive_concurrency=adaptive,
    )
    try:
        reward.pool.start()
        scores = reward(["p"] * n, [f"print({i})" for i in range(n)])
        assert reward.last_batch is not None and reward.last_batch.pool is not None
        return scores, reward.last_batch.pool
    finally:
        reward.close()


@pytest.mark.slow
def test_adaptive_budget_backs_off_instead_of_hammering(faulty: FaultyBackend) -> None:
    allowed = 3
    faulty.faults = Faults(max_concurrent_execs=allowed, latency_ms=20, seed=5)
    # The adaptive budget's refusals come mostly from its first wave; the fixed one's grow with
    # the batch (measured: 23 against 66-78 at 32 programs, 28 against 192-201 at 64).
    n = 64

    scores, adaptive = rate_limited_batch(faulty, adaptive=True, n=n)
    adaptive_429s = faulty.injected["too many execs"]
    faulty.injected.clear()
    _, fixed = rate_limited_batch(faulty, adaptive=False, n=n)
    fixed_429s = faulty.injected["too many execs"]

    assert scores == [1.0] * n
    assert adaptive.rate_limited == adaptive_429s > 0  # each refusal reached the budget
    assert adaptive.concurrency_limit <= allowed + 2, adaptive
    assert fixed.concurrency_limit == 16
    assert adaptive_429s * 3 < fixed_429s, (adaptive_429s, fixed_429s)


def test_sandboxes_are_created_in_turns_under_the_limit(faulty: FaultyBackend) -> None:
    faulty.faults = Faults(create_latency_ms=100, seed=5)
    client = SandboxClient(faulty)  # type: ignore[arg-type]
    with SandboxPool(client, size=6, max_concurrency=2) as pool:
        pool.start()
        assert (pool.stats.size, faulty.calls["create"], faulty.peak["create"]) == (6, 6, 2)


def test_a_wave_of_rate_limits_halves_the_limit_once(faulty: FaultyBackend) -> None:
    faulty.faults = Faults(max_concurrent_execs=0, latency_ms=50, seed=5)  # refuses every exec
    client = SandboxClient(faulty)  # type: ignore[arg-type]

    async def true(sandbox: Sandbox) -> ExecResult:
        return await sandbox.aexec(["true"], timeout=30)

    with SandboxPool(client, size=4, retries=0) as pool:
        pool.start()

        async def wave() -> list[ExecResult | BaseException]:
            return await asyncio.gather(
                *(pool.arun(true) for _ in range(4)), return_exceptions=True
            )

        assert all(isinstance(r, RateLimitedError) for r in asyncio.run(wave()))
        assert (pool.stats.rate_limited, pool.stats.concurrency_limit) == (4, 2)
        with pytest.raises(RateLimitedError):  # sent at the new limit: halves it again
            pool.run(true)
        assert (pool.stats.rate_limited, pool.stats.concurrency_limit) == (5, 1)


def test_retries_wait_as_long_as_the_provider_asks(local: SandboxClient) -> None:
    faults = Faults(max_concurrent_execs=0, retry_after=0.4, seed=5)  # refuses every exec
    faulty = FaultyBackend(local.backend, faults)
    with SandboxPool(SandboxClient(faulty), size=1, retries=1, backoff=0.01) as pool:  # type: ignore[arg-type]
        pool.start()
        started = time.monotonic()
        with pytest.raises(RateLimitedError) as caught:
            pool.run(lambda sb: sb.aexec(["true"], timeout=30))
        assert time.monotonic() - started >= 0.4  # the provider's wait, not backoff's 0.01 s
    assert caught.value.retry_after == 0.4
    assert faulty.injected["too many execs"] == 2  # the attempt and its retry


def test_the_common_path_builds_no_retry_controller(
    faulty: FaultyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    real = retry_module.retrying

    def counting(**kw: object) -> object:
        built.append(1)
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(retry_module, "retrying", counting)
    client = SandboxClient(faulty)  # type: ignore[arg-type]
    with SandboxPool(client, size=2, retries=1, backoff=0.01) as pool:
        for _ in range(10):
            assert pool.run(lambda sb: sb.aexec(["true"], timeout=30)).ok
        assert built == []
        faulty.faults = Faults(max_concurrent_execs=0, seed=5)
        with pytest.raises(RateLimitedError):
            pool.run(lambda sb: sb.aexec(["true"], timeout=30))
        assert built == [1]


@pytest.fixture
def rate_limiting_emulator(remote_provider: str) -> Iterator[tuple[str, Emulator]]:
    with start_emulator(remote_provider, faults=Faults(retry_after=0.05)) as emu:
        yield remote_provider, emu


def test_emulated_rate_limits_are_rate_limited_errors_with_their_retry_after(
    rate_limiting_emulator: tuple[str, Emulator],
) -> None:
    provider, emu = rate_limiting_emulator
    with client_for(provider, emu.url) as client:
        with client.sandbox() as sb:
            emu.faults.max_concurrent_execs = 0  # every exec is refused
            with pytest.raises(RateLimitedError) as refused_exec:
                sb.exec(["true"], timeout=30)
        emu.faults.max_sandboxes = 0  # and every sandbox
        with pytest.raises(RateLimitedError) as refused_create:
            client.sandbox()
    assert refused_exec.value.retry_after == pytest.approx(0.05)
    assert refused_create.value.retry_after == pytest.approx(0.05)
    assert emu.live_sandboxes() == 0


@pytest.mark.slow
def test_a_batch_under_emulated_rate_limits_completes(
    rate_limiting_emulator: tuple[str, Emulator],
) -> None:
    provider, emu = rate_limiting_emulator
    emu.faults.max_concurrent_execs = 2
    n = 16
    with client_for(provider, emu.url) as client:
        # Reused (wiped) between leases: a fresh sandbox each would pace the execs by creates.
        reward = exec_reward(client, timeout=60, pool_size=4, per_sandbox=2, retries=8, reuse=True)
        try:
            scores = reward(["p"] * n, [f"print({i})" for i in range(n)])
            stats = reward.last_batch
        finally:
            reward.close()
    assert emu.live_sandboxes() == 0
    assert scores == [1.0] * n
    assert stats is not None and stats.pool is not None
    assert stats.pool.rate_limited >= 1 and stats.pool.concurrency_limit < 8, stats.pool


# -- the batch deadline -------------------------------------------------------------------------

MARKER = "SBXK_DEADLINE_STRAGGLER"
STRAGGLER = (
    "import os, sys\n"
    "os.nice(19)\n"
    f"os.execv(sys.executable, [sys.executable, '-c', 'while True: pass', '{MARKER}'])"
)
"""Loops forever under a command line the host's /proc shows, warm template or not (niced, so
that on two cores the quick programs of its batch still finish in time)."""


def leftovers(client: SandboxClient, root: Path) -> list[str]:
    return [i.id for i in client.list()] + [p.name for p in root.iterdir() if "sbx-" in p.name]


@pytest.mark.slow
def test_deadline_cuts_off_stragglers_kills_them_and_keeps_the_pool(
    local: SandboxClient, local_root: Path
) -> None:
    reward = exec_reward(local, timeout=120, pool_size=4, batch_timeout=6)
    # Three stragglers hold three sandboxes to the end; the quick ones share the fourth.
    completions = [f"print({i})" for i in range(9)]
    for i in (1, 4, 7):
        completions.insert(i, STRAGGLER)
    quick = [c != STRAGGLER for c in completions]
    try:
        reward.pool.start()  # the deadline is for running programs, not for making sandboxes
        started = time.monotonic()
        scores = reward(["p"] * len(completions), completions)
        elapsed = time.monotonic() - started

        assert elapsed < 60, elapsed  # not the stragglers' own 120 s
        assert scores == [1.0 if q else None for q in quick]
        assert processes_with(MARKER) == []
        stats = reward.last_batch
        assert stats is not None and stats.pool is not None
        assert stats.outcomes["deadline"] == 3 and stats.outcomes["passed"] == 9
        assert reward.metrics(stats)["exec_reward/deadline_rate"] == pytest.approx(3 / 12)
        # Each straggler's exec is set to end on its own timeout before the deadline; one the
        # host still had to cut off (its kill and return took over RETURN_GRACE on a loaded
        # machine) may run on, so its sandbox is abandoned, never leased again.
        assert stats.pool.expired == stats.pool.abandoned <= 3

        assert reward(["p"] * 3, ["print(5)"] * 3) == [1.0] * 3  # the same pool, replenished
    finally:
        reward.close()
    assert leftovers(local, local_root) == []


@pytest.mark.slow
def test_deadline_on_the_async_face_does_not_trip_the_breaker(
    local: SandboxClient, local_root: Path
) -> None:
    reward = exec_reward(local, timeout=120, pool_size=4, batch_timeout=6, max_infra_share=0.5)
    completions = [STRAGGLER, "print(1)", STRAGGLER, STRAGGLER]
    twin = reward.as_async()

    async def main() -> tuple[list[float | None], int]:
        await reward.pool.astart()
        batch = asyncio.ensure_future(twin(["p"] * 4, completions))
        # The stragglers really run (so that their absence afterwards means something).
        while len(processes_with(MARKER)) < 3 and not batch.done():
            await asyncio.sleep(0.05)
        seen = len(processes_with(MARKER))
        return await batch, seen

    try:
        scores, seen = asyncio.run(main())
        assert seen == 3
        assert scores == [None, 1.0, None, None]  # most of the batch, yet no CircuitOpenError
        assert processes_with(MARKER) == []
        assert asyncio.run(twin(["p"], ["print(2)"])) == [1.0]
    finally:
        reward.close()
    assert leftovers(local, local_root) == []


@pytest.mark.slow
def test_pool_deadline_drops_waiting_leases_and_retires_running_ones(
    local: SandboxClient,
) -> None:
    async def main(pool: SandboxPool) -> None:
        await pool.astart()
        hold = asyncio.Event()  # never set

        async def forever(sandbox: Sandbox) -> str:
            await hold.wait()
            return sandbox.id

        deadline = time.monotonic() + 1.0
        running = asyncio.ensure_future(pool.arun(forever, deadline=deadline))
        waiting = asyncio.ensure_future(pool.arun(forever, deadline=deadline))
        for task in (running, waiting):
            with pytest.raises(DeadlineExceededError):
                await asyncio.wait_for(task, 60)
        stats = pool.stats
        assert (stats.expired, stats.abandoned, stats.leases, stats.in_use) == (2, 1, 1, 0)

        cancelled = asyncio.ensure_future(pool.arun(forever))  # a caller that gives up
        while pool.stats.in_use == 0:
            await asyncio.sleep(0.01)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert pool.stats.abandoned == 2 and pool.stats.expired == 2

        async def sandbox_id(sandbox: Sandbox) -> str:
            return sandbox.id

        assert await pool.arun(sandbox_id, deadline=time.monotonic() + 60)
        with pytest.raises(DeadlineExceededError):  # too late to start: takes no sandbox
            await pool.arun(sandbox_id, deadline=time.monotonic() - 1)
        assert (pool.stats.leases, pool.stats.expired, pool.stats.abandoned) == (3, 3, 2)

    with SandboxPool(local, size=1) as pool:
        asyncio.run(main(pool))
        assert pool.stats.created == 3  # the first sandbox and two replacements
    assert local.list() == []
