"""Pytest fixtures that run the real ``modal`` client against a local Modal emulator.

Load them with ``pytest_plugins = ["sandboxkit.testing.modal"]``. ``modal_emulator`` is one
emulator for the whole session, with a random token secret; ``modal_env`` points the
environment (``MODAL_SERVER_URL``, ``MODAL_TOKEN_ID``, ``MODAL_TOKEN_SECRET``) at it for one
test, so ``get_backend("modal")`` needs no options. Tests that inject faults should start their
own :class:`~sandboxkit.emulators.modal.ModalEmulator` rather than change the shared one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..backends._facts import MODAL_KEY_VARS, MODAL_URL_VAR
from ..emulators import MODAL_TOKEN_ID
from .remote import emulator_or_skip

if TYPE_CHECKING:
    from ..emulators.modal import ModalEmulator


@pytest.fixture(scope="session")
def modal_emulator() -> Iterator[ModalEmulator]:
    emulator_class: type[ModalEmulator] = emulator_or_skip("modal").ModalEmulator
    with emulator_class(api_key=f"test-secret-{uuid.uuid4().hex}") as emulator:
        yield emulator


@pytest.fixture
def modal_env(modal_emulator: ModalEmulator, monkeypatch: pytest.MonkeyPatch) -> ModalEmulator:
    monkeypatch.setenv(MODAL_URL_VAR, modal_emulator.url)
    monkeypatch.setenv(MODAL_KEY_VARS[0], MODAL_TOKEN_ID)
    monkeypatch.setenv(MODAL_KEY_VARS[1], modal_emulator.api_key or "")
    return modal_emulator
