"""The Aviato backend and its emulator, with the real ``cwsandbox`` client in between.

The shared contract runs on aviato through ``conftest.CONFORMANCE_BACKENDS``; this module covers
what is particular to Aviato: credentials, faults, the emulator's CLI and the client's signal
handlers.
"""

from __future__ import annotations

import asyncio
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import pytest

pytest.importorskip("cwsandbox", reason="needs pip install 'sandboxkit[aviato,emulators]'")

import cwsandbox

from sandboxkit import (
    AuthenticationError,
    BackendMisconfiguredError,
    SandboxClient,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    SandboxStatus,
    TransientBackendError,
    get_backend,
)
from sandboxkit.emulators.aviato import AviatoEmulator
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import processes_with, sleeper_argv

PY = "python3"
REPO = Path(__file__).resolve().parents[1]


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` with a generous deadline (the machine is shared and slow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def emulator() -> Iterator[AviatoEmulator]:
    """A private emulator whose faults a test may change."""
    with AviatoEmulator(api_key="private-key") as emu:
        yield emu


@pytest.fixture
def client(emulator: AviatoEmulator) -> Iterator[SandboxClient]:
    with get_backend("aviato", base_url=emulator.url, api_key=emulator.api_key) as c:
        yield c


# -- configuration ------------------------------------------------------------------------------


def test_bad_token_is_an_authentication_error(emulator: AviatoEmulator) -> None:
    with (
        get_backend("aviato", base_url=emulator.url, api_key="wrong") as c,
        pytest.raises(AuthenticationError),
    ):
        c.sandbox()
    assert emulator.sandbox_ids() == []


@pytest.mark.parametrize("url", ["emulator", "default"])
def test_a_missing_key_fails_when_the_backend_is_built_naming_the_variable(
    emulator: AviatoEmulator, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """As Daytona's: before any call, so neither the service's "invalid API key" nor the
    default URL's "Domain name not found" is what a user without a key reads."""
    monkeypatch.delenv("CWSANDBOX_API_KEY", raising=False)
    monkeypatch.delenv("AVIATO_API_KEY", raising=False)
    monkeypatch.delenv("CWSANDBOX_BASE_URL", raising=False)
    options = {"base_url": emulator.url} if url == "emulator" else {}
    with pytest.raises(BackendMisconfiguredError) as raised:
        get_backend("aviato", **options)
    assert type(raised.value) is BackendMisconfiguredError
    assert str(raised.value) == (
        "the aviato backend needs an API key: pass api_key= or set CWSANDBOX_API_KEY "
        "(AVIATO_API_KEY is read too; auth= takes another cwsandbox credential)"
    )


def test_cwsandbox_alias(aviato_env: AviatoEmulator) -> None:
    with get_backend("cwsandbox") as c:
        assert c.name == "aviato"
        with c.sandbox() as sb:
            assert sb.exec(["echo", "alias"], timeout=60).stdout == "alias\n"


def test_old_key_name_is_a_fallback(
    aviato_env: AviatoEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AVIATO_API_KEY`` (the name before the rename) is the key sent when ``CWSANDBOX_API_KEY``
    is absent; when both are set the new name wins (the reverse is ``test_key_precedence``)."""
    good = aviato_env.api_key or ""
    tag = uuid.uuid4().hex
    monkeypatch.delenv("CWSANDBOX_API_KEY")
    monkeypatch.setenv("AVIATO_API_KEY", good)
    with get_backend("aviato") as c, c.sandbox(tags=[tag]) as sb:
        assert [i.id for i in c.list(tags=[tag])] == [sb.id]
    monkeypatch.setenv("AVIATO_API_KEY", "wrong")
    with get_backend("aviato") as c, pytest.raises(AuthenticationError):
        c.list()  # the emulator saw the old name's key
    monkeypatch.setenv("CWSANDBOX_API_KEY", good)
    with get_backend("aviato") as c:
        assert c.list(tags=[tag]) == []  # signed with the new name's key; the sandbox is gone


def test_key_precedence(aviato_env: AviatoEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    good = aviato_env.api_key or ""
    monkeypatch.setenv("CWSANDBOX_API_KEY", "wrong")
    monkeypatch.setenv("AVIATO_API_KEY", good)
    with get_backend("aviato") as c, pytest.raises(AuthenticationError):
        c.list()  # CWSANDBOX_API_KEY wins over the old name
    with get_backend("aviato", api_key=good) as c:
        c.list()  # an explicit key wins over both


def test_spec_reaches_the_service(client: SandboxClient, emulator: AviatoEmulator) -> None:
    with client.sandbox(
        image="python:3.12-slim",
        tags=["t1", "t2"],
        env={"A": "1"},
        cpu=2,
        memory_mb=512,
        workdir="/workspace/proj",
        lifetime_seconds=600,
    ) as sb:
        seen = emulator.describe(sb.id)
        main = seen.spec.containers[0]
        assert main.image == "python:3.12-slim"
        assert dict(main.environment_variables) == {"A": "1"}
        assert main.working_dir == "/workspace/proj"
        assert seen.spec.max_lifetime_seconds == 600
        assert list(seen.spec.tags) == ["t1", "t2"]
        assert main.resources.cpu == "2" or main.resource_requirements.limits.cpu == "2"
        requests = main.resource_requirements.requests
        assert (main.resources.memory or requests.memory) == "512Mi"
        # The workdir exists and is the default cwd; relative paths resolve against it.
        assert sb.exec(["pwd"], timeout=60).stdout == "/workspace/proj\n"
        sb.write_file("rel.txt", "x")
        assert sb.read_file("/workspace/proj/rel.txt") == b"x"


def test_refused_spec_is_a_configuration_error(
    client: SandboxClient, emulator: AviatoEmulator
) -> None:
    with pytest.raises(BackendMisconfiguredError):
        client.sandbox(workdir="/srv/app")  # the emulator's local sandboxes live in /workspace
    assert emulator.sandbox_ids() == []


def test_output_is_capped(client: SandboxClient) -> None:
    with client.sandbox() as sb:
        code = "import sys; sys.stdout.write('x' * (2 * 1024 * 1024)); print('e', file=sys.stderr)"
        result = sb.exec([PY, "-c", code], timeout=60)
        assert result.ok and result.truncated
        assert len(result.stdout_bytes) == 1024 * 1024
        assert result.stderr == "e\n"


def test_list_by_tags_and_status_pages_through() -> None:
    with (
        AviatoEmulator(api_key="k", page_size=2) as emu,
        get_backend("aviato", base_url=emu.url, api_key="k") as c,
    ):
        tag = uuid.uuid4().hex
        boxes = [c.sandbox(tags=[tag, f"n{i}"]) for i in range(5)]
        c.sandbox(tags=["other"])
        assert {i.id for i in c.list(tags=[tag])} == {b.id for b in boxes}
        assert [i.id for i in c.list(tags=[tag, "n3"])] == [boxes[3].id]
        boxes[0].stop()
        running = c.list(tags=[tag], status="running")
        assert {i.id for i in running} == {b.id for b in boxes[1:]}
        assert all(i.status is SandboxStatus.RUNNING and i.started_at for i in running)
        stopped = c.list(tags=[tag], status="stopped")
        assert [(i.id, i.status) for i in stopped] == [(boxes[0].id, SandboxStatus.STOPPED)]
        assert c.list(tags=[tag], status="failed") == []


# -- exec ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_exec_timeout_kills_the_command(client: SandboxClient) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    with client.sandbox() as sb:
        result = sb.exec(sleeper_argv(marker, 120), timeout=3)
        assert result.timed_out and result.returncode != 0
        assert wait_until(lambda: not processes_with(marker)), "the command outlived its timeout"
        assert sb.exec(["true"], timeout=60).ok  # the sandbox is still usable


def test_stop_kills_running_commands(client: SandboxClient) -> None:
    """Also shows that the process check above can see a sandbox's commands."""
    marker = f"marker-{uuid.uuid4().hex}"
    sb = client.sandbox()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sb.exec, sleeper_argv(marker, 120))
        assert wait_until(lambda: bool(processes_with(marker)))
        sb.stop()
        with pytest.raises((SandboxLostError, SandboxNotFoundError)):
            running.result(timeout=60)
    assert wait_until(lambda: not processes_with(marker))


# -- faults -------------------------------------------------------------------------------------


def test_transient_errors_are_transient(client: SandboxClient, emulator: AviatoEmulator) -> None:
    sb = client.sandbox()
    emulator.faults.error_rate = 1.0
    kinds = set()
    for call in (
        lambda: client.sandbox(),
        lambda: client.list(),
        lambda: client.get(sb.id),
        lambda: sb.exec(["true"], timeout=60),
        lambda: sb.write_file("f", "x"),
        lambda: sb.read_file("f"),
    ) * 3:
        with pytest.raises(TransientBackendError) as info:
            call()
        kinds.add(type(info.value.__cause__))
    assert kinds == {cwsandbox.SandboxUnavailableError, cwsandbox.SandboxResourceExhaustedError}
    emulator.faults.error_rate = 0.0
    sb.stop()
    assert emulator.live_sandboxes() == 0


def test_dropped_calls_are_transient(client: SandboxClient, emulator: AviatoEmulator) -> None:
    emulator.faults.drop_rate = 1.0
    with pytest.raises(TransientBackendError):
        client.sandbox()
    assert emulator.sandbox_ids() == []


def test_sandbox_dying_mid_exec_is_lost(client: SandboxClient, emulator: AviatoEmulator) -> None:
    sb = client.sandbox()
    emulator.faults.die_rate = 1.0
    with pytest.raises(SandboxLostError):
        sb.exec([PY, "-c", "print('hi')"], timeout=60)
    emulator.faults.die_rate = 0.0
    assert sb.info().status is SandboxStatus.FAILED
    with pytest.raises(SandboxNotFoundError):
        sb.exec(["true"], timeout=60)
    assert emulator.live_sandboxes() == 0


def test_sandbox_cap_refuses_creation_as_transient(emulator: AviatoEmulator) -> None:
    emulator.faults.max_sandboxes = 1
    with get_backend("aviato", base_url=emulator.url, api_key=emulator.api_key) as c:
        first = c.sandbox()
        with pytest.raises(TransientBackendError):
            c.sandbox()
        assert emulator.live_sandboxes() == 1
        first.stop()
        c.sandbox().stop()  # room again


def _seed_failing_only_the_first_status_poll(rate: float) -> int:
    """A seed whose draws let CreateSandbox through, fail the GetSandbox after it, then let
    the clean-up (DeleteSandbox and its status poll) through."""
    for seed in range(10_000):
        draws = random.Random(seed)
        create, poll, _kind, delete, after = (draws.random() for _ in range(5))
        if create >= rate and poll < rate and delete >= rate and after >= rate:
            return seed
    raise AssertionError("no seed found")


def test_create_failing_after_the_sandbox_was_made_does_not_leak() -> None:
    seed = _seed_failing_only_the_first_status_poll(0.5)
    with (
        AviatoEmulator(api_key="k", faults=Faults(error_rate=0.5, seed=seed)) as emu,
        get_backend("aviato", base_url=emu.url, api_key="k") as c,
    ):
        with pytest.raises(TransientBackendError):
            c.sandbox()
        assert len(emu.sandbox_ids()) == 1, "the service made the sandbox"
        assert emu.live_sandboxes() == 0, "and the backend deleted it"


@pytest.mark.slow
def test_cancelled_create_does_not_leak() -> None:
    with (
        AviatoEmulator(api_key="k", faults=Faults(create_latency_ms=1500)) as emu,
        get_backend("aviato", base_url=emu.url, api_key="k") as c,
    ):

        async def give_up() -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.asandbox(), timeout=0.3)

        asyncio.run(give_up())
        assert wait_until(lambda: len(emu.sandbox_ids()) == 1), "the service made the sandbox"
        assert wait_until(lambda: emu.live_sandboxes() == 0), "and the backend deleted it"


# -- the CLI and process-wide state -------------------------------------------------------------


def _read_line(stream: IO[str] | None, timeout: float) -> str:
    """One line from a pipe, without hanging the test if it never comes."""
    assert stream is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    return lines.get(timeout=timeout)


def test_cli_emulator_serves_and_cleans_up_on_sigterm(local_root: Path) -> None:
    env = {**os.environ, "TMPDIR": str(local_root), "PYTHONPATH": str(REPO)}  # nobody can enter
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandboxkit", "emulate", "aviato", "--port", "0", "--api-key", "k"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = _read_line(proc.stdout, timeout=120)
        assert line.startswith("CWSANDBOX_BASE_URL=http://127.0.0.1:"), line
        url = line.strip().split("=", 1)[1]
        with get_backend("aviato", base_url=url, api_key="k") as c:
            sb = c.sandbox()
            assert sb.exec(["echo", "cli"], timeout=60).stdout == "cli\n"
        assert len(list(local_root.glob("sandboxkit-aviato-*/sbx-*"))) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
        assert list(local_root.glob("sandboxkit-aviato-*/sbx-*")) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SIGNAL_PROBE = textwrap.dedent(
    """
    import asyncio, signal, sys
    import sandboxkit

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    client = sandboxkit.get_backend("aviato", signal_handlers=sys.argv[1] == "opt-in")

    async def main():
        # Created on the main thread, where the client installs its handlers unless told not to.
        sb = await client.asandbox()
        await sb.astop()

    asyncio.run(main())
    after = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    print("kept" if after == before else "replaced")
    """
)


@pytest.mark.parametrize(("mode", "expected"), [("default", "kept"), ("opt-in", "replaced")])
def test_client_signal_handlers_are_off_unless_asked_for(
    aviato_env: AviatoEmulator, mode: str, expected: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CWSANDBOX_DISABLE_SIGNAL_HANDLERS", None)
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_PROBE, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


# -- the emulator's direct Python path ----------------------------------------------------------

SEES = (
    "import os, sys\n"
    "print(sorted(os.environ.items()), os.getcwd(), sys.argv, sys.stdin.read())\n"
    "print('err', file=sys.stderr); sys.exit(int(os.environ.get('CODE', '0')))"
)


@pytest.mark.parametrize(
    ("argv", "cwd", "env"),
    [
        ([PY, "-c", SEES, "a b"], None, None),
        ([PY, "-c", SEES], "sub", {"CODE": "3", "QUOTED": 'it\'s "x" = y', "EMPTY": ""}),
        (["python", "-c", "raise KeyError('k')"], "sub", None),
        ([PY, "-c", SEES], "missing", None),
        (["sh", "-c", "echo $PWD $OLDPWD"], "sub", None),
    ],
)
def test_direct_python_runs_as_through_sh(
    argv: list[str], cwd: str | None, env: dict[str, str] | None
) -> None:
    """The emulator may skip the backend's sh wrapper around Python; nothing may tell."""
    results = []
    for direct in (True, False):
        with (
            AviatoEmulator(api_key="k", direct_python=direct) as emu,
            get_backend("aviato", base_url=emu.url, api_key="k") as c,
            c.sandbox() as sb,
        ):
            sb.exec(["mkdir", "sub"], timeout=120)
            try:
                r = sb.exec(argv, cwd=cwd, env=env, stdin=b"in", timeout=120)
                results.append((r.returncode, r.stdout, r.stderr))
            except SandboxError as exc:
                results.append((type(exc).__name__, str(exc).replace(sb.id, "<id>"), ""))
    assert results[0] == results[1]
