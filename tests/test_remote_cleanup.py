"""A training process that ends against a remote provider: exiting without closing, or SIGTERM
mid-batch, leaves nothing running; SIGKILL leaves its sandboxes, which a reap by tag then stops.
The provider is an emulator in this process; the run is a child process using the reward
function as TRL would."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from sandboxkit import Session
from sandboxkit.testing.remote import (
    Emulator,
    child_env,
    client_for,
    processes_with,
    start_emulator,
    wait_until,
)

POOL = 3
RUN = textwrap.dedent(
    """
    import sys
    from sandboxkit.rewards import exec_reward

    provider, tag, marker, pool = sys.argv[1:]
    # The program replaces itself with one whose command line carries the marker, so the
    # test can see from the host whether it still runs.
    program = (
        "import os, sys\\n"
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', "
        f"{marker!r}])"
    )
    reward = exec_reward(provider, timeout=300, pool_size=int(pool), tags=[tag])
    reward(["p"] * 2 * int(pool), [program] * 2 * int(pool))
    """
)

SCORE_AND_EXIT = textwrap.dedent(
    """
    import sys
    from sandboxkit.rewards import exec_reward

    reward = exec_reward(sys.argv[1], pool_size=int(sys.argv[2]))
    print(reward(["p"] * 4, ["print('ok')", "raise SystemExit(1)"] * 2))
    """
)


@pytest.mark.slow
def test_a_script_that_exits_without_closing_leaves_nothing_running(
    remote_provider: str, remote_emulator: Emulator
) -> None:
    child = subprocess.run(
        [sys.executable, "-c", SCORE_AND_EXIT, remote_provider, str(POOL)],
        env=child_env(remote_provider, remote_emulator.url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcome = (child.returncode, child.stdout)
    assert outcome == (0, "[1.0, 0.0, 1.0, 0.0]\n"), child.stderr[-3000:]
    assert remote_emulator.live_sandboxes() == 0
    assert child.stderr == ""  # no traceback, failed stop or unclosed session at exit


def test_closing_a_session_that_made_nothing_calls_no_provider(
    remote_provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    with start_emulator(remote_provider) as emu:
        url = emu.url
    # The provider is gone: a call would fail and log.
    with client_for(remote_provider, url) as client, Session(client, handle_signals=False):
        pass
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def start_run(provider: str, emu: Emulator, tag: str, marker: str) -> subprocess.Popen[bytes]:
    """A child running a batch of reward evaluations, returned once every sandbox of its pool
    runs one of them."""
    child = subprocess.Popen(
        [sys.executable, "-c", RUN, provider, tag, marker, str(POOL)],
        env=child_env(provider, emu.url),
    )
    try:
        assert wait_until(lambda: len(processes_with(marker)) >= POOL, timeout=180)
    except BaseException:
        child.kill()
        raise
    assert emu.live_sandboxes() == POOL
    return child


@pytest.mark.slow
def test_sigterm_mid_batch_leaves_nothing_running(
    remote_provider: str, remote_emulator: Emulator
) -> None:
    marker = f"reward-batch-{uuid.uuid4().hex}"
    child = start_run(remote_provider, remote_emulator, f"test={uuid.uuid4().hex}", marker)

    child.send_signal(signal.SIGTERM)

    assert child.wait(timeout=120) == -signal.SIGTERM
    assert remote_emulator.live_sandboxes() == 0
    assert wait_until(lambda: not processes_with(marker)), "programs outlived their sandboxes"


@pytest.mark.slow
def test_sigkill_leaves_sandboxes_that_a_reap_stops(
    remote_provider: str, remote_emulator: Emulator
) -> None:
    tag, marker = f"test={uuid.uuid4().hex}", f"reward-batch-{uuid.uuid4().hex}"
    child = start_run(remote_provider, remote_emulator, tag, marker)

    child.kill()
    child.wait(timeout=120)
    assert remote_emulator.live_sandboxes() == POOL  # nobody cleaned up

    with (
        client_for(remote_provider, remote_emulator.url) as client,
        Session(client, handle_signals=False) as janitor,
    ):
        assert len(janitor.reap(tags=[tag], older_than=0)) == POOL
    assert remote_emulator.live_sandboxes() == 0
    assert wait_until(lambda: not processes_with(marker)), "programs outlived their sandboxes"
