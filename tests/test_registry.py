"""Choosing a backend: argument, environment, .env file, aliases, plugins and helpful errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import config
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.errors import BackendUnavailableError, UnknownBackendError
from sandboxkit.registry import (
    BackendChoice,
    BackendEntry,
    as_client,
    backend_factory,
    resolve_backend,
)

Installer = Callable[..., Path]


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


@pytest.mark.parametrize(
    ("name", "sdk", "extra"), [("daytona", "daytona", "daytona"), ("e2b", "e2b", "e2b")]
)
def test_missing_sdk_names_the_extra(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str, sdk: str, extra: str
) -> None:
    # A None entry makes ``import <sdk>`` fail exactly as when it is not installed.
    monkeypatch.setitem(sys.modules, sdk, None)
    monkeypatch.delitem(sys.modules, f"sandboxkit.backends.{name}", raising=False)
    with pytest.raises(BackendUnavailableError, match=rf"pip install 'sandboxkit\[{extra}\]'"):
        sandboxkit.get_backend(name)


ECHO_BACKEND = """
from sandboxkit.backends.subprocess import SubprocessBackend

class EchoBackend(SubprocessBackend):
    name = "echobox"
"""


def test_third_party_backend_from_an_entry_point(
    clean_env: Path, install_plugin: Installer
) -> None:
    install_plugin(
        "sandboxkit-echo",
        entry_points={"echobox": "sandboxkit_echo:EchoBackend"},
        modules={"sandboxkit_echo": ECHO_BACKEND},
    )
    assert "echobox" in sandboxkit.available_backends()
    with sandboxkit.get_backend("echobox") as client, client.sandbox() as sb:
        assert client.name == "echobox"
        assert sb.exec(["python3", "-c", "print('plugged in')"], timeout=60).stdout == (
            "plugged in\n"
        )


def test_plugin_that_is_not_a_backend_is_refused(
    clean_env: Path, install_plugin: Installer
) -> None:
    install_plugin("notabackend", entry_points={"bogus": "builtins:dict"})
    with pytest.raises(TypeError, match="does not implement"):
        sandboxkit.get_backend("bogus")


ECHO_ENTRY = """
from sandboxkit.registry import BackendEntry

ENTRY = BackendEntry(
    "sandboxkit_echo:EchoBackend",
    extra="cloud",
    sdk="echo-sdk",
    key_vars=("ECHOBOX_TOKEN", "ECHOBOX_OLD_TOKEN"),
    url_var="ECHOBOX_URL",
    default_url="https://echo.example/api",
)
BROKEN = BackendEntry("sandboxkit_echo_cloud:CloudBackend", extra="cloud")
"""


def test_a_plugin_declares_its_facts_in_a_registry_entry(
    clean_env: Path, install_plugin: Installer
) -> None:
    """An entry point may name a BackendEntry: the backend it names works as a bare class
    does, and the entry carries the facts, the distribution that declared it filled in."""
    install_plugin(
        "sandboxkit-echo",
        entry_points={"echobox": "sandboxkit_echo_entry:ENTRY"},
        modules={"sandboxkit_echo_entry": ECHO_ENTRY, "sandboxkit_echo": ECHO_BACKEND},
    )
    choice = resolve_backend("EchoBox")
    assert (choice.name, choice.source, choice.known) == ("echobox", "argument", True)
    assert choice.entry() == BackendEntry(
        "sandboxkit_echo:EchoBackend",
        extra="cloud",
        package="sandboxkit-echo",
        sdk="echo-sdk",
        key_vars=("ECHOBOX_TOKEN", "ECHOBOX_OLD_TOKEN"),
        url_var="ECHOBOX_URL",
        default_url="https://echo.example/api",
    )
    assert choice.entry().install == "pip install 'sandboxkit-echo[cloud]'"
    with sandboxkit.get_backend("echobox") as client, client.sandbox() as sb:
        assert client.name == "echobox"
        assert sb.exec(["python3", "-c", "print('declared')"], timeout=60).stdout == "declared\n"


def test_a_plugin_missing_a_dependency_names_its_own_extra(
    clean_env: Path, install_plugin: Installer
) -> None:
    install_plugin(
        "sandboxkit-echo",
        entry_points={"cloudbox": "sandboxkit_echo_entry:BROKEN"},
        modules={
            "sandboxkit_echo_entry": ECHO_ENTRY,
            "sandboxkit_echo_cloud": "import echo_cloud_sdk_that_is_not_installed\n",
        },
    )
    with pytest.raises(
        BackendUnavailableError,
        match=r"needs 'echo_cloud_sdk_that_is_not_installed'.*'sandboxkit-echo\[cloud\]'",
    ):
        sandboxkit.get_backend("cloudbox")


def test_every_caller_resolves_names_the_same_way(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The argument, else SANDBOXKIT_BACKEND (the environment, then .env), else the default;
    stripped, lower-cased, aliases followed; unknown names stay unknown until used."""
    assert resolve_backend() == BackendChoice("subprocess", "default")
    (clean_env / ".env").write_text("SANDBOXKIT_BACKEND= CWSandbox\n")
    monkeypatch.setattr(config, "_dotenv_loaded", False)
    assert resolve_backend() == BackendChoice("aviato", "SANDBOXKIT_BACKEND")
    monkeypatch.setenv("SANDBOXKIT_BACKEND", "LOCAL")
    assert resolve_backend() == BackendChoice("subprocess", "SANDBOXKIT_BACKEND")
    assert resolve_backend(" Daytona ") == BackendChoice("daytona", "argument")
    unknown = resolve_backend("dytona")
    assert (unknown.name, unknown.known) == ("dytona", False)
    with pytest.raises(UnknownBackendError, match="unknown sandbox backend 'dytona'"):
        unknown.entry()
    assert backend_factory("local") == ("subprocess", SubprocessBackend)


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


def test_a_name_a_client_or_a_backend_becomes_a_client(clean_env: Path) -> None:
    """One rule for Session, pools and rewards: a client is used as is and a backend wrapped,
    both left to their owner to close; a name (or None) becomes a client the caller owns;
    anything else is a TypeError naming what was given."""
    made, owned = as_client("LOCAL")
    with made:
        assert (made.name, owned) == ("subprocess", True)
        assert as_client(made) == (made, False)
        wrapped, owned = as_client(made.backend)
        assert (wrapped.backend, owned) == (made.backend, False)
    default, owned = as_client(None)
    with default:
        assert (default.name, owned) == ("subprocess", True)
    with pytest.raises(TypeError, match="a backend name or None, got int: 42"):
        as_client(42)  # type: ignore[arg-type]


def test_a_client_made_from_a_name_says_how_to_get_one() -> None:
    """``SandboxClient("subprocess")`` is what a newcomer writes first: it must not fail later,
    inside ``sandbox()``, with an AttributeError on a str."""
    with pytest.raises(TypeError, match=r"call sandboxkit.get_backend\('subprocess'\)"):
        sandboxkit.SandboxClient("subprocess")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wraps a Backend, got int"):
        sandboxkit.SandboxClient(42)  # type: ignore[arg-type]


def test_a_client_reads_its_backend_s_own_facts_typed(clean_env: Path) -> None:
    """Facts outside the protocol (the local backend's isolation) are read from the backend as
    its class, never forwarded: a client is no stand-in for its backend's attributes."""
    with sandboxkit.get_backend("subprocess") as client:
        local = client.backend_as(SubprocessBackend)
        assert local is client.backend
        assert local.isolation.tier is not None
        assert not hasattr(client, "isolation")
        with pytest.raises(TypeError, match="backend is a SubprocessBackend, not a dict"):
            client.backend_as(dict)
