"""TRL glue: sandboxkit's reward functions already have TRL's signature (sync, or async via
``.as_async()``) and log through its ``log_metric``/``log_extra``; the sandboxes of multi-turn
rollouts are a TRL environment (:class:`SandboxEnvironment`, from
:mod:`sandboxkit.integrations.environment`). This module adds the callback that releases
every sandbox as soon as training ends, rather than at exit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import installed_for
from ..rewards import AsyncRewardFunction, RewardFunction
from .environment import TOOLS, SandboxEnvironment, sandbox_environment

with installed_for("sandboxkit.integrations.trl", "pip install 'sandboxkit[trl]'"):
    from transformers import TrainerCallback

__all__ = ["TOOLS", "SandboxCleanupCallback", "SandboxEnvironment", "sandbox_environment"]


class SandboxCleanupCallback(TrainerCallback):
    """When training ends (or is stopped), close the pools of the given reward functions and
    the sandboxes of the given environment classes."""

    def __init__(
        self,
        reward_funcs: Iterable[Any] = (),
        environments: Iterable[type[SandboxEnvironment]] = (),
    ) -> None:
        self.reward_funcs = [
            f.inner if isinstance(f, AsyncRewardFunction) else f
            for f in reward_funcs
            if isinstance(f, (RewardFunction, AsyncRewardFunction))
        ]
        self.environments = list(environments)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        for func in self.reward_funcs:
            func.close()
        for environment in self.environments:
            environment.close_all()
