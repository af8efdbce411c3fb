"""GRPO on contest problems: the model writes a whole program that reads stdin, in C++ or Python,
and ``stdio_tests_reward`` compiles it once and runs it on the problem's tests in sandboxes.

    python examples/contest_grpo.py           # Qwen/Qwen2.5-Coder-1.5B-Instruct, NVIDIA GPU
    python examples/contest_grpo.py --tiny    # a tiny random model on CPU: one step, end to end

The problems are ours (``contest/``), each asked once per language, as open-r1's rows ask
(``verification_info``, ``time_limit``, ``memory_limit``, a ``checker`` where the problem has
one). The reward is the share of tests passed; each step logs the share of every contest
verdict (``stdio_tests_reward/compile_error_rate``, ...), printed at the end for the last step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from typing import TYPE_CHECKING, Any, cast

from _common import (
    EXIT_UNSUPPORTED,
    add_model_args,
    backend_name,
    gpu_unsupported_reason,
    grpo_config,
    job_tag,
    new_job_id,
    print_header,
    quiet_libraries,
    tiny_model_dir,
    train_and_report,
)
from contest.problemset import PROMPT_NAMES, as_row, load_problems

from sandboxkit import Verdict
from sandboxkit.rewards import RewardFunction, stdio_tests_reward

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOTrainer

MODEL_NAME = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
PROBLEMS = ("aplusb", "palindromes", "circles", "smallest_sums")
"""A handful of the set: 64-bit sums, a case-insensitive checker, a float checker, and 1.4 MB
inputs where a quadratic sort runs out of time."""
LANGUAGES = ("cpp17", "python")
NUM_GENERATIONS = 4


def contest_dataset(names: list[str], languages: list[str]) -> Dataset:
    """Each problem asked in each language, as chat prompts (TRL applies the chat template).
    Checkers and test cases go in as JSON text, which every row can hold alike."""
    from datasets import Dataset

    problems = {p.name: p for p in load_problems()}
    unknown = sorted(set(names) - set(problems))
    if unknown:
        raise SystemExit(f"error: no problem {', '.join(unknown)}; choose from {sorted(problems)}")
    rows = []
    for name in names:
        for language in languages:
            row = as_row(problems[name], language)
            rows.append(
                {
                    "prompt": [{"role": "user", "content": row["prompt"]}],
                    "verification_info": json.dumps(row["verification_info"]),
                    "checker": json.dumps(row["checker"]) if "checker" in row else "",
                    "time_limit": row["time_limit"],
                    "memory_limit": row["memory_limit"],
                }
            )
    return Dataset.from_list(rows)


def verdict_shares(trainer: GRPOTrainer, reward: RewardFunction) -> str:
    """The verdicts of the last logged step, as ``compile_error 75%, wrong_answer 25%``."""
    logged = [e for e in trainer.state.log_history if f"{reward.__name__}/accepted_rate" in e]
    if not logged:
        return "none (no program was judged)"
    shares = {v.value: float(logged[-1][f"{reward.__name__}/{v.value}_rate"]) for v in Verdict}
    return ", ".join(f"{name} {share:.0%}" for name, share in shares.items() if share > 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GRPO on contest problems (C++ and Python).")
    add_model_args(parser, MODEL_NAME)
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated names")
    parser.add_argument(
        "--languages", default=",".join(LANGUAGES), help=f"of {', '.join(PROMPT_NAMES)}"
    )
    parser.add_argument("--max-steps", type=int, default=None, help="default 50 (1 with --tiny)")
    parser.add_argument("--pool-size", type=int, default=4, help="sandboxes judging at once")
    args = parser.parse_args(argv)
    if not args.tiny:
        reason = gpu_unsupported_reason("Training", [], "python examples/contest_grpo.py --tiny")
        if reason is not None:
            print(f"error: {reason}", file=sys.stderr)
            return EXIT_UNSUPPORTED
    quiet_libraries()
    languages = args.languages.split(",")
    wrong = sorted(set(languages) - set(PROMPT_NAMES))
    if wrong:
        parser.error(f"no language {', '.join(wrong)}; choose from {', '.join(PROMPT_NAMES)}")

    from trl import GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback

    dataset = contest_dataset(args.problems.split(","), languages)
    max_steps = args.max_steps or (1 if args.tiny else 50)
    job_id = new_job_id()
    print_header(
        f"Contest GRPO with sandbox judging (job: {job_id})",
        [
            ("Model", "tiny random model (local, CPU)" if args.tiny else args.model),
            ("Backend", backend_name()),
            ("Problems", args.problems.replace(",", ", ")),
            ("Languages", ", ".join(PROMPT_NAMES[lang][0] for lang in languages)),
            ("Steps", max_steps),
        ],
    )
    prompts = [row["prompt"][0]["content"] for row in dataset]
    model = str(tiny_model_dir(prompts)) if args.tiny else args.model
    reward = stdio_tests_reward(pool_size=args.pool_size, tags=[job_tag(job_id)])
    settings: dict[str, Any] = {"max_steps": max_steps, "num_generations": NUM_GENERATIONS}
    if args.tiny:  # every row's whole group in the one step: both languages are judged
        settings["per_device_train_batch_size"] = NUM_GENERATIONS * len(dataset)
    else:
        settings["max_completion_length"] = 1024
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="contest-grpo-")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[cast(Any, reward.as_async())],  # TRL awaits async callables
        args=grpo_config(output_dir, tiny=args.tiny, **settings),
        train_dataset=dataset,
        callbacks=[SandboxCleanupCallback([reward])],
    )
    status = train_and_report(trainer, reward, job_id)
    print(f"Verdicts at the last step: {verdict_shares(trainer, reward)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
