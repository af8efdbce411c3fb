"""Scores from per-test results: the share passed, all-or-nothing, or IOI-style subtasks."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..harness import Harness, RunRequest
from ..outcomes import Outcome, OutcomeKind
from ..protocol import ExecResult

Scoring = Literal["fraction", "all", "subtasks"]
SCORINGS: tuple[Scoring, ...] = ("fraction", "all", "subtasks")
SUBTASKS_SHAPE = '{"subtasks": [{"points": 30, "tests": [0, 1, 2]}, ...]} (or the list alone)'


@dataclass(frozen=True)
class Subtask:
    """A group of tests (indices into the row's tests) worth ``points``, all or nothing."""

    points: float
    tests: tuple[int, ...]


def parse_subtasks(value: Any, tests: int) -> tuple[Subtask, ...]:
    """The subtasks of a row with ``tests`` tests, from the shape named in ``SUBTASKS_SHAPE``
    (a JSON string of it too)."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, Mapping):
        value = value.get("subtasks")
    if not isinstance(value, list) or not value:
        raise ValueError(f"subtasks must be a non-empty list, as {SUBTASKS_SHAPE}")
    found = []
    for group in value:
        if not isinstance(group, Mapping) or not isinstance(group.get("tests"), list):
            raise ValueError(f"a subtask must be a dict with points and tests, as {SUBTASKS_SHAPE}")
        indices = tuple(int(i) for i in group["tests"])
        if not indices or any(not 0 <= i < tests for i in indices):
            raise ValueError(f"subtask tests {list(indices)} are not among the row's {tests} tests")
        found.append(Subtask(float(group["points"]), indices))
    if sum(s.points for s in found) <= 0:
        raise ValueError("the subtasks' points add up to nothing")
    return tuple(found)


def score(outcome: Outcome, scoring: Scoring, subtasks: Sequence[Subtask] = ()) -> float:
    """``outcome``'s score in [0, 1]. A subtask earns its points times the lowest score of its
    tests (all or nothing while tests pass or fail; a checker's partial scores later)."""
    if scoring == "all":
        return 1.0 if outcome.kind is OutcomeKind.PASSED else 0.0
    if scoring == "fraction":
        return outcome.fraction
    results = outcome.test_scores
    earned = sum(
        s.points * min(results[i] if i < len(results) else 0.0 for i in s.tests) for s in subtasks
    )
    return earned / sum(s.points for s in subtasks)


@dataclass(frozen=True)
class ScoredStdioTests:
    """A harness judging tests one by one (:class:`~sandboxkit.harness.StdioTests`,
    :class:`~sandboxkit.contest.calls.CallTests`) whose outcome carries its ``score`` under a
    scoring rule."""

    tests: Harness
    scoring: Scoring = "fraction"
    subtasks: tuple[Subtask, ...] = ()

    def request(self, code: str) -> RunRequest:
        return self.tests.request(code)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        outcome = self.tests.judge(result, request)
        return replace(outcome, score=score(outcome, self.scoring, self.subtasks))
