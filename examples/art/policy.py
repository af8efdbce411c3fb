"""The training update of the rollout loop: a group-relative policy gradient.

Each trajectory's advantage is its reward minus its group's mean (the group being the rollouts
of one problem), divided by the group's standard deviation; the loss is minus the advantage
times the mean log-probability of the tokens the model wrote (every assistant turn, so the
attempts after feedback are trained too). Groups whose rollouts all scored the same carry no
signal and are skipped. This is GRPO without clipping or a KL term: one step per batch of
fresh samples, so the policy that sampled is the one being updated.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollout import Message, Trajectory


class PolicyGradient:
    def __init__(self, model: str | Path, *, device: str = "cuda") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(model))
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        loaded: Any = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype)
        self.model: Any = loaded.to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

    def _ids(self, messages: Sequence[Message], *, prompt: bool = False) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            list(messages), tokenize=True, add_generation_prompt=prompt, return_dict=False
        )
        return list(ids)

    def tokens(self, messages: Sequence[Message]) -> tuple[list[int], list[bool]]:
        """The conversation's token ids and which of them the model wrote."""
        ids = self._ids(messages)
        written = [False] * len(ids)
        for i, message in enumerate(messages):
            if message["role"] == "assistant":
                start = len(self._ids(messages[:i], prompt=True))
                end = len(self._ids(messages[: i + 1]))
                written[start:end] = [True] * (end - start)
        return ids, written

    def step(
        self, groups: Sequence[Sequence[Trajectory]], learning_rate: float
    ) -> dict[str, float]:
        import torch

        weighted: list[tuple[Trajectory, float]] = []
        for group in groups:
            usable = [t for t in group if not t.infra_failure]
            rewards = [t.reward for t in usable]
            if len(rewards) < 2 or max(rewards) == min(rewards):
                continue
            mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
            weighted += [(t, (t.reward - mean) / (std + 1e-4)) for t in usable]
        if not weighted:
            return {"loss": 0.0, "trained_trajectories": 0.0}
        for params in self.optimizer.param_groups:
            params["lr"] = learning_rate
        self.model.train()
        self.optimizer.zero_grad()
        total = 0.0
        for trajectory, advantage in weighted:
            ids, written = self.tokens(trajectory.messages_and_choices)
            input_ids = torch.tensor([ids], device=self.device)
            logits = self.model(input_ids=input_ids).logits[0, :-1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            taken = logprobs.gather(1, input_ids[0, 1:, None])[:, 0]
            mask = torch.tensor(written[1:], device=self.device, dtype=taken.dtype)
            loss = -advantage * (taken * mask).sum() / mask.sum().clamp(min=1) / len(weighted)
            loss.backward()  # type: ignore[no-untyped-call]
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return {"loss": total, "trained_trajectories": float(len(weighted))}

    def save(self, directory: str | Path) -> None:
        self.model.save_pretrained(str(directory))
        self.tokenizer.save_pretrained(str(directory))
