"""MBPP problems for the rollout loop, from the hub (``datasets``) or a local JSONL file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPLITS: dict[str, range] = {
    "prompt": range(1, 11),
    "test": range(11, 511),
    "validation": range(511, 601),
    "train": range(601, 975),
}
"""MBPP's task-id ranges per split (as the ``datasets`` copy splits them), so that a local copy
of the original file gives the same problems for the same ``--dataset-split``."""


@dataclass(frozen=True)
class MBPPProblem:
    task_id: int
    prompt: str
    test_cases: list[str]
    """``assert`` snippets; each counts on its own."""
    setup: str = ""
    """Code the tests need first (MBPP's ``test_setup_code``)."""
    reference: str = field(default="", repr=False)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> MBPPProblem:
        """Read the original format (``text``, ``test_setup_code``) or the sanitized one
        (``prompt``, ``test_imports``)."""
        setup = record.get("test_setup_code")
        if setup is None:
            setup = "\n".join(record.get("test_imports") or [])
        return cls(
            task_id=int(record["task_id"]),
            prompt=str(record.get("text") or record["prompt"]),
            test_cases=list(record["test_list"]),
            setup=setup,
            reference=str(record.get("code", "")),
        )


def load_problems(
    split: str = "train", limit: int | None = None, path: str | Path | None = None
) -> list[MBPPProblem]:
    """The problems of ``split``, at most ``limit``; from ``path`` (JSONL) when given."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    if path is not None:
        records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        records = [r for r in records if int(r["task_id"]) in SPLITS[split]]
    else:
        from datasets import load_dataset

        records = list(load_dataset("google-research-datasets/mbpp", split=split))
    problems = [MBPPProblem.from_record(r) for r in records]
    return problems[:limit] if limit is not None else problems
