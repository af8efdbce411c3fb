"""pytest fixtures that run the Daytona backend against a local emulator: no network, no account.

Enable them in a ``conftest.py`` with ``pytest_plugins = ["sandboxkit.testing.daytona"]``:

- ``daytona_emulator`` (session): a running :class:`~sandboxkit.emulators.daytona.DaytonaEmulator`
  that requires a bearer token (skips, naming the extra to install, without the emulator's
  libraries or the Daytona SDK, and where the local backend lacks its namespaces tier, which
  the emulator needs to look like a Linux box);
- ``daytona_env``: ``DAYTONA_API_URL``, ``DAYTONA_API_KEY`` and ``DAYTONA_TARGET`` pointing at it,
  so code under test that calls ``get_backend("daytona")`` reaches the emulator;
- ``daytona_client``: a ``SandboxClient`` on it that fails the test if sandboxes are left behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..backends._facts import DAYTONA_KEY_VAR, DAYTONA_TARGET_VAR, DAYTONA_URL_VAR
from ..client import SandboxClient
from ..local.isolation import Tier
from ..registry import get_backend
from .remote import emulator_or_skip

if TYPE_CHECKING:
    from ..emulators.daytona import DaytonaEmulator

EMULATOR_API_KEY = "sandboxkit-test-key"
EMULATOR_TARGET = "local"


@pytest.fixture(scope="session")
def daytona_emulator() -> Iterator[DaytonaEmulator]:
    emulator_class: type[DaytonaEmulator] = emulator_or_skip("daytona").DaytonaEmulator
    with pytest.MonkeyPatch.context() as mp:
        # The SDK honours proxy variables: keep loopback traffic off any proxy.
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1,localhost"]))
        mp.setenv("NO_PROXY", no_proxy)
        emulator = emulator_class(api_key=EMULATOR_API_KEY)
        emulator.start_in_thread()
        try:
            if emulator.isolation.tier is not Tier.NAMESPACES:
                pytest.skip(f"the Daytona emulator needs namespaces: {emulator.isolation.reason}")
            yield emulator
        finally:
            emulator.close()


@pytest.fixture
def daytona_env(
    daytona_emulator: DaytonaEmulator, monkeypatch: pytest.MonkeyPatch
) -> DaytonaEmulator:
    monkeypatch.setenv(DAYTONA_URL_VAR, daytona_emulator.url)
    monkeypatch.setenv(DAYTONA_KEY_VAR, EMULATOR_API_KEY)
    monkeypatch.setenv(DAYTONA_TARGET_VAR, EMULATOR_TARGET)
    return daytona_emulator


@pytest.fixture
def daytona_client(daytona_env: DaytonaEmulator) -> Iterator[SandboxClient]:
    before = daytona_env.live_sandboxes()
    with get_backend("daytona") as client:
        yield client
    leaked = daytona_env.live_sandboxes() - before
    assert leaked <= 0, f"the test left {leaked} Daytona sandbox(es) running"
