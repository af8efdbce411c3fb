"""The E2B backend against the E2B emulator, driven by the real ``e2b`` SDK: what is E2B's own
(metadata, templates, pause and resume, its two planes' errors and faults), beyond the shared
suites (conformance, remote rewards, remote cleanup) that cover it with the other providers."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("e2b", reason="needs pip install 'sandboxkit[e2b,emulators]'")
pytest.importorskip("aiohttp", reason="needs pip install 'sandboxkit[e2b,emulators]'")

from e2b import AsyncSandbox

from sandboxkit import SandboxClient, get_backend
from sandboxkit.backends.e2b import OUTPUT_BYTES, STDIN_CHUNK, E2BBackend, tag_key
from sandboxkit.emulators.e2b import E2BEmulator
from sandboxkit.errors import (
    AuthenticationError,
    BackendMisconfiguredError,
    RateLimitedError,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
)
from sandboxkit.portal import run_sync
from sandboxkit.protocol import KILLED_RETURNCODE, SandboxStatus
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import processes_with, sleeper_argv, wait_until

REPO = Path(__file__).resolve().parents[1]
PY = "python3"
KEY = "e2b-test-key"


@pytest.fixture(scope="module")
def emulator() -> Iterator[E2BEmulator]:
    """One emulator for the module; a test that injects faults gets them reset after it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        with E2BEmulator(api_key=KEY) as emu:
            yield emu


@pytest.fixture
def emu(emulator: E2BEmulator) -> Iterator[E2BEmulator]:
    emulator.faults = Faults()
    yield emulator
    emulator.faults = Faults()


@pytest.fixture
def client(emu: E2BEmulator) -> Iterator[SandboxClient]:
    before = emu.live_sandboxes()
    with get_backend("e2b", api_key=KEY, api_url=emu.url, sandbox_url=emu.url) as c:
        yield c
    assert emu.live_sandboxes() == before, "the test left sandboxes running"


# -- configuration ------------------------------------------------------------------------------


def test_a_missing_key_fails_when_the_backend_is_built_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(BackendMisconfiguredError) as raised:
        get_backend("e2b")
    assert type(raised.value) is BackendMisconfiguredError
    assert str(raised.value) == "the e2b backend needs an API key: pass api_key= or set E2B_API_KEY"


def test_a_wrong_key_is_an_authentication_error_that_makes_nothing(emu: E2BEmulator) -> None:
    with (
        get_backend("e2b", api_key="wrong", api_url=emu.url, sandbox_url=emu.url) as c,
        pytest.raises(AuthenticationError) as raised,
    ):
        c.sandbox()
    assert "refused the API key (HTTP 401); check E2B_API_KEY" in str(raised.value)
    assert emu.live_sandboxes() == 0


def test_tags_template_and_options_reach_the_api_as_e2b_shows_them(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    tags = ["run=a b", "odd&=?/%ü", f"only={uuid.uuid4().hex}"]
    options = {"metadata": {"team": "rl"}, "timeout": 120}
    with client.sandbox(image="my-template", tags=tags, env={"V": "1"}, **options) as sb:
        info = asyncio.run(AsyncSandbox.get_info(sb.id, api_key=KEY, api_url=emu.url))
        assert info.template_id == "my-template"
        assert info.metadata["team"] == "rl"
        assert {info.metadata[tag_key(t)] for t in tags} == set(tags)
        assert 115 <= (info.end_at - info.started_at).total_seconds() <= 125
        assert set(sb.info().tags) == set(tags)
        assert [s.id for s in client.list(tags=tags[1:])] == [sb.id]
        assert client.list(tags=[*tags, "not-there"]) == []
        assert sb.exec([PY, "-c", "import os; print(os.environ['V'])"], timeout=60).stdout == "1\n"
    with pytest.raises(TypeError, match="unexpected keyword argument 'snapshot'"):
        client.sandbox(snapshot="x")


def test_pause_keeps_files_and_resume_brings_the_sandbox_back(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    backend = client.backend
    assert isinstance(backend, E2BBackend)
    with client.sandbox() as sb:
        sb.write_file("kept.txt", "before the pause")
        assert run_sync(backend.pause(sb.id)) is True
        assert run_sync(backend.pause(sb.id)) is False
        assert emu.state(sb.id) == "paused"
        assert sb.info().status is SandboxStatus.PENDING
        assert [s.id for s in client.list(status=SandboxStatus.PENDING)] == [sb.id]
        with pytest.raises(SandboxNotFoundError, match="is paused"):
            sb.exec(["true"], timeout=60)
        resumed = run_sync(backend.resume(sb.id))
        assert resumed.status is SandboxStatus.RUNNING
        assert sb.read_file("kept.txt") == b"before the pause"


# -- commands -----------------------------------------------------------------------------------


def test_output_and_stdin_keep_every_byte_past_the_caps(client: SandboxClient) -> None:
    """Bytes that are not UTF-8 come back as they are (the SDK's own handle would replace them);
    stdin larger than one SendInput arrives whole; output past the cap is cut, and flagged."""
    stdin = bytes(range(256)) * (STDIN_CHUNK * 5 // 2 // 256)
    code = (
        "import hashlib, sys; data = sys.stdin.buffer.read(); "
        "sys.stdout.buffer.write(b'\\xff\\xfe' + hashlib.sha256(data).digest()); "
        "sys.stderr.buffer.write(b'\\x80' * (int(sys.argv[1]) + 7))"
    )
    with client.sandbox() as sb:
        result = sb.exec([PY, "-c", code, str(OUTPUT_BYTES)], stdin=stdin, timeout=60)
    assert result.returncode == 0 and not result.timed_out
    assert result.stdout_bytes == b"\xff\xfe" + hashlib.sha256(stdin).digest()
    assert result.stderr_bytes == b"\x80" * OUTPUT_BYTES and result.truncated


def test_a_timeout_kills_the_command_and_leaves_the_sandbox_usable(client: SandboxClient) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    with client.sandbox() as sb:
        result = sb.exec(sleeper_argv(marker, 120), timeout=1)
        assert (result.timed_out, result.returncode) == (True, KILLED_RETURNCODE)
        assert wait_until(lambda: not processes_with(marker)), "the command outlived its timeout"
        assert sb.exec(["true"], timeout=60).ok


def test_a_cancelled_exec_kills_its_command(client: SandboxClient) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    with client.sandbox() as sb:

        async def give_up() -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sb.aexec(sleeper_argv(marker, 120)), timeout=1.0)

        asyncio.run(give_up())
        assert wait_until(lambda: not processes_with(marker)), "the cancelled command runs on"


def test_stopping_a_sandbox_under_its_command_is_lost_or_not_found(client: SandboxClient) -> None:
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


def test_injected_errors_are_transient_on_both_planes_with_their_wait(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    sb = client.sandbox()
    emu.faults = Faults(error_rate=1.0, retry_after=2.5, seed=3)
    kinds: set[tuple[str, float | None]] = set()
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
        error = info.value
        kinds.add((type(error).__name__, getattr(error, "retry_after", None)))
    assert kinds == {("TransientBackendError", None), ("RateLimitedError", 2.5)}
    emu.faults = Faults()
    sb.stop()


def test_a_create_whose_answer_is_lost_leaves_no_sandbox(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    emu.faults = Faults(drop_rate=1.0, operations=frozenset({"create"}))
    with pytest.raises(TransientBackendError):
        client.sandbox()
    assert emu.live_sandboxes() == 0, "the backend found the sandbox it was not told of"


def test_a_command_whose_end_is_lost_is_transient_while_the_sandbox_runs(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    with client.sandbox() as sb:
        emu.faults = Faults(drop_rate=1.0, operations=frozenset({"exec"}))
        with pytest.raises(TransientBackendError) as raised:
            sb.exec([PY, "-c", "print('ran')"], timeout=60)
        assert type(raised.value) is TransientBackendError
        emu.faults = Faults()
        assert sb.exec([PY, "-c", "print('again')"], timeout=60).stdout == "again\n"


def test_a_sandbox_dying_mid_exec_is_lost_as_the_api_says(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    sb = client.sandbox()
    emu.faults = Faults(die_rate=1.0)
    with pytest.raises(SandboxLostError, match="is gone"):
        sb.exec([PY, "-c", "print('hi')"], timeout=60)
    emu.faults = Faults()
    with pytest.raises(SandboxNotFoundError):
        sb.info()
    assert emu.live_sandboxes() == 0


def test_a_command_whose_envd_was_killed_is_lost_though_the_sandbox_runs(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    """A program with sudo may kill envd: the sandbox is then lost (charged to the program by
    the layer above the second time), not a transient error to retry in it."""
    marker = f"marker-{uuid.uuid4().hex}"
    sb = client.sandbox()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sb.exec, sleeper_argv(marker, 120), timeout=60)
        assert wait_until(lambda: bool(processes_with(marker)))
        emu.kill_envd(sb.id)
        with pytest.raises(SandboxLostError, match="its envd does not answer"):
            running.result(timeout=60)
    assert sb.info().status is SandboxStatus.RUNNING  # as the API says
    sb.stop()


def test_the_sandbox_cap_refuses_creation_as_rate_limited(
    client: SandboxClient, emu: E2BEmulator
) -> None:
    emu.faults = Faults(max_sandboxes=emu.live_sandboxes() + 1, retry_after=0.5)
    with client.sandbox():
        with pytest.raises(RateLimitedError) as raised:
            client.sandbox()
        assert raised.value.retry_after == 0.5


# -- the CLI ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_doctor_reaches_the_emulator_and_checks_the_key(emu: E2BEmulator) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "E2B_API_URL": emu.url,
        "E2B_SANDBOX_URL": emu.url,
        "E2B_API_KEY": KEY,
    }
    doctor = [sys.executable, "-m", "sandboxkit", "doctor", "--backend", "e2b", "--timeout", "10"]
    ok = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout
    assert re.search(r"\[ok  \] api +an authenticated list call answered", ok.stdout)
    assert KEY not in ok.stdout + ok.stderr
    wrong = subprocess.run(
        doctor, env={**env, "E2B_API_KEY": "nope"}, capture_output=True, text=True, timeout=300
    )
    assert wrong.returncode == 1
    assert re.search(r"\[FAIL\] api +AuthenticationError", wrong.stdout)
