"""The Modal backend and its emulator, with the real ``modal`` client in between.

The shared contract runs on modal through ``conftest.CONFORMANCE_BACKENDS``, and the rewards and
cleanup tests through ``sandboxkit.testing.remote``; this module covers what is particular to
Modal: credentials, what a spec and provider options become, faults as the client reports them,
and the emulator served by ``sandboxkit emulate`` as ``sandboxkit doctor`` sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytest.importorskip("modal", reason="needs pip install 'sandboxkit[modal,emulators]'")

import modal.config

from sandboxkit import (
    AuthenticationError,
    BackendMisconfiguredError,
    RateLimitedError,
    SandboxClient,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
    get_backend,
)
from sandboxkit.backends.modal import ARG_MAX, tag_name
from sandboxkit.doctor import check_backend
from sandboxkit.emulators import MODAL_TOKEN_ID
from sandboxkit.emulators.modal import ModalEmulator
from sandboxkit.registry import resolve_backend
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import API_KEY, backend_env, backend_options, serve_emulator

PY = "python3"


@dataclass
class Switched(Faults):
    """Faults whose transient error, when set, hits every call."""

    kind: str | None = None

    def transient_error(self) -> str | None:
        return self.kind


@pytest.fixture
def emulator() -> Iterator[ModalEmulator]:
    """A private emulator whose faults a test may change."""
    with ModalEmulator(api_key=API_KEY, faults=Switched(retry_after=2.5)) as emu:
        yield emu


@pytest.fixture
def client(emulator: ModalEmulator) -> Iterator[SandboxClient]:
    with get_backend("modal", **backend_options("modal", emulator.url)) as c:
        yield c


def test_a_wrong_secret_is_an_authentication_error_and_no_token_fails_at_once(
    emulator: ModalEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = backend_options("modal", emulator.url) | {"token_secret": "wrong"}
    with get_backend("modal", **options) as c, pytest.raises(AuthenticationError):
        c.sandbox()
    assert emulator.sandbox_ids() == []
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(var, raising=False)
    # Nor a profile of ~/.modal.toml (read when modal is imported): one that is not there.
    monkeypatch.setattr(modal.config, "_profile", "sandboxkit-no-such-profile")
    with pytest.raises(BackendMisconfiguredError) as raised:
        get_backend("modal", server_url=emulator.url, token_id=MODAL_TOKEN_ID)
    assert str(raised.value) == (
        "the modal backend needs a token: pass token_id= and token_secret= or set "
        "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (`modal token new` saves one in "
        "~/.modal.toml, which is read too)"
    )


def test_spec_options_and_long_arguments_reach_modal(
    client: SandboxClient, emulator: ModalEmulator
) -> None:
    sb = client.sandbox(
        tags=["run", "a tag with spaces"],
        env={"SPEC": "1"},
        workdir="/workspace/proj",
        cpu=0.5,
        memory_mb=256,
        lifetime_seconds=90.5,
    )
    info, definition = emulator.describe(sb.id), emulator.definition(sb.id)
    tags = {(t.tag_name, t.tag_value) for t in info.tags}
    assert {(tag_name("run"), "run"), (tag_name("a tag with spaces"), "a tag with spaces")} <= tags
    assert ("sbk.workdir", "/workspace/proj") in tags
    assert (definition.workdir, definition.timeout_secs, definition.idle_timeout_secs) == (
        "/workspace/proj",
        91,
        900,
    )
    assert (definition.resources.milli_cpu, definition.resources.memory_mb) == (500, 256)
    assert sb.exec(["sh", "-c", 'pwd; echo "$SPEC"'], timeout=60).stdout == "/workspace/proj\n1\n"
    # Stdin past one client write, and a -c source past the client's argument limit.
    big = b"x" * (9 << 20)
    assert sb.exec(["wc", "-c"], stdin=big, timeout=60).stdout.strip() == str(len(big))
    source = "#" * ARG_MAX + "\nimport sys; print(sys.argv, sys.stdin.read())"
    result = sb.exec([PY, "-I", "-c", source, "arg"], stdin="in", timeout=60)
    assert result.stdout == "['-c', 'arg'] in\n"
    long_arg = "y" * ARG_MAX + "é\n\n"  # any command: its arguments whole, newlines kept
    shown = sb.exec(["sh", "-c", 'printf %s "$1" | wc -c; cat', "sh", long_arg], stdin="in")
    assert shown.stdout == f"{len(long_arg.encode())}\nin"
    flood = sb.exec([PY, "-c", "import sys; sys.stdout.write('a' * (3 << 20))"], timeout=60)
    assert (len(flood.stdout_bytes), flood.truncated, flood.returncode) == (1 << 20, True, 0)
    # A GPU takes Modal's V1 path; another app is listed too.
    gpu = client.sandbox(tags=["run"], gpu="T4", app_name="other")
    assert (len(gpu.id), emulator.definition(gpu.id).resources.gpu_config.gpu_type) == (25, "T4")
    assert emulator.describe(gpu.id).app_id != info.app_id
    assert gpu.exec(["echo", "v1"], timeout=60).stdout == "v1\n"
    assert {i.id for i in client.list(tags=["run"])} == {sb.id, gpu.id}
    assert [i.tags for i in client.list(tags=["a tag with spaces"])] == [
        ("run", "a tag with spaces")
    ]
    with pytest.raises(TypeError, match="'gpus'"):
        client.sandbox(gpus="T4")
    sb.stop()
    gpu.stop()
    assert emulator.live_sandboxes() == 0


def test_throttling_carries_modals_wait_and_server_errors_are_transient(
    client: SandboxClient, emulator: ModalEmulator
) -> None:
    sb = client.sandbox()
    sb.write_file("f", "x")
    faults = emulator.faults
    assert isinstance(faults, Switched)
    faults.kind = "rate_limited"
    for call in (
        client.sandbox,
        client.list,
        lambda: client.get(sb.id),
        lambda: sb.exec(["true"], timeout=60),
        lambda: sb.write_file("f", "y"),
        lambda: sb.read_file("f"),
    ):
        with pytest.raises(RateLimitedError) as raised:
            call()
        assert raised.value.retry_after == 2.5
    faults.kind = "server_error"  # the client retries these itself, then gives up
    for call in (client.sandbox, client.list):
        with pytest.raises(TransientBackendError) as failed:
            call()
        assert type(failed.value) is TransientBackendError
    faults.kind = None
    assert sb.read_file("f") == b"x"
    faults.drop_rate = 1.0
    with pytest.raises(TransientBackendError):
        client.sandbox()
    faults.drop_rate = 0.0
    sb.stop()
    assert emulator.live_sandboxes() == 0
    assert len(emulator.sandbox_ids()) == 1


def test_a_sandbox_dying_mid_exec_is_lost_and_the_cap_is_a_rate_limit(
    client: SandboxClient, emulator: ModalEmulator
) -> None:
    sb = client.sandbox()
    emulator.faults.die_rate = 1.0
    with pytest.raises(SandboxLostError):
        sb.exec([PY, "-c", "print('hi')"], timeout=60)
    emulator.faults.die_rate = 0.0
    with pytest.raises(SandboxNotFoundError):
        sb.exec(["true"], timeout=60)
    with pytest.raises(SandboxNotFoundError):
        client.get(sb.id)
    emulator.faults.max_sandboxes = 1
    first = client.sandbox()
    with pytest.raises(RateLimitedError) as raised:
        client.sandbox()
    assert raised.value.retry_after == 2.5
    first.stop()
    client.sandbox().stop()  # room again
    assert emulator.live_sandboxes() == 0


def test_the_served_emulator_passes_the_doctor_and_runs_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serve_emulator("modal") as url:
        for var, value in backend_env("modal", url).items():
            monkeypatch.setenv(var, value)
        checks = {
            c.name: (c.status.value, c.detail) for c in check_backend(resolve_backend("modal"), 30)
        }
        assert checks["credentials"] == ("ok", "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET set")
        assert checks["endpoint"][0] == "ok" and "gRPC channel ready" in checks["endpoint"][1]
        assert checks["api"] == ("ok", "an authenticated list call answered (0 found)")
        with get_backend("modal") as c, c.sandbox() as sb:
            assert sb.exec(["echo", "served"], timeout=60).stdout == "served\n"
