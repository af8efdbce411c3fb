"""Pytest fixtures that run the real ``e2b`` SDK against a local E2B emulator.

Load them with ``pytest_plugins = ["sandboxkit.testing.e2b"]``. ``e2b_emulator`` is one
emulator for the whole session, with a random API key (skips, naming the extra to install,
without the SDK or the emulator's libraries); ``e2b_env`` points the environment
(``E2B_API_URL``, ``E2B_SANDBOX_URL``, ``E2B_API_KEY``) at it for one test, so
``get_backend("e2b")`` needs no options. Tests that inject faults should start their own
:class:`~sandboxkit.emulators.e2b.E2BEmulator` rather than change the shared one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..backends._facts import E2B_KEY_VAR, E2B_SANDBOX_URL_VAR, E2B_URL_VAR
from .remote import emulator_or_skip

if TYPE_CHECKING:
    from ..emulators.e2b import E2BEmulator


@pytest.fixture(scope="session")
def e2b_emulator() -> Iterator[E2BEmulator]:
    emulator_class: type[E2BEmulator] = emulator_or_skip("e2b").E2BEmulator
    with pytest.MonkeyPatch.context() as mp:
        # The SDK honours proxy variables: keep loopback traffic off any proxy.
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1,localhost"]))
        mp.setenv("NO_PROXY", no_proxy)
        with emulator_class(api_key=f"test-key-{uuid.uuid4().hex}") as emulator:
            yield emulator


@pytest.fixture
def e2b_env(e2b_emulator: E2BEmulator, monkeypatch: pytest.MonkeyPatch) -> E2BEmulator:
    monkeypatch.setenv(E2B_URL_VAR, e2b_emulator.url)
    monkeypatch.setenv(E2B_SANDBOX_URL_VAR, e2b_emulator.url)
    monkeypatch.setenv(E2B_KEY_VAR, e2b_emulator.api_key or "")
    return e2b_emulator
