"""The Daytona backend and emulator, beyond the shared conformance suite (run in
``test_conformance.py``): the real ``daytona`` SDK talks HTTP to the emulator throughout."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("daytona", reason="needs pip install 'sandboxkit[daytona,emulators]'")

from daytona import AsyncDaytona, DaytonaConfig, DaytonaError

from sandboxkit import (
    AuthenticationError,
    Sandbox,
    SandboxClient,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
    get_backend,
    spawn,
)
from sandboxkit.backends.daytona import (
    INLINE_COMMAND_BYTES,
    TAG_PREFIX,
    decode_label_value,
    encode_label_value,
    tag_label,
)
from sandboxkit.emulators.daytona import DaytonaEmulator
from sandboxkit.testing.daytona import EMULATOR_API_KEY, EMULATOR_TARGET
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import wait_until

PY = "python3"
AWKWARD_TAGS = [
    "run=abc",
    "with spaces  inside",
    "ünïcødé ✓ 雪",
    "x" * 300,
    "b32-looks-encoded",
    "-leading-dash",
    "plain-tag_1.2",
    "",
]
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,61}[A-Za-z0-9]")


@pytest.fixture
def emulator(daytona_emulator: DaytonaEmulator) -> Iterator[DaytonaEmulator]:
    """A private emulator, for tests that inject faults or change its settings."""
    with DaytonaEmulator(api_key=EMULATOR_API_KEY) as emu:
        yield emu


def client_for(emu: DaytonaEmulator, **options: object) -> SandboxClient:
    options = {"api_key": EMULATOR_API_KEY, "api_url": emu.url, "target": EMULATOR_TARGET} | options
    return get_backend("daytona", **options)


# -- tags as labels --------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", AWKWARD_TAGS)
def test_tag_labels_are_valid_and_reversible(tag: str) -> None:
    key, value = tag_label(tag)
    assert key.startswith(TAG_PREFIX) and LABEL_KEY.fullmatch(key)
    assert re.fullmatch(r"[A-Za-z0-9._-]*", value)
    assert decode_label_value(value) == tag
    assert tag_label(tag) == (key, value)  # deterministic, so list() can filter on it


def test_plain_tags_stay_readable() -> None:
    assert encode_label_value("conformance-1a2b") == "conformance-1a2b"
    assert encode_label_value("run=abc") != "run=abc"


def test_awkward_tags_round_trip_through_create_and_list(daytona_client: SandboxClient) -> None:
    with daytona_client.sandbox(tags=AWKWARD_TAGS) as sb:
        assert set(sb.tags) == set(AWKWARD_TAGS)
        assert set(sb.info().tags) == set(AWKWARD_TAGS)
        for tag in AWKWARD_TAGS:
            assert [i.id for i in daytona_client.list(tags=[tag])] == [sb.id]
        listed = daytona_client.list(tags=AWKWARD_TAGS)
        assert [set(i.tags) for i in listed] == [set(AWKWARD_TAGS)]
        assert daytona_client.list(tags=[*AWKWARD_TAGS, "absent"]) == []


# -- auth, paging ----------------------------------------------------------------------------------


def test_wrong_api_key_is_an_authentication_error(daytona_env: DaytonaEmulator) -> None:
    with client_for(daytona_env, api_key="wrong-key") as client:
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="DAYTONA_API_KEY"):
            client.sandbox()
        with pytest.raises(AuthenticationError):
            client.list()
        assert time.monotonic() - started < 60  # no retries, no waiting
    assert daytona_env.live_sandboxes() == 0


def test_missing_api_key_is_reported_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(SandboxError, match="DAYTONA_API_KEY"):
        get_backend("daytona", api_url="http://127.0.0.1:9/api")


def test_list_follows_cursors_past_one_page(emulator: DaytonaEmulator) -> None:
    emulator.page_size = 3
    with client_for(emulator) as client:
        made = [client.sandbox(tags=["paged"]) for _ in range(8)]
        try:
            found = client.list(tags=["paged"])
            assert sorted(i.id for i in found) == sorted(sb.id for sb in made)
            assert len(client.list(tags=["paged"], status="running")) == 8
            assert client.list(tags=["paged"], status="stopped") == []
        finally:
            for sb in made:
                sb.stop()
    assert emulator.live_sandboxes() == 0


# -- exec details ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_keeps_output_printed_before_it(daytona_client: SandboxClient) -> None:
    with daytona_client.sandbox() as sb:
        code = "import sys, time; print('early', flush=True); print('warn', file=sys.stderr)\n"
        code += "sys.stderr.flush(); time.sleep(60)"
        result = sb.exec([PY, "-c", code], timeout=1.5)
        assert result.timed_out and result.returncode == 137
        assert result.stdout == "early\n" and result.stderr == "warn\n"
        # Nothing of the timed-out exec is left in /tmp: only the listing exec's own files.
        assert len(sb.exec(["ls", "-A", "/tmp/.sandboxkit"], timeout=60).stdout.split()) == 1


@pytest.mark.slow
def test_timeout_when_children_hold_the_pipes(daytona_client: SandboxClient) -> None:
    """The wrapper's watchdog kills the command, a child keeps stdout open: Daytona's own
    limit ends the call, and it still reads as a timeout."""
    with daytona_client.sandbox() as sb:
        result = sb.exec(["sh", "-c", "sleep 60 & wait"], timeout=1)
        assert result.timed_out and result.returncode == 137 and not result.ok


def test_sub_second_timeouts_are_kept(daytona_client: SandboxClient) -> None:
    """Daytona counts whole seconds; the wrapper's watchdog does not round."""
    with daytona_client.sandbox() as sb:
        result = sb.exec(["sleep", "30"], timeout=0.3)
        assert result.timed_out and result.duration < 20


def test_streams_stay_apart_and_are_capped(daytona_client: SandboxClient) -> None:
    with daytona_client.sandbox() as sb:
        code = (
            "import sys; sys.stdout.write('o' * (3 << 20)); sys.stderr.buffer.write(b'\\xff\\x00e')"
        )
        result = sb.exec([PY, "-c", code], timeout=120)
        assert result.returncode == 0 and result.truncated
        assert result.stdout_bytes == b"o" * (1 << 20)
        assert result.stderr_bytes == b"\xff\x00e"


def test_output_cap_is_an_option(daytona_env: DaytonaEmulator) -> None:
    with client_for(daytona_env, output_cap_bytes=4) as client, client.sandbox() as sb:
        result = sb.exec(["echo", "hello"], timeout=60)
        assert result.stdout == "hell" and result.truncated


def test_workdir_is_created_and_is_the_default_cwd(daytona_client: SandboxClient) -> None:
    with daytona_client.sandbox(workdir="/workspace/project/src") as sb:
        sb.write_file("data.txt", "here")
        assert sb.read_file("/workspace/project/src/data.txt") == b"here"
        result = sb.exec([PY, "-c", "import os; print(os.getcwd(), open('data.txt').read())"])
        assert result.stdout.split() == ["/workspace/project/src", "here"]
        sb.write_file("/tmp/abs.txt", "absolute")
        assert sb.exec(["cat", "abs.txt"], cwd="/tmp", timeout=60).stdout == "absolute"


def test_missing_cwd_and_argv_rules(daytona_client: SandboxClient) -> None:
    with daytona_client.sandbox() as sb:
        with pytest.raises(SandboxError, match="cwd"):
            sb.exec(["true"], cwd="no/such/dir", timeout=60)
        assert sb.exec(["no-such-program-here"], timeout=60).returncode == 127
        # Shell words are data, not syntax: a builtin name or an assignment runs as a program.
        assert sb.exec(["exit", "3"], timeout=60).returncode == 127
        assert sb.exec(["A=b", "true"], timeout=60).returncode == 127
        with pytest.raises(ValueError):
            sb.exec(["-x"], timeout=60)


def test_large_stdin(daytona_client: SandboxClient) -> None:
    data = os.urandom(3 << 20)
    with daytona_client.sandbox() as sb:
        code = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
        result = sb.exec([PY, "-c", code], stdin=data, timeout=120)
        assert result.stdout.strip() == hashlib.sha256(data).hexdigest()


# -- the emulator's direct Python path -------------------------------------------------------------

SEES = (
    "import os, sys\n"
    "print(sorted(os.environ.items()), os.getcwd(), sys.argv, sys.stdin.read())\n"
    "sys.stderr.buffer.write(b'err \\xff'); sys.exit(int(os.environ.get('CODE', '0')))"
)


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        ([PY, "-c", SEES, "a b"], {"stdin": b"in"}),
        ([PY, "-c", SEES], {"stdin": b"uploaded " * 10_000}),
        ([PY, "-c", SEES], {"cwd": "sub", "env": {"CODE": "3", "Q": 'it\'s "x" = y', "E": ""}}),
        ([PY, "-c", SEES], {"cwd": "sub/../sub/."}),
        (["python", "-c", "raise KeyError('k')"], {"cwd": "/workspace/sub"}),
        ([PY, "-c", SEES], {"cwd": "missing"}),
        ([PY, "-c", SEES], {"cwd": "missing", "stdin": b"uploaded " * 20_000}),
        ([PY, "-c", SEES], {"cwd": "/tmp"}),
        ([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], {}),
        pytest.param(
            [PY, "-c", "print('early', flush=True); import time; time.sleep(60)"],
            {"timeout": 1},
            marks=pytest.mark.slow,
        ),
        ([PY, "-c", "print('x' * 10); print('y' * 5, file=__import__('sys').stderr)"], {"cap": 8}),
        (["sh", "-c", "echo $PWD $OLDPWD; ls -A /tmp/.sandboxkit | wc -l"], {"cwd": "sub"}),
    ],
)
def test_direct_python_runs_as_through_the_wrapper(
    argv: list[str], options: dict[str, object]
) -> None:
    """The emulator may run the backend's wrapped Python itself; nothing may tell (``cap``:
    the client's output cap; the last case, not Python, runs the shell way both times)."""
    cap = options.pop("cap", 1 << 20)
    results = []
    for direct in (True, False):
        with (
            DaytonaEmulator(api_key=EMULATOR_API_KEY, direct_python=direct) as emu,
            client_for(emu, output_cap_bytes=cap) as client,
            client.sandbox() as sb,
        ):
            sb.exec(["mkdir", "sub"], timeout=60)
            try:
                r = sb.exec(argv, **({"timeout": 60} | options))  # type: ignore[arg-type]
                seen: tuple[object, ...] = (r.returncode, r.stdout_bytes, r.stderr_bytes)
                results.append((*seen, r.timed_out, r.truncated))
            except SandboxError as exc:
                results.append((type(exc).__name__, str(exc).replace(sb.id, "<id>")))
            # Neither way leaves anything in /tmp (the listing's own scratch directory).
            listing = sb.exec(["ls", "-A", "/tmp/.sandboxkit"], timeout=60).stdout.split()
            assert len(listing) == 1
    assert results[0] == results[1]


@pytest.mark.slow
def test_a_cancelled_direct_python_command_is_killed(emulator: DaytonaEmulator) -> None:
    """Cancelling a Python exec sends the backend's kill command, which the emulator must
    apply to the command it runs directly (there is no wrapper FIFO to write to)."""
    beat = (
        "import time\nwhile True:\n    open('beat', 'w').write(repr(time.time())); time.sleep(0.1)"
    )

    def beats(sb: Sandbox) -> bytes | None:
        try:
            return sb.read_file("beat")
        except FileNotFoundError:
            return None

    def stopped(sb: Sandbox) -> bool:
        first = beats(sb)
        time.sleep(1)
        return first is not None and beats(sb) == first

    with client_for(emulator) as client, client.sandbox() as sb:
        running = spawn(sb.aexec([PY, "-c", beat], timeout=600))
        assert wait_until(lambda: beats(sb) is not None)
        assert not stopped(sb)
        running.cancel()
        assert wait_until(lambda: stopped(sb)), "the cancelled command still runs"
        assert sb.exec([PY, "-c", "print('next')"], timeout=60).stdout == "next\n"
    assert not emulator._wrapped


def test_small_stdin_travels_in_the_exec_itself() -> None:
    """A harness's stdin (the program) costs no upload round trip: with every upload failing,
    an exec with small stdin still runs. Stdin that would make the command too long for one
    argument of a shell (large itself, or beside a large argv) is uploaded. The emulator runs
    the command the shell way here, as Daytona does (its direct path has no such limit)."""
    echo = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"
    small, large = os.urandom(32 << 10), os.urandom(80 << 10)
    long_argv = [PY, "-c", echo + "#" + "x" * (90 << 10)]
    # Inlined beside the long argv, stdin would break Linux's limit on one argument (E2BIG).
    assert (
        len(long_argv[2])
        < INLINE_COMMAND_BYTES
        < 128 << 10
        < len(long_argv[2]) + len(small) * 4 // 3
    )
    with (
        DaytonaEmulator(api_key=EMULATOR_API_KEY, direct_python=False) as emulator,
        client_for(emulator) as client,
        client.sandbox() as sb,
    ):
        for argv, data in (([PY, "-c", echo], large), (long_argv, small)):
            assert sb.exec(argv, stdin=data, timeout=60).stdout_bytes == data
        emulator.faults = Faults(error_rate=1.0, operations=frozenset({"upload"}))
        assert sb.exec([PY, "-c", echo], stdin=small, timeout=60).stdout_bytes == small
        for argv, data in (([PY, "-c", echo], large), (long_argv, small)):
            with pytest.raises(TransientBackendError):
                sb.exec(argv, stdin=data, timeout=60)


# -- faults ----------------------------------------------------------------------------------------


def test_injected_errors_become_transient_errors(emulator: DaytonaEmulator) -> None:
    with client_for(emulator) as client:
        sb = client.sandbox(tags=["faulty"])
        emulator.faults = Faults(error_rate=1.0, seed=7)
        calls = {
            "create": lambda: client.sandbox(),
            "list": lambda: client.list(tags=["faulty"]),
            "get": lambda: client.get(sb.id),
            "exec": lambda: sb.exec(["true"], timeout=60),
            "write": lambda: sb.write_file("f", "x"),
            "read": lambda: sb.read_file("f"),
            "stop": lambda: sb.stop(),
        }
        for name, call in calls.items():
            with pytest.raises(TransientBackendError) as caught:
                call()
            assert not isinstance(caught.value, DaytonaError), name
            assert isinstance(caught.value.__cause__, DaytonaError), name
        emulator.faults = Faults()
        assert sb.exec(["true"], timeout=60).ok
        sb.stop()
    assert emulator.live_sandboxes() == 0


def test_dropped_connections_are_transient(emulator: DaytonaEmulator) -> None:
    with client_for(emulator) as client, client.sandbox() as sb:
        emulator.faults = Faults(drop_rate=1.0, operations=frozenset({"exec"}))
        with pytest.raises(TransientBackendError):
            sb.exec(["true"], timeout=60)
        emulator.faults = Faults()


def test_lost_create_answer_does_not_leak_the_sandbox(emulator: DaytonaEmulator) -> None:
    emulator.faults = Faults(drop_rate=1.0, operations=frozenset({"create"}))
    with client_for(emulator) as client:
        with pytest.raises(TransientBackendError):
            client.sandbox(tags=["lost"])
        assert emulator.live_sandboxes() == 0
        assert client.list(tags=["lost"]) == []


def test_sandbox_dying_mid_exec_is_lost(emulator: DaytonaEmulator) -> None:
    with client_for(emulator) as client:
        sb = client.sandbox()
        emulator.faults = Faults(die_rate=1.0)
        with pytest.raises(SandboxLostError, match="error"):
            sb.exec([PY, "-c", "import time; time.sleep(30)"], timeout=60)
        emulator.faults = Faults()
        assert emulator.live_sandboxes() == 0
        assert sb.info().status.value == "failed"
        with pytest.raises(SandboxLostError):
            sb.exec(["true"], timeout=60)
        sb.stop()
        with pytest.raises(SandboxNotFoundError):
            client.get(sb.id)


def test_sandbox_cap_refuses_creation_as_transient(emulator: DaytonaEmulator) -> None:
    emulator.faults = Faults(max_sandboxes=2)
    with client_for(emulator) as client:
        first, second = client.sandbox(), client.sandbox()
        with pytest.raises(TransientBackendError, match="limit"):
            client.sandbox()
        first.stop()
        third = client.sandbox()
        for sb in (second, third):
            sb.stop()
    assert emulator.live_sandboxes() == 0


def test_latency_is_added(emulator: DaytonaEmulator) -> None:
    emulator.faults = Faults(latency_ms=200)
    with client_for(emulator) as client:
        started = time.monotonic()
        client.list()
        assert time.monotonic() - started >= 0.2


# -- the emulator as a service ---------------------------------------------------------------------


def test_emulator_close_stops_its_sandboxes(daytona_emulator: DaytonaEmulator) -> None:
    emu = DaytonaEmulator(api_key=EMULATOR_API_KEY).start_in_thread()
    root = Path(emu.root or "")
    with client_for(emu) as client:
        for _ in range(2):
            client.sandbox()
        assert emu.live_sandboxes() == 2
        assert len(list(root.glob("*/sandbox.json"))) == 2
    emu.close()
    assert emu.live_sandboxes() == 0
    assert not root.exists()


@pytest.mark.slow
def test_sdk_code_run_and_interpreter(daytona_env: DaytonaEmulator) -> None:
    async def main() -> None:
        config = DaytonaConfig(
            api_key=EMULATOR_API_KEY, api_url=daytona_env.url, target=EMULATOR_TARGET
        )
        async with AsyncDaytona(config) as daytona:
            sb = await daytona.create()
            try:
                run = await sb.process.code_run("import sys; print(sys.argv[1:])", timeout=60)
                assert run.exit_code == 0 and run.result == "[]\n"
                result = await sb.code_interpreter.run_code("print('hi'); 1/0", timeout=60)
                assert result.stdout == "hi\n"
                assert result.error is not None and result.error.name == "ZeroDivisionError"
                with pytest.raises(DaytonaError):
                    await sb.code_interpreter.run_code("import time; time.sleep(30)", timeout=1)
            finally:
                await sb.delete()

    asyncio.run(main())
    assert daytona_env.live_sandboxes() == 0


@pytest.mark.slow
def test_cli_serves_until_sigterm(local_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    env = os.environ | {"TMPDIR": str(local_root)}  # a root host's sandboxes run as nobody
    command = [sys.executable, "-m", "sandboxkit", "emulate", "daytona", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--api-key", "cli-key"], stdout=subprocess.PIPE, text=True, env=env
    )
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("DAYTONA_API_URL=http://127.0.0.1:"), line
        url = line.partition("=")[2]
        with get_backend("daytona", api_key="cli-key", api_url=url, target="local") as client:
            sb = client.sandbox(tags=["cli"])
            assert sb.exec(["echo", "served"], timeout=60).stdout == "served\n"
            assert len(list(local_root.glob("*/*/sandbox.json"))) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    finally:
        watchdog.cancel()
        proc.kill()
    assert list(local_root.glob("*/*/sandbox.json")) == []


def test_a_program_that_takes_away_the_workdir_does_not_break_the_next_exec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool runs the next completions in the same sandbox: mode 000 on the workdir (which
    the sandbox's user owns) must not make their execs fail. (The emulator's local sandboxes
    run cold here, as a provider's would: no capability over the user's own files.)"""
    monkeypatch.setenv("SANDBOXKIT_WARM", "0")
    with DaytonaEmulator(api_key=EMULATOR_API_KEY) as emu:
        client = client_for(emu)
        try:
            with client.sandbox(workdir="/workspace/project") as sb:
                chmod = [PY, "-c", "import os; os.chmod('.', 0)"]
                assert sb.exec(chmod, timeout=60).returncode == 0
                result = sb.exec([PY, "-c", "import os; print(os.listdir())"], timeout=60)
                assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr
        finally:
            client.close()
