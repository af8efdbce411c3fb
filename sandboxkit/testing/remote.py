"""One way to reach any remote provider's emulator, for tests and benchmarks that cover them all.

The emulators differ in how they are reached (Daytona: ``api_url`` + ``target``; Aviato:
``base_url``; E2B: ``api_url`` + ``sandbox_url``; Modal: a token id and secret and
``server_url``) and started; this module hides that, so a
test parametrized over :data:`REMOTE_BACKENDS` reads the same for each:

- :func:`start_emulator`: a private emulator on a thread of this process (its ``faults`` may be
  changed while it runs, and ``live_sandboxes()`` says what it holds);
- :func:`serve_emulator`: one in a process of its own through ``sandboxkit emulate``, as a
  benchmark wants (it must not share this process's GIL);
- :func:`backend_options` / :func:`backend_env`: what a client in this process, or in a child
  process through ``get_backend(provider)``, needs to reach an emulator;
- pytest fixtures (load with ``pytest_plugins = ["sandboxkit.testing.remote"]``):
  ``remote_provider``, parametrized over the backends, and ``remote_emulator``, a private
  emulator of it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pytest

from ..backends._facts import (
    AVIATO_KEY_VARS,
    AVIATO_URL_VAR,
    DAYTONA_KEY_VAR,
    DAYTONA_TARGET_VAR,
    DAYTONA_URL_VAR,
    E2B_KEY_VAR,
    E2B_SANDBOX_URL_VAR,
    E2B_URL_VAR,
    MODAL_KEY_VARS,
    MODAL_URL_VAR,
)
from ..client import SandboxClient
from ..config import child_pythonpath
from ..emulators import MODAL_TOKEN_ID, load_emulator
from ..errors import BackendUnavailableError
from ..registry import backend_factory, get_backend
from .faults import Faults

REMOTE_BACKENDS = ("daytona", "aviato", "modal", "e2b")
API_KEY = "sandboxkit-remote-key"
DAYTONA_TARGET = "local"
_URL_VARS = {
    "daytona": DAYTONA_URL_VAR,
    "aviato": AVIATO_URL_VAR,
    "modal": MODAL_URL_VAR,
    "e2b": E2B_URL_VAR,
}
_SHARED_FIXTURES = {
    "daytona": "daytona_emulator",
    "aviato": "aviato_emulator",
    "modal": "modal_emulator",
    "e2b": "e2b_emulator",
}
"""The session fixtures that skip where an emulator cannot run (and set ``NO_PROXY``)."""
_EMULATOR_CLASSES = {
    "daytona": "DaytonaEmulator",
    "aviato": "AviatoEmulator",
    "modal": "ModalEmulator",
    "e2b": "E2BEmulator",
}


class Emulator(Protocol):
    """What the emulator classes have in common."""

    faults: Faults

    @property
    def url(self) -> str: ...

    def live_sandboxes(self) -> int: ...


@contextlib.contextmanager
def start_emulator(
    provider: str, *, faults: Faults | None = None, direct_python: bool = True
) -> Iterator[Emulator]:
    """A private emulator of ``provider`` on a thread here; stopping it stops its sandboxes.
    ``direct_python``: run the backend's wrapped Python commands without their wrapper (E2B's
    commands are their argv: there is no wrapper to remove)."""
    if provider not in REMOTE_BACKENDS:
        raise ValueError(f"no emulator for {provider!r}; choose from {REMOTE_BACKENDS}")
    emulator_class = getattr(emulator_or_skip(provider), _EMULATOR_CLASSES[provider])
    options = {} if provider == "e2b" else {"direct_python": direct_python}
    with emulator_class(api_key=API_KEY, faults=faults, **options) as emu:
        yield emu


def emulator_or_skip(provider: str) -> ModuleType:
    """The emulator module of ``provider``; skips the test, saying what to install, where its
    server libraries or the provider's SDK (which a test then points at it) are not installed
    (cwsandbox, whose protos the Aviato emulator serves, needs Python 3.11)."""
    try:
        backend_factory(provider)
        return load_emulator(provider)
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


def backend_options(provider: str, url: str) -> dict[str, str]:
    """``get_backend(provider, **options)`` reaches the emulator at ``url``."""
    if provider == "daytona":
        return {"api_key": API_KEY, "api_url": url, "target": DAYTONA_TARGET}
    if provider == "modal":
        return {"token_id": MODAL_TOKEN_ID, "token_secret": API_KEY, "server_url": url}
    if provider == "e2b":
        return {"api_key": API_KEY, "api_url": url, "sandbox_url": url}
    return {"api_key": API_KEY, "base_url": url}


def backend_env(provider: str, url: str) -> dict[str, str]:
    """Environment variables under which ``get_backend(provider)`` reaches ``url``."""
    env = {_URL_VARS[provider]: url, "NO_PROXY": "127.0.0.1,localhost"}
    if provider == "daytona":
        return env | {DAYTONA_KEY_VAR: API_KEY, DAYTONA_TARGET_VAR: DAYTONA_TARGET}
    if provider == "modal":
        return env | dict(zip(MODAL_KEY_VARS, (MODAL_TOKEN_ID, API_KEY), strict=True))
    if provider == "e2b":
        return env | {E2B_KEY_VAR: API_KEY, E2B_SANDBOX_URL_VAR: url}
    return env | {AVIATO_KEY_VARS[0]: API_KEY}


def client_for(provider: str, url: str) -> SandboxClient:
    return get_backend(provider, **backend_options(provider, url))


def child_env(provider: str, url: str) -> dict[str, str]:
    """This process's environment plus what a child needs to import sandboxkit and reach
    ``url`` (proxy variables are overridden: the SDKs honour them even for loopback), less
    asyncio's debug mode: on a loaded machine it logs every slow callback, and a child's
    stderr must show only what it did wrong (an unclosed session is logged without it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONASYNCIODEBUG"}
    return {**env, "PYTHONPATH": child_pythonpath(), **backend_env(provider, url)}


@contextlib.contextmanager
def serve_emulator(
    provider: str, *, args: Sequence[str] = (), startup_timeout: float = 120.0
) -> Iterator[str]:
    """Run ``sandboxkit emulate <provider>`` (with ``args`` such as ``--latency-ms 50``) in a
    child process; yields its URL and stops it with SIGTERM (it then stops its sandboxes)."""
    command = [sys.executable, "-m", "sandboxkit", "emulate", provider, "--port", "0"]
    server = subprocess.Popen(
        [*command, "--api-key", API_KEY, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": child_pythonpath(), "NO_PROXY": "127.0.0.1,localhost"},
    )
    lines: queue.Queue[str] = queue.Queue()
    assert server.stdout is not None
    stdout = server.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=startup_timeout).strip()
        if "=" not in line:
            raise RuntimeError(f"the {provider} emulator did not start: {line!r}")
        yield line.partition("=")[2]
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- pytest fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(params=REMOTE_BACKENDS)
def remote_provider(request: pytest.FixtureRequest) -> str:
    """Each remote backend whose emulator can run here."""
    request.getfixturevalue(_SHARED_FIXTURES[request.param])
    return str(request.param)


@pytest.fixture
def remote_emulator(remote_provider: str) -> Iterator[Emulator]:
    """A private emulator of ``remote_provider``, for tests that count its sandboxes."""
    with start_emulator(remote_provider) as emu:
        yield emu


def sleeper_argv(marker: str, seconds: int = 300) -> list[str]:
    """A program that sleeps, exec'd so that ``marker`` shows in its command line: a Python
    program run in a warm template's fork (locally, or behind an emulator) shows the
    template's."""
    return ["sh", "-c", f'exec python3 -c "import time; time.sleep({seconds})" "$0"', marker]


def processes_with(marker: str, where: str = "cmdline") -> list[int]:
    """Pids whose command line (or, ``where="environ"``, initial environment) contains
    ``marker``, seen from the host: the emulators run sandboxed programs as local processes,
    so this shows whether a remote command still runs."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / where).read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def wait_until(condition: Callable[[], object], timeout: float = 60.0) -> bool:
    """Poll ``condition`` with a generous deadline (the machine may be shared and slow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())
