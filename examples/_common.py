"""What the examples share: job tags and cleanup checks, the toy coding dataset, the sandbox
reward, GRPO settings and the run report.

The TRL, Unsloth and Daytona-port examples differ only in how they load the model and which
tasks they train on; everything else lives here so the examples cannot drift apart. Heavy
imports (trl, datasets, torch) happen inside functions: Unsloth must be imported before them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import secrets
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import sandboxkit
from sandboxkit.rewards import RewardFunction, assert_tests_reward

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

RULE = "=" * 60
THIN_RULE = "-" * 60
DEFAULT_INSTRUCT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
EXIT_UNSUPPORTED = 3
"""Exit status of an example that cannot run on this machine (no GPU, a GPU-only package
missing), so a script can tell "cannot run here" from a failure."""


def new_job_id() -> str:
    """A short random id naming this run's sandboxes (8 hex characters)."""
    return secrets.token_hex(4)


def job_tag(job_id: str) -> str:
    return f"job={job_id}"


def count_sandboxes(tag: str, backend: str | None = None) -> int:
    """How many sandboxes ``backend`` (None: the configured one) still lists under ``tag``.

    Asked of the provider rather than of our own bookkeeping, so a leak shows up.
    """
    with sandboxkit.get_backend(backend) as client:
        return len(client.list(tags=[tag]))


def backend_name(backend: str | None = None) -> str:
    """The backend ``backend`` names, else the one ``SANDBOXKIT_BACKEND`` (or ``.env``)
    selects, as the registry resolves it."""
    with sandboxkit.get_backend(backend) as client:
        return client.name


def gpu_unsupported_reason(what: str, packages: Sequence[str], cpu_alternative: str) -> str | None:
    """Why ``what`` cannot run here (no CUDA GPU, or one of ``packages`` missing), or None.

    Checked before importing those packages: vLLM and Unsloth fail to import without a GPU with
    errors that do not say so.
    """
    import torch

    if not torch.cuda.is_available():
        return (
            f"{what} needs an NVIDIA GPU with CUDA, and none is available here. "
            f"For a CPU run, use: {cpu_alternative}"
        )
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        return f"{what} needs {', '.join(missing)}: pip install {' '.join(missing)}"
    return None


def quiet_libraries() -> None:
    """Keep an example's output to its progress, rewards and summary.

    transformers warns (FutureWarning) about its own deprecated names whenever TRL calls them,
    logs weight-loading notes and draws progress bars for saving and loading a model: none of
    it is something a user of the example can act on. Only those categories and modules are
    silenced; errors still raise, and other libraries' warnings still show.
    """
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl)(\.|$)")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def print_header(title: str, rows: Sequence[tuple[str, object]] = ()) -> None:
    print(title)
    print(RULE)
    for label, value in rows:
        print(f"{label + ':':<14}{value}")
    if rows:
        print(RULE)


# -- the toy coding dataset of the TRL and Unsloth examples --------------------------------

CODING_PROBLEMS: list[dict[str, Any]] = [
    {
        "task": "add",
        "text": "Write a function add(a, b) that returns the sum of two integers.",
        "test_list": ["assert add(1, 2) == 3", "assert add(-4, 4) == 0"],
    },
    {
        "task": "reverse_string",
        "text": "Write a function reverse_string(s) that returns s reversed.",
        "test_list": ["assert reverse_string('abc') == 'cba'", "assert reverse_string('') == ''"],
    },
    {
        "task": "is_even",
        "text": "Write a function is_even(n) that returns True when n is even.",
        "test_list": ["assert is_even(4) is True", "assert is_even(7) is False"],
    },
    {
        "task": "count_vowels",
        "text": "Write a function count_vowels(s) that counts the vowels (aeiou) in s.",
        "test_list": ["assert count_vowels('hello') == 2", "assert count_vowels('xyz') == 0"],
    },
    {
        "task": "squares",
        "text": "Write a function squares(n) that returns [0, 1, 4, ...] up to (n-1)**2.",
        "test_list": ["assert squares(3) == [0, 1, 4]", "assert squares(0) == []"],
    },
]
"""Five small problems with MBPP-style asserts (``assert_tests_reward`` reads ``test_list``)."""


def coding_dataset() -> Dataset:
    """The problems as a conversational dataset: TRL applies the model's chat template."""
    from datasets import Dataset

    rows = [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": f"{p['text']} Answer with the code in one ```python block.",
                }
            ],
            "task": p["task"],
            "test_list": p["test_list"],
        }
        for p in CODING_PROBLEMS
    ]
    return Dataset.from_list(rows)


def sandbox_reward(job_id: str, *, pool_size: int = 4, timeout: float = 5.0) -> RewardFunction:
    """The TRL/Unsloth reward: the share of a problem's asserts the completion passes, run on
    the backend ``SANDBOXKIT_BACKEND`` names, in sandboxes tagged with the job."""
    return assert_tests_reward(timeout=timeout, pool_size=pool_size, tags=[job_tag(job_id)])


# -- GRPO runs -----------------------------------------------------------------------------


def add_model_args(parser: argparse.ArgumentParser, default_model: str) -> None:
    parser.add_argument("--model", default=default_model, help="hub id or local directory")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="train a tiny random model built locally, on CPU (no hub, no GPU)",
    )
    parser.add_argument("--output-dir", default=None, help="where the trainer writes")


def tiny_model_dir(extra_text: Sequence[str] = (), *, tool_calling: bool = False) -> Path:
    """Build the tiny offline model (a few seconds) in a fresh temporary directory;
    ``tool_calling``: with a chat template whose tool calls TRL parses."""
    from tiny_model import build_tiny_model

    return build_tiny_model(
        tempfile.mkdtemp(prefix="sandboxkit-tiny-"),
        extra_text=extra_text,
        tool_calling=tool_calling,
    )


def grpo_config(output_dir: str, *, tiny: bool, **overrides: Any) -> GRPOConfig:
    """GRPO settings: a CPU-sized run with ``tiny``, a single-GPU one otherwise."""
    import torch
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "report_to": "none",
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": 0,
        "max_steps": 1,
        # Transformers hides the progress bar when its log level is above WARNING, as
        # quiet_libraries sets it: the bar is progress a user wants, so keep it.
        "disable_tqdm": False,
    }
    if tiny:
        settings |= {
            "bf16": False,
            "use_cpu": True,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 24,
        }
    else:
        settings |= {
            "bf16": torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 256,
            "learning_rate": 5e-6,
        }
    settings |= overrides
    return GRPOConfig(**settings)


def metrics_writer(path: Path, reward_name: str) -> TrainerCallback:
    """A callback appending one JSON line per logged training step to ``path``: the step, the
    mean reward, its standard deviation, the loss and the ``reward_name/...`` metrics."""
    from transformers import TrainerCallback

    class MetricsWriter(TrainerCallback):
        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
        ) -> None:
            if not logs or "reward" not in logs:
                return
            record: dict[str, Any] = {"step": state.global_step}
            for key, value in logs.items():
                if key in ("reward", "reward_std", "loss") or key.startswith(f"{reward_name}/"):
                    record[key] = value
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    path.write_text("")
    return MetricsWriter()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_rewards(
    metrics: Sequence[Mapping[str, Any]],
    png: Path,
    title: str,
    *,
    ylim: tuple[float, float],
    band: bool = True,
    marks: Mapping[str, float] | None = None,
) -> None:
    """Mean reward per step, with a band of one standard deviation across completions (unless
    not ``band``: for rewards of 0 or 1 it only says how close to half the mean is), and a
    dashed horizontal line per entry of ``marks`` (label: value)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [m["step"] for m in metrics]
    mean = [m["reward"] for m in metrics]
    std = [m.get("reward_std", 0.0) for m in metrics]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, marker="o", label="mean reward")
    if band:
        ax.fill_between(
            steps,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            alpha=0.2,
            label="± 1 std",
        )
    for (label, value), color in zip(
        (marks or {}).items(), ("tab:red", "tab:green", "tab:purple"), strict=False
    ):
        ax.axhline(value, color=color, linestyle="--", label=f"{label}: {value:.2f}")
    ax.set(xlabel="training step", ylabel="reward", title=title, ylim=ylim)
    ax.axhline(0.0, color="grey", linewidth=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def mean_rewards(trainer: GRPOTrainer) -> list[float]:
    """The mean reward TRL logged at each step."""
    return [float(e["reward"]) for e in trainer.state.log_history if "reward" in e]


def run_grpo(
    title: str,
    model: Any,
    *,
    model_label: str,
    tiny: bool,
    output_dir: str | None = None,
    processing_class: Any = None,
    **config_overrides: Any,
) -> int:
    """The TRL and Unsloth examples' run: print the header, train one GRPO step on the coding
    problems with the async sandbox reward, report. ``model`` is a hub id, a directory or a
    loaded model (then ``processing_class`` is its tokenizer)."""
    from trl import GRPOTrainer

    from sandboxkit.integrations.trl import SandboxCleanupCallback

    job_id = new_job_id()
    dataset = coding_dataset()
    print_header(
        f"{title} (job: {job_id})",
        [
            ("Model", model_label),
            ("Backend", backend_name()),
            ("Dataset", f"{len(dataset)} coding problems"),
        ],
    )
    reward = sandbox_reward(job_id)
    config = grpo_config(
        output_dir or tempfile.mkdtemp(prefix="grpo-"), tiny=tiny, **config_overrides
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=processing_class,
        reward_funcs=[cast(Any, reward.as_async())],  # TRL awaits async callables
        args=config,
        train_dataset=dataset,
        callbacks=[SandboxCleanupCallback([reward])],
    )
    return train_and_report(trainer, reward, job_id)


def train_and_report(trainer: GRPOTrainer, reward: RewardFunction, job_id: str) -> int:
    """Train, print the completion line, and check that no sandbox of the job outlived it.

    Returns the exit status: 1 when sandboxes were left behind.
    """
    try:
        trainer.train()
    finally:
        reward.close()
    steps = trainer.state.global_step
    rewards = mean_rewards(trainer)
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    print(f"Training complete: {steps} step{'s' if steps != 1 else ''}, mean reward {mean:.2f}")
    left = count_sandboxes(job_tag(job_id))
    print(f"Sandboxes left under {job_tag(job_id)}: {left}")
    return 0 if left == 0 else 1
