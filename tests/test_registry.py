"""Choosing a backend: argument, environment, .env file, aliases, plugins and helpful errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import config
from sandboxkit.errors import BackendUnavailableError, UnknownBackendError


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No SANDBOXKIT_BACKEND, a fresh working directory, and .env not yet read."""
    # Set, then deleted: monkeypatch then puts back the original value at the end, even where
    # a test's .env file added the variable (deleting an absent one would record nothing).
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "")
    monkeypatch.delenv("SANDBOXKIT_BACKEND")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "_dotenv_loaded", False)
    return tmp_path


def test_default_is_subprocess(clean_env: Path) -> None:
    with sandboxkit.get_backend() as client:
        assert client.name == "subprocess"


@pytest.mark.parametrize("name", ["subprocess", "local", "LOCAL", " subprocess "])
def test_names_and_aliases(clean_env: Path, name: str) -> None:
    with sandboxkit.get_backend(name) as client:
        assert client.name == "subprocess"


def test_env_var_selects(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "local")
    assert sandboxkit.get_backend().name == "subprocess"


def test_dotenv_is_read_but_never_overrides(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (clean_env / ".env").write_text("SANDBOXKIT_BACKEND=no-such-backend\n")
    with pytest.raises(UnknownBackendError, match="no-such-backend"):
        sandboxkit.get_backend()
    monkeypatch.setattr(config, "_dotenv_loaded", False)
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "local")
    assert sandboxkit.get_backend().name == "subprocess"


def test_argument_beats_environment(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "no-such-backend")
    assert sandboxkit.get_backend("subprocess").name == "subprocess"


def test_unknown_name_lists_the_available_ones(clean_env: Path) -> None:
    with pytest.raises(UnknownBackendError) as info:
        sandboxkit.get_backend("dytona")
    message = str(info.value)
    for name in ("subprocess", "local", "daytona", "aviato", "cwsandbox"):
        assert name in message


@pytest.mark.parametrize(("name", "sdk", "extra"), [("daytona", "daytona", "daytona")])
def test_missing_sdk_names_the_extra(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str, sdk: str, extra: str
) -> None:
    # A None entry makes ``import <sdk>`` fail exactly as when it is not installed.
    monkeypatch.setitem(sys.modules, sdk, None)
    monkeypatch.delitem(sys.modules, f"sandboxkit.backends.{name}", raising=False)
    with pytest.raises(BackendUnavailableError, match=rf"pip install 'sandboxkit\[{extra}\]'"):
        sandboxkit.get_backend(name)


def test_third_party_backend_from_an_entry_point(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = clean_env / "site"
    dist = site / "sandboxkit_echo-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sandboxkit-echo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[sandboxkit.backends]\nechobox = sandboxkit_echo:EchoBackend\n"
    )
    (site / "sandboxkit_echo.py").write_text(
        textwrap.dedent(
            """
            from sandboxkit.backends.subprocess import SubprocessBackend

            class EchoBackend(SubprocessBackend):
                name = "echobox"
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    assert "echobox" in sandboxkit.available_backends()
    with sandboxkit.get_backend("echobox") as client, client.sandbox() as sb:
        assert client.name == "echobox"
        assert sb.exec(["python3", "-c", "print('plugged in')"], timeout=60).stdout == (
            "plugged in\n"
        )


def test_plugin_that_is_not_a_backend_is_refused(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = clean_env / "site"
    dist = site / "notabackend-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: notabackend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sandboxkit.backends]\nbogus = builtins:dict\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(TypeError, match="does not implement"):
        sandboxkit.get_backend("bogus")


def test_a_client_wrapped_again_keeps_its_backend(clean_env: Path) -> None:
    """A client passes for a Backend; wrapping it must not turn the async protocol into the
    client's sync twins (stop would then fail inside sandboxkit's own loop)."""
    with sandboxkit.get_backend("subprocess") as client:
        again = sandboxkit.SandboxClient(client)
        assert again.backend is client.backend
        with again.sandbox(tags=["wrapped-again"]) as sb:
            assert sb.exec(["true"]).returncode == 0
            assert [info.id for info in again.list(tags=["wrapped-again"])] == [sb.id]
        assert again.list(tags=["wrapped-again"]) == []
