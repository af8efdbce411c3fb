"""Scheduling under pressure: rate limits. Real local sandboxes and real SDKs against the
emulators; the faults are injected by ``FaultyBackend`` and the emulators' ``Faults``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sandboxkit import RateLimitedError, SandboxClient, SandboxPool
from sandboxkit.emulators.faults import Faults
from sandboxkit.testing.faulty import FaultyBackend
from sandboxkit.testing.remote import Emulator, client_for, start_emulator


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
