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
    metrics_writer,
    new_job_id,
    plot_rewards,
    print_header,
    quiet_libraries,
    read_metrics,
    tiny_model_dir,
    train_and_report,
)
from tasks import TASKS

from sandboxkit.rewards import function_tests_reward

MODEL_NAME = "Qwen/Qwen3-1.7B-Base"
NUM_GENERATIONS = 5
REWARD_NAME = "function_tests_reward"


def env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


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
    quiet_libraries()

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
        callbacks=[metrics_writer(metrics_path, REWARD_NAME), SandboxCleanupCallback([reward])],
    )
    status = train_and_report(trainer, reward, job_id)
    trainer.save_model(str(out / "model"))
    png = out / "rewards.png"
    plot_rewards(read_metrics(metrics_path), png, f"GRPO on {', '.join(TASKS)}", ylim=(-1.1, 1.1))
    print(f"Saved: {out / 'model'}, {metrics_path}, {png}")
    return status


if __name__ == "__main__":
    sys.exit(main())
