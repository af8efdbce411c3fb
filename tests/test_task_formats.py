"""``function_tests_reward`` takes the tasks of Daytona's GRPO example as that example writes
them (a dict of dicts, ``reference`` a builtin's name or a function), which is what a user
porting it passes."""

from __future__ import annotations

from typing import Any

import pytest

from sandboxkit import SandboxClient
from sandboxkit.rewards import function_tests_reward

SORTING_PROMPT = '''# I don't call sorted(), list.sort(), heapq, or use any imports here: just plain
# Python and an original algorithm.
def sort_numbers(xs: list[int]) -> list[int]:
    """Sort a list of integers in ascending order."""
'''
MAX_SUBARRAY_PROMPT = '''# My own take on the maximum subarray problem.
def max_subarray_sum(xs: list[int]) -> int:
    """Return the maximum sum of a non-empty contiguous subarray."""
'''

KADANE = """    best = current = xs[0]
    for x in xs[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best
"""
_reference: dict[str, Any] = {}
exec(MAX_SUBARRAY_PROMPT + KADANE, _reference)  # the correct completion is the reference

# The shape of Daytona's example, keys and all (its "_kadane" reference is defined in its
# harness script; here the function itself is passed).
TASKS = {
    "sorting": {
        "prompt": SORTING_PROMPT,
        "func_name": "sort_numbers",
        "banned_patterns": ["sorted(", ".sort(", "heapq", "import ", "__import__"],
        "tests": [
            "[]",
            "[1, 3, 2]",
            "[random.randint(-1000, 1000) for _ in range(200)]",
            "list(range(0, 100)) + list(range(200, 100, -1)) + list(range(200, 300))",
        ],
        "reference": "sorted",
    },
    "max_subarray": {
        "prompt": MAX_SUBARRAY_PROMPT,
        "func_name": "max_subarray_sum",
        "banned_patterns": [],
        "tests": ["[5]", "[-2, -3, -1, -4]", "[random.randint(-100, 100) for _ in range(300)]"],
        "reference": _reference["max_subarray_sum"],
    },
}
INSERTION_SORT = """    out = []
    for x in xs:
        i = len(out)
        while i > 0 and out[i - 1] > x:
            i -= 1
        out.insert(i, x)
    return out
"""


def test_daytonas_task_dicts_score_correct_code_1_and_wrong_code_0(local: SandboxClient) -> None:
    reward = function_tests_reward(TASKS, backend=local, pool_size=2, timeout=30)
    prompts = [SORTING_PROMPT, MAX_SUBARRAY_PROMPT] * 2
    completions = [INSERTION_SORT, KADANE, "    return xs[::-1] + [0]\n", "    return 0\n"]
    try:
        assert reward(prompts, completions) == [1.0, 1.0, 0.0, 0.0]
    finally:
        reward.close()


def test_a_reference_that_names_no_builtin_is_refused() -> None:
    tasks = {"max_subarray": {**TASKS["max_subarray"], "reference": "_kadane"}}
    with pytest.raises(ValueError, match="'_kadane' is not a builtin's name"):
        function_tests_reward(tasks)


def test_a_misspelt_task_key_names_the_valid_ones() -> None:
    task = {**TASKS["sorting"], "banned_pattern": ["sorted("]}
    task.pop("banned_patterns")
    with pytest.raises(TypeError, match="'banned_pattern' \\(did you mean 'banned_patterns'"):
        function_tests_reward([task])
