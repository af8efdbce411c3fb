"""The ``sandboxkit`` command line, run as a user runs it: ``python -m sandboxkit ...``."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import IO

import pytest

from sandboxkit import get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.cli import parse_duration
from sandboxkit.contest import languages as contest_languages
from sandboxkit.contest.languages import Language, languages, register_language
from sandboxkit.doctor import (
    BackendReport,
    Check,
    LanguageCheck,
    Status,
    _commands,
    _warm_path,
    format_json,
    format_report,
    redact,
    run_doctor,
    scrubbed,
)
from sandboxkit.evalfile import summary
from sandboxkit.local import disk, seccomp
from sandboxkit.local.isolation import namespaces_failure
from sandboxkit.outcomes import Outcome, OutcomeKind, Verdict
from sandboxkit.registry import BUILTIN_BACKENDS
from sandboxkit.rewards import exec_reward

REPO = Path(__file__).resolve().parent.parent
UNREACHABLE = "http://127.0.0.1:9"
"""The discard port on loopback: nothing listens there, so a probe fails at once."""
CREDENTIAL_VARS = ("DAYTONA_API_KEY", "CWSANDBOX_API_KEY", "AVIATO_API_KEY")


def cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    environ["NO_PROXY"] = ",".join(filter(None, [environ.get("NO_PROXY"), "127.0.0.1,localhost"]))
    return subprocess.run(
        [sys.executable, "-m", "sandboxkit", *args],
        env=environ,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def clean_env(**settings: str) -> dict[str, str]:
    """This environment without any backend setting, plus ``settings``; remote endpoints point
    at a closed local port so no probe leaves the machine, nor joins a Ray cluster that
    another test (or program) runs here and may stop meanwhile."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DAYTONA_", "CWSANDBOX_", "MODAL_"))
    }
    env.pop("AVIATO_API_KEY", None)
    env.pop("SANDBOXKIT_BACKEND", None)
    env["DAYTONA_API_URL"] = f"{UNREACHABLE}/api"
    env["CWSANDBOX_BASE_URL"] = UNREACHABLE
    env["MODAL_SERVER_URL"] = UNREACHABLE
    env["RAY_ADDRESS"] = UNREACHABLE.removeprefix("http://")
    env.update(settings)
    return env


@pytest.fixture
def local_env(local_root: Path) -> dict[str, str]:
    """The local backend on a private root, so listings see only this test's sandboxes."""
    return clean_env(SANDBOXKIT_LOCAL_ROOT=str(local_root))


@pytest.fixture
def clean_process_env(monkeypatch: pytest.MonkeyPatch, local_env: dict[str, str]) -> None:
    """This process's environment made ``local_env``, for ``run_doctor`` called in-process."""
    for var in set(os.environ) - set(local_env):
        monkeypatch.delenv(var)
    for var, value in local_env.items():
        monkeypatch.setenv(var, value)


def test_help_names_every_subcommand() -> None:
    done = cli("--help")
    assert done.returncode == 0
    for command in ("doctor", "run", "ls", "reap", "eval", "bench", "emulate"):
        assert command in done.stdout


# -- doctor -------------------------------------------------------------------------------


@pytest.mark.slow
def test_doctor_passes_for_the_local_backend_and_never_prints_secrets(
    local_env: dict[str, str],
) -> None:
    secrets = {var: f"secret-{uuid.uuid4().hex}" for var in CREDENTIAL_VARS}
    # A URL that carries a key (some proxies want one) is printed, but never the key.
    url = f"{UNREACHABLE}/{secrets['DAYTONA_API_KEY']}/api"
    done = cli("doctor", "--timeout", "2", env={**local_env, **secrets, "DAYTONA_API_URL": url})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "selected backend: subprocess (default)" in out
    assert re.search(r"^subprocess: ready  <- selected$", out, re.M)
    assert re.search(r"\[ok  \] smoke test +ran python in a sandbox", out)
    if os.uname().machine == "x86_64":  # the fast path, with the init it can use here
        assert re.search(r"\[ok  \] warm template +execs fork from a warm .*\(tiny init\)", out)
        lazy = seccomp.host_filter() is not None and seccomp.user_notification() is None
        network = "for each exec that makes a network socket" if lazy else "ahead for every exec"
        assert re.search(
            rf"\[ok  \] warm template +execs fork .*; a network namespace {network}", out
        )
    if seccomp.native_arch() is not None and seccomp.unsupported() is None:
        assert re.search(r"\[ok  \] seccomp +syscall filter on \(\w+\): \d+ calls allowed", out)
    limits = ("process limit", "memory limit", "cpu limit", "disk limit")
    for line in ("isolation", *limits, "runs as", "bwrap", "python", "root", "seccomp"):
        assert re.search(rf"^  \[\w+ *\] {line} ", out, re.M), line
    assert "DAYTONA_API_KEY set" in out and "CWSANDBOX_API_KEY set" in out
    assert re.search(r"^daytona: NOT READY$", out, re.M)  # its endpoint is unreachable
    assert f"{UNREACHABLE}/***/api (DAYTONA_API_URL) unreachable" in out
    for value in secrets.values():
        assert value not in out + done.stderr


def test_doctor_masks_a_short_key_only_where_it_stands_as_a_whole_value() -> None:
    text = (
        "  [ok  ] python        /opt/sandboxkit/bin/python3\n"
        "  [ok  ] credentials   DAYTONA_API_KEY=k set\n"
        "  [FAIL] endpoint      http://127.0.0.1:9/k/api (k) unreachable: k"
    )
    assert redact(text, ["k"]) == (
        "  [ok  ] python        /opt/sandboxkit/bin/python3\n"
        "  [ok  ] credentials   DAYTONA_API_KEY=*** set\n"
        "  [FAIL] endpoint      http://127.0.0.1:9/***/api (***) unreachable: ***"
    )


def test_doctor_masks_the_longest_secret_first_and_leaves_longer_words_alone() -> None:
    values = ["secret", "secret-a1.b2", "a+b"]
    text = "url=http://h/secret-a1.b2/x secrets secret_x (secret) a+b"
    assert redact(text, values) == "url=http://h/***/x secrets secret_x (***) ***"


def test_doctor_report_with_a_one_letter_key_keeps_its_status_marks() -> None:
    report = BackendReport(
        "daytona", selected=True, checks=[Check("credentials", Status.OK, "DAYTONA_API_KEY set")]
    )
    out = redact(format_report([report], "daytona", "--backend"), ["k"])
    assert "  [ok  ] credentials   DAYTONA_API_KEY set" in out.splitlines()


def test_doctor_masks_a_short_key_in_what_it_quotes_never_in_its_own_words() -> None:
    report = BackendReport(
        "daytona",
        selected=True,
        checks=[
            Check("credentials", Status.OK, "DAYTONA_API_KEY set"),
            Check("endpoint", Status.FAIL, "http://127.0.0.1:9/ok/api unreachable: ok", "see ok"),
        ],
        languages=[
            LanguageCheck("python", "Python 3", "/ok/bin/python3"),
            LanguageCheck("go", "Go", "", "go", "apt install golang-go", "/ok/go/bin/go"),
        ],
    )
    out = format_report(scrubbed([report], ["ok"]), "daytona", "--backend").splitlines()
    assert "  [ok  ] credentials   DAYTONA_API_KEY set" in out
    assert "  [FAIL] endpoint      http://127.0.0.1:9/***/api unreachable: ***" in out
    assert f"  {'':6} {'':13} fix: see ***" in out
    assert f"  {'':6} python        Python 3              /***/bin/python3" in out
    assert any(
        line.endswith(
            "this machine has /***/go/bin/go: SANDBOXKIT_LOCAL_TOOLCHAINS shows its toolchain)"
        )
        for line in out
    )
    data = json.loads(format_json(scrubbed([report], ["ok"]), "daytona", "--backend"))
    assert [c["status"] for c in data["backends"][0]["checks"]] == ["ok", "FAIL"]


@pytest.mark.slow
def test_doctor_run_with_a_two_letter_key_keeps_its_status_marks() -> None:
    """A key ``ok`` (a test account's, say) masked every ``ok`` the doctor printed."""
    done = cli(
        "doctor", "--backend", "daytona", "--timeout", "2", env=clean_env(DAYTONA_API_KEY="ok")
    )
    assert re.search(r"^  \[ok  \] credentials   DAYTONA_API_KEY set$", done.stdout, re.M), (
        done.stdout
    )
    assert "[***" not in done.stdout
    json_done = cli(
        "doctor",
        "--backend",
        "daytona",
        "--json",
        "--timeout",
        "2",
        env=clean_env(DAYTONA_API_KEY="ok"),
    )
    daytona = next(b for b in json.loads(json_done.stdout)["backends"] if b["name"] == "daytona")
    assert daytona["checks"][1] == {
        "name": "credentials",
        "status": "ok",
        "detail": "DAYTONA_API_KEY set",
        "fix": "",
    }


@pytest.mark.slow
def test_doctor_says_when_execs_do_not_fork_from_a_warm_interpreter(
    local_env: dict[str, str],
) -> None:
    """A user who turned the warm template off (or whose machine cannot run it) learns that
    every exec pays an interpreter start, and how to get the fast path back."""
    done = cli(
        "doctor",
        "--backend",
        "subprocess",
        "--timeout",
        "2",
        env={**local_env, "SANDBOXKIT_WARM": "0"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"^  \[warn\] warm template +off: every exec starts a new interpreter", done.stdout, re.M
    )
    assert "unset SANDBOXKIT_WARM" in done.stdout


def test_doctor_gives_the_reason_an_exec_ran_cold(local_root: Path) -> None:
    """When a sandbox's template could not start, the doctor shows the template's reason."""
    with get_backend("subprocess", root=str(local_root), warm=True) as client:
        backend = client.backend
        assert isinstance(backend, SubprocessBackend)
        if namespaces_failure() is not None:
            pytest.skip("no namespaces tier here")
        assert backend.warm
        backend.last_cold_reason = "nested user and pid namespaces are not allowed"
        check = _warm_path(client, "sbx-without-template")
    assert check.status is Status.WARN
    assert check.detail == "execs run cold here: nested user and pid namespaces are not allowed"


@pytest.mark.slow
def test_doctor_fails_for_a_selected_backend_without_credentials() -> None:
    done = cli("doctor", "--timeout", "2", env=clean_env(SANDBOXKIT_BACKEND="daytona"))
    assert done.returncode == 1
    assert "selected backend: daytona (SANDBOXKIT_BACKEND)" in done.stdout
    assert re.search(r"^daytona: NOT READY  <- selected$", done.stdout, re.M)
    assert "[FAIL] credentials   DAYTONA_API_KEY missing" in done.stdout
    assert "fix: set DAYTONA_API_KEY" in done.stdout
    assert "[FAIL] endpoint" in done.stdout and "fix: check the network" in done.stdout


@pytest.mark.slow
def test_doctor_fails_for_an_unreachable_endpoint_and_reports_json() -> None:
    pytest.importorskip("cwsandbox", reason="needs pip install 'sandboxkit[aviato]'")
    secret = f"secret-{uuid.uuid4().hex}"
    env = clean_env(CWSANDBOX_API_KEY=secret)
    done = cli("doctor", "--backend", "aviato", "--json", "--timeout", "2", env=env)
    assert done.returncode == 1
    assert secret not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["selected"] == "aviato" and report["source"] == "--backend"
    aviato = next(b for b in report["backends"] if b["name"] == "aviato")
    assert not aviato["ready"]
    status = {c["name"]: c["status"] for c in aviato["checks"]}
    assert status == {"installed": "ok", "credentials": "ok", "endpoint": "FAIL", "api": "skip"}
    local = next(b for b in report["backends"] if b["name"] == "subprocess")
    assert local["ready"] and not local["selected"]


@pytest.mark.slow
def test_doctor_rejects_an_unknown_backend(local_env: dict[str, str]) -> None:
    done = cli("doctor", "--backend", "nosuchbox", "--timeout", "1", env=local_env)
    assert done.returncode == 1
    assert "unknown backend name" in done.stdout


@pytest.mark.slow
def test_doctor_reaches_an_emulator_and_checks_the_key(aviato_env: object) -> None:
    ok = cli("doctor", "--backend", "aviato", "--timeout", "10")
    assert ok.returncode == 0, ok.stdout
    assert re.search(r"\[ok  \] api +an authenticated list call answered", ok.stdout)
    # The emulator runs commands on this machine: its sandboxes have this machine's python3.
    assert re.search(r"^ {9}python +Python 3 +/\S+/python3$", ok.stdout, re.M)
    assert os.environ["CWSANDBOX_API_KEY"] not in ok.stdout + ok.stderr
    wrong = cli("doctor", "--backend", "aviato", env={**os.environ, "CWSANDBOX_API_KEY": "nope"})
    assert wrong.returncode == 1
    assert re.search(r"\[FAIL\] api +AuthenticationError", wrong.stdout)


@pytest.mark.slow
def test_doctor_lists_the_languages_the_selected_backend_can_run(
    local_env: dict[str, str],
) -> None:
    """Each contest language gets a line: where the sandbox has its toolchain, or what to
    install; the JSON report holds the same."""
    done = cli("doctor", "--timeout", "5", env=local_env)
    assert done.returncode == 0, done.stdout + done.stderr
    system = "/usr/local/bin:/usr/bin:/bin"  # what a local sandbox sees of this machine
    for lang in languages():
        commands = _commands(lang)
        line = rf"^ {{9}}{lang.name} +{re.escape(lang.title)} +(.*)$"
        shown = re.search(line, done.stdout, re.M)
        assert shown is not None, lang.name
        if all(shutil.which(c, path=system) for c in commands):
            assert shown[1].startswith("/") and shown[1].endswith(f"/{commands[0]}")
        else:
            assert shown[1].startswith(f"missing: {lang.install}")
    assert re.search(
        r"^  \[(ok  |warn)\] languages +\d+ of \d+ found in a sandbox", done.stdout, re.M
    )
    assert re.search(r"^ {9}python +Python 3 +/\S+/python3$", done.stdout, re.M)

    report = json.loads(cli("doctor", "--json", "--timeout", "5", env=local_env).stdout)
    local = next(b for b in report["backends"] if b["name"] == "subprocess")
    python = next(lang for lang in local["languages"] if lang["name"] == "python")
    assert python["found"].endswith("/python3") and python["missing"] == ""
    others = [b for b in report["backends"] if not b["selected"]]
    assert all(b["languages"] == [] for b in others)  # probed for the selected one only


@pytest.mark.slow
def test_doctor_shows_a_language_whose_toolchain_the_sandbox_lacks_with_its_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_process_env: None
) -> None:
    # A table of its own, so the language registered here leaves with the test.
    monkeypatch.setattr(contest_languages, "_LANGUAGES", dict(contest_languages._LANGUAGES))
    monkeypatch.setattr(contest_languages, "_NAMES", dict(contest_languages._NAMES))
    register_language(
        Language(
            "cobol",
            "COBOL",
            ("cob",),
            "main.cob",
            ("cobc-not-installed", "-x", "-o", "main", "main.cob"),
            ("./main",),
            "cobc-not-installed",
            "apt install gnucobol",
        )
    )
    assert run_doctor("subprocess", timeout=5, as_json=False) == 0  # a warning, not a failure
    out = capsys.readouterr().out
    assert re.search(
        r"^ {9}cobol +COBOL +missing: apt install gnucobol \(no cobc-not-installed in the "
        r"sandbox\)$",
        out,
        re.M,
    )
    assert re.search(
        r"^  \[warn\] languages +\d+ of \d+ found in a sandbox; missing: .*cobol", out, re.M
    )
    assert re.search(r"^ {9}python +Python 3 +/\S+/python3$", out, re.M)

    run_doctor("subprocess", timeout=5, as_json=True)
    local = next(b for b in json.loads(capsys.readouterr().out)["backends"] if b["selected"])
    cobol = next(lang for lang in local["languages"] if lang["name"] == "cobol")
    assert cobol == {
        "name": "cobol",
        "title": "COBOL",
        "found": "",
        "missing": "cobc-not-installed",
        "install": "apt install gnucobol",
        "host": "",
    }


@pytest.mark.slow
def test_doctor_finds_a_toolchain_outside_usr_in_the_sandbox_once_it_is_named(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_process_env: None,
    toolchain: Path,
) -> None:
    """A language whose compiler this machine has outside /usr (on its PATH here) is missing
    in local sandboxes, and the doctor says what shows it to them; named in
    ``SANDBOXKIT_LOCAL_TOOLCHAINS``, a sandbox finds it."""
    monkeypatch.setattr(contest_languages, "_LANGUAGES", dict(contest_languages._LANGUAGES))
    monkeypatch.setattr(contest_languages, "_NAMES", dict(contest_languages._NAMES))
    register_language(
        Language("sbx", "Toolchain shell", (), "main.sh", ("sbx-cc", "main.sh"), ("./main",))
    )
    monkeypatch.setenv("PATH", f"{toolchain}/bin:{os.environ['PATH']}")
    assert run_doctor("subprocess", timeout=5, as_json=False) == 0
    out = capsys.readouterr().out
    assert re.search(
        rf"^ {{9}}sbx +Toolchain shell +missing: install it \(no sbx-cc in the sandbox; this "
        rf"machine has {toolchain}/bin/sbx-cc: SANDBOXKIT_LOCAL_TOOLCHAINS shows its "
        r"toolchain\)$",
        out,
        re.M,
    ), out
    assert "name its directory in SANDBOXKIT_LOCAL_TOOLCHAINS" in out
    assert re.search(r"^  \[ok  \] toolchains    /usr's only", out, re.M), out

    monkeypatch.setenv("SANDBOXKIT_LOCAL_TOOLCHAINS", str(toolchain))
    assert run_doctor("subprocess", timeout=5, as_json=False) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^ {{9}}sbx +Toolchain shell +{toolchain}/bin/sbx-cc$", out, re.M), out
    assert re.search(
        rf"^  \[ok  \] toolchains    {toolchain} \(SANDBOXKIT_LOCAL_TOOLCHAINS\): ", out, re.M
    ), out


def test_the_registry_names_what_the_backends_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables and endpoints doctor reports (from the registry) are the ones the backends
    read, and the Aviato default is the client's own."""
    pytest.importorskip("daytona", reason="needs pip install 'sandboxkit[daytona,aviato]'")
    cwsandbox = pytest.importorskip(
        "cwsandbox", reason="needs pip install 'sandboxkit[daytona,aviato]'"
    )
    from sandboxkit.backends.aviato import AviatoBackend
    from sandboxkit.backends.daytona import DaytonaBackend

    daytona, aviato = BUILTIN_BACKENDS["daytona"], BUILTIN_BACKENDS["aviato"]
    assert (daytona.key_vars, daytona.url_var) == (("DAYTONA_API_KEY",), "DAYTONA_API_URL")
    assert aviato.key_vars == ("CWSANDBOX_API_KEY", "AVIATO_API_KEY")
    assert aviato.url_var == "CWSANDBOX_BASE_URL"
    assert aviato.default_url == cwsandbox.SandboxDefaults().base_url
    for var in (*daytona.key_vars, daytona.url_var, *aviato.key_vars, aviato.url_var):
        monkeypatch.delenv(var or "", raising=False)
    monkeypatch.setenv("DAYTONA_API_KEY", "k")
    assert DaytonaBackend().api_url == daytona.default_url
    assert AviatoBackend(api_key="k").base_url == aviato.default_url
    monkeypatch.setenv("DAYTONA_API_URL", "http://daytona.example/api")
    monkeypatch.setenv("CWSANDBOX_BASE_URL", "http://aviato.example")
    assert DaytonaBackend().api_url == "http://daytona.example/api"
    assert AviatoBackend(api_key="k").base_url == "http://aviato.example"


def test_doctor_reports_from_the_registry_entry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_process_env: None
) -> None:
    """Change a backend's facts in its registry entry and doctor's report follows."""
    entry = replace(
        BUILTIN_BACKENDS["daytona"],
        sdk="daytona-sdk-that-is-not-installed",
        key_vars=("SBX_TEST_KEY", "SBX_TEST_OLD_KEY"),
        url_var="SBX_TEST_URL",
        default_url=f"{UNREACHABLE}/moved",
    )
    monkeypatch.setitem(BUILTIN_BACKENDS, "daytona", entry)
    assert run_doctor("daytona", timeout=2, as_json=False) == 1
    out = capsys.readouterr().out
    assert "[FAIL] installed     daytona-sdk-that-is-not-installed missing" in out
    assert "fix: pip install 'sandboxkit[daytona]'" in out
    assert "[FAIL] credentials   SBX_TEST_KEY or SBX_TEST_OLD_KEY missing" in out
    assert "fix: set SBX_TEST_KEY" in out
    assert f"[FAIL] endpoint      {UNREACHABLE}/moved (default) unreachable" in out
    assert "fix: check the network and proxy settings, or set SBX_TEST_URL" in out

    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SBX_TEST_OLD_KEY", secret)
    monkeypatch.setenv("SBX_TEST_URL", f"{UNREACHABLE}/{secret}")
    run_doctor("daytona", timeout=2, as_json=False)
    out = capsys.readouterr().out
    assert "[ok  ] credentials   SBX_TEST_OLD_KEY set" in out
    assert f"{UNREACHABLE}/*** (SBX_TEST_URL) unreachable" in out
    assert secret not in out


PLUGIN_ENTRY = """
from sandboxkit.registry import BackendEntry

ENTRY = BackendEntry(
    "sandboxkit_echo:EchoBackend",
    sdk="echo-sdk",
    key_vars=("ECHOBOX_TOKEN", "ECHOBOX_OLD_TOKEN"),
    url_var="ECHOBOX_URL",
    default_url="http://127.0.0.1:9/echo",
)
FUTURE = BackendEntry("sandboxkit_echo:EchoBackend", extra="cloud", min_python=(3, 99))
"""
PLUGIN_BACKEND = """
from sandboxkit.backends.subprocess import SubprocessBackend

class EchoBackend(SubprocessBackend):
    name = "echobox"
"""


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP endpoint on loopback that answers every GET with 200."""

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_doctor_reports_the_facts_a_plugin_declares(
    local_env: dict[str, str], install_plugin: Callable[..., Path], http_server: str
) -> None:
    """A plugin whose entry point names a BackendEntry gets the built-ins' checks: its SDK,
    its credentials (scrubbed from the report), its endpoint, then one authenticated call."""
    install_plugin("echo-sdk", version="2.5")
    site = install_plugin(
        "sandboxkit-echo",
        entry_points={
            "echobox": "sandboxkit_echo_entry:ENTRY",
            "futurebox": "sandboxkit_echo_entry:FUTURE",
        },
        modules={"sandboxkit_echo_entry": PLUGIN_ENTRY, "sandboxkit_echo": PLUGIN_BACKEND},
    )
    secret = f"secret-{uuid.uuid4().hex}"
    env = {**local_env, "PYTHONPATH": str(site)}
    ready = cli(
        "doctor",
        "--backend",
        "EchoBox",
        "--timeout",
        "5",
        env={**env, "ECHOBOX_OLD_TOKEN": secret, "ECHOBOX_URL": f"{http_server}/{secret}"},
    )
    assert ready.returncode == 0, ready.stdout + ready.stderr
    out = ready.stdout
    assert "selected backend: echobox (--backend)" in out
    assert re.search(r"^echobox: ready  <- selected$", out, re.M)
    installed = "plugin sandboxkit_echo_entry:ENTRY (sandboxkit-echo 1.0), echo-sdk 2.5"
    assert f"[ok  ] installed     {installed}" in out
    assert "[ok  ] credentials   ECHOBOX_OLD_TOKEN set" in out
    assert f"[ok  ] endpoint      {http_server}/*** (ECHOBOX_URL) reachable (HTTP 200," in out
    assert re.search(r"\[ok  \] api +an authenticated list call answered \(\d+ found\)", out)
    assert secret not in out + ready.stderr
    assert re.search(r"^futurebox: NOT READY$", out, re.M)
    assert "[FAIL] installed     futurebox needs Python >= 3.99" in out
    assert "fix: use Python >= 3.99, then pip install 'sandboxkit-echo[cloud]'" in out

    missing = cli("doctor", "--backend", "echobox", "--timeout", "2", env=env)
    assert missing.returncode == 1
    assert "[FAIL] credentials   ECHOBOX_TOKEN or ECHOBOX_OLD_TOKEN missing" in missing.stdout
    assert "fix: set ECHOBOX_TOKEN" in missing.stdout
    assert f"[FAIL] endpoint      {UNREACHABLE}/echo (default) unreachable" in missing.stdout
    assert "[skip] api           not tried: fix the gaps above first" in missing.stdout


# -- run ----------------------------------------------------------------------------------


def test_run_prints_output_and_propagates_the_exit_status(
    tmp_path: Path, local_env: dict[str, str], local_root: Path
) -> None:
    program = tmp_path / "prog.py"
    program.write_text("import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n")
    program.write_text(program.read_text() + "sys.exit(3)\n")
    done = cli("run", str(program), env=local_env)
    assert done.returncode == 3
    assert done.stdout == "to stdout\n"
    assert "to stderr" in done.stderr
    with get_backend("subprocess", root=local_root) as client:
        assert client.list() == []  # the sandbox was stopped


def test_run_reads_the_program_from_stdin(local_env: dict[str, str]) -> None:
    done = cli("run", "-", input="print(sum(range(10)))\n", env=local_env)
    assert (done.returncode, done.stdout) == (0, "45\n")


@pytest.mark.slow
def test_run_reports_a_timeout_as_124(local_env: dict[str, str], local_root: Path) -> None:
    done = cli(
        "run",
        "--timeout",
        "1",
        "-",
        input="print('started', flush=True)\nwhile True: pass\n",
        env=local_env,
    )
    assert done.returncode == 124
    assert "timed out after 1 s" in done.stderr
    with get_backend("subprocess", root=local_root) as client:
        assert client.list() == []


def test_run_stops_the_sandbox_on_sigterm(local_env: dict[str, str], local_root: Path) -> None:
    env = {**local_env, "PYTHONPATH": str(REPO)}
    program = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    command = [sys.executable, "-m", "sandboxkit", "run", "-"]
    with get_backend("subprocess", root=local_root) as client:
        runner = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, text=True)
        try:
            assert runner.stdin is not None
            runner.stdin.write(program)
            runner.stdin.close()
            deadline = time.monotonic() + 120
            while not client.list() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert client.list(), "the sandbox never appeared"
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(timeout=120) == -signal.SIGTERM
        finally:
            runner.kill()
        assert client.list() == []


@pytest.mark.slow
def test_run_reports_its_own_failure_as_125(local_env: dict[str, str]) -> None:
    pytest.importorskip("daytona", reason="needs pip install 'sandboxkit[daytona]'")
    done = cli("run", "--backend", "daytona", "-", input="print(1)\n", env=local_env)
    assert done.returncode == 125
    assert "BackendMisconfiguredError" in done.stderr and "DAYTONA_API_KEY" in done.stderr


def test_run_refuses_a_missing_file(local_env: dict[str, str]) -> None:
    done = cli("run", "/nonexistent/prog.py", env=local_env)
    assert done.returncode == 2
    assert "cannot read /nonexistent/prog.py" in done.stderr


def test_verbose_logs_the_sandbox_and_run_tag(local_env: dict[str, str]) -> None:
    quiet = cli("run", "-", input="pass\n", env=local_env)
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr
    loud = cli("-v", "run", "-", input="pass\n", env=local_env)
    assert loud.returncode == 0
    assert re.search(
        r"INFO sandboxkit\.cli: running main\.py in \S+ \(sandboxkit-run=\w+\)", loud.stderr
    )
    debug = cli("run", "-vv", "-", input="pass\n", env=local_env)
    assert "DEBUG sandboxkit.session: created" in debug.stderr


# -- ls and reap --------------------------------------------------------------------------


def test_parse_duration() -> None:
    assert parse_duration("30s") == timedelta(seconds=30)
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("1d") == timedelta(days=1)
    assert parse_duration("90") == timedelta(seconds=90)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("2 weeks")
    done = cli("reap", "--tag", "t", "--older-than", "2x")
    assert done.returncode == 2 and "not a duration like 30s" in done.stderr


def _ls_reap_cycle(backend: str, env: Mapping[str, str], tagged: set[str], tag: str) -> None:
    """What the commands show and do for sandboxes carrying ``tag`` (ids ``tagged``)."""
    listed = cli("ls", "--backend", backend, "--tag", tag, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "AGE", "TAGS"]
    assert {line.split()[0] for line in lines[1:]} == tagged
    assert all(line.split()[1] == "running" and tag in line for line in lines[1:])

    refused = cli("reap", "--backend", backend, env=env)
    assert refused.returncode == 2 and "--all" in refused.stderr

    dry = cli("reap", "--backend", backend, "--tag", tag, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert {line.split()[2] for line in dry.stdout.splitlines()[:-1]} == tagged
    assert dry.stdout.splitlines()[-1] == f"{len(tagged)} sandboxes would be stopped (dry run)"
    young = cli("reap", "--backend", backend, "--tag", tag, "--older-than", "1h", env=env)
    assert young.stdout == "stopped 0 sandboxes\n"
    still = cli("ls", "--backend", backend, "--tag", tag, env=env)
    assert len(still.stdout.splitlines()) == len(tagged) + 1

    reaped = cli("reap", "--backend", backend, "--tag", tag, env=env)
    assert reaped.returncode == 0, reaped.stderr
    assert {line.split()[1] for line in reaped.stdout.splitlines()[:-1]} == tagged
    assert reaped.stdout.splitlines()[-1] == f"stopped {len(tagged)} sandboxes"
    assert cli("ls", "--backend", backend, "--tag", tag, env=env).stdout == "no sandboxes\n"


@pytest.mark.slow
def test_ls_and_reap_on_the_local_backend(local_env: dict[str, str], local_root: Path) -> None:
    with get_backend("subprocess", root=local_root) as client:
        tagged = {client.sandbox(tags=["run=cli-test", f"n={i}"]).id for i in range(2)}
        other = client.sandbox(tags=["run=someone-else"])
        _ls_reap_cycle("subprocess", local_env, tagged, "run=cli-test")
        assert [info.id for info in client.list()] == [other.id]  # untouched
        everything = cli("ls", "--status", "running", env=local_env)
        assert other.id in everything.stdout
        assert cli("ls", "--status", "stopped", env=local_env).stdout == "no sandboxes\n"
        other.stop()


def test_reap_deletes_what_half_stopped_sandboxes_left(
    local_env: dict[str, str], local_root: Path
) -> None:
    """A stop killed after it renamed the directory, and a create that died before it wrote
    the metadata (its tmpfs still mounted on a root host), leave directories no ``stop``
    finds: ``reap`` deletes them, however deep and unreadable, and nothing else."""
    with get_backend("subprocess", root=local_root) as client:
        live = client.sandbox()
        doomed = client.sandbox()
        deep = (
            "import os\n"
            "for _ in range(300): os.mkdir('d'); os.chdir('d')\n"
            "open('f', 'w').write('x')\n"
            "os.chdir('/workspace'); os.chmod('d', 0)\n"
        )
        assert doomed.exec(["python3", "-c", deep], timeout=60).returncode == 0
    half_stopped = local_root / f".stopped-{doomed.id}-0a1b2c"
    backend = SubprocessBackend(root=local_root)
    if backend.disk_limit == "tmpfs":
        disk.unmount(local_root / doomed.id)  # as stop does before it renames
    (local_root / doomed.id).rename(half_stopped)
    half_made = local_root / "sbx-000000000000"
    half_made.mkdir(mode=0o711)
    if backend.disk_limit == "tmpfs":
        disk.mount(half_made, size_mb=1, inodes=64)
    (half_made / "workspace").mkdir()
    old = time.time() - 3600
    os.utime(half_made, (old, old))
    young = local_root / "sbx-111111111111"  # a create under way: not touched
    young.mkdir()
    dry = cli("reap", "--all", "--dry-run", env=local_env)
    assert f"would delete half-stopped {half_stopped.name}" in dry.stdout
    assert f"would delete half-stopped {half_made.name}" in dry.stdout
    assert half_stopped.exists() and half_made.exists()
    reaped = cli("reap", "--all", env=local_env)
    assert reaped.returncode == 0, reaped.stderr
    assert reaped.stdout.splitlines()[-1] == "stopped 1 sandbox, 2 half-stopped deleted"
    assert sorted(p.name for p in local_root.iterdir()) == [young.name]
    with open("/proc/self/mountinfo") as f:
        assert str(half_made) not in f.read()
    assert live.id in reaped.stdout


@pytest.mark.slow
@pytest.mark.parametrize("emulator", ["daytona_env", "aviato_env", "modal_env", "e2b_env"])
def test_ls_and_reap_on_an_emulator(emulator: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(emulator)
    backend = emulator.removesuffix("_env")
    tag = f"run={uuid.uuid4().hex[:10]}"
    with get_backend(backend) as client:
        tagged = {client.sandbox(tags=[tag, f"n={i}"]).id for i in range(2)}
        try:
            _ls_reap_cycle(backend, os.environ, tagged, tag)
        finally:
            for sandbox_id in tagged:
                client.stop(sandbox_id)


# -- eval ---------------------------------------------------------------------------------


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _summary(stdout: str) -> tuple[float, dict[str, int]]:
    mean = re.search(r"^mean reward: (-?[\d.]+) ", stdout, re.M)
    assert mean is not None, stdout
    outcomes, _, _ = stdout.partition("\nverdict ")
    counts = dict(re.findall(r"^(\w+) +(\d+) +[\d.]+%$", outcomes, re.M))
    return float(mean[1]), {kind: int(n) for kind, n in counts.items()}


def _verdicts(stdout: str) -> dict[str, int]:
    """The contest verdicts' counts in an eval summary (those above zero)."""
    _, _, verdicts = stdout.partition("\nverdict ")
    counts = dict(re.findall(r"^(\w+) +(\d+) +[\d.]+%$", verdicts, re.M))
    return {verdict: int(n) for verdict, n in counts.items() if int(n)}


ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
NO_OUTCOMES = dict.fromkeys((kind.value for kind in OutcomeKind), 0)  # the summary counts each kind


@pytest.mark.slow
def test_eval_assert_tests(tmp_path: Path, local_env: dict[str, str]) -> None:
    rows: list[dict[str, object]] = [
        {"completion": f"```python\n{ADD}```", "test_list": ADD_TESTS},
        {"completion": "def add(a, b):\n    return 3\n", "test_list": ADD_TESTS},
        {"completion": "def add(a, b:\n", "test_list": ADD_TESTS},
        {"completion": "", "test_list": ADD_TESTS},
        {"completion": "def add(a, b):\n    while True: pass\n", "test_list": ADD_TESTS[:1]},
        {
            "completion": "def add(a, b):\n    return math.floor(a + b)\n",
            "test_list": ADD_TESTS,
            "test_setup_code": "import math",
        },
    ]
    data = _jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "results.jsonl"
    done = cli(
        "eval", str(data), "--timeout", "1", "--pool-size", "2", "--output", str(out), env=local_env
    )
    assert done.returncode == 0, done.stderr
    mean, counts = _summary(done.stdout)
    assert mean == pytest.approx((1 + 0.5 + 0 + 0 + 0 + 1) / 6, abs=1e-4)
    assert counts == {
        **NO_OUTCOMES,
        "passed": 2,
        "failed": 1,
        "error": 1,
        "timeout": 1,
        "empty": 1,
    }
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["outcome"] for r in results] == [
        "passed",
        "failed",
        "error",
        "empty",
        "timeout",
        "passed",
    ]
    assert [r["reward"] for r in results] == [1.0, 0.5, 0.0, 0.0, 0.0, 1.0]
    assert results[1]["passed"] == 1 and results[1]["total"] == 2


def test_eval_function_tasks(tmp_path: Path, local_env: dict[str, str]) -> None:
    sort = {
        "prompt": "def sort_numbers(xs):\n",
        "func_name": "sort_numbers",
        "tests": ["[3, 1, 2]", "[]"],
        "reference": "sorted",
    }
    desc = {
        "prompt": "def sort_desc(xs):\n",
        "func_name": "sort_desc",
        "tests": ["[1, 2]"],
        "reference": "lambda xs: sorted(xs, reverse=True)",
        "banned_patterns": ["sorted"],
    }
    rows = [
        {**sort, "completion": "    return sorted(xs)\n"},
        {**sort, "completion": "    return xs\n"},  # right for [] only
        {**desc, "completion": "    return sorted(xs)[::-1]\n"},  # banned
        {**desc, "completion": "    return [max(xs), min(xs)]\n"},
    ]
    data = _jsonl(tmp_path / "tasks.jsonl", rows)
    done = cli("eval", "--reward", "function", str(data), env=local_env)
    assert done.returncode == 0, done.stderr
    mean, counts = _summary(done.stdout)
    assert mean == pytest.approx((1 + 0.5 - 1 + 1) / 4, abs=1e-4)
    assert (counts["passed"], counts["failed"], counts["banned"]) == (2, 1, 1)


def test_eval_stdio_reads_the_contest_dataset_shapes(
    tmp_path: Path, local_env: dict[str, str]
) -> None:
    apps = {"input_output": json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3", "7"]})}
    contests = {"public_tests": {"input": ["4 4\n"], "output": ["8\n"]}}
    add = "a, b = map(int, input().split())\nprint(a + b)"
    rows = [
        {**apps, "completion": add},
        {**apps, "completion": add.replace("a + b", "a + b if a < 10 else 0")},
        {**contests, "completion": add},
    ]
    data = _jsonl(tmp_path / "stdio.jsonl", rows)
    done = cli("eval", "--reward", "stdio", str(data), env=local_env)
    assert done.returncode == 0, done.stderr
    assert _summary(done.stdout) == (
        pytest.approx((1 + 0.5 + 1) / 3, abs=1e-4),
        {**NO_OUTCOMES, "passed": 2, "failed": 1},
    )
    assert _verdicts(done.stdout) == {"accepted": 2, "wrong_answer": 1}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_eval_stdio_judges_the_language_named_and_writes_verdicts(
    tmp_path: Path, local_env: dict[str, str]
) -> None:
    """``--language`` names the language of rows that name none; a row's ``language`` column
    and a fenced block's tag are read too; ``--output`` carries each verdict."""
    tests = {"public_tests": {"input": ["1 2\n", "10 -3\n"], "output": ["3", "7"]}}
    add_c = '#include <stdio.h>\nint main(){long a,b;scanf("%ld %ld",&a,&b);printf("%ld\\n",a+b);}'
    rows = [
        {**tests, "completion": add_c},
        {**tests, "completion": add_c.replace("a+b)", "a-b)")},
        {**tests, "completion": "int main( {"},
        {**tests, "language": "python", "completion": "print(sum(map(int, input().split())))"},
    ]
    data = _jsonl(tmp_path / "c.jsonl", rows)
    out = tmp_path / "results.jsonl"
    done = cli(
        "eval",
        "--reward",
        "stdio",
        "--language",
        "c",
        str(data),
        "--output",
        str(out),
        env=local_env,
    )
    assert done.returncode == 0, done.stderr
    assert _verdicts(done.stdout) == {"accepted": 2, "wrong_answer": 1, "compile_error": 1}
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["verdict"] for r in results] == [
        "accepted",
        "wrong_answer",
        "compile_error",
        "accepted",
    ]
    assert results[2]["detail"].startswith("compile error: ")


def test_eval_exec(tmp_path: Path, local_env: dict[str, str]) -> None:
    rows = [{"completion": "print('hi')"}, {"completion": "raise SystemExit(2)"}]
    done = cli("eval", "--reward", "exec", str(_jsonl(tmp_path / "e.jsonl", rows)), env=local_env)
    assert done.returncode == 0, done.stderr
    assert _summary(done.stdout) == (
        0.5,
        {**NO_OUTCOMES, "passed": 1, "error": 1},
    )


def test_eval_gives_up_when_no_sandbox_starts(tmp_path: Path) -> None:
    pytest.importorskip("cwsandbox", reason="needs pip install 'sandboxkit[aviato]'")
    rows = [{"completion": "print(1)"}] * 3
    data = _jsonl(tmp_path / "e.jsonl", rows)
    env = clean_env(CWSANDBOX_API_KEY="k")  # the endpoint is a closed port
    done = cli(
        "eval", "--backend", "aviato", "--reward", "exec", "--retries", "0", str(data), env=env
    )
    assert done.returncode == 1
    assert "no sandbox could be started" in done.stderr
    assert "mean reward" not in done.stdout


@pytest.mark.parametrize(
    ("reward", "rows", "message"),
    [
        ("assert", [{"completion": ADD}], "row 1: missing 'test_list'"),
        ("assert", [{"test_list": []}], "no 'completion' field"),
        (
            "function",
            [
                {
                    "completion": "",
                    "prompt": "def f(x):\n",
                    "func_name": "f",
                    "tests": ["1"],
                    "reference": "42",
                }
            ],
            "is not callable",
        ),
    ],
)
def test_eval_rejects_unusable_rows(
    tmp_path: Path,
    local_env: dict[str, str],
    reward: str,
    rows: list[dict[str, object]],
    message: str,
) -> None:
    done = cli("eval", "--reward", reward, str(_jsonl(tmp_path / "bad.jsonl", rows)), env=local_env)
    assert done.returncode == 2
    assert message in done.stderr


def test_eval_summary_lines_every_outcome_and_verdict_up_under_its_header() -> None:
    kinds = [OutcomeKind.PASSED, OutcomeKind.UNSUPPORTED, OutcomeKind.DEADLINE]
    outcomes = [Outcome(kind, verdict=Verdict.ACCEPTED) for kind in kinds]
    outcomes.append(Outcome(OutcomeKind.FAILED, verdict=Verdict.WRONG_ANSWER))
    reward = exec_reward("subprocess")
    try:
        text = summary(reward, outcomes)
    finally:
        reward.close()
    assert text.splitlines()[3:] == [
        "outcome      count   share",
        "passed           1   25.0%",
        "failed           1   25.0%",
        "error            0    0.0%",
        "timeout          0    0.0%",
        "banned           0    0.0%",
        "empty            0    0.0%",
        "infra            0    0.0%",
        "unsupported      1   25.0%",
        "deadline         1   25.0%",
        "invalid_row      0    0.0%",
        "",
        "verdict        count   share",
        "accepted           3   75.0%",
        "wrong_answer       1   25.0%",
        "partial            0    0.0%",
        "time_limit         0    0.0%",
        "memory_limit       0    0.0%",
        "runtime_error      0    0.0%",
        "compile_error      0    0.0%",
        "output_limit       0    0.0%",
    ]


def test_eval_names_the_line_that_is_not_json(tmp_path: Path, local_env: dict[str, str]) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"completion": "pass", "test_list": []}\n{oops\n')
    done = cli("eval", str(data), env=local_env)
    assert done.returncode == 2
    assert f"{data}:2: not JSON" in done.stderr


# -- bench and emulate --------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_run() -> Iterator[ModuleType]:
    """``benchmarks/run.py``, imported as its scripts import it (their directory on the path);
    its modules are forgotten afterwards, or ``contest`` would shadow the examples' package of
    that name for later tests."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    before = set(sys.modules)
    try:
        yield importlib.import_module("run")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
        for name in set(sys.modules) - before:
            if (getattr(sys.modules[name], "__file__", None) or "").startswith(
                str(REPO / "benchmarks")
            ):
                del sys.modules[name]


@pytest.mark.slow
def test_bench_prints_its_table_and_writes_to_the_users_cache_or_out_never_the_checkout(
    local_env: dict[str, str], tmp_path: Path
) -> None:
    results = REPO / "benchmarks" / "results"
    before = {p.name: p.read_bytes() for p in results.iterdir()}
    env = {**local_env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = cli("bench", "--", "--smoke", "--only", "local", env=env)
    assert done.returncode == 0, done.stderr
    assert "exec_reward" in done.stdout and "naive" in done.stdout
    cached = tmp_path / "cache" / "sandboxkit" / "bench" / "smoke.json"
    assert json.loads(cached.read_text())["mode"] == "smoke"
    out = tmp_path / "elsewhere" / "mine.json"
    done = cli("bench", "--out", str(out), "--", "--smoke", "--only", "local", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["name"] == "mine"
    assert {p.name: p.read_bytes() for p in results.iterdir()} == before


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupted_bench_stops_its_sandboxes_and_deletes_their_roots(
    local_env: dict[str, str], tmp_path: Path, how: str
) -> None:
    """Ctrl-C reaches the whole foreground group; a SIGTERM only ``sandboxkit bench``: either
    way the benchmark runs its cleanup (no ``kill`` of it mid-way, no orphan left running)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-tmp-"))
    tmp.chmod(0o711)
    env = {**local_env, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "sandboxkit", "bench", "--", "--smoke", "--only", "local"]
    bench = subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob("sandboxkit-bench-*/sbx-*")):
            assert bench.poll() is None and time.monotonic() < deadline, "no sandbox was made"
            time.sleep(0.05)
        if how == "ctrl-c":
            os.killpg(bench.pid, signal.SIGINT)
        else:
            bench.send_signal(signal.SIGTERM)
        bench.wait(timeout=120)
        assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("sandboxkit")) == []
        assert bench.returncode == 128 + (signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bench.pid, signal.SIGKILL)
        bench.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def test_bench_results_describe_the_load_measured_not_who_shares_the_machine(
    bench_run: ModuleType,
) -> None:
    machine = bench_run.machine_info("namespaces")
    assert "note" not in machine
    machine.update(cpu_count=2, memory_gib=23.5, python="3.11.7", kernel="6.1", date="2026-11-27")
    machine["load_average_start"] = [1.5, 1.0, 0.5]
    assert bench_run.machine_line(machine) == (
        "2 cores, 23.5 GiB, Python 3.11.7, kernel 6.1, isolation: namespaces, 2026-11-27; "
        "load average at start 1.5."
    )
    machine["load_average_end"] = [11.9, 5.0, 2.0]
    assert bench_run.machine_line(machine).endswith("load average at start 1.5, at end 11.9.")


def test_benchmark_results_go_to_the_users_cache_unless_recorded(
    bench_run: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    parser = argparse.ArgumentParser()
    bench_run.add_output_options(parser, "quick")
    paths = [
        bench_run.output_path(parser.parse_args(argv), "quick")
        for argv in ([], ["--record"], ["--json", "x/y.json"])
    ]
    assert paths == [
        tmp_path / "sandboxkit" / "bench" / "quick.json",
        REPO / "benchmarks" / "results" / "quick.json",
        Path("x/y.json"),
    ]
    with pytest.raises(SystemExit):
        parser.parse_args(["--record", "--json", "x.json"])


def test_bench_without_benchmarks_says_so(tmp_path: Path) -> None:
    done = cli("bench", "--dir", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "not in the installed package" in done.stderr
    done = cli("bench", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "has no run.py" in done.stderr


def test_children_import_the_sandboxkit_of_a_copy_that_no_path_names(tmp_path: Path) -> None:
    """Bench and the emulator fixtures start ``sys.executable`` children that must import the
    parent's sandboxkit, wherever it lies: here a copy found only through the parent's cwd."""
    holder = tmp_path / "copy"
    shutil.copytree(REPO / "sandboxkit", holder / "sandboxkit")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child = (
        "import os, subprocess, sys\n"
        "from sandboxkit.config import child_pythonpath\n"
        "env = {**os.environ, 'PYTHONPATH': child_pythonpath()}\n"
        "print(child_pythonpath())\n"
        "code = 'import sandboxkit; print(sandboxkit.__file__)'\n"
        f"subprocess.run([sys.executable, '-c', code], cwd={str(elsewhere)!r}, env=env)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=holder, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(holder), str(holder / "sandboxkit" / "__init__.py")]


def without(tmp_path: Path, *modules: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose Python processes (children included) cannot import ``modules``,
    as on a core install: a ``sitecustomize`` on ``PYTHONPATH`` blocks them at start-up."""
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nsys.modules.update(dict.fromkeys({modules!r}))\n"
    )
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(tmp_path), environ.get("PYTHONPATH")])
    )
    return environ


@pytest.mark.parametrize(("provider", "missing"), [("daytona", "socketio"), ("aviato", "grpc")])
def test_emulate_without_the_emulators_extra_names_it_in_one_line(
    provider: str, missing: str, tmp_path: Path
) -> None:
    done = cli("emulate", provider, env=without(tmp_path, missing))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"sandboxkit emulate: MissingDependencyError: the {provider} emulator needs "
        f"{missing!r}, which is not installed: pip install 'sandboxkit[emulators]'\n"
    )


@pytest.mark.slow
def test_bench_skips_the_emulated_rows_it_cannot_run_and_prints_the_rest(
    local_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    env = without(tmp_path, "socketio", "grpc", env=local_env)
    done = cli("bench", "--", "--smoke", "--only", "remote", "--json", str(out), env=env)
    assert done.returncode == 0, done.stderr
    skipped = [
        "daytona: the daytona emulator needs 'socketio', which is not installed: "
        "pip install 'sandboxkit[emulators]'",
        "aviato: the aviato emulator needs 'grpc', which is not installed: "
        "pip install 'sandboxkit[emulators]'",
    ]
    assert json.loads(out.read_text())["skipped"] == skipped
    assert "\n### Skipped\n\n" + "".join(f"- {line}\n" for line in skipped) in done.stdout
    for line in skipped:
        provider, _, reason = line.partition(": ")
        assert f"skipped the {provider} rows: {reason}\n" in done.stderr
    assert "Traceback" not in done.stderr
    assert "| latency-only | 50 | sandboxkit" in done.stdout  # the rows it could run


@contextlib.contextmanager
def emulating(env: Mapping[str, str], *args: str) -> Iterator[IO[str]]:
    """``sandboxkit emulate ARGS`` serving until the block ends, then stopped by SIGTERM (which
    it must obey at once); its stdout."""
    server = subprocess.Popen(
        [sys.executable, "-m", "sandboxkit", "emulate", *args],
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("provider", "options", "printed"),
    [
        ("daytona", ["--api-key", "k1"], ["DAYTONA_API_URL", "DAYTONA_API_KEY=k1"]),
        ("daytona", [], ["DAYTONA_API_URL", "DAYTONA_API_KEY=any"]),
        ("aviato", ["--api-key", "k2"], ["CWSANDBOX_BASE_URL", "CWSANDBOX_API_KEY=k2"]),
    ],
)
def test_emulate_prints_the_key_variable_a_client_needs_after_the_url(
    local_env: dict[str, str], provider: str, options: list[str], printed: list[str]
) -> None:
    pytest.importorskip("grpc", reason="needs pip install 'sandboxkit[emulators]'")
    pytest.importorskip("socketio", reason="needs pip install 'sandboxkit[emulators]'")
    with emulating(local_env, provider, "--port", "0", *options) as out:
        url = out.readline().strip()
        assert url.partition("=")[0] == printed[0]
        assert url.partition("=")[2].startswith("http://127.0.0.1:"), url
        assert out.readline().strip() == printed[1]


@pytest.mark.slow
def test_emulate_serves_what_doctor_then_finds_ready(local_env: dict[str, str]) -> None:
    pytest.importorskip("cwsandbox", reason="needs pip install 'sandboxkit[aviato,emulators]'")
    key = f"key-{uuid.uuid4().hex}"
    with emulating(local_env, "aviato", "--api-key", key) as out:
        line = out.readline().strip()
        name, _, url = line.partition("=")
        assert name == "CWSANDBOX_BASE_URL", line
        done = cli(
            "doctor",
            "--backend",
            "aviato",
            "--timeout",
            "10",
            env={**local_env, "CWSANDBOX_BASE_URL": url, "CWSANDBOX_API_KEY": key},
        )
        assert done.returncode == 0, done.stdout
        assert key not in done.stdout
