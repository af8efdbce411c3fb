"""Local stand-ins for provider APIs, so the real provider SDKs run offline.

Each emulator serves the subset of its provider's API that the SDK uses, on loopback, and runs
commands with the local ``subprocess`` backend (so it inherits its isolation). Faults are
injected by :class:`~sandboxkit.emulators.faults.Faults`, shared by all emulators.
"""
