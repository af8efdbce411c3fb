"""TRL glue: sandboxkit's reward functions already have TRL's signature (sync, or async via
``.as_async()``) and log through its ``log_metric``/``log_extra``. This module adds the
callback that releases their sandboxes as soon as training ends, rather than at exit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from transformers import TrainerCallback

from ..rewards import AsyncRewardFunction, RewardFunction


class SandboxCleanupCallback(TrainerCallback):
    """Close the pools of the given reward functions when training ends (or is stopped)."""

    def __init__(self, reward_funcs: Iterable[Any]) -> None:
        self.reward_funcs = [
            f.inner if isinstance(f, AsyncRewardFunction) else f
            for f in reward_funcs
            if isinstance(f, (RewardFunction, AsyncRewardFunction))
        ]

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        for func in self.reward_funcs:
            func.close()
