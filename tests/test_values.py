"""What a correct program returns or raises reaches its test as plain Python would see it.

Real runs of the runner in a local sandbox (warm and cold), through both harnesses that call
functions: assert tests compare in the runner, function tests on the host.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import test_cheats

from sandboxkit import Sandbox
from sandboxkit.harness import AssertTests, FunctionTests
from sandboxkit.outcomes import OutcomeKind

Point = namedtuple("Point", "x y")
judge = test_cheats.judge  # with conftest's ``sandbox``: one on the warm path, one on the cold


SAFE_DIV = "def safe_div(a, b):\n    return a / b\n"
RAISES_TESTS = [
    "try:\n    safe_div(1, 0)\nexcept ZeroDivisionError:\n    pass\n"
    "else:\n    raise AssertionError",
    "try:\n    safe_div(1, 'x')\nexcept TypeError as e:\n    assert 'unsupported' in str(e)\n"
    "else:\n    raise AssertionError",
    "assert safe_div(6, 3) == 2.0",
]


def test_a_builtin_exception_reaches_the_test_as_its_type(sandbox: Sandbox) -> None:
    outcome = judge(sandbox, AssertTests(RAISES_TESTS, timeout=5), SAFE_DIV)
    assert outcome.kind is OutcomeKind.PASSED, outcome
    lookup = (
        "class Missing(KeyError):\n    def __str__(self):\n        return 'lies'\n"
        "def find(d, k):\n    if k not in d:\n        raise Missing(k, 'more')\n    return d[k]\n"
    )
    tests = [
        "try:\n    find({}, 'k')\nexcept KeyError as e:\n"
        "    assert type(e) is KeyError and e.args == ('k', 'more')\n"
        "else:\n    raise AssertionError",
        "assert find({'k': 1}, 'k') == 1",
    ]
    outcome = judge(sandbox, AssertTests(tests, timeout=5), lookup)
    assert outcome.kind is OutcomeKind.PASSED, outcome  # its builtin base, made by the runner


def test_what_would_end_a_test_early_does_not_cross(sandbox: Sandbox) -> None:
    """StopIteration would end the test's ``map`` as if exhausted; SystemExit the runner."""
    tests = [
        "assert all(map(lambda x: positive(x) > 0, [1, 2, 3]))",
        "try:\n    positive(1)\nexcept BaseException:\n    pass\nassert positive(2) > 0",
    ]
    for raising in ("StopIteration", "SystemExit(0)", "GeneratorExit"):
        code = f"def positive(x):\n    raise {raising}\n"
        outcome = judge(sandbox, AssertTests(tests, timeout=5), code)
        assert outcome.passed == 0, (raising, outcome)


BIG = 18 * 10**4998
STANDARD: dict[str, tuple[str, Any]] = {
    "Counter": ("collections.Counter('abracadabra')", Counter("abracadabra")),
    "OrderedDict": ("collections.OrderedDict(b=1, a=2)", OrderedDict(b=1, a=2)),
    "defaultdict": ("collections.defaultdict(list, a=[1])", defaultdict(list, a=[1])),
    "deque": ("collections.deque([1, (2, 3)], 5)", deque([1, (2, 3)], 5)),
    "namedtuple": ("collections.namedtuple('Point', 'x y')(1, (2, 3))", Point(1, (2, 3))),
    "Decimal": ("decimal.Decimal('1.10') * 2", Decimal("2.2")),
    "Fraction": ("fractions.Fraction(3, 6)", Fraction(1, 2)),
    "complex": ("complex(1, -0.5)", 1 - 0.5j),
    "sets": ("({1, 2}, frozenset({(1, 'a')}))", ({1, 2}, frozenset({(1, "a")}))),
    "nested tuples": ("((1, (2, (3,))), ())", ((1, (2, (3,))), ())),
    "a big int": (f"18 * 10 ** {4998}", BIG),
    "a big negative int": ("-(2 ** 20000) + 1", -(2**20000) + 1),
    "a long list": ("list(range(3_000_000))", list(range(3_000_000))),
}
IMPORTS = "import collections, decimal, fractions\n"


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if "long" in k else k for k in STANDARD]
)
def test_standard_results_compare_as_python_compares_them(sandbox: Sandbox, kind: str) -> None:
    made, expected = STANDARD[kind]
    code = f"{IMPORTS}def make(n):\n    return {made}\n"
    calls = FunctionTests("make", [(0,), (BIG,)], [expected, expected], timeout=20)
    outcome = judge(sandbox, calls, code)
    assert outcome.kind is OutcomeKind.PASSED, outcome
    asserts = AssertTests([f"assert make(18 * 10 ** 4998) == {made}"], setup=IMPORTS, timeout=20)
    outcome = judge(sandbox, asserts, code)
    assert outcome.kind is OutcomeKind.PASSED, outcome


WRONG: dict[str, tuple[str, Any]] = {
    "a dict for a Counter": ("dict(collections.Counter('aab'))", Counter("aab")),
    "a Counter off by one": ("collections.Counter('aabb')", Counter("aab")),
    "an OrderedDict in another order": (
        "collections.OrderedDict(a=2, b=1)",
        OrderedDict(b=1, a=2),
    ),
    "a namedtuple of another name": ("collections.namedtuple('P', 'x y')(1, 2)", Point(1, 2)),
    "a plain tuple for a namedtuple": ("(1, 2)", Point(1, 2)),
    "a deque with a float": ("collections.deque([1.0])", deque([1])),
    "a big int off by one": ("18 * 10 ** 4998 + 1", BIG),
    "a long list one longer": ("list(range(3_000_001))", list(range(3_000_000))),
    "a lying Counter subclass": (
        "type('C', (collections.Counter,), {'__eq__': lambda s, o: True})(x=1)",
        Counter(a=1),
    ),
    "a lying namedtuple subclass": (
        "type('Point', (collections.namedtuple('Point', 'x y'),), "
        "{'__eq__': lambda s, o: True, '__hash__': tuple.__hash__})(0, 0)",
        Point(1, 2),
    ),
}


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if "long" in k else k for k in WRONG]
)
def test_wrong_results_of_standard_types_fail(sandbox: Sandbox, kind: str) -> None:
    made, expected = WRONG[kind]
    code = f"{IMPORTS}def make():\n    return {made}\n"
    outcome = judge(sandbox, FunctionTests("make", [()], [expected], timeout=20), code)
    assert outcome.passed == 0, outcome


def test_a_result_past_the_frame_limit_says_so(sandbox: Sandbox) -> None:
    code = "def make():\n    return 'x' * 70_000_000\n"
    outcome = judge(sandbox, FunctionTests("make", [()], ["x" * 70_000_000], timeout=20), code)
    assert outcome.kind is OutcomeKind.FAILED, outcome
    assert "over the limit of 67108864" in outcome.detail, outcome


def test_a_forged_encoding_that_is_no_value_fails_its_calls(sandbox: Sandbox) -> None:
    """The candidate's process replaces the runner's encoder there: its short answers, which
    the judge passes to the host unread, and its long ones, which the judge decodes, are no
    value; each fails its own call (the host cannot decode it), and the process that sent a
    long one is replaced. Never an error of the run, and never a pass."""
    forge = (
        "import sys\n"
        "def echo(x):\n"
        "    if x == 2:\n"
        "        sys.modules['__main__'].encode = lambda v, *a: {'$nope': [v] * v}\n"
        "    return x\n"
    )
    harness = FunctionTests("echo", [(1,), (2,), (3,), (400,), (5,)], [1, 2, 3, 400, 5])
    outcome = judge(sandbox, harness, forge)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.FAILED, 2), outcome
    assert outcome.detail == "bad value: not a value: {'$nope': [2, 2]}", outcome


@pytest.mark.parametrize("name", ["exec", "eval", "open", "__import__", "breakpoint", "input"])
def test_a_value_names_no_builtin_that_does_more_than_compute(name: str) -> None:
    """A value may name a builtin type or a builtin that only computes (``len``), as itself or
    as a ``defaultdict``'s factory, which the judge calls on a missing key: one that reads,
    writes, imports or runs text is no value, wherever it stands."""
    from sandboxkit.harness import runner

    assert runner.decode({"$bi": "len"}) is len
    assert runner.decode({"$dd": [{"$bi": "int"}, {"$d": []}]})["x"] == 0
    for data in ({"$bi": name}, {"$dd": [{"$bi": name}, {"$d": []}]}):
        with pytest.raises(runner.CodecError):
            runner.decode(data)


STARTS_ONE_ENDS = "def starts_one_ends(n):\n    return 1 if n == 1 else 18 * 10 ** (n - 2)\n"
"""HumanEval/83's canonical solution."""


def test_a_tests_integer_literal_of_thousands_of_digits_is_the_datasets_own(
    sandbox: Sandbox,
) -> None:
    """HumanEval+/83's tests write its results out, 5,000 digits and more: Python refuses to
    read decimal text past 4,300 digits (the read takes quadratic time), but a test is the
    dataset's trusted text, so it is compiled whole; the candidate's own text keeps the
    limit."""
    literal = "18" + "0" * 4998  # BIG in decimal: 5,000 digits
    tests = [
        f"assert starts_one_ends(5000) == {literal}",
        "assert starts_one_ends(2) == 18",
        f"results = [18, {literal}]\nfor n, r in zip([2, 5000], results):\n"
        "    assert starts_one_ends(n) == r",
    ]
    harness = AssertTests(tests)
    outcome = judge(sandbox, harness, STARTS_ONE_ENDS)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.PASSED, 3), outcome
    wrong = judge(sandbox, harness, STARTS_ONE_ENDS.replace("18 *", "17 *"))
    assert wrong.passed == 0, wrong
    code = f"def starts_one_ends(n):\n    return {literal}\n"
    said = judge(sandbox, harness, code)
    assert said.kind is OutcomeKind.ERROR and "4300" in said.detail, said


def test_code_that_does_not_compile_says_so_however_long_its_rows_tests(sandbox: Sandbox) -> None:
    """The judge asks for the first test's process while it still reads the tests; a zygote
    that could not compile the code has ended by then, and the judge reads why."""
    harness = AssertTests(["assert f(1) == 1  # " + "x" * 4000] * 2000)
    outcome = judge(sandbox, harness, "def f(:\n")
    assert outcome.kind is OutcomeKind.ERROR, outcome
    assert outcome.detail.startswith("compile error: SyntaxError"), outcome
