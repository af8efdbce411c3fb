"""Pytest fixtures that run the real ``cwsandbox`` client against a local Aviato emulator.

Load them with ``pytest_plugins = ["sandboxkit.testing.aviato"]``. ``aviato_emulator`` is one
emulator for the whole session, with a random API key; ``aviato_env`` points the environment
(``CWSANDBOX_BASE_URL``, ``CWSANDBOX_API_KEY``) at it for one test, so ``get_backend("aviato")``
needs no options. Tests that inject faults should start their own
:class:`~sandboxkit.emulators.aviato.AviatoEmulator` rather than change the shared one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..backends._facts import AVIATO_KEY_VARS, AVIATO_URL_VAR
from .remote import emulator_or_skip

if TYPE_CHECKING:
    from ..emulators.aviato import AviatoEmulator


@pytest.fixture(scope="session")
def aviato_emulator() -> Iterator[AviatoEmulator]:
    emulator_class: type[AviatoEmulator] = emulator_or_skip("aviato").AviatoEmulator
    with emulator_class(api_key=f"test-key-{uuid.uuid4().hex}") as emulator:
        yield emulator


@pytest.fixture
def aviato_env(aviato_emulator: AviatoEmulator, monkeypatch: pytest.MonkeyPatch) -> AviatoEmulator:
    monkeypatch.setenv(AVIATO_URL_VAR, aviato_emulator.url)
    monkeypatch.setenv(AVIATO_KEY_VARS[0], aviato_emulator.api_key or "")
    for fallback in AVIATO_KEY_VARS[1:]:
        monkeypatch.delenv(fallback, raising=False)
    return aviato_emulator
