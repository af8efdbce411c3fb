"""SandboxEnvironment under a real GRPOTrainer on CPU: TRL's own tool loop calls the sandbox
tools, TRL's reward machinery scores the submissions, and no sandbox outlives training.

The tiny random model writes no well-formed tool call, so the second test swaps its generation
for a scripted policy (``_generate_single_turn``, the one step that samples tokens) and leaves
everything else, parsing, tool calls, tool results fed back, rewards and logging, to TRL.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import get_backend
from sandboxkit.rewards import assert_tests_reward

trl = pytest.importorskip("trl", reason="needs pip install 'sandboxkit[examples]'")
datasets = pytest.importorskip("datasets", reason="needs pip install 'sandboxkit[examples]'")

from sandboxkit.integrations.trl import (  # noqa: E402  (needs trl)
    TOOLS,
    SandboxCleanupCallback,
    SandboxEnvironment,
    sandbox_environment,
)

pytestmark = pytest.mark.slow  # torch and transformers take seconds to import, then to train

REPO = Path(__file__).resolve().parents[1]
SUBMITTED = "submitted; it will be judged against the task's tests when the rollout ends"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples' tiny model, with Qwen2.5's chat template: TRL parses its tool calls."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / "examples"))
        from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-tools"), tool_calling=True)


@pytest.fixture(autouse=True)
def _silence_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    """environment_factory is experimental in TRL, which says so on every trainer."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture
def closed_after() -> Iterator[list[type[SandboxEnvironment]]]:
    """The environment classes a test makes, closed after it even when it fails (the
    callback closes them when it passes)."""
    made: list[type[SandboxEnvironment]] = []
    yield made
    for environment in made:
        environment.close_all()


def _config(output_dir: Path, **overrides: Any) -> Any:
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "bf16": False,
        "use_cpu": True,
        "report_to": [],
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": 0,
        **overrides,
    }
    return GRPOConfig(**settings)


def _run_sandboxes(run_tag: str) -> list[str]:
    """The ids of the local sandboxes of one run that are still there."""
    with get_backend("subprocess") as client:
        return [info.id for info in client.list(tags=[run_tag])]


def _logged(trainer: Any, key: str) -> list[float]:
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_grpo_trains_with_sandbox_environment(
    tiny_model: Path, tmp_path: Path, closed_after: list[type[SandboxEnvironment]]
) -> None:
    """Two steps of the random model through TRL's tool machinery; the sandboxes its rollouts
    hold when training ends (TRL resets an environment only at the next batch) are stopped
    by the callback."""
    from trl import GRPOTrainer

    env = sandbox_environment("subprocess", timeout=20, name="TinyEnv")
    closed_after.append(env)
    run_tag = env.lender().session.run_tag
    during: list[list[str]] = []

    def use_the_sandboxes(
        prompts: list[Any], completions: list[Any], environments: list[Any], **kwargs: Any
    ) -> list[float | None]:
        """What a model that calls a tool would have done: every rollout gets a sandbox."""
        outputs = [e.run_python("print(6 * 7)") for e in environments]
        assert outputs == ["42"] * len(environments)
        during.append(_run_sandboxes(run_tag))
        return [0.0] * len(completions)

    dataset = datasets.Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "Write add(a, b)."}],
                "test_list": ["assert add(1, 2) == 3"],
            }
        ]
        * 4
    )
    trainer = GRPOTrainer(
        model=str(tiny_model),
        reward_funcs=[use_the_sandboxes],
        args=_config(
            tmp_path,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=16,
            max_steps=2,
            max_tool_calling_iterations=2,
        ),
        train_dataset=dataset,
        environment_factory=env,
        callbacks=[SandboxCleanupCallback(environments=[env])],
    )
    assert sorted(tool.__name__ for tool in trainer.tools) == sorted(TOOLS)
    trainer.train()

    assert len(_logged(trainer, "tools/call_frequency")) == 2  # the tool loop ran every step
    assert _logged(trainer, "rewards/TinyEnv/mean") == [0.0, 0.0]  # nothing submitted
    assert len(during) == 2 and all(len(ids) >= 2 for ids in during), during
    assert _run_sandboxes(run_tag) == [], "the callback stopped the sandboxes still lent"


TASKS: dict[str, dict[str, Any]] = {
    "add": {
        "prompt": "Write add(a, b), which returns a + b.",
        "test_list": ["assert add(1, 2) == 3", "assert add(-4, 4) == 0"],
        "submission": "def add(a, b):\n    return a + b\n",  # right
    },
    "sub": {
        "prompt": "Write sub(a, b), which returns a - b.",
        "test_list": ["assert sub(5, 3) == 2"],
        "submission": "def sub(a, b):\n    return a + b\n",  # wrong
    },
}
EXPECTED = {"add": 1.0, "sub": 0.0}


def _tool_call(name: str, **arguments: str) -> str:
    """An assistant turn calling a tool, as Qwen2.5 writes it."""
    call = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{call}\n</tool_call><|im_end|>"


def _scripted_turn(conversation: str, seen: list[str]) -> str:
    """The policy: from the conversation so far (the prompt it is given, decoded), the next
    assistant turn. It defines ``x`` in one call and prints it in the next, which shows 42
    only if the interpreter kept its state between TRL's turns; it submits its solution only
    when it saw 42."""
    task = next(name for name, t in TASKS.items() if t["prompt"] in conversation)
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", conversation, re.DOTALL)
    if not results:
        return _tool_call("run_python", code="x = 6 * 7")
    if len(results) == 1:
        return _tool_call("run_python", code="print(x + 0)")
    if len(results) == 2:
        seen.append(results[-1])
        code = TASKS[task]["submission"] if results[-1] == "42" else "lost = True\n"
        return _tool_call("submit", code=code)
    return "Done.<|im_end|>"


def test_scripted_policy_calls_tools_through_trl(
    tiny_model: Path, tmp_path: Path, closed_after: list[type[SandboxEnvironment]]
) -> None:
    """Tool calls that really happen, through TRL's parsing and tool loop: a stateful
    interpreter across turns, the submissions judged by the environment (right for add, wrong
    for sub) and by a sandboxkit reward given the environments, which logs their tool use."""
    from trl import GRPOTrainer

    seen: list[str] = []
    judged: list[tuple[str, float | None]] = []

    class ScriptedTrainer(GRPOTrainer):
        def _generate_single_turn(
            self,
            prompt_ids: list[list[int]],
            images: Any,
            multimodal_fields: Any,
            num_generations: int,
            has_tool_images: bool = False,
        ) -> tuple[list[list[int]], None]:
            """One completion per prompt, as the non-vLLM path returns (no logprobs)."""
            tokenizer: Any = self.processing_class
            turns = [_scripted_turn(tokenizer.decode(ids), seen) for ids in prompt_ids]
            return [tokenizer(turn, add_special_tokens=False)["input_ids"] for turn in turns], None

    class ScriptedEnv(sandbox_environment("subprocess", timeout=20)):  # type: ignore[misc]
        async def get_reward(self) -> float | None:
            reward: float | None = await super().get_reward()
            judged.append((self.row["task"], reward))
            return reward

    closed_after.append(ScriptedEnv)
    run_tag = ScriptedEnv.lender().session.run_tag
    reward = assert_tests_reward("subprocess", timeout=20, pool_size=2)
    calls: list[dict[str, Any]] = []

    def spy(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        """The sandboxkit reward, recording what TRL gave it (and the sandboxes lent now)."""
        rewards = reward(prompts, completions, **kwargs)
        calls.append(
            {
                "completions": completions,
                "tasks": kwargs["task"],
                "tool_calls": [[c.tool for c in e.tool_calls] for e in kwargs["environments"]],
                "errors": [[c.error for c in e.tool_calls] for e in kwargs["environments"]],
                "rewards": rewards,
                "sandboxes": _run_sandboxes(run_tag),
            }
        )
        return rewards

    spy.__name__ = reward.__name__
    dataset = datasets.Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": t["prompt"]}],
                "task": name,
                "test_list": t["test_list"],
            }
            for name, t in TASKS.items()
        ]
    )
    trainer = ScriptedTrainer(
        model=str(tiny_model),
        reward_funcs=[spy],
        args=_config(
            tmp_path,
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=1024,
            max_steps=2,
            max_tool_calling_iterations=4,
        ),
        train_dataset=dataset,
        environment_factory=ScriptedEnv,
        callbacks=[SandboxCleanupCallback([reward], environments=[ScriptedEnv])],
    )
    trainer.train()

    assert seen == ["42"] * 8, "x survived from one run_python call to the next"
    assert len(calls) == 2
    for call in calls:
        assert sorted(call["tasks"]) == ["add", "add", "sub", "sub"]
        for task, completion, tools, errors, value in zip(
            call["tasks"],
            call["completions"],
            call["tool_calls"],
            call["errors"],
            call["rewards"],
            strict=True,
        ):
            results = [m["content"] for m in completion if m["role"] == "tool"]
            assert results == ["(no output)", "42", SUBMITTED], completion
            assert completion[-1] == {"role": "assistant", "content": "Done."}
            assert tools == ["run_python", "run_python", "submit"]
            assert errors == [False, False, False]
            assert value == EXPECTED[task]
        assert len(call["sandboxes"]) >= 4  # a sandbox per rollout, still lent
    assert sorted(judged) == sorted(
        [(task, EXPECTED[task]) for task in ["add", "add", "sub", "sub"] * 2]
    )

    assert _logged(trainer, "tools/call_frequency") == [3.0, 3.0]
    assert _logged(trainer, "completions/clipped_ratio") == [0.0, 0.0]  # every turn ended
    assert _logged(trainer, "tools/failure_frequency") == [0.0, 0.0]
    assert _logged(trainer, "rewards/ScriptedEnv/mean") == [0.5, 0.5]
    assert _logged(trainer, "rewards/assert_tests_reward/mean") == [0.5, 0.5]
    assert _logged(trainer, "assert_tests_reward/tool_calls_per_rollout") == [2.0, 2.0]
    assert _logged(trainer, "assert_tests_reward/submitted_rate") == [1.0, 1.0]
    assert _logged(trainer, "assert_tests_reward/tool_error_rate") == [0.0, 0.0]
    assert _logged(trainer, "assert_tests_reward/pass_rate") == [0.5, 0.5]

    assert _run_sandboxes(run_tag) == [], "the callback stopped every rollout's sandbox"
    assert reward._pool is None, "and the reward's pool"


EXIT_CHILD = """
import sys
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from sandboxkit import get_backend
from sandboxkit.integrations.trl import sandbox_environment

model, output_dir = sys.argv[1:]
env = sandbox_environment("subprocess", timeout=20, name="ExitEnv")

def use_the_sandboxes(prompts, completions, environments, **kwargs):
    return [float(e.run_python("print(6 * 7)") == "42") for e in environments]

rows = [{"prompt": [{"role": "user", "content": "Write add(a, b)."}], "test_list": []}] * 2
config = GRPOConfig(
    output_dir=output_dir, use_cpu=True, bf16=False, report_to=[], save_strategy="no",
    per_device_train_batch_size=2, num_generations=2, max_completion_length=8, max_steps=1,
    max_tool_calling_iterations=1,
)
trainer = GRPOTrainer(
    model=model, reward_funcs=[use_the_sandboxes], args=config,
    train_dataset=Dataset.from_list(rows), environment_factory=env,
)
trainer.train()
run_tag = env.lender().session.run_tag
with get_backend("subprocess") as client:
    print(run_tag, len(client.list(tags=[run_tag])))
"""


def test_sandboxes_are_released_at_exit_without_the_callback(
    tiny_model: Path, tmp_path: Path
) -> None:
    """A run that forgets the callback still leaves no sandbox once its process exits."""
    result = subprocess.run(
        [sys.executable, "-c", EXIT_CHILD, str(tiny_model), str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": str(REPO), "TRL_EXPERIMENTAL_SILENCE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_tag, left_at_the_end = result.stdout.split()[-2:]
    assert int(left_at_the_end) >= 2, "the rollouts still held their sandboxes"
    assert _run_sandboxes(run_tag) == []
