"""Local stand-ins for provider APIs, so the real provider SDKs run offline.

Each emulator serves the subset of its provider's API that the SDK uses, on loopback, and runs
commands with the local ``subprocess`` backend (so it inherits its isolation). Faults are
injected by :class:`~sandboxkit.emulators.faults.Faults`, shared by all emulators.
"""

import re

PYTHONS = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")
"""Commands an emulator may run directly rather than behind its backend's shell wrapper, so
that the local backend's warm template serves them instead of an interpreter started by sh."""
