"""A misspelt keyword is a TypeError naming the valid ones, at every layer it can be passed to;
the options each layer passes on (pool settings, sandbox spec, provider SDK options) still
reach the layer that reads them."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import SandboxClient, SandboxPool, Session, get_backend, wait
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.harness import FunctionTask
from sandboxkit.local.limits import Limits
from sandboxkit.rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
)
from sandboxkit.testing.remote import Emulator, client_for

TASK = FunctionTask(prompt="def f(x):\n", func_name="f", tests=["1"], reference=abs)
FACTORIES: dict[str, Callable[..., RewardFunction]] = {
    "exec_reward": lambda **kw: exec_reward("subprocess", **kw),
    "assert_tests_reward": lambda **kw: assert_tests_reward("subprocess", **kw),
    "function_tests_reward": lambda **kw: function_tests_reward([TASK], **kw),
}


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_misspelt_reward_option_is_a_type_error_naming_the_valid_ones(factory: str) -> None:
    with pytest.raises(TypeError) as info:
        FACTORIES[factory](pool_sise=2, timeoutt=1)
    message = str(info.value)
    assert message.startswith(
        f"{factory}() got unexpected keyword arguments 'pool_sise', 'timeoutt' "
        "(did you mean 'pool_size', 'timeout'?); valid keywords: "
    )
    valid = message.rpartition("valid keywords: ")[2].split(", ")
    # The factory's, the reward function's, the pool's and the sandbox spec's own.
    assert {"timeout", "batch_timeout", "pool_size", "retries", "tags", "memory_mb"} <= set(valid)
    assert "size" not in valid  # the pool's size is pool_size here


def test_reward_options_still_reach_the_pool_and_its_sandboxes(local: SandboxClient) -> None:
    tag = f"kw={uuid.uuid4().hex}"
    reward = exec_reward(local, pool_size=1, retries=0, tags=[tag], memory_mb=512, timeout=30)
    try:
        assert reward(["p"], ["print('ok')"]) == [1.0]
        assert reward.pool.size == 1 and reward.pool.retries == 0
        assert len(local.list(tags=[tag])) == 1
    finally:
        reward.close()
    assert local.list(tags=[tag]) == []


def test_pool_session_and_client_refuse_misspelt_sandbox_options(local: SandboxClient) -> None:
    with pytest.raises(TypeError, match=r"SandboxPool\(\) .* 'sise' \(did you mean 'size'\?\)"):
        SandboxPool(local, sise=2)
    workdri = r"sandbox\(\) .* 'workdri' \(did you mean 'workdir'"
    with Session(local, handle_signals=False) as session, pytest.raises(TypeError, match=workdri):
        session.sandbox(workdri="/workspace/x")
    with pytest.raises(TypeError, match=r"'imag' \(did you mean 'image'\?\); valid keywords: cpu"):
        local.sandbox(imag="python:3.11")
    assert local.list() == []


def test_a_misspelt_keyword_of_exec_names_the_method_called_and_the_keyword_meant(
    local: SandboxClient,
) -> None:
    valid = "valid keywords: argv, cwd, env, stdin, timeout"
    with local.sandbox() as sb:
        with pytest.raises(TypeError) as sync:
            sb.exec(["true"], timeot=3)  # type: ignore[call-arg]

        async def misspelt() -> None:
            await sb.aexec(["true"], timout=3)  # type: ignore[call-arg]

        with pytest.raises(TypeError) as aio:
            asyncio.run(misspelt())
        assert sb.exec(["true"], timeout=30).returncode == 0
    assert str(sync.value) == (
        "Sandbox.exec() got an unexpected keyword argument 'timeot' (did you mean 'timeout'?); "
        + valid
    )
    assert str(aio.value) == (
        "Sandbox.aexec() got an unexpected keyword argument 'timout' (did you mean 'timeout'?); "
        + valid
    )


def test_public_methods_and_functions_suggest_the_keyword_meant(
    local: SandboxClient,
) -> None:
    def refused(call: Callable[[], object]) -> str:
        with pytest.raises(TypeError) as raised:
            call()
        return str(raised.value).split(";")[0]

    with local.sandbox() as sb, Session(local, handle_signals=False) as session:
        pool = SandboxPool(local, size=1)
        try:
            said = [
                refused(lambda: sb.write_file("a.txt", dat="x")),
                refused(lambda: local.list(tag=["x"])),
                refused(lambda: session.reap(tag=["x"], older=5)),
                refused(lambda: pool.run(lambda s: s.aexec(["true"]), dedline=1.0)),
                refused(lambda: wait([], timout=1.0)),
            ]
        finally:
            pool.close()
    assert said == [
        "Sandbox.write_file() got an unexpected keyword argument 'dat' (did you mean 'data'?)",
        "SandboxClient.list() got an unexpected keyword argument 'tag' (did you mean 'tags'?)",
        "Session.reap() got unexpected keyword arguments 'older', 'tag' "
        "(did you mean 'older_than', 'tags'?)",
        "SandboxPool.run() got an unexpected keyword argument 'dedline' (did you mean 'deadline'?)",
        "wait() got an unexpected keyword argument 'timout' (did you mean 'timeout'?)",
    ]


@pytest.mark.parametrize(
    ("name", "options", "meant"),
    [
        ("subprocess", {"cpu_secs": 2}, "cpu_seconds"),
        pytest.param(
            "daytona",
            {"api_key": "k", "api_ulr": "http://127.0.0.1:9"},
            "api_url",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("daytona") is None,
                reason="needs pip install 'sandboxkit[daytona]'",
            ),
        ),
    ],
)
def test_get_backend_refuses_a_misspelt_constructor_option(
    name: str, options: dict[str, Any], meant: str
) -> None:
    with pytest.raises(TypeError, match=rf"\(did you mean '{meant}'\?\); valid keywords: .*"):
        get_backend(name, **options)


def test_keyword_limits_override_the_limits_given_with_them(local_root: Path) -> None:
    backend = SubprocessBackend(root=local_root, limits=Limits(cpu_seconds=5), cpu_seconds=2)
    assert backend.limits.cpu_seconds == 2


PROVIDER_OPTIONS = {
    "daytona": ({"public": False, "auto_stop_interval": 5}, {"auto_stop_intervall": 5}),
    "aviato": ({"annotations": {"team": "rl"}}, {"anotations": {"team": "rl"}}),
    "modal": ({"idle_timeout": 300, "block_network": True}, {"idle_timout": 300}),
    "e2b": ({"metadata": {"team": "rl"}, "timeout": 600}, {"metdata": {"team": "rl"}}),
}


def test_provider_sdk_options_pass_and_their_misspellings_do_not(
    remote_provider: str, remote_emulator: Emulator
) -> None:
    valid, misspelt = PROVIDER_OPTIONS[remote_provider]
    with client_for(remote_provider, remote_emulator.url) as client:
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            SandboxPool(client, size=1, **misspelt)
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            exec_reward(client, pool_size=1, **misspelt)
        assert remote_emulator.live_sandboxes() == 0
        reward = exec_reward(client, pool_size=1, **valid)
        try:
            assert reward(["p"], ["print('ok')"]) == [1.0]
        finally:
            reward.close()
    assert remote_emulator.live_sandboxes() == 0
