"""Local stand-ins for provider APIs, so the real provider SDKs run offline.

Each emulator serves the subset of its provider's API that the SDK uses, on loopback, and runs
commands with the local ``subprocess`` backend (so it inherits its isolation). Faults are
injected by :class:`~sandboxkit.testing.faults.Faults`, shared by all emulators.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from ..errors import installed_for

EMULATORS = {
    "daytona": "sandboxkit.emulators.daytona",
    "aviato": "sandboxkit.emulators.aviato",
    "modal": "sandboxkit.emulators.modal",
    "e2b": "sandboxkit.emulators.e2b",
}
"""The emulator module of each provider; each has ``serve_forever``."""
INSTALL = "pip install 'sandboxkit[emulators]'"
"""What installs every emulator's server libraries."""
ANY_KEY = "any"
"""The key ``sandboxkit emulate`` prints when it accepts every key: the backends still need
one set."""
MODAL_TOKEN_ID = "ak-sandboxkit-emulator"
"""The token id the Modal emulator expects (its secret is the emulator's key)."""
PYTHONS = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")
"""Commands an emulator may run directly rather than behind its backend's shell wrapper, so
that the local backend's warm template serves them instead of an interpreter started by sh."""


def load_emulator(provider: str) -> ModuleType:
    """The emulator module of ``provider`` (a key of :data:`EMULATORS`), imported; a server
    library that is not installed is a :class:`~sandboxkit.errors.BackendUnavailableError`
    saying what to install (a core install has none of them)."""
    with installed_for(f"the {provider} emulator", INSTALL):
        return importlib.import_module(EMULATORS[provider])
