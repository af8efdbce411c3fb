"""Daytona's GRPO example (sorting and max-subarray) ported to sandboxkit.

    python examples/daytona_trl/train_grpo.py           # Qwen/Qwen3-1.7B-Base, vLLM colocate, GPU
    python examples/daytona_trl/train_grpo.py --tiny    # 2 steps of a tiny local model on CPU

The model continues each task's prompt with a function body; ``function_tests_reward`` keeps
the indented body, rejects banned patterns (-1.0), runs it in one of ``SANDBOX_POOL_SIZE``
pooled sandboxes (default 10) with ``MAX_TIMEOUT_SECONDS`` per test (default 1), and rewards
the share of inputs on which it strictly agrees with the reference (-1.0 for an error or a
timeout). The backend is ``SANDBOXKIT_BACKEND`` (``daytona`` for Daytona itself). Writes the
model, ``metrics.jsonl`` (one line per step) and ``rewards.png`` under ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the examples' shared module

from _common import (
    EXIT_UNSUPPORTED,
    backend_name,
    gpu_unsupported_reason,
    grpo_config,
    job_tag,
    new_job_id,
    print_header,
    tiny_model_dir,
    train_and_report,
)
from tasks import TASKS
from transformers import TrainerCallback

from sandboxkit.rewards import function_tests_reward

MODEL_NAME = "Qwen/Qwen3-1.7B-Base"
NUM_GENERATIONS = 5
REWARD_NAME = "function_tests_reward"


def env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


class MetricsWriter(TrainerCallback):
    """Append one JSON line per logged training step: the mean reward and the reward's stats."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if not logs or "reward" not in logs:
            return
        record: dict[str, Any] = {"step": state.global_step}
        for key, value in logs.items():
            if key in ("reward", "reward_std", "loss") or key.startswith(f"{REWARD_NAME}/"):
                record[key] = value
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_rewards(metrics: list[dict[str, Any]], png: Path, title: str) -> None:
    """Mean reward per step, with a band of one standard deviation across completions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [m["step"] for m in metrics]
    mean = [m["reward"] for m in metrics]
    std = [m.get("reward_std", 0.0) for m in metrics]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, marker="o", label="mean reward")
    ax.fill_between(
        steps,
        [m - s for m, s in zip(mean, std, strict=True)],
        [m + s for m, s in zip(mean, std, strict=True)],
        alpha=0.2,
        label="± 1 std",
    )
    ax.set(xlabel="training step", ylabel="reward", title=title, ylim=(-1.1, 1.1))
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Daytona's GRPO example on sandboxkit.")
    parser.add_argument("--model", default=MODEL_NAME)
    parser.add_argument("--tiny", action="store_true", help="2 steps of a tiny model on CPU")
    parser.add_argument("--output-dir", default="training_results")
    parser.add_argument("--max-steps", type=int, default=None, help="default 64 (2 with --tiny)")
    args = parser.parse_args(argv)
    if not args.tiny:
        reason = gpu_unsupported_reason(
            "Training with vLLM", ["vllm"], "python examples/daytona_trl/train_grpo.py --tiny"
        )
        if reason is not None:
            print(f"error: {reason}", file=sys.stderr)
            return EXIT_UNSUPPORTED

    from datasets import Dataset
    from trl import GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback

    pool_size = int(env_number("SANDBOX_POOL_SIZE", 10))
    timeout = env_number("MAX_TIMEOUT_SECONDS", 1)
    max_steps = args.max_steps or (2 if args.tiny else 64)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    job_id = new_job_id()
    print_header(
        f"Daytona GRPO example on sandboxkit (job: {job_id})",
        [
            ("Model", "tiny random model (local, CPU)" if args.tiny else args.model),
            ("Backend", backend_name()),
            ("Tasks", ", ".join(TASKS)),
            ("Sandboxes", f"{pool_size}, {timeout:g}s per test"),
            ("Steps", max_steps),
            ("Output", out),
        ],
    )
    model = str(tiny_model_dir([t.prompt for t in TASKS.values()])) if args.tiny else args.model
    reward = function_tests_reward(
        TASKS, timeout=timeout, pool_size=pool_size, tags=[job_tag(job_id)]
    )
    batch = NUM_GENERATIONS * len(TASKS)  # every task's whole group in each step
    settings: dict[str, Any] = {
        "max_steps": max_steps,
        "num_generations": NUM_GENERATIONS,
        "per_device_train_batch_size": batch,
    }
    if not args.tiny:
        settings |= {
            "max_completion_length": 512,
            "learning_rate": 8e-6,
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.15,
            "gradient_checkpointing": True,
            "loss_type": "dapo",
            "beta": 0.01,
        }
    dataset = Dataset.from_list(
        [{"prompt": task.prompt, "task": name} for name, task in TASKS.items()] * max_steps
    )
    metrics_path = out / "metrics.jsonl"
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=grpo_config(str(out), tiny=args.tiny, **settings),
        train_dataset=dataset,
        callbacks=[MetricsWriter(metrics_path), SandboxCleanupCallback([reward])],
    )
    status = train_and_report(trainer, reward, job_id)
    trainer.save_model(str(out / "model"))
    png = out / "rewards.png"
    plot_rewards(read_metrics(metrics_path), png, f"GRPO on {', '.join(TASKS)}")
    print(f"Saved: {out / 'model'}, {metrics_path}, {png}")
    return status


if __name__ == "__main__":
    sys.exit(main())
