"""Scheduling under pressure: the concurrency budget that backs off on rate limits. Real local
sandboxes and real SDKs against the emulators; the faults are injected by ``FaultyBackend`` and
the emulators' ``Faults``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from sandboxkit import (
    ExecResult,
    RateLimitedError,
    Sandbox,
    SandboxClient,
    SandboxPool,
)
from sandboxkit import retry as retry_module
from sandboxkit.budget import ConcurrencyBudget
from sandboxkit.emulators.faults import Faults
from sandboxkit.pool import PoolStats
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.faulty import FaultyBackend
from sandboxkit.testing.remote import Emulator, client_for, start_emulator

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


def test_adaptive_budget_backs_off_instead_of_hammering(faulty: FaultyBackend) -> None:
    allowed = 3
    faulty.faults = Faults(max_concurrent_execs=allowed, latency_ms=20, seed=5)
    n = 32

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


def test_a_batch_under_emulated_rate_limits_completes(
    rate_limiting_emulator: tuple[str, Emulator],
) -> None:
    provider, emu = rate_limiting_emulator
    emu.faults.max_concurrent_execs = 2
    n = 16
    with client_for(provider, emu.url) as client:
        reward = exec_reward(client, timeout=60, pool_size=4, per_sandbox=2, retries=8)
        try:
            scores = reward(["p"] * n, [f"print({i})" for i in range(n)])
            stats = reward.last_batch
        finally:
            reward.close()
    assert emu.live_sandboxes() == 0
    assert scores == [1.0] * n
    assert stats is not None and stats.pool is not None
    assert stats.pool.rate_limited >= 1 and stats.pool.concurrency_limit < 8, stats.pool
