"""stdio_tests_reward as TRL calls it, on each dataset shape of contest tests and each scoring
rule, with real programs in local sandboxes: right, partly right, crashing and slow ones."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import RewardFunction, stdio_tests_reward
from sandboxkit.contest import languages
from sandboxkit.contest.formats import parse_tests
from sandboxkit.contest.languages import Language, register_language
from sandboxkit.harness import StdioTests

CASES = [("1 2\n", "3\n"), ("5 7\n", "12\n"), ("0 0\n", "0\n"), ("10 -3\n", "7\n")]
READ = "a, b = map(int, input().split())\n"
PROGRAMS = {
    "right": READ + "print(a + b)",
    "wrong on the last test": READ + "print(a + b if a < 10 else 0)",
    "crashing": READ + "raise RuntimeError('boom')",
    "slow on the last test": READ + "while a >= 10: pass\nprint(a + b)",
}
SUBTASKS = {"subtasks": [{"points": 40, "tests": [0, 1]}, {"points": 60, "tests": [2, 3]}]}


def _inputs() -> list[str]:
    return [i for i, _ in CASES]


def _outputs() -> list[str]:
    return [o for _, o in CASES]


SHAPES: dict[str, dict[str, Any]] = {
    "open-r1 verification_info (JSON)": {
        "verification_info": json.dumps(
            {
                "language": "python",
                "test_cases": [{"input": i, "output": o, "type": "stdin_stdout"} for i, o in CASES],
            }
        )
    },
    "open-r1 verification_info (dict)": {
        "verification_info": {
            "language": "Python 3",
            "test_cases": [{"input": i, "output": o} for i, o in CASES],
        }
    },
    "APPS input_output, strings": {
        "input_output": json.dumps({"inputs": _inputs(), "outputs": _outputs()})
    },
    "TACO input_output, lists of lines": {
        "input_output": json.dumps(
            {"inputs": [i.split("\n")[:1] for i in _inputs()], "outputs": [[3], [12], [0], [7]]}
        )
    },
    "CodeContests public/private/generated": {
        "public_tests": {"input": _inputs()[:1], "output": _outputs()[:1]},
        "private_tests": {"input": _inputs()[1:3], "output": _outputs()[1:3]},
        "generated_tests": {"input": _inputs()[3:], "output": _outputs()[3:]},
    },
    "LiveCodeBench public/private test cases": {
        "public_test_cases": json.dumps(
            [{"input": i, "output": o, "testtype": "stdin"} for i, o in CASES[:2]]
        ),
        "private_test_cases": [
            {"input": i, "output": o, "testtype": "stdin"} for i, o in CASES[2:]
        ],
        "metadata": "{}",
    },
}


@pytest.fixture(scope="module")
def reward() -> Iterator[RewardFunction]:
    """The module's reward, on one sandbox: its C++ rows precompile the header once (seconds
    of CPU a second sandbox would spend again)."""
    fn = stdio_tests_reward("subprocess", timeout=1, pool_size=1)
    yield fn
    fn.close()


def _call(fn: RewardFunction, row: dict[str, Any], **extra: Any) -> list[float | None]:
    """Every program of ``PROGRAMS`` on one problem, columns as TRL passes them."""
    columns = {name: [value] * len(PROGRAMS) for name, value in row.items()}
    completions = [f"```python\n{code}\n```" for code in PROGRAMS.values()]
    return fn(
        prompts=["Add two numbers."] * len(PROGRAMS), completions=completions, **columns, **extra
    )


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_dataset_shape_scores_the_fraction_of_tests_passed(
    reward: RewardFunction, shape: str
) -> None:
    assert _call(reward, SHAPES[shape]) == [1.0, 0.75, 0.0, 0.75]
    stats = reward.last_batch
    assert stats is not None and stats.outcomes == {"passed": 1, "failed": 3}


def test_the_outcomes_say_which_test_failed_and_why(reward: RewardFunction) -> None:
    seen: dict[str, list[str]] = {}
    _call(reward, SHAPES["APPS input_output, strings"], log_extra=seen.__setitem__)
    right, wrong, crashing, slow = seen["stdio_tests_reward_outcome"]
    assert right == "passed 4/4"
    assert wrong == "failed 3/4: test 3: wrong answer"
    assert crashing == "failed 0/4: test 0: runtime error (exit status 1: RuntimeError: boom)"
    assert slow.startswith("failed 3/4: test 3:") and "time" in slow


@pytest.mark.parametrize("named", ["my_tests", ["my_first", "my_rest"]], ids=["one", "two"])
def test_named_tests_columns_are_read_instead_of_detected(named: str | list[str]) -> None:
    row = {
        "input_output": json.dumps({"inputs": ["1 1\n"], "outputs": ["999\n"]}),
        "my_tests": json.dumps({"inputs": _inputs(), "outputs": _outputs()}),
        "my_first": {"input": _inputs()[:1], "output": _outputs()[:1]},
        "my_rest": {"inputs": _inputs()[1:], "outputs": _outputs()[1:]},
    }
    fn = stdio_tests_reward("subprocess", tests_column=named, timeout=1, pool_size=2)
    try:
        assert _call(fn, row) == [1.0, 0.75, 0.0, 0.75]
    finally:
        fn.close()


def test_all_or_nothing_scoring() -> None:
    fn = stdio_tests_reward("subprocess", scoring="all", timeout=1, pool_size=2)
    try:
        assert _call(fn, SHAPES["APPS input_output, strings"]) == [1.0, 0.0, 0.0, 0.0]
    finally:
        fn.close()


@pytest.mark.parametrize("as_json", [False, True], ids=["dict", "JSON string"])
def test_subtasks_score_the_points_of_groups_whose_tests_all_pass(as_json: bool) -> None:
    fn = stdio_tests_reward("subprocess", scoring="subtasks", timeout=1, pool_size=2)
    row = {
        **SHAPES["CodeContests public/private/generated"],
        "subtasks": json.dumps(SUBTASKS) if as_json else SUBTASKS,
    }
    try:
        # The last two fail test 3 only: the first group's 40 points of 100.
        assert _call(fn, row) == [1.0, 0.4, 0.0, 0.4]
    finally:
        fn.close()


def _unjudged(fn: RewardFunction, row: dict[str, Any]) -> str:
    """What one row that cannot be judged came to: no reward, and an outcome saying why."""
    seen: dict[str, list[str]] = {}
    columns = {k: [v] for k, v in row.items()}
    assert fn(prompts=["p"], completions=["print(1)"], log_extra=seen.__setitem__, **columns) == [
        None
    ]
    (said,) = seen[f"{fn.__name__}_outcome"]
    return said


def test_subtasks_naming_a_test_the_row_lacks_make_the_row_unjudgeable() -> None:
    fn = stdio_tests_reward("subprocess", scoring="subtasks", pool_size=1)
    row = {
        **SHAPES["APPS input_output, strings"],
        "subtasks": {"subtasks": [{"points": 1, "tests": [4]}]},
    }
    assert _unjudged(fn, row) == (
        "invalid_row: row 0 (prompt 'p'): ValueError: subtask tests [4] are not among the "
        "row's 4 tests"
    )


def test_an_unknown_scoring_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="scoring must be one of fraction, all, subtasks"):
        stdio_tests_reward("subprocess", scoring="best")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "row",
    [
        {"input_output": json.dumps({"cases": [["1", "2"]]})},
        {"verification_info": "not json"},
        {"public_tests": [1, 2, 3]},
    ],
    ids=["unknown keys", "not JSON", "a list of numbers"],
)
def test_a_column_of_an_unknown_shape_makes_the_row_unjudgeable_naming_the_shapes(
    reward: RewardFunction, row: dict[str, Any]
) -> None:
    said = _unjudged(reward, row)
    assert said.startswith("invalid_row: row 0 (prompt 'p'): ValueError: "), said
    assert "expected open-r1 verification_info" in said


def test_a_row_without_a_column_of_tests_cannot_be_judged(reward: RewardFunction) -> None:
    said = _unjudged(reward, {"answer": "3"})
    assert said.startswith("invalid_row: row 0 (prompt 'p'): ValueError: no column of test ")
    assert "['answer']" in said


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (
            {
                "verification_info": {
                    "language": "kotlin",
                    "test_cases": [{"input": "", "output": ""}],
                }
            },
            "language 'kotlin' is not in the table (register_language)",
        ),
        (
            {
                "verification_info": {
                    "language": "cpp",
                    "test_cases": [
                        {"input": [1], "output": [1], "type": "function_call", "fn_name": "g"}
                    ],
                }
            },
            "call-based problems run in Python only, not C++17",
        ),
    ],
    ids=["Kotlin", "C++ function_call"],
)
def test_what_is_not_supported_yet_gets_no_reward_and_says_why(
    reward: RewardFunction, row: dict[str, Any], why: str
) -> None:
    seen: dict[str, list[str]] = {}
    code = "```cpp\nint main() { return 0; }\n```"
    scores = reward(
        prompts=["p"],
        completions=[code],
        log_extra=seen.__setitem__,
        **{k: [v] for k, v in row.items()},
    )
    assert scores == [None]
    assert seen["stdio_tests_reward_outcome"] == [f"unsupported: stdio_tests_reward: {why}"]


def test_a_batch_of_rows_it_cannot_run_yet_does_not_stop_training(reward: RewardFunction) -> None:
    """Unsupported rows are a property of the dataset, not a failing provider: a batch made of
    them gives no reward and no ``CircuitOpenError``, and the metrics count them apart."""
    row = {"verification_info": {"language": "kotlin", "test_cases": [{"input": "", "output": ""}]}}
    logged: dict[str, float] = {}
    scores = reward(
        prompts=["p"] * 6,
        completions=["int main() {}"] * 6,
        log_metric=logged.__setitem__,
        **{k: [v] * 6 for k, v in row.items()},
    )
    assert scores == [None] * 6
    assert logged["stdio_tests_reward/unsupported_rate"] == 1.0
    assert logged["stdio_tests_reward/infra_error_rate"] == 0.0


def test_taco_lists_of_lines_become_texts_with_one_line_each() -> None:
    tests = parse_tests({"inputs": [["3", "1 2 3"], "4\n"], "outputs": [["6"], 4]})
    assert tests.cases == (("3\n1 2 3\n", "6\n"), ("4\n", "4"))


def test_call_based_tests_are_kept_as_the_dataset_holds_them() -> None:
    """Arguments and results not flattened to text: ``contest.calls`` decodes them."""
    tests = parse_tests({"inputs": [[[1, 2], 3]], "outputs": [[True]], "fn_name": "f"})
    assert tests.cases == () and tests.calls == (([[1, 2], 3], [True]),)
    assert tests.call_based and tests.fn_name == "f"


def test_inputs_and_outputs_of_different_lengths_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="input_output: 2 inputs but 1 outputs"):
        parse_tests({"inputs": ["1", "2"], "outputs": ["1"]})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_the_language_is_the_rows_and_verdicts_are_logged(reward: RewardFunction) -> None:
    """A row's ``language`` column decides its language (C++ here, a Python row in the same
    batch as Python); each verdict's share is a batch metric."""
    row = SHAPES["CodeContests public/private/generated"]
    add = "#include <bits/stdc++.h>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b;}"
    completions = [
        f"```cpp\n{add}\n```",
        f"```c++\n{add.replace('a+b', 'a*b')}\n```",
        "```cpp\nint main() { undefined; }\n```",
        f"```python\n{PROGRAMS['right']}\n```",
    ]
    logged: dict[str, float] = {}
    seen: dict[str, list[str]] = {}
    scores = reward(
        prompts=["p"] * 4,
        completions=completions,
        log_metric=logged.__setitem__,
        log_extra=seen.__setitem__,
        language=["C++", "cpp", "c++17", None],
        **{name: [value] * 4 for name, value in row.items()},
    )
    assert scores[0] == 1.0 and scores[1] is not None and scores[1] < 1.0, seen
    assert scores[2] == 0.0 and scores[3] == 1.0, seen
    assert seen["stdio_tests_reward_outcome"][2].startswith("error 0/4: compile error: main.cpp:1")
    assert logged["stdio_tests_reward/accepted_rate"] == 0.5
    assert logged["stdio_tests_reward/compile_error_rate"] == 0.25
    assert logged["stdio_tests_reward/wrong_answer_rate"] == 0.25


def test_a_language_the_table_lacks_is_a_value_error_up_front() -> None:
    with pytest.raises(ValueError, match="no language 'cobol' in the table; known: python, c, "):
        stdio_tests_reward("subprocess", language="cobol")


def test_a_python_program_that_does_not_parse_is_a_compile_error(reward: RewardFunction) -> None:
    logged: dict[str, float] = {}
    row = SHAPES["CodeContests public/private/generated"]
    scores = reward(
        prompts=["p"],
        completions=["```python\ndef main(:\n```"],
        log_metric=logged.__setitem__,
        **{name: [value] for name, value in row.items()},
    )
    assert scores == [0.0]
    assert logged["stdio_tests_reward/compile_error_rate"] == 1.0


COMPILE_BOMB = (
    "constexpr long long spin() {\n"
    "  long long s = 0;\n"
    "  for (long long i = 0; i < 200000; i++) for (long long j = 0; j < 200000; j++) s += i ^ j;\n"
    "  return s;\n"
    "}\n"
    "static_assert(spin() != 1);  // g++ evaluates 2^25 operations first: seconds\n"
    "int main() {}\n"
)
IOSTREAM_SUM = (
    "#include <iostream>\n"
    "int main() { long long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n"
)
LONG_LINE = "1 " * 2500
OPTIONS = {
    # option: (its value, the row's language, the program, (input, output), the outcome)
    "compile_timeout": (
        2.0,
        "cpp",
        COMPILE_BOMB,
        ("", ""),
        (0.0, "error 0/1: compile error: the compiler ran past 2s of CPU time"),
    ),
    "compile_memory_mb": (
        32,
        "cpp",
        IOSTREAM_SUM,
        ("1 2", "3"),
        (0.0, "error 0/1: compile error: virtual memory exhausted: Cannot allocate memory"),
    ),
    "wall": (
        1.0,
        "python",
        "import time\ntime.sleep(2)\nprint(sum(map(int, input().split())))",
        ("1 2", "3"),
        (0.0, "timeout 0/1: test 0: time limit (still running after 1s of wall-clock time)"),
    ),
    "output_limit": (
        1000,
        "python",
        f"print({LONG_LINE!r})",
        ("", LONG_LINE),
        (0.0, "failed 0/1: test 0: output limit (wrote more than 1000 bytes of output)"),
    ),
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("option", list(OPTIONS))
def test_each_limit_the_factory_takes_reaches_the_judge(option: str) -> None:
    """``compile_timeout``, ``compile_memory_mb``, ``wall`` and ``output_limit`` were accepted
    and never reached the harness: a compile bomb ran 30 s under ``compile_timeout=2``, 5 KB
    of output scored 1.0 under ``output_limit=1000``, a 2 s sleep 1.0 under ``wall=1``."""
    value, language, code, (stdin, stdout), (score, said) = OPTIONS[option]
    fn = stdio_tests_reward("subprocess", timeout=5, pool_size=1, **{option: value})
    seen: dict[str, list[str]] = {}
    row = {"test_cases": [{"input": stdin, "output": stdout}], "language": language}
    try:
        scores = fn(
            prompts=["p"],
            completions=[f"```{language}\n{code}\n```"],
            verification_info=[row],
            log_extra=seen.__setitem__,
        )
    finally:
        fn.close()
    assert (scores, seen["stdio_tests_reward_outcome"]) == ([score], [said])


SPIN = "python3 -c 'import time\nwhile time.process_time() < 1.2: pass'"
COMPILERS = {
    # what the "compiler" does: (its score, the outcome)
    "waits 3 s": ("sleep 3", (1.0, "passed 1/1")),
    "spins 2.4 s in two grandchildren": (
        f"{SPIN}; {SPIN}",
        (0.0, "error 0/1: compile error: the compiler ran past 2s of CPU time"),
    ),
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_a_compile_is_judged_by_the_cpu_time_of_its_whole_process_tree(
    compiler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile's wall-clock time was its limit: on a loaded machine a correct program whose
    compile got too little CPU was a compile error (a Rust A+B did). Its limit is CPU time
    now, the compiler's and every process it runs, with a wall-clock backstop far above it."""
    command, (score, said) = COMPILERS[compiler]
    monkeypatch.setattr(languages, "_LANGUAGES", dict(languages._LANGUAGES))
    monkeypatch.setattr(languages, "_NAMES", dict(languages._NAMES))
    register_language(
        Language(
            "shc", "Shell", ("shc",), "main.sh", ("sh", "-c", command), ("sh", "main.sh"), "sh"
        )
    )
    fn = stdio_tests_reward("subprocess", timeout=5, pool_size=1, compile_timeout=2.0)
    seen: dict[str, list[str]] = {}
    row = {"test_cases": [{"input": "1 2", "output": "3"}], "language": "shc"}
    try:
        scores = fn(
            prompts=["p"],
            completions=["```shc\nread a b; echo $((a + b))\n```"],
            verification_info=[row],
            log_extra=seen.__setitem__,
        )
    finally:
        fn.close()
    assert (scores, seen["stdio_tests_reward_outcome"]) == ([score], [said])


TOOLCHAIN_LANGUAGE = Language(
    "sbx", "Toolchain shell", ("sbx",), "main.sh", ("sbx-cc", "main.sh"), ("./main",), "sbx-cc"
)
"""Compiled by the ``toolchain`` fixture's compiler, whose prelude gives it ``greet``."""


@pytest.mark.parametrize("warm", ["1", "0"])
def test_a_language_whose_compiler_is_outside_usr_is_judged_with_its_toolchain(
    warm: str, toolchain: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler installed outside /usr (rustup's, /usr/local/go) was missing in every local
    sandbox, each program an ``infra`` outcome; named in ``SANDBOXKIT_LOCAL_TOOLCHAINS``, it
    builds programs there as on the host."""
    monkeypatch.setattr(languages, "_LANGUAGES", dict(languages._LANGUAGES))
    monkeypatch.setattr(languages, "_NAMES", dict(languages._NAMES))
    register_language(TOOLCHAIN_LANGUAGE)
    monkeypatch.setenv("SANDBOXKIT_LOCAL_TOOLCHAINS", str(toolchain))
    monkeypatch.setenv("SANDBOXKIT_WARM", warm)
    fn = stdio_tests_reward("subprocess", timeout=5, pool_size=1)
    seen: dict[str, list[str]] = {}
    rows = [{"test_cases": [{"input": "1 2", "output": "hello from the toolchain 3"}]}] * 2
    programs = ["read a b; greet; echo $((a + b))", "read a b; greet; echo $((a - b))"]
    try:
        scores = fn(
            prompts=["p", "p"],
            completions=[f"```sbx\n{program}\n```" for program in programs],
            verification_info=[{**row, "language": "sbx"} for row in rows],
            log_extra=seen.__setitem__,
        )
    finally:
        fn.close()
    assert scores == [1.0, 0.0], seen["stdio_tests_reward_outcome"]


def test_the_harness_of_a_row_carries_every_limit_the_factory_took() -> None:
    """The same, for all the limits at once, read off the harness a row is planned with."""
    fn = stdio_tests_reward(
        "subprocess",
        timeout=3.0,
        memory_mb=64,
        wall=7.0,
        output_limit=999,
        compile_timeout=11.0,
        compile_memory_mb=333,
    )
    row = {"public_tests": [{"input": ["1 2"], "output": ["3"]}]}
    judging = fn.planner(0, "p", {name: [value] for name, value in row.items()})
    planned = judging("```python\nprint(3)\n```")
    tests = getattr(planned.harness, "tests", None)
    assert isinstance(tests, StdioTests), planned
    limits = (tests.timeout, tests.memory_mb, tests.wall, tests.output_cap)
    compile_limits = (tests.compile_timeout, tests.compile_memory_mb)
    assert (limits, compile_limits) == ((3.0, 64, 7.0, 999), (11.0, 333))
