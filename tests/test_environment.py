"""Sandboxes as a multi-turn environment, driven directly as TRL drives it: ``reset(**row)``,
tool calls between turns, ``get_reward()`` at the end. State persists within a rollout and
never reaches the next one; tool calls never raise; what the model does in its tools cannot
raise its reward; every sandbox is released."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import SandboxClient, get_backend
from sandboxkit.harness import FunctionTask
from sandboxkit.integrations.environment import (
    TOOLS,
    SandboxEnvironment,
    sandbox_environment,
)
from sandboxkit.rewards import assert_tests_reward, function_tests_reward

ROW = {
    "prompt": [{"role": "user", "content": "Write add(a, b)."}],
    "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
    "test_setup_code": "",
}
RIGHT = "def add(a, b):\n    return a + b"
WRONG = "def add(a, b):\n    return a - b"


@pytest.fixture
def env_class(local: SandboxClient) -> Iterator[type[SandboxEnvironment]]:
    environment = sandbox_environment(local, timeout=5, max_output=2000)
    yield environment
    environment.close_all()


def reward_of(env: SandboxEnvironment) -> float | None:
    return asyncio.run(env.get_reward())


def run_tag(environment: type[SandboxEnvironment]) -> str:
    return environment.lender().session.run_tag


def test_a_scripted_rollout_keeps_its_state_and_is_judged(
    backend_client: SandboxClient,
) -> None:
    """On every backend: a notebook's semantics across calls, files the interpreter can
    import, a judged submission, and a next rollout that starts from nothing."""
    environment = sandbox_environment(backend_client, timeout=20)
    try:
        env = environment()
        assert env.reset(**ROW) is None
        assert env.run_python("import math\nx = 41\ndef inc(v):\n    return v + 1") == (
            "(no output)"
        )
        assert env.run_python("class Box:\n    size = 3\nbox = Box()\ninc(x)") == "42"
        assert env.run_python("isinstance(box, Box), box.size, math.floor(2.5)") == "(True, 3, 2)"
        assert env.write_file("helper.py", "def twice(v):\n    return 2 * v\n").startswith("wrote")
        assert env.run_python("import helper\nhelper.twice(x)") == "82"
        assert env.run_shell("cat helper.py | wc -l") == "2"
        assert env.read_file("helper.py").startswith("def twice")
        env.submit(RIGHT)
        assert reward_of(env) == 1.0
        assert [c.tool for c in env.tool_calls].count("run_python") == 4

        env.reset(**ROW)  # a new rollout: nothing of the last one
        assert "NameError" in env.run_python("x")
        assert "No such file" in env.run_shell("cat helper.py")
        env.submit(WRONG)
        assert reward_of(env) == 0.0
    finally:
        environment.close_all()


def test_no_submission_scores_zero_without_a_sandbox(
    env_class: type[SandboxEnvironment],
) -> None:
    env = env_class()
    env.reset(**ROW)
    assert reward_of(env) == 0.0
    assert env_class.lender().stats.leases == 0  # no tool call, no sandbox


def test_rollouts_at_once_have_sandboxes_of_their_own(
    env_class: type[SandboxEnvironment],
) -> None:
    first, second = env_class(), env_class()
    first.reset(**ROW)
    second.reset(**ROW)
    first.run_python("secret = 'first'")
    first.write_file("mine.txt", "first")
    assert "NameError" in second.run_python("secret")
    assert "No such file" in second.run_shell("cat mine.txt /tmp/* 2>&1")
    assert first.run_python("secret") == "'first'"


def test_reset_returns_the_sandbox_wiped_for_the_next_rollout(
    env_class: type[SandboxEnvironment],
) -> None:
    env = env_class()
    env.reset(**ROW)
    env.run_shell("mkdir -p locked/deep && echo x > locked/deep/f && chmod 000 locked")
    env.run_shell("echo t > /tmp/left && echo h > .hidden")
    env.reset(**ROW)
    lender = env_class.lender()
    assert env.run_shell("ls -A . /tmp") == ".:\n\n/tmp:"
    assert lender.stats.created == 1 and lender.stats.reused == 1


@pytest.mark.slow  # a child process, or a timeout to wait out
def test_a_timeout_is_text_and_earlier_state_survives(local: SandboxClient) -> None:
    environment = sandbox_environment(local, timeout=1)
    try:
        env = environment()
        env.reset(**ROW)
        env.run_python("kept = 1")
        out = env.run_python("lost = 2\nwhile True:\n    pass")
        assert "timed out after 1 s" in out and "lost" in out
        assert env.run_python("kept") == "1"
        assert "NameError" in env.run_python("lost")
        assert "timed out" in env.run_shell("sleep 30")
        assert [c.timed_out for c in env.tool_calls] == [False, True, False, False, True]
    finally:
        environment.close_all()


def test_long_output_is_trimmed_with_a_marker(env_class: type[SandboxEnvironment]) -> None:
    env = env_class()
    env.reset(**ROW)
    out = env.run_python("print('start'); print('x' * 100_000); print('the end')")
    assert len(out) < 2200
    assert out.startswith("start") and out.endswith("the end")
    assert "characters trimmed" in out


def test_errors_come_back_as_text(env_class: type[SandboxEnvironment]) -> None:
    env = env_class()
    env.reset(**ROW)
    assert "SyntaxError" in env.run_python("def broken(:")
    assert "ZeroDivisionError" in env.run_python("1 / 0")
    assert "[the code called exit(3)]" in env.run_python("import sys; sys.exit(3)")
    assert env.run_shell("echo out; echo err >&2; exit 4") == "out\nerr\n[exit status 4]"
    assert env.read_file("missing.txt").startswith("error: could not read missing.txt")
    assert len(env.read_file("/dev/zero")) < 2200
    assert env.write_file("big.txt", "x" * (2 << 20)).startswith("error:")
    assert "[note: not kept for later calls (cannot be pickled): f (TextIOWrapper)]" in (
        env.run_python("f = open('a.txt', 'w')\ng = 1")
    )
    assert env.run_python("g") == "1"
    errors = [c.error for c in env.tool_calls]
    assert errors == [True, True, True, True, True, False, True, False, False]


def test_a_sandbox_that_dies_is_replaced_and_the_model_told(
    env_class: type[SandboxEnvironment], local: SandboxClient
) -> None:
    env = env_class()
    env.reset(**ROW)
    env.run_python("x = 1")
    for info in local.list(tags=[run_tag(env_class)]):
        local.stop(info.id)  # behind the rollout's back
    assert env.run_python("x").startswith("error: the sandbox failed")
    assert "NameError" in env.run_python("x")  # a new sandbox, without the old state
    env.submit(RIGHT)
    assert reward_of(env) == 1.0


@pytest.mark.slow  # a child process, or a timeout to wait out
def test_hostile_tool_calls_are_contained(
    env_class: type[SandboxEnvironment], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOXKIT_TEST_HOST_SECRET", "hunter2")
    env = env_class()
    env.reset(**ROW)
    assert "hunter2" not in env.run_shell("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert "hunter2" not in env.run_python("import os; dict(os.environ)")
    fork_bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    assert "timed out" in env.run_python(fork_bomb)
    env.run_shell("(sleep 300 &) ; nohup sleep 301 >/dev/null 2>&1 &")
    assert "sleep" not in env.run_shell("cat /proc/[0-9]*/comm")
    assert env.run_shell("kill -9 -1; echo still here").endswith("still here")
    assert env.run_python("1 + 1") == "2"


def test_tampering_with_the_interpreter_state_harms_only_the_tampering_rollout(
    env_class: type[SandboxEnvironment],
) -> None:
    env = env_class()
    env.reset(**ROW)
    env.run_python("x = 1")
    env.write_file(".sandboxkit/kernel/state.pickle", "not a pickle")
    assert "could not be restored" in env.run_python("y = 2")
    assert env.run_python("y") == "2"


def test_what_the_tools_did_cannot_forge_the_verdict(env_class: type[SandboxEnvironment]) -> None:
    """The submission is judged in a sandbox no tool call touched, by a runner no file of the
    model's replaces: shadowed modules, a forged state, printed verdicts and files the
    solution would read are all absent there."""
    env = env_class()
    env.reset(**ROW)
    env.write_file("unittest.py", "raise SystemExit(0)\n")
    env.write_file("sitecustomize.py", "import builtins\nbuiltins.add = lambda a, b: a + b\n")
    env.write_file("solution.py", RIGHT + "\n")
    env.run_python("def add(a, b):\n    return a + b\nprint('2 passed, 0 failed')")
    env.submit("exec(open('solution.py').read())")
    assert reward_of(env) == 0.0
    env.submit("import sitecustomize")
    assert reward_of(env) == 0.0
    env.submit(RIGHT)
    assert reward_of(env) == 1.0


def test_reward_functions_score_the_environments_and_log_tool_metrics(
    env_class: type[SandboxEnvironment], local: SandboxClient
) -> None:
    right, silent = env_class(), env_class()
    for env in (right, silent):
        env.reset(**ROW)
    right.run_python("1 / 0")
    right.run_shell("true")
    right.submit(RIGHT)
    silent.run_shell("true")
    reward = assert_tests_reward(local)
    logged: dict[str, float] = {}
    try:
        rewards = reward(
            [ROW["prompt"]] * 2,
            ["the last message, not what is judged"] * 2,
            test_list=[ROW["test_list"]] * 2,
            environments=[right, silent],
            log_metric=logged.__setitem__,
        )
    finally:
        reward.close()
    assert rewards == [1.0, 0.0]
    assert logged["assert_tests_reward/tool_calls_per_rollout"] == 1.5
    assert logged["assert_tests_reward/tool_error_rate"] == pytest.approx(1 / 3)
    assert logged["assert_tests_reward/submitted_rate"] == 0.5
    assert logged["assert_tests_reward/tool_latency_p50"] > 0


def test_the_tools_offered_are_the_configured_ones() -> None:
    def tools_of(environment: type[Any]) -> list[str]:
        members = inspect.getmembers(environment, predicate=inspect.isfunction)
        return sorted(n for n, _ in members if not n.startswith("_") and n != "reset")

    assert tools_of(SandboxEnvironment) == sorted([*TOOLS, "get_reward"])
    limited = sandbox_environment(tools=["run_python", "submit"], name="Limited")
    assert limited.__name__ == "Limited"
    assert tools_of(limited) == ["get_reward", "run_python", "submit"]
    with pytest.raises(ValueError, match="unknown tools"):
        sandbox_environment(tools=["run_python", "browse"])


@pytest.mark.slow  # a child process, or a timeout to wait out
def test_close_all_and_exit_release_every_sandbox(
    env_class: type[SandboxEnvironment], local: SandboxClient, local_root: Path
) -> None:
    env, other = env_class(), env_class()
    for rollout in (env, other):
        rollout.reset(**ROW)
        rollout.run_shell("true")
    env.reset(**ROW)  # its sandbox goes back to the lender, wiped, idle
    tag = run_tag(env_class)
    assert len(local.list(tags=[tag])) == 2
    env_class.close_all()
    assert local.list(tags=[tag]) == []

    script = textwrap.dedent(
        f"""
        from sandboxkit import get_backend
        from sandboxkit.integrations.environment import sandbox_environment
        env = sandbox_environment(get_backend("subprocess", root={str(local_root)!r}))()
        env.reset(test_list=[])
        env.run_shell("sleep 0")
        print(env.lender().session.run_tag)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 0, done.stderr
    with get_backend("subprocess", root=local_root) as client:
        assert client.list(tags=[done.stdout.strip()]) == []


def test_the_async_core_is_usable_from_a_running_loop(
    env_class: type[SandboxEnvironment],
) -> None:
    """Sync tools called where a loop runs (a notebook), and ``get_reward`` awaited there."""

    async def rollout() -> float | None:
        env = env_class()
        env.reset(**ROW)
        assert env.run_python("y = 2\ny * 21") == "42"
        env.submit(RIGHT)
        return await env.get_reward()

    assert asyncio.run(rollout()) == 1.0


def test_arguments_that_are_not_text_and_a_closed_class_are_errors_the_model_reads(
    env_class: type[SandboxEnvironment],
) -> None:
    """JSON lets a model pass a number, a list or null where a tool takes text; and tools
    called after ``close_all`` start afresh rather than raise."""
    env = env_class()
    env.reset(**ROW)
    assert env.run_python(42) == "error: code must be a string, not int"  # type: ignore[arg-type]
    assert env.write_file("a.txt", None) == "error: content must be a string, not NoneType"  # type: ignore[arg-type]
    assert env.submit(code=["x"]) == "error: code must be a string, not list"  # type: ignore[arg-type]
    assert env.submission is None
    env.run_python("x = 1")
    env_class.close_all()
    assert "NameError" in env.run_python("x")  # a new lender, a new sandbox


def test_text_no_command_line_or_path_can_hold_is_an_error_the_model_reads(
    env_class: type[SandboxEnvironment],
) -> None:
    """JSON strings can hold a NUL (``"\\u0000"``) and lone surrogates (``"\\ud800"``), which
    no argv, path or UTF-8 encoder takes: tools answer with text on both exec paths rather
    than raise."""
    env = env_class()
    env.reset(**ROW)
    nul = "error: a command line or a path cannot hold a NUL character"
    assert env.run_shell("echo a\0b") == nul
    assert env.read_file("a\0b").endswith(nul)
    assert env.write_file("a\0b", "x") == "error: a path cannot hold a NUL character"
    cell = env.run_python("x = 1\0")  # the kernel's own frames are not the model's business
    assert cell.startswith(("ValueError", "SyntaxError")) and "null bytes" in cell, cell
    assert env.write_file("s\ud800.txt", "t\ud800") == "wrote 2 bytes to s?.txt"
    assert env.read_file("s\ud800.txt") == "t?"
    assert env.run_shell("echo \ud800; ls") == "?\ns?.txt"
    assert env.run_python("'\ud800'") == "'?'"


TWICE = FunctionTask(
    prompt="def twice(x: int) -> int:\n",
    func_name="twice",
    tests=["1", "2"],
    reference=lambda x: 2 * x,
)


@pytest.mark.parametrize("rule", ["assert_tests_reward", "function_tests_reward"])
def test_both_trl_paths_give_a_rollout_the_same_reward(local: SandboxClient, rule: str) -> None:
    """``get_reward`` (``environment_factory``) and a reward function given the rollouts
    (``environments=``) judge the same rollouts alike: no submission is empty code under the
    reward's own rule, -1.0 under Daytona's (``get_reward`` gave 0.0 there)."""
    if rule == "assert_tests_reward":
        reward = assert_tests_reward(local, pool_size=1)
        row: dict[str, Any] = ROW
        submissions, expected = [None, "", RIGHT], [0.0, 0.0, 1.0]
    else:
        reward = function_tests_reward([TWICE], backend=local, pool_size=1)
        row = {"prompt": TWICE.prompt}
        submissions, expected = [None, "", "    return 2 * x\n"], [-1.0, -1.0, 1.0]
    environment = sandbox_environment(local, reward=reward, name=f"Judged{rule}")
    try:
        rollouts = [environment() for _ in submissions]
        for env, code in zip(rollouts, submissions, strict=True):
            env.reset(**row)
            if code is not None:
                env.submit(code)
        through_the_environment = [reward_of(env) for env in rollouts]
        columns = {k: [v] * len(rollouts) for k, v in row.items() if k != "prompt"}
        through_the_reward = reward(
            [row["prompt"]] * len(rollouts),
            ["the last message, not what is judged"] * len(rollouts),
            environments=rollouts,
            **columns,
        )
    finally:
        environment.close_all()
    assert through_the_environment == expected
    assert through_the_reward == expected
