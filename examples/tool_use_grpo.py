"""GRPO with tools: on MBPP problems, the model may run its code in a sandbox before answering.

    python examples/tool_use_grpo.py           # Qwen/Qwen2.5-0.5B-Instruct, NVIDIA GPU
    python examples/tool_use_grpo.py --tiny    # a tiny random model on CPU: two steps, end to end

Each rollout is a conversation with two tools, served by a TRL environment
(``sandbox_environment``): ``run_python`` runs code in the rollout's own sandbox, a stateful
interpreter, so the model can try its function on the examples and read the traceback;
``submit`` hands in the final solution. When the conversation ends, the environment's
``get_reward`` runs the last submission against the problem's asserts in a sandbox no tool
call has touched, and the reward is the share of asserts passed (0.0 without a submission).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.append(str(Path(__file__).resolve().parent / "art"))  # the MBPP loader

from _common import (
    DEFAULT_INSTRUCT_MODEL,
    EXIT_UNSUPPORTED,
    add_model_args,
    backend_name,
    count_sandboxes,
    gpu_unsupported_reason,
    grpo_config,
    job_tag,
    mean_rewards,
    new_job_id,
    print_header,
    quiet_libraries,
    tiny_model_dir,
)
from mbpp import SPLITS, MBPPProblem, load_problems

from sandboxkit.rewards import assert_tests_reward

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOTrainer

MBPP_SAMPLE = Path(__file__).resolve().parent / "art" / "data" / "mbpp_sample.jsonl"
NUM_GENERATIONS = 4
TOOLS = ("run_python", "submit")
SYSTEM_PROMPT = (
    "You are an expert Python programmer. You have two tools. run_python runs code in a "
    "Python interpreter that keeps its variables between calls: use it to try your function "
    "on the examples before you answer. submit hands in your final solution: call it with the "
    "complete code (the function and the imports it needs). Only submitted code is graded, by "
    "running the tests below; the last submission counts."
)


def as_row(problem: MBPPProblem) -> dict[str, Any]:
    """A problem as a conversational row (TRL applies the model's chat template and adds the
    tools' schemas); ``test_list`` and ``test_setup_code`` are what the judge reads."""
    tests = "\n".join(problem.test_cases)
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {
                "role": "user",
                "content": f"{problem.prompt}\nYour code should pass these tests:\n{tests}",
            },
        ],
        "task_id": problem.task_id,
        "test_list": problem.test_cases,
        "test_setup_code": problem.setup,
    }


def mbpp_dataset(problems: list[MBPPProblem]) -> Dataset:
    from datasets import Dataset

    return Dataset.from_list([as_row(p) for p in problems])


def logged_mean(trainer: GRPOTrainer, key: str) -> float:
    """The mean over steps of a metric TRL logged once per step (NaN: never logged)."""
    values = [float(e[key]) for e in trainer.state.log_history if key in e]
    return sum(values) / len(values) if values else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GRPO on MBPP with a sandbox to run code in.")
    add_model_args(parser, DEFAULT_INSTRUCT_MODEL)
    parser.add_argument("--max-steps", type=int, default=None, help="default 50 (2 with --tiny)")
    parser.add_argument(
        "--backend", default=None, help="subprocess, daytona, aviato (default: SANDBOXKIT_BACKEND)"
    )
    parser.add_argument(
        "--dataset-path",
        default=None,
        help="a local MBPP JSONL file (default: MBPP from the hub; with --tiny, the 4-problem "
        "sample in examples/art/data)",
    )
    parser.add_argument("--dataset-split", default="train", choices=list(SPLITS))
    parser.add_argument("--dataset-limit", type=int, default=None, help="at most this many")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per tool call, test")
    parser.add_argument("--max-tool-calls", type=int, default=4, help="tool-calling turns")
    parser.add_argument("--pool-size", type=int, default=4, help="sandboxes judging at once")
    args = parser.parse_args(argv)
    if not args.tiny:
        reason = gpu_unsupported_reason("Training", [], "python examples/tool_use_grpo.py --tiny")
        if reason is not None:
            print(f"error: {reason}", file=sys.stderr)
            return EXIT_UNSUPPORTED
    quiet_libraries()

    from trl import GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback, sandbox_environment

    path = args.dataset_path or (MBPP_SAMPLE if args.tiny else None)
    problems = load_problems(args.dataset_split, args.dataset_limit, path)
    if not problems:
        raise SystemExit(f"error: no {args.dataset_split} problems in {path}")
    dataset = mbpp_dataset(problems)
    max_steps = args.max_steps or (2 if args.tiny else 50)
    job_id = new_job_id()
    tag = job_tag(job_id)
    print_header(
        f"GRPO with a sandbox to run code in (job: {job_id})",
        [
            ("Model", "tiny random model (local, CPU)" if args.tiny else args.model),
            ("Backend", backend_name(args.backend)),
            ("Dataset", f"{len(dataset)} MBPP {args.dataset_split} problems"),
            ("Tools", ", ".join(TOOLS)),
            ("Steps", max_steps),
        ],
    )
    if args.tiny:  # its tokenizer learns the prompts' words: shorter prompts, faster steps
        texts = [m["content"] for row in dataset for m in row["prompt"]]
        model = str(tiny_model_dir(texts, tool_calling=True))
    else:
        model = args.model
    # Rollout sandboxes and the judge's carry the job's tag, so the check below finds leaks.
    environment = sandbox_environment(
        args.backend,
        timeout=args.timeout,
        tools=TOOLS,
        reward=assert_tests_reward(
            args.backend, timeout=args.timeout, pool_size=args.pool_size, tags=[tag]
        ),
        name="MBPPSandbox",
        tags=[tag],
    )
    settings: dict[str, Any] = {
        "max_steps": max_steps,
        "num_generations": NUM_GENERATIONS,
        "per_device_train_batch_size": 2 * NUM_GENERATIONS,
        "max_tool_calling_iterations": args.max_tool_calls,
    }
    if not args.tiny:  # room for a few turns of code and tool output
        settings["max_completion_length"] = 1024
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="tool-use-grpo-")
    trainer = GRPOTrainer(
        model=model,
        args=grpo_config(output_dir, tiny=args.tiny, **settings),
        train_dataset=dataset,
        environment_factory=environment,  # its get_reward is the reward
        callbacks=[SandboxCleanupCallback(environments=[environment])],
    )
    try:
        trainer.train()
    finally:
        environment.close_all()  # also when training fails (the callback runs on success)
    steps = trainer.state.global_step
    rewards = mean_rewards(trainer)
    mean = sum(rewards) / len(rewards) if rewards else math.nan
    print(f"Training complete: {steps} step{'s' if steps != 1 else ''}, mean reward {mean:.2f}")
    calls = logged_mean(trainer, "tools/call_frequency")
    failed = logged_mean(trainer, "tools/failure_frequency")
    print(f"Tool calls per rollout: {calls:.2f} (failed: {failed:.0%})")
    left = count_sandboxes(tag, args.backend)
    print(f"Sandboxes left under {tag}: {left}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
