"""Call-based contest rows (APPS/TACO ``fn_name``, LiveCodeBench ``functional``, open-r1
``function_call``) through stdio_tests_reward as TRL calls it, with real programs in local
sandboxes: functions and LeetCode ``class Solution`` methods, right, wrong and cheating ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sandboxkit import RewardFunction, stdio_tests_reward
from sandboxkit.contest.calls import call_tests
from sandboxkit.contest.formats import parse_tests

CALLS = [([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2]), ([[3, 3], 6], [0, 1])]
CALLS.append(([[1, 5, 0, 8], 8], [2, 3]))
BODY = """
    seen = {}
    for j, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], j]
        seen[x] = j
"""
PROGRAMS = {
    "a function": "def two_sum(nums, target):" + BODY,
    "a Solution class": "class Solution:\n    def two_sum(self, nums: List[int], target: int)"
    " -> List[int]:" + BODY.replace("\n", "\n    "),
    "returning a tuple": "def two_sum(nums, target):\n    return tuple(_two_sum(nums, target))\n"
    "def _two_sum(nums, target):" + BODY,
    "wrong on the last test": "def two_sum(nums, target):\n    return [0, 1] if nums[0] == 1 "
    "else _two_sum(nums, target)\ndef _two_sum(nums, target):" + BODY,
    "crashing": "def two_sum(nums, target):\n    raise ValueError('no')",
}
EXPECTED = [1.0, 1.0, 1.0, 0.75, 0.0]

ROWS: dict[str, dict[str, Any]] = {
    "APPS input_output (results wrapped)": {
        "input_output": json.dumps(
            {
                "fn_name": "two_sum",
                "inputs": [args for args, _ in CALLS],
                "outputs": [[result] for _, result in CALLS],
            }
        )
    },
    "TACO input_output (results as they are)": {
        "input_output": {
            "fn_name": "two_sum",
            "inputs": [args for args, _ in CALLS],
            "outputs": [result for _, result in CALLS],
        }
    },
    "LiveCodeBench functional": {
        "public_test_cases": json.dumps(
            [
                {
                    "input": "\n".join(json.dumps(a) for a in args),
                    "output": json.dumps(result),
                    "testtype": "functional",
                }
                for args, result in CALLS[:2]
            ]
        ),
        "private_test_cases": json.dumps(
            [
                {
                    "input": "\n".join(json.dumps(a) for a in args),
                    "output": json.dumps(result),
                    "testtype": "functional",
                }
                for args, result in CALLS[2:]
            ]
        ),
        "metadata": json.dumps({"func_name": "two_sum"}),
    },
    "open-r1 verification_info function_call": {
        "verification_info": {
            "language": "python",
            "test_cases": [
                {"fn_name": "two_sum", "input": args, "output": [result], "type": "function_call"}
                for args, result in CALLS
            ],
        }
    },
}


@pytest.fixture(scope="module")
def reward() -> Iterator[RewardFunction]:
    fn = stdio_tests_reward("subprocess", timeout=1, pool_size=2)
    yield fn
    fn.close()


def _score(
    fn: RewardFunction, row: dict[str, Any], codes: list[str], **extra: Any
) -> list[float | None]:
    """Each of ``codes`` on one row, columns as TRL passes them."""
    columns = {name: [value] * len(codes) for name, value in row.items()}
    completions = [f"```python\n{code}\n```" for code in codes]
    return fn(prompts=["Two sum."] * len(codes), completions=completions, **columns, **extra)


def _apps(fn_name: str, inputs: list[Any], outputs: list[Any]) -> dict[str, Any]:
    return {"input_output": json.dumps({"fn_name": fn_name, "inputs": inputs, "outputs": outputs})}


@pytest.mark.parametrize("shape", list(ROWS))
def test_each_dataset_shape_calls_the_function_and_scores_the_fraction_passed(
    reward: RewardFunction, shape: str
) -> None:
    seen: dict[str, list[str]] = {}
    assert _score(reward, ROWS[shape], list(PROGRAMS.values()), log_extra=seen.__setitem__) == (
        EXPECTED
    )
    assert seen["stdio_tests_reward_outcome"][3:] == [
        "failed 3/4: test 3: wrong result",
        "failed 0/4: test 0: ValueError: no",
    ]


def test_all_or_nothing_and_subtasks_score_calls_test_by_test() -> None:
    row = {
        **ROWS["APPS input_output (results wrapped)"],
        "subtasks": {"subtasks": [{"points": 30, "tests": [0, 1]}, {"points": 70, "tests": [3]}]},
    }
    codes = [PROGRAMS["a Solution class"], PROGRAMS["wrong on the last test"]]
    for scoring, expected in (("all", [1.0, 0.0]), ("subtasks", [1.0, 0.3])):
        fn = stdio_tests_reward("subprocess", timeout=1, pool_size=1, scoring=scoring)
        try:
            assert _score(fn, row, codes) == expected
        finally:
            fn.close()


@pytest.mark.parametrize(
    ("expected", "returned", "score"),
    [
        (1, "1", 1.0),
        (1, "1.0", 0.0),
        (1, "True", 0.0),
        (1.0, "1", 0.0),
        (1.0, "1.0", 1.0),
        (True, "1", 0.0),
        (True, "True", 1.0),
        ([1, [2, 3]], "(1, (2, 3))", 1.0),
        ([1, 2], "{1, 2}", 0.0),
        ("1", "1", 0.0),
        ({"1": "a"}, "{1: 'a'}", 1.0),
        ({"1": "a"}, "{'1': 'a'}", 1.0),
    ],
)
def test_results_match_in_the_types_the_json_says(
    reward: RewardFunction, expected: Any, returned: str, score: float
) -> None:
    """JSON tells ints, floats, booleans and texts apart, so results must match them; it has
    no tuples, so a tuple counts as a list; its keys are texts, so integer keys written as
    text also match integers (as APPS's judge reads them)."""
    row = _apps("f", [[]], [[expected]])
    assert _score(reward, row, [f"def f():\n    return {returned}"]) == [score]


def test_a_result_with_a_lying_eq_does_not_pass(reward: RewardFunction) -> None:
    liars = [
        "class Any:\n    def __eq__(self, other): return True\ndef f():\n    return Any()",
        "class Int(int):\n    def __eq__(self, other): return True\ndef f():\n    return Int(0)",
        "class L(list):\n    def __eq__(self, other): return True\ndef f():\n    return L()",
    ]
    assert _score(reward, _apps("f", [[]], [[[5]]]), liars) == [0.0, 0.0, 0.0]


def test_arguments_cross_as_the_dataset_holds_them(reward: RewardFunction) -> None:
    """Several arguments of several JSON types, a dict argument with integer keys as APPS
    reads it; a function called with no arguments."""
    code = "def f(*args):\n    return [type(a).__name__ for a in args] + [sorted(args[-1])]"
    row = _apps(
        "f",
        [[1, 1.5, True, "x", None, [1], {"2": 3}]],
        [[["int", "float", "bool", "str", "NoneType", "list", "dict", [2]]]],
    )
    assert _score(reward, row, [code]) == [1.0]


def test_a_missing_function_fails_each_test_saying_so(reward: RewardFunction) -> None:
    seen: dict[str, list[str]] = {}
    scores = _score(
        reward,
        ROWS["LiveCodeBench functional"],
        ["def twoSum(nums, target):\n    return [0, 1]"],
        log_extra=seen.__setitem__,
    )
    assert scores == [0.0]
    assert seen["stdio_tests_reward_outcome"] == [
        "failed 0/4: test 0: NameError: no function two_sum and no class Solution with a "
        "method two_sum"
    ]


@pytest.mark.slow
def test_a_call_past_its_time_limit_fails_that_test_only(reward: RewardFunction) -> None:
    code = "def f(n):\n    while n: pass\n    return n"
    seen: dict[str, list[str]] = {}
    row = _apps("f", [[0], [1]], [[0], [1]])
    assert _score(reward, row, [code], log_extra=seen.__setitem__) == [0.5]
    assert seen["stdio_tests_reward_outcome"][0].startswith("failed 1/2: test 1: ")


@pytest.mark.parametrize(
    "row",
    [
        {
            "public_test_cases": json.dumps(
                [{"input": "1", "output": "1", "testtype": "functional"}]
            ),
            "metadata": "{}",
        },
        {
            "verification_info": {
                "language": "python",
                "test_cases": [{"input": [1], "output": [1], "type": "function_call"}],
            }
        },
        _apps("not a name", [[1]], [[1]]),
    ],
    ids=["LiveCodeBench without func_name", "open-r1 without fn_name", "APPS bad fn_name"],
)
def test_a_call_based_row_without_a_function_name_cannot_be_judged(
    reward: RewardFunction, row: dict[str, Any]
) -> None:
    """No reward, and no exception into the trainer: the outcome names the row and why."""
    seen: dict[str, list[str]] = {}
    assert _score(reward, row, ["def f(x): return x"], log_extra=seen.__setitem__) == [None]
    (said,) = seen["stdio_tests_reward_outcome"]
    assert said.startswith("invalid_row: row 0 (prompt 'Two sum.'): ValueError: call-based ")


def test_a_call_based_row_in_another_language_is_unsupported(reward: RewardFunction) -> None:
    row = {
        "verification_info": {
            "language": "javascript",
            "test_cases": [{"fn_name": "f", "input": [1], "output": [1], "type": "function_call"}],
        }
    }
    assert _score(reward, row, ["function f(x) { return x; }"]) == [None]


def test_apps_results_accept_the_wrapped_and_unwrapped_forms() -> None:
    """APPS stores a result wrapped in a one-element list, mostly: both forms pass. A longer
    list is the result itself (APPS's judge would also accept its first item)."""
    tests = call_tests(
        parse_tests({"fn_name": "f", "inputs": [[1], [2], [3]], "outputs": [[[1]], [1, 2], 3]})
    )
    assert tests.args == ((1,), (2,), (3,))
    assert tests.accepted == (([[1]], [1]), ([1, 2],), (3,))


def test_livecodebench_inputs_are_one_json_value_per_line() -> None:
    tests = call_tests(
        parse_tests(
            [{"input": '[1, 2]\n"a b"\n\n', "output": "null", "testtype": "functional"}],
            fn_name="f",
        )
    )
    assert tests.args == (([1, 2], "a b"),) and tests.accepted == ((None,),)
    with pytest.raises(ValueError, match="call 0: LiveCodeBench functional input and output"):
        call_tests(
            parse_tests([{"input": "[1,", "output": "1", "testtype": "functional"}], fn_name="f")
        )


@pytest.mark.parametrize(
    ("code", "score"),
    [
        ("class Solution:\n    def f(self):\n        return 1\ndef f():\n    return 2", 1.0),
        ("class Solution:\n    def g(self):\n        return 2\ndef f():\n    return 1", 1.0),
        ("Solution = lambda: None\ndef f():\n    return 1", 1.0),
    ],
    ids=["the method before a function", "a class without it", "not a class"],
)
def test_a_solution_class_is_called_when_it_has_the_method(
    reward: RewardFunction, code: str, score: float
) -> None:
    assert _score(reward, _apps("f", [[]], [[1]]), [code]) == [score]


def test_code_cannot_stand_in_for_the_call_shim(reward: RewardFunction) -> None:
    """The shim is appended after the code, so the code's own definition of its name is
    replaced; code that swallows the shim into an unclosed string does not load."""
    right_for_the_shim = "def __sandboxkit_call__(*args):\n    return 1\ndef f():\n    return 0"
    swallowing = 'def f():\n    return 0\n__sandboxkit_call__ = lambda: 1\nrest = """'
    assert _score(reward, _apps("f", [[]], [[1]]), [right_for_the_shim, swallowing]) == [0.0, 0.0]


def test_long_results_compare_as_strictly_as_short_ones(reward: RewardFunction) -> None:
    """A long result crosses to the host as a digest of its encoding: the same rules hold."""
    row = _apps("f", [[300]], [[list(range(300))]])
    codes = [
        "def f(n):\n    return tuple(range(n))",
        "def f(n):\n    return [*range(n - 1), 0]",
        "def f(n):\n    return [float(i) for i in range(n)]",
    ]
    assert _score(reward, row, codes) == [1.0, 0.0, 0.0]
