"""Call-based contest problems: the candidate writes a function (or LeetCode's ``class
Solution`` method); each test calls it and compares what it returned with the dataset's result.

The call goes through the function-test machinery (:class:`~sandboxkit.harness.FunctionTests`'s
runner job): each test calls the function in a fresh child of the candidate's process, the
result crosses to the host as plain data, and the host compares it with strict equality
(:func:`~sandboxkit.harness.strict_equal`: ``1``, ``1.0`` and ``True`` differ, as they do in
the dataset's JSON). The expected results never enter the sandbox.

How each dataset's calls are decoded (what their own judges do, kept where it is sound):

- APPS / TACO ``input_output`` with ``fn_name``, and open-r1's ``"type": "function_call"``
  test cases (taken from them): an input is the list of arguments; an output is the result,
  usually wrapped in a one-element list. APPS's judge accepts ``output == expected`` or
  ``output == expected[0]`` for any non-empty list; here the unwrapped form is accepted only
  for a one-element list (a longer list's first item is not a result the problem stated). As
  in APPS's judge, a dict argument or result whose keys are all integers written as text
  (JSON allows no other keys) has integer keys.
- LiveCodeBench ``functional`` tests: ``input`` is a text of one JSON value per line, one per
  argument; ``output`` is the result as JSON text. Compared as is.

JSON has no tuples, so a dataset cannot say that a result is one: a tuple the function
returns (at any depth, inside lists and dict values too) is read as a list, as both judges do
at the top level.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..harness import FunctionTests, RunRequest, returned, runner
from ..harness.records import judge_returns
from ..outcomes import Outcome
from ..protocol import ExecResult
from .formats import ContestTests

ENTRY = "__sandboxkit_call__"
"""The name the runner calls in the candidate's namespace: the shim below."""
PRELUDE = (
    "from typing import *; from collections import *; from heapq import *; "
    "from bisect import *; from functools import *; from itertools import *; import math\n"
)
"""Put before the candidate's code: LeetCode-style starter code (``def f(self, nums:
List[int])``) uses these names without importing them, as LeetCode's own environment and
LiveCodeBench's and APPS's judges provide them."""
_SHIM = """
def {entry}(*args):
    # sandboxkit: call the function under test; tuples come back as lists.
    target = globals().get("Solution")
    if isinstance(target, type) and hasattr(target, {name!r}):
        found = getattr(target(), {name!r})
    elif {name!r} in globals():
        found = globals()[{name!r}]
    else:
        raise NameError("no function {name} and no class Solution with a method {name}")

    def lists(value):
        if isinstance(value, (list, tuple)):
            return [lists(v) for v in value]
        if isinstance(value, dict):
            return {{k: lists(v) for k, v in value.items()}}
        return value

    return lists(found(*args))
"""
"""Appended to the candidate's code. It runs in the candidate's process with nothing the
candidate lacks (no key, no expected value), and its result crosses to the host like any
other, so it cannot be used to cheat: whatever the code does to it (redefining its name,
``Solution``, ``globals`` or ``isinstance``; swallowing it into an unclosed string) the host
still compares the returned value with the expected one, which the candidate never sees."""
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class CallTests:
    """Call ``fn_name`` on each test's arguments: a method of a fresh ``Solution()`` where the
    code defines that class with it (LeetCode's form, as APPS's and LiveCodeBench's judges
    call it), else a top-level function. A test passes when the result strictly equals one of
    its accepted results. Each test is scored on its own (``test_scores``), as
    :class:`~sandboxkit.harness.StdioTests` does, so contest scoring applies."""

    judge_waits: ClassVar[bool] = False
    fn_name: str
    args: tuple[tuple[Any, ...], ...]
    accepted: tuple[tuple[Any, ...], ...]
    """Per test, the results that pass it."""
    timeout: float = 5.0

    def request(self, code: str) -> RunRequest:
        # FunctionTests' runner job, calling the shim; its expected values are not needed here
        tests = FunctionTests(ENTRY, self.args, (), self.timeout)
        return tests.request(PRELUDE + code + _SHIM.format(entry=ENTRY, name=self.fn_name))

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        namedtuples = runner.NamedTuples()  # this run's, as every budget its values spend

        def passes(i: int, record: dict[str, Any]) -> bool:
            return any(returned(record, e, namedtuples) for e in self.accepted[i])

        return judge_returns(result, request, len(self.args), passes)


def call_tests(tests: ContestTests, *, timeout: float = 5.0) -> CallTests:
    """The harness for a call-based row's tests, decoded as the module docstring says."""
    name = tests.fn_name
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"call-based tests need the function's name (APPS/TACO fn_name, LiveCodeBench "
            f"metadata func_name, open-r1 fn_name); got {name!r}"
        )
    decoded = [_decode(i, arguments, result) for i, (arguments, result) in enumerate(tests.calls)]
    return CallTests(
        name,
        tuple(args for args, _ in decoded),
        tuple(accepted for _, accepted in decoded),
        timeout,
    )


def _decode(index: int, arguments: Any, result: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """One call's arguments and accepted results, from either dataset's shape."""
    if isinstance(arguments, str):  # LiveCodeBench: JSON texts
        try:
            args = tuple(json.loads(line) for line in arguments.split("\n") if line.strip())
            expected = json.loads(result) if isinstance(result, str) else result
        except ValueError as exc:
            raise ValueError(
                f"call {index}: LiveCodeBench functional input and output must be JSON, one "
                f"value per line ({exc})"
            ) from exc
        return args, (expected,)
    if not isinstance(arguments, list):
        raise ValueError(
            f"call {index}: the arguments must be a list (APPS/TACO, open-r1) or JSON text, "
            f"one value per line (LiveCodeBench); got {type(arguments).__name__}"
        )
    forms = [result, *([result[0]] if isinstance(result, list) and len(result) == 1 else [])]
    forms += [keyed for form in forms if (keyed := _integer_keys(form)) is not form]
    return tuple(_integer_keys(a) for a in arguments), tuple(forms)


def _integer_keys(value: Any) -> Any:
    """A dict whose keys are all integers written as text, with integer keys; else
    ``value`` itself."""
    if (
        isinstance(value, dict)
        and value
        and all(isinstance(k, str) and _INTEGER.fullmatch(k) for k in value)
    ):
        return {int(k): v for k, v in value.items()}
    return value
