"""The contest problems in examples/contest: complete, consistent, and rebuilt exactly by their
build script. (How a judge treats each solution is tested with the languages that run them.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sandboxkit.contest.formats import parse_tests
from sandboxkit.contest.scoring import parse_subtasks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBLEMS = [
    "aplusb",
    "circles",
    "max_subarray",
    "pair_sum",
    "palindromes",
    "smallest_sums",
    "tree_diameter",
]
ALL_LANGUAGES = {"python", "cpp17", "c", "java", "rust", "go", "javascript"}


@pytest.fixture
def ps(problemset: ModuleType) -> ModuleType:
    return problemset


def test_the_set_loads_every_problem_with_tests_and_limits(ps: ModuleType) -> None:
    problems = ps.load_problems()
    assert [p.name for p in problems] == PROBLEMS
    for p in problems:
        assert p.dir.name == p.name
        assert 6 <= len(p.tests) <= 10, p.name
        assert all(t["input"] and t["output"] for t in p.tests), p.name
        assert p.time_limit == 1.0
        assert p.memory_limit_mb == 256
        assert "Input:" in p.statement and "Output:" in p.statement


def test_every_problem_has_a_python_and_a_cpp_reference(ps: ModuleType) -> None:
    for p in ps.load_problems():
        found = ps.solutions(p)
        assert found["accepted.py"][0] == "python"
        assert found["accepted.cpp"][0] == "cpp17"
        assert "int main" in found["accepted.cpp"][1]


@pytest.mark.parametrize("name", ["aplusb", "smallest_sums", "palindromes"])
def test_three_problems_are_solved_in_every_language(ps: ModuleType, name: str) -> None:
    (problem,) = [p for p in ps.load_problems() if p.name == name]
    found = ps.solutions(problem)
    accepted = {lang for variant, (lang, _) in found.items() if variant.startswith("accepted")}
    assert accepted == ALL_LANGUAGES
    assert "public class Main" in found["accepted.java"][1]


def test_every_solution_is_named_for_its_verdict_and_every_verdict_occurs(
    ps: ModuleType,
) -> None:
    verdicts = {
        ps.expected_verdict(variant): variant
        for p in ps.load_problems()
        for variant in ps.solutions(p)
    }
    assert set(verdicts) == {
        "accepted",
        "wrong_answer",
        "time_limit",
        "runtime_error",
        "memory_limit",
        "compile_error",
        "partial",
    }


@pytest.mark.parametrize(
    ("variant", "verdict"),
    [
        ("accepted.cpp", "accepted"),
        ("accepted_digits.py", "accepted"),
        ("wrong_rounded.py", "wrong_answer"),
        ("slow.py", "time_limit"),
        ("crash.cpp", "runtime_error"),
        ("memory.py", "memory_limit"),
        ("compile_error.cpp", "compile_error"),
        ("partial", "partial"),
    ],
)
def test_expected_verdict_reads_the_name_prefix(ps: ModuleType, variant: str, verdict: str) -> None:
    assert ps.expected_verdict(variant) == verdict


def test_a_name_with_no_verdict_prefix_is_an_error(ps: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"'wrongly\.py' starts with none of"):
        ps.expected_verdict("wrongly.py")


def test_subtasks_are_valid_and_only_their_problem_has_partial_solutions(ps: ModuleType) -> None:
    for p in ps.load_problems():
        partial = [v for v in ps.solutions(p) if ps.expected_verdict(v) == "partial"]
        if p.subtasks is None:
            assert partial == [], p.name
            continue
        subtasks = parse_subtasks(p.subtasks, len(p.tests))
        assert sorted(i for s in subtasks for i in s.tests) == list(range(len(p.tests)))
        assert sum(s.points for s in subtasks) == 100
        assert partial == ["partial.cpp", "partial.py"]


def test_each_checker_is_of_a_known_kind_and_its_program_exists(ps: ModuleType) -> None:
    kinds = {}
    for p in ps.load_problems():
        if p.checker is None:
            continue
        kinds[p.name] = p.checker["kind"]
        if p.checker["kind"] == "program":
            assert "int main(int argc, char** argv)" in (p.dir / p.checker["file"]).read_text()
    assert kinds == {"circles": "floats", "pair_sum": "program", "palindromes": "tokens"}


def test_a_row_reads_back_through_the_contest_formats(ps: ModuleType) -> None:
    for p in ps.load_problems():
        row = ps.as_row(p, "cpp17")
        tests = parse_tests(row["verification_info"])
        assert tests.language == "cpp17"
        assert tests.cases == tuple((t["input"], t["output"]) for t in p.tests)
        assert row["prompt"].startswith(p.statement)
        assert "Write a solution in C++17" in row["prompt"] and "```cpp" in row["prompt"]
        assert (row["time_limit"], row["memory_limit"]) == (p.time_limit, p.memory_limit_mb)
        assert row.get("subtasks") == p.subtasks
        assert ("checker" in row) == (p.checker is not None)


def test_a_row_carries_a_checker_programs_source(ps: ModuleType) -> None:
    (problem,) = [p for p in ps.load_problems() if p.name == "pair_sum"]
    checker = ps.as_row(problem, "python")["checker"]
    assert checker["kind"] == "program"
    assert checker["source"] == (problem.dir / "checker.cpp").read_text()
    assert "source" not in problem.checker  # the problem's own dict is left alone


@pytest.mark.slow
def test_the_build_script_rewrites_the_committed_problem_files_exactly(tmp_path: Path) -> None:
    script = EXAMPLES / "contest" / "build_problems.py"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(d.name for d in tmp_path.iterdir()) == PROBLEMS
    for name in PROBLEMS:
        committed = EXAMPLES / "contest" / "problems" / name / "problem.json"
        assert (tmp_path / name / "problem.json").read_bytes() == committed.read_bytes(), name


@pytest.mark.slow
def test_the_checker_program_accepts_any_valid_pair_and_rejects_the_rest(
    ps: ModuleType, tmp_path: Path
) -> None:
    """pair_sum's checker, run by its protocol: the reference's pair, another valid pair, and
    wrong or malformed outputs (exit 0 accepted, 1 wrong answer, 2 presentation error)."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ to build the checker")
    (problem,) = [p for p in ps.load_problems() if p.name == "pair_sum"]
    checker = tmp_path / "checker"
    subprocess.run(
        ["g++", "-O2", "-std=gnu++17", str(problem.dir / "checker.cpp"), "-o", str(checker)],
        check=True,
        timeout=120,
    )
    test = problem.tests[3]
    assert (test["input"], test["output"]) == ("5 8\n4 1 7 3 5\n", "2 3\n")
    (tmp_path / "input").write_text(test["input"])
    (tmp_path / "answer").write_text(test["output"])

    def status(output: str) -> int:
        (tmp_path / "output").write_text(output)
        files = [str(tmp_path / name) for name in ("input", "output", "answer")]
        return subprocess.run([str(checker), *files], capture_output=True, timeout=30).returncode

    assert [status(o) for o in ("2 3\n", "5 4", "3 2\n")] == [0, 0, 0]
    assert [status(o) for o in ("1 1\n", "1 2\n", "-1\n", "0 3\n")] == [1, 1, 1, 1]
    assert [status(o) for o in ("", "2\n", "2 3 4\n", "two three\n")] == [2, 2, 2, 2]
