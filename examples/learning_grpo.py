"""GRPO that visibly learns, on CPU, offline, in a few minutes.

    python examples/learning_grpo.py                    # 1-3 min on 2 CPU cores
    python examples/learning_grpo.py --steps 60 --output-dir my_run

The task family: four two-argument functions (``add``, ``sub``, ``mul``, ``biggest``), each a
prompt made of its signature and docstring, judged by ``assert_tests_reward`` running the
model's body against two asserts in a sandbox (the body continues the prompt). A tiny model
built locally (``tiny_model.py``) is first fitted for a few seconds on programs of the right
shape in which every prompt is paired with each of the four bodies equally often: it learns to
write ``return <expression>``, but not which expression a prompt asks for, so about a quarter
of its samples pass. GRPO on the sandbox reward alone has to teach it the rest: the pass rate
climbs toward 1.0. Nothing but the reward tells the model which body is right.

Prints one line per step, a summary (mean reward over the first and last ten steps, each
task's pass rate then and now) and writes ``metrics.jsonl`` and ``rewards.png`` under
``--output-dir``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

from _common import (
    RULE,
    backend_name,
    count_sandboxes,
    job_tag,
    metrics_writer,
    new_job_id,
    plot_rewards,
    print_header,
    quiet_libraries,
    read_metrics,
)

from sandboxkit.rewards import RewardFunction, assert_tests_reward

TASKS: dict[str, dict[str, Any]] = {
    "add": {
        "doc": "Return a plus b.",
        "body": "a + b",
        "tests": ["add(3, 5) == 8", "add(7, 2) == 9"],
    },
    "sub": {
        "doc": "Return a minus b.",
        "body": "a - b",
        "tests": ["sub(3, 5) == -2", "sub(7, 2) == 5"],
    },
    "mul": {
        "doc": "Return a times b.",
        "body": "a * b",
        "tests": ["mul(3, 5) == 15", "mul(7, 2) == 14"],
    },
    "biggest": {
        "doc": "Return the larger of a and b.",
        "body": "max(a, b)",
        "tests": ["biggest(3, 5) == 5", "biggest(7, 2) == 7"],
    },
}
"""On (3, 5) and (7, 2) the four bodies give four different values: each of the other three
bodies fails both asserts, so only the right one earns the reward."""

GROUP = 8
"""Samples per prompt: the group each sample's reward is compared within. Every step samples
every task (the dataset is not shuffled), so each update says at once which body is right for
one prompt and wrong for the others; a step of one task alone pushes its body onto all four."""

WINDOW = 10
"""Steps averaged at each end of the run to measure the rise."""


def prompt(name: str) -> str:
    return f'def {name}(a, b):\n    """{TASKS[name]["doc"]}"""\n'


def body(expression: str) -> str:
    return f"    return {expression}\n"


def prefit(model_dir: Path, *, steps: int, seed: int) -> tuple[float, float]:
    """Fit the model on every (prompt, body) pair, each body after each prompt equally often,
    ending with EOS; saves it in place. Returns the final loss and the seconds it took.

    Prompt and body are tokenized apart, as TRL tokenizes a prompt and the model then writes
    the completion's tokens: tokenized together, the whitespace between them would merge into
    tokens the model never sees at sampling time.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    torch.manual_seed(seed)
    tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir))
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir))
    sequences = [
        tokenizer(prompt(name))["input_ids"]
        + tokenizer(body(task["body"]))["input_ids"]
        + [tokenizer.eos_token_id]
        for name in TASKS
        for task in TASKS.values()
    ]
    width = max(map(len, sequences))
    pad = [[tokenizer.pad_token_id] * (width - len(s)) for s in sequences]
    input_ids = torch.tensor([p + s for p, s in zip(pad, sequences, strict=True)])
    mask = torch.tensor([[0] * len(p) + [1] * len(s) for p, s in zip(pad, sequences, strict=True)])
    labels = input_ids.masked_fill(mask == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = 0.0
    for _ in range(steps):
        optimizer.zero_grad()
        output = model(input_ids=input_ids, attention_mask=mask, labels=labels)
        output.loss.backward()
        optimizer.step()
        loss = float(output.loss.detach())
    model.save_pretrained(str(model_dir))
    return loss, time.monotonic() - started


class Scoreboard:
    """The sandbox reward, recording each completion's reward by step and task for the
    summary; TRL passes the dataset's ``task`` column along with the completions."""

    def __init__(self, reward: RewardFunction) -> None:
        # Made here, on the main thread, as as_async asks: its pool's session handles signals.
        self.reward = reward.as_async()
        self.scores: list[dict[str, list[float]]] = []
        self.__name__ = reward.__name__  # TRL logs a reward under its function's name

    async def __call__(
        self, prompts: list[str], completions: list[str], **columns: Any
    ) -> list[float | None]:
        rewards = await self.reward(prompts, completions, **columns)
        step: dict[str, list[float]] = defaultdict(list)
        for task, value in zip(columns["task"], rewards, strict=True):
            if value is not None:  # None: the sandbox failed, not the model (TRL drops it)
                step[task].append(value)
        self.scores.append(step)
        return rewards

    def by_task(self, steps: list[dict[str, list[float]]]) -> dict[str, float]:
        rates: dict[str, float] = {}
        for name in TASKS:
            values = [v for step in steps for v in step.get(name, [])]
            rates[name] = statistics.fmean(values) if values else float("nan")
        return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GRPO that learns, on CPU, in minutes.")
    parser.add_argument("--steps", type=int, default=60, help="GRPO steps (at least 20)")
    parser.add_argument("--prefit-steps", type=int, default=150)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="learning_results")
    args = parser.parse_args(argv)
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW}: the first and last {WINDOW} compare")
    quiet_libraries()
    import torch

    # A model this small runs fastest on one thread; more only contend on a busy machine, and
    # one thread makes the run's arithmetic, hence its samples, the same on any machine.
    torch.set_num_threads(1)
    from datasets import Dataset
    from tiny_model import build_tiny_model
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback

    started = time.monotonic()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    job_id = new_job_id()
    print_header(
        f"GRPO that learns: four tiny functions, sandbox rewards (job: {job_id})",
        [
            ("Model", "tiny model built locally, pre-fitted on CPU"),
            ("Backend", backend_name()),
            ("Tasks", ", ".join(TASKS)),
            ("Steps", f"{args.steps}, each: {len(TASKS)} tasks x {GROUP} samples"),
            ("Output", out),
        ],
    )
    model_dir = build_tiny_model(
        tempfile.mkdtemp(prefix="sandboxkit-learn-"),
        extra_text=[prompt(n) + body(t["body"]) for n, t in TASKS.items()],
        seed=args.seed,
    )
    loss, seconds = prefit(model_dir, steps=args.prefit_steps, seed=args.seed)
    print(f"Pre-fit: {args.prefit_steps} steps in {seconds:.0f}s, loss {loss:.2f}", flush=True)

    rows = [
        {"prompt": prompt(n), "task": n, "test_list": [f"assert {t}" for t in task["tests"]]}
        for n, task in TASKS.items()
    ]
    reward = assert_tests_reward(
        continuation=True, timeout=5.0, pool_size=4, tags=[job_tag(job_id)]
    )
    scoreboard = Scoreboard(reward)
    metrics_path = out / "metrics.jsonl"

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = kwargs.get("logs")
            if logs and "reward" in logs:
                print(
                    f"step {state.global_step:3d}/{args.max_steps}: "
                    f"mean reward {logs['reward']:.2f} (std {logs['reward_std']:.2f}), "
                    f"{time.monotonic() - started:.0f}s",
                    flush=True,
                )

    config = GRPOConfig(
        output_dir=str(out / "trainer"),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        max_steps=args.steps,
        per_device_train_batch_size=GROUP * len(TASKS),
        num_generations=GROUP,
        shuffle_dataset=False,
        max_completion_length=12,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[cast(Any, scoreboard)],  # TRL awaits async callables
        args=config,
        train_dataset=Dataset.from_list(rows * args.steps),
        callbacks=[Progress(), metrics_writer(metrics_path, reward.__name__)],
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)  # our own line per step replaces TRL's log dicts
    trainer.add_callback(SandboxCleanupCallback([reward]))
    try:
        trainer.train()
    finally:
        reward.close()

    metrics = read_metrics(metrics_path)
    rewards = [m["reward"] for m in metrics]
    first, last = statistics.fmean(rewards[:WINDOW]), statistics.fmean(rewards[-WINDOW:])
    png = out / "rewards.png"
    plot_rewards(
        metrics,
        png,
        "GRPO on sandbox rewards: pass rate per step",
        ylim=(-0.05, 1.05),
        band=False,
        marks={f"first {WINDOW} steps": first, f"last {WINDOW} steps": last},
    )
    before = scoreboard.by_task(scoreboard.scores[:WINDOW])
    after = scoreboard.by_task(scoreboard.scores[-WINDOW:])
    left = count_sandboxes(job_tag(job_id))
    print(RULE)
    print(
        f"Mean reward: first {WINDOW} steps {first:.2f}, last {WINDOW} steps {last:.2f}, "
        f"rise {last - first:+.2f}"
    )
    print(
        f"Mean reward by task (first -> last {WINDOW} steps): "
        + ", ".join(f"{n} {before[n]:.2f} -> {after[n]:.2f}" for n in TASKS)
    )
    print(f"Time: {time.monotonic() - started:.0f}s")
    print(f"Saved: {metrics_path}, {png}")
    print(f"Sandboxes left under {job_tag(job_id)}: {left}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
