"""The rollout loop: batches of MBPP problems, parallel rollouts, an update per step, logging,
and a clean stop on SIGINT/SIGTERM.

A first signal lets the step in flight finish (its rollouts, update and log line), then the
loop stops and the sandboxes are released; a second one cancels at once (the sandboxes are
still stopped on the way out).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mbpp import MBPPProblem
from models import TrainableModel
from rollout import Trajectory, rollout

from sandboxkit.session import Session


@dataclass(frozen=True)
class StepResult:
    step: int
    groups: list[list[Trajectory]]
    seconds: float

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for group in self.groups for t in group]

    @property
    def reward(self) -> float:
        return statistics.fmean(t.reward for t in self.trajectories)

    @property
    def solved(self) -> int:
        return sum(t.solved for t in self.trajectories)

    def line(self) -> str:
        n = len(self.trajectories)
        return (
            f"Step {self.step}: reward={self.reward:.3f}, "
            f"success={self.solved / n:.1%} ({self.solved}/{n}), time={self.seconds:.1f}s"
        )


class RunLogger:
    """Weights & Biases when ``WANDB_API_KEY`` is set (and wandb installed), else nothing."""

    def __init__(self, project: str, config: dict[str, Any]) -> None:
        self.run: Any = None
        if not os.environ.get("WANDB_API_KEY"):
            self.status = "off (WANDB_API_KEY not set)"
            return
        try:
            import wandb
        except ImportError:
            self.status = "off (WANDB_API_KEY is set but wandb is not installed: pip install wandb)"
            return
        self.run = wandb.init(project=project, config=config)
        self.status = f"on (project {project})"

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


class TrainingLoop:
    def __init__(
        self,
        model: TrainableModel,
        problems: Sequence[MBPPProblem],
        session: Session,
        *,
        batch_size: int = 8,
        rollouts_per_problem: int = 4,
        max_attempts: int = 3,
        learning_rate: float = 1e-5,
        dry_run: bool = False,
        timeout: float = 5.0,
        logger: RunLogger | None = None,
        trajectories_path: Path | None = None,
    ) -> None:
        if not problems:
            raise ValueError("no problems to train on")
        if not dry_run and not model.trainable:
            raise ValueError(f"{model.name} cannot be trained here; use a dry run")
        self.model = model
        self.problems = list(problems)
        self.session = session
        self.batch_size = batch_size
        self.rollouts_per_problem = rollouts_per_problem
        self.max_attempts = max_attempts
        self.learning_rate = learning_rate
        self.dry_run = dry_run
        self.timeout = timeout
        self.logger = logger
        self.trajectories_path = trajectories_path
        self.stop_requested: int | None = None
        """The signal that asked the loop to stop after the current step."""
        self._task: asyncio.Task[Any] | None = None

    def batch(self, step: int) -> list[MBPPProblem]:
        """The problems of a step: the next ``batch_size`` in order, wrapping around."""
        start = step * self.batch_size
        return [self.problems[(start + i) % len(self.problems)] for i in range(self.batch_size)]

    async def run_step(self, step: int) -> StepResult:
        started = time.monotonic()

        async def group(problem: MBPPProblem) -> list[Trajectory]:
            return list(
                await asyncio.gather(
                    *(
                        rollout(
                            self.model.chat,
                            problem,
                            self.session,
                            max_attempts=self.max_attempts,
                            timeout=self.timeout,
                        )
                        for _ in range(self.rollouts_per_problem)
                    )
                )
            )

        groups = list(await asyncio.gather(*(group(p) for p in self.batch(step))))
        metrics: dict[str, float] = {}
        if not self.dry_run:
            metrics = await self.model.train(groups, self.learning_rate)
        result = StepResult(step, groups, time.monotonic() - started)
        n = len(result.trajectories)
        if self.logger is not None:
            attempts = [len(t.attempts) for t in result.trajectories]
            self.logger.log(
                step,
                {
                    "reward": result.reward,
                    "success_rate": result.solved / n,
                    "mean_attempts": statistics.fmean(attempts),
                    "step_time": result.seconds,
                    **{f"train/{k}": v for k, v in metrics.items()},
                },
            )
        if self.trajectories_path is not None:
            with self.trajectories_path.open("a") as f:
                for t in result.trajectories:
                    f.write(json.dumps({"step": step, **t.to_json()}) + "\n")
        return result

    async def run(self, num_steps: int) -> list[StepResult]:
        """Run up to ``num_steps`` steps, printing a line per step; stops early on a signal."""
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal, signum)
        results: list[StepResult] = []
        try:
            for step in range(num_steps):
                if self.stop_requested is not None:
                    break
                result = await self.run_step(step)
                results.append(result)
                print(result.line(), flush=True)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        return results

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.stop_requested is None:
            self.stop_requested = signum
            print(f"{name}: finishing the current step, then stopping", flush=True)
        elif self._task is not None:
            print(f"{name} again: stopping now", flush=True)
            self._task.cancel()
