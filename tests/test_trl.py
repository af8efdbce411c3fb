"""A real GRPOTrainer run on CPU: a tiny random model, the sort and max-subarray tasks, and
``function_tests_reward`` (sync and async) scoring its completions in local sandboxes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandboxkit.harness import FunctionTask
from sandboxkit.rewards import function_tests_reward

trl = pytest.importorskip("trl", reason="needs pip install 'sandboxkit[examples]'")
datasets = pytest.importorskip("datasets", reason="needs pip install 'sandboxkit[examples]'")

pytestmark = pytest.mark.slow  # torch and transformers take seconds to import, then to train


def _kadane(xs: list[int]) -> int:
    best = current = xs[0]
    for x in xs[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best


TASKS = {
    "sorting": FunctionTask(
        prompt='def sort_numbers(xs: list[int]) -> list[int]:\n    """Sort ascending."""\n',
        func_name="sort_numbers",
        tests=["[]", "[1, 3, 2]", "[random.randint(-100, 100) for _ in range(50)]"],
        reference=sorted,
        banned_patterns=["sorted(", ".sort(", "heapq", "import ", "__import__"],
    ),
    "max_subarray": FunctionTask(
        prompt='def max_subarray(xs: list[int]) -> int:\n    """Largest sum of a contiguous '
        'non-empty subarray."""\n',
        func_name="max_subarray",
        tests=[
            "[1]",
            "[-2, 1, -3, 4, -1, 2, 1, -5, 4]",
            "[random.randint(-9, 9) for _ in range(40)]",
        ],
        reference=_kadane,
    ),
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as mp:  # the examples' tiny model, as --tiny builds it
        mp.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))
        from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_grpo_trains_two_steps_with_sandbox_rewards(
    tiny_model: Path, tmp_path: Path, asynchronous: bool
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback

    reward = function_tests_reward(TASKS, backend="subprocess", timeout=5, pool_size=2)
    calls: list[dict[str, Any]] = []

    def record(prompts: list[str], completions: list[str], **kwargs: Any) -> None:
        calls.append({"prompts": prompts, "completions": completions, **kwargs})

    if asynchronous:
        inner = reward.as_async()

        async def spy_async(prompts: list[str], completions: list[str], **kwargs: Any) -> Any:
            record(prompts, completions, **kwargs)
            return await inner(prompts, completions, **kwargs)

        spy: Any = spy_async
    else:

        def spy_sync(prompts: list[str], completions: list[str], **kwargs: Any) -> Any:
            record(prompts, completions, **kwargs)
            return reward(prompts, completions, **kwargs)

        spy = spy_sync
    spy.__name__ = reward.__name__

    dataset = datasets.Dataset.from_list(
        [{"prompt": t.prompt, "task": name} for name, t in TASKS.items()] * 4
    )
    config = GRPOConfig(
        output_dir=str(tmp_path),
        bf16=False,
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=24,
        max_steps=2,
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(tiny_model),
        reward_funcs=[spy],
        args=config,
        train_dataset=dataset,
        callbacks=[SandboxCleanupCallback([reward])],
    )
    trainer.train()

    assert len(calls) >= 2
    first = calls[0]
    for key in (
        "prompts",
        "completions",
        "completion_ids",
        "trainer_state",
        "log_metric",
        "log_extra",
        "task",
    ):
        assert key in first, key
    assert len(first["completions"]) == len(first["prompts"]) == 4
    assert all(p in {t.prompt for t in TASKS.values()} for p in first["prompts"])

    history = {k for entry in trainer.state.log_history for k in entry}
    assert "rewards/function_tests_reward/mean" in history
    for metric in (
        "timeout_rate",
        "error_rate",
        "infra_error_rate",
        "latency_p50",
        "latency_p95",
        "pool_size",
    ):
        assert f"function_tests_reward/{metric}" in history, sorted(history)
    stats = reward.last_batch
    assert stats is not None and stats.total == 4
    # Random weights write nonsense: every completion is scored, none by the provider failing.
    assert stats.outcomes["infra"] == 0
    assert reward._pool is None, "the callback released the pool when training ended"
