"""Multi-step RL on MBPP with execution feedback (an ART-style rollout loop on sandboxkit).

    python examples/art/train_mbpp.py                                   # vLLM on a GPU, trains
    python examples/art/train_mbpp.py --tiny                 # offline: a tiny local model, CPU
    python examples/art/train_mbpp.py --use-openai --base-url URL --dry-run   # any endpoint

Each rollout gives the model a problem, runs its code against the tests in a fresh sandbox
and, while tests fail, shows it the error for another attempt (up to ``--max-attempts``). The
reward is the share of tests the last attempt passed. ``--tiny`` builds a tiny random model
locally and serves it from a local OpenAI-compatible server, so the loop (HTTP sampling,
sandboxes, updates) runs offline on CPU. Exit status: 0 done, 1 an endpoint failed (its error
says which and why), 3 no GPU for vLLM, 130 stopped by a second signal.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the examples' shared module

from _common import (
    EXIT_UNSUPPORTED,
    RULE,
    count_sandboxes,
    print_header,
    quiet_libraries,
    tiny_model_dir,
)
from mbpp import load_problems
from models import GPURequiredError, LocalModel, OpenAIModel, TrainableModel, VLLMModel
from training import RunLogger, StepResult, TrainingLoop

from sandboxkit.session import Session

SAMPLE = Path(__file__).resolve().parent / "data" / "mbpp_sample.jsonl"
TINY_DEFAULTS = {"num_steps": 2, "batch_size": 2, "rollouts_per_problem": 2}
DEFAULTS = {"num_steps": 10, "batch_size": 8, "rollouts_per_problem": 4}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Multi-step RL on MBPP with execution feedback.")
    p.add_argument("--model", default="Qwen/Qwen2.5-3B-Instruct")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="offline: a tiny random model built locally, served by a local OpenAI-compatible "
        "server and trained on CPU (2 steps of 2 problems x 2 rollouts, on the sample problems)",
    )
    p.add_argument("--project", default="sandboxkit-mbpp", help="W&B project")
    p.add_argument("--num-steps", type=int, default=None, help="default 10 (2 with --tiny)")
    p.add_argument("--batch-size", type=int, default=None, help="problems per step (default 8)")
    p.add_argument("--rollouts-per-problem", type=int, default=None, help="the group (default 4)")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per test")
    p.add_argument("--dataset-split", default="train", help="prompt, test, validation, train")
    p.add_argument("--dataset-limit", type=int, default=None)
    p.add_argument("--dataset-path", default=None, help="a local MBPP JSONL file")
    p.add_argument("--dry-run", action="store_true", help="roll out, but no training update")
    p.add_argument("--use-openai", action="store_true", help="an OpenAI-compatible endpoint")
    p.add_argument("--base-url", default=None, help="its URL (default: OpenAI's)")
    p.add_argument("--output-dir", default="art_results", help="trajectories.jsonl goes here")
    args = p.parse_args(argv)
    if args.tiny and args.use_openai:
        p.error("--tiny serves a local model; --use-openai talks to an endpoint: choose one")
    if args.use_openai and not args.dry_run:
        p.error("an OpenAI-compatible endpoint serves fixed weights: add --dry-run")
    if args.use_openai and not args.base_url and not os.environ.get("OPENAI_API_KEY"):
        p.error(
            "--use-openai without --base-url calls api.openai.com, which needs OPENAI_API_KEY; "
            "set it, pass --base-url for another endpoint, or run offline with --tiny"
        )
    for name, default in (TINY_DEFAULTS if args.tiny else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.tiny and args.dataset_path is None:
        args.dataset_path = str(SAMPLE)
    return args


def endpoint_failure(exc: Exception, base_url: str | None) -> str:
    """What went wrong with the endpoint, and what to check, in a sentence."""
    from openai import APIStatusError

    url = base_url or "api.openai.com"
    if not isinstance(exc, APIStatusError):
        return (
            f"cannot reach the OpenAI-compatible endpoint at {url} ({exc}); check --base-url "
            "and that the server is up, or run offline with --tiny"
        )
    if exc.status_code in (401, 403):
        hint = "check OPENAI_API_KEY"
    elif exc.status_code == 404:
        hint = "check --base-url (it usually ends in /v1) and --model"
    else:
        hint = "see its message"
    return f"the endpoint at {url} answered {exc.status_code} ({exc.message}); {hint}"


async def run(args: argparse.Namespace) -> int:
    model: TrainableModel
    if args.tiny:
        model = LocalModel(tiny_model_dir(), name="tiny")
        where = f"tiny random model built locally, served at {model.url}, CPU"
    elif args.use_openai:
        model = OpenAIModel(args.model, args.base_url)
        where = f"OpenAI-compatible API at {args.base_url or 'api.openai.com'}"
    else:
        try:
            model = VLLMModel(args.model, checkpoint_dir=Path(args.output_dir) / "checkpoints")
        except GPURequiredError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNSUPPORTED
        where = "local vLLM server"
    problems = load_problems(args.dataset_split, args.dataset_limit, args.dataset_path)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    trajectories_path = out / "trajectories.jsonl"
    trajectories_path.write_text("")
    logger = RunLogger(args.project, {k: v for k, v in vars(args).items() if v is not None})
    # The loop owns SIGINT/SIGTERM (finish the step first); the session must not act on them.
    session = Session(tags=["example=art-mbpp"], handle_signals=False)

    print_header(
        "MBPP rollouts with execution feedback",
        [
            ("Model", where if args.tiny else f"{args.model} ({where})"),
            ("Mode", "dry run (no training update)" if args.dry_run else "training"),
            ("Backend", session.client.name),
            ("Problems", f"{len(problems)} ({args.dataset_split} split)"),
            (
                "Steps",
                f"{args.num_steps} x {args.batch_size} problems x {args.rollouts_per_problem} "
                f"rollouts, up to {args.max_attempts} attempts",
            ),
            ("W&B", logger.status),
        ],
    )
    sys.stdout.flush()

    results: list[StepResult] = []
    loop = TrainingLoop(
        model,
        problems,
        session,
        batch_size=args.batch_size,
        rollouts_per_problem=args.rollouts_per_problem,
        max_attempts=args.max_attempts,
        learning_rate=args.learning_rate,
        dry_run=args.dry_run,
        timeout=args.timeout,
        logger=logger,
        trajectories_path=trajectories_path,
    )
    from openai import APIConnectionError, APIStatusError

    try:
        results = await loop.run(args.num_steps)
    except (APIConnectionError, APIStatusError) as exc:
        print(f"error: {endpoint_failure(exc, args.base_url)}", file=sys.stderr)
        return 1
    finally:
        await session.aclose()
        await model.aclose()
        logger.finish()
    left = count_sandboxes(session.run_tag)

    print(RULE)
    trajectories = [t for r in results for t in r.trajectories]
    if trajectories:
        solved = sum(t.solved for t in trajectories)
        mean = sum(t.reward for t in trajectories) / len(trajectories)
        retried = [t for t in trajectories if len(t.attempts) > 1]
        print(
            f"Summary: {len(results)} step(s), mean reward {mean:.3f}, "
            f"success {solved / len(trajectories):.1%} ({solved}/{len(trajectories)})"
        )
        print(
            f"Feedback: {len(retried)} trajectories took more than one attempt, "
            f"{sum(t.solved for t in retried)} of them solved after feedback"
        )
    if loop.stop_requested is not None:
        print(f"Stopped early after {len(results)} step(s) on request")
    print(f"Trajectories: {trajectories_path}")
    print(f"Sandboxes left: {left}")
    return 0 if left == 0 else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_libraries()
    try:
        return asyncio.run(run(args))
    except asyncio.CancelledError:
        print("Stopped.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
