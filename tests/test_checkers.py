"""Checkers judge contest outputs as the judges they stand for do: tokens (Codeforces' wcmp,
Kattis ignoring case), float tolerance (testlib's doubleCompare), a host function, and real
testlib-style C++ checker programs, compiled once and run confined on hostile outputs."""

from __future__ import annotations

import asyncio
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandboxkit import get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.contest.checkers import (
    SPEC_SHAPES,
    CheckerError,
    FloatChecker,
    ProgramChecker,
    PythonChecker,
    TokenChecker,
    _checker_sandbox,
    acheck,
    checker_from_spec,
    compile_checker,
    floats,
    tokens,
)
from sandboxkit.harness.runner import tokens_digest
from sandboxkit.local.isolation import Tier
from sandboxkit.portal import run_sync

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

SUM_CHECKER = r"""
#include <cstdio>
// Any two integers summing to the input's x; the jury's pair (the answer file) is one of many.
int main(int argc, char** argv) {
    FILE* in = fopen(argv[1], "r");
    FILE* out = fopen(argv[2], "r");
    FILE* ans = fopen(argv[3], "r");
    long long x, a, b;
    char extra[2];
    if (!in || !out || !ans || fscanf(in, "%lld", &x) != 1) {
        fprintf(stderr, "cannot read the input");
        return 3;
    }
    if (fscanf(out, "%lld %lld", &a, &b) != 2) return 2;
    if (fscanf(out, "%1s", extra) == 1) return 1;
    return a + b == x ? 0 : 1;
}
"""
PARTIAL_CHECKER = r"""
#include <cstdio>
#include <cstring>
// The share of the answer's numbers the output has right, in place; the input names the
// convention: "stdout" prints the score, "testlib" says "points <score>" on stderr as quitp.
int main(int argc, char** argv) {
    FILE* in = fopen(argv[1], "r");
    FILE* out = fopen(argv[2], "r");
    FILE* ans = fopen(argv[3], "r");
    char how[16];
    if (fscanf(in, "%15s", how) != 1) return 3;
    long long a, b;
    int right = 0, total = 0;
    while (fscanf(ans, "%lld", &b) == 1) {
        total++;
        if (fscanf(out, "%lld", &a) == 1 && a == b) right++;
    }
    if (right == total) return 0;
    if (right == 0) return 1;
    double score = (double)right / total;
    if (strcmp(how, "testlib") == 0) fprintf(stderr, "points %.10f of %d\n", score, total);
    else printf("%.6f\n", score);
    return 7;
}
"""
BROKEN_CHECKER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
// Fails as checkers fail: testlib's _fail (exit 3), a crash, an exit status that is no
// verdict, a score out of range, a hang; the input says which.
int main(int argc, char** argv) {
    FILE* in = fopen(argv[1], "r");
    char how[16] = "";
    if (fscanf(in, "%15s", how) != 1) return 3;
    if (strcmp(how, "fail") == 0) {
        fprintf(stderr, "jury answer is worse than participant's");
        return 3;
    }
    if (strcmp(how, "crash") == 0) abort();
    if (strcmp(how, "status") == 0) return 42;
    if (strcmp(how, "score") == 0) { printf("1.5\n"); return 7; }
    if (strcmp(how, "noscore") == 0) return 7;
    for (;;) {}
}
"""
EXACT_CHECKER = r"""
#include <cstdio>
// Accepts only an output byte for byte equal to the answer.
int main(int argc, char** argv) {
    FILE* out = fopen(argv[2], "rb");
    FILE* ans = fopen(argv[3], "rb");
    int c, d;
    do {
        c = fgetc(out);
        d = fgetc(ans);
        if (c != d) return 1;
    } while (c != EOF);
    return 0;
}
"""
PROBE_CHECKER = r"""
#include <cstdio>
#include <cstdlib>
// A checker that trusts the output too far: "open" accepts if it can read the file the output
// names, "env" if it sees CHECKER_SECRET in its environment.
int main(int argc, char** argv) {
    FILE* in = fopen(argv[1], "r");
    FILE* out = fopen(argv[2], "r");
    char how[16], path[4096];
    if (fscanf(in, "%15s", how) != 1) return 3;
    if (how[0] == 'e') return getenv("CHECKER_SECRET") ? 0 : 1;
    if (fscanf(out, "%4095s", path) != 1) return 1;
    FILE* named = fopen(path, "r");
    return named && fgetc(named) != EOF ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module, where each checker source compiles once for all its tests."""
    path = tmp_path_factory.mktemp("checkers")
    if shutil.which("g++") is not None:
        for source in (SUM_CHECKER, PARTIAL_CHECKER, BROKEN_CHECKER, EXACT_CHECKER, PROBE_CHECKER):
            compile_checker(source, "cpp", path)
    return path


@pytest.fixture
def counted_gxx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``g++`` first on PATH as the real one behind a script that logs each call: the log
    holds a line per compile."""
    real = shutil.which("g++")
    assert real is not None
    bin_dir, log = tmp_path / "bin", tmp_path / "compiles.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "g++"
    wrapper.write_text(f'#!/bin/sh\necho compile >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(real).parent}")
    log.touch()
    return log


# Tokens


def test_tokens_ignore_line_structure_blank_lines_and_trailing_spaces() -> None:
    check = tokens().check
    assert check("", "1 2 3\n", "1 2 3") == 1.0
    assert check("", "1\n2\r\n\n\n3   \t\n\n", "1 2 3\n") == 1.0
    assert check("", "  1 2\n3", "1\n2\n3\n") == 1.0


def test_tokens_reject_a_different_token_count_or_token() -> None:
    check = tokens().check
    assert check("", "1 2", "1 2 3") == 0.0
    assert check("", "1 2 3 4", "1 2 3") == 0.0
    assert check("", "1 2 4", "1 2 3") == 0.0
    assert check("", "12 3", "1 23") == 0.0  # the same characters, other tokens


def test_empty_output_matches_only_an_empty_answer() -> None:
    assert tokens().check("", "", "0") == 0.0
    assert tokens().check("", "\n\n", "") == 1.0


def test_kattis_case_insensitive_tokens_accept_ja_for_ja() -> None:
    assert tokens(case_sensitive=False).check("", "ja\n", "Ja\n") == 1.0
    assert tokens(case_sensitive=False).check("", "JA", "Ja") == 1.0
    assert tokens().check("", "ja\n", "Ja\n") == 0.0
    assert tokens(case_sensitive=False).check("", "nej", "Ja") == 0.0


def test_case_folding_is_ascii_only() -> None:
    """Kattis and testlib fold ASCII letters; ``ß`` is not ``SS`` nor ``É`` ``é``."""
    nocase = tokens(case_sensitive=False)
    assert nocase.check("", "STRASSE", "strasse") == 1.0
    assert nocase.check("", "STRASSE", "straße") == 0.0
    assert nocase.check("", "É", "é") == 0.0


def test_token_checkers_let_the_sandbox_compare_digests() -> None:
    assert tokens().digest_mode == "tokens"
    assert tokens(case_sensitive=False).digest_mode == "tokens_nocase"
    assert floats().digest_mode is None


@pytest.mark.parametrize("case_sensitive", [True, False])
def test_digests_are_equal_exactly_when_the_token_checker_accepts(case_sensitive: bool) -> None:
    outputs = ["1 2 3", "1\n2\n3\n", "1 2  3 ", "1 23", "12 3", "", "\n", "Ja", "ja", "JA ", "1 2"]
    checker = tokens(case_sensitive)
    for a in outputs:
        for b in outputs:
            same = tokens_digest(a, case_sensitive) == tokens_digest(b, case_sensitive)
            assert same == (checker.check("", a, b) == 1.0), (a, b)


def test_digest_of_bytes_is_that_of_their_text() -> None:
    """The runner may digest the program's raw bytes, the host the decoded text."""
    raw = b"caf\xc3\xa9 \xff\xfe 1\n"
    text = raw.decode("utf-8", "surrogateescape")
    assert tokens_digest(raw) == tokens_digest(text)
    assert tokens_digest("x \ud800") != tokens_digest("x")  # any str digests, lone surrogates too


def test_huge_outputs_compare() -> None:
    answer = "\n".join(str(i) for i in range(200_000))
    output = " ".join(str(i) for i in range(200_000))
    assert tokens().check("", output, answer) == 1.0
    assert tokens().check("", output + " 0", answer) == 0.0
    assert tokens_digest(output) == tokens_digest(answer)


# Floats


def test_floats_accept_within_the_relative_or_absolute_tolerance() -> None:
    check = floats().check
    assert check("", "3.1415926\n", "3.14159\n") == 1.0  # 8.3e-7 relative
    assert check("", "3.14159\n", "3.1415926\n") == 1.0
    assert check("", "3.14\n", "3.14159\n") == 0.0
    assert check("", "0.0000005", "0") == 1.0  # absolute, where relative cannot help
    assert check("", "0.000002", "0") == 0.0
    assert check("", "1000000.5", "1000000") == 1.0  # relative, far beyond the absolute one


def test_floats_read_exponents_and_integers() -> None:
    check = floats().check
    assert check("", "1.5e3 2E-7", "1500.0000001 0.0000002") == 1.0
    assert check("", "1e9", "1000000000") == 1.0
    assert check("", "-2.5E+00", "-2.5") == 1.0
    assert check("", "+1", "1") == 1.0
    assert check("", "1e9", "1000002000") == 0.0


def test_floats_compare_other_tokens_exactly() -> None:
    check = floats().check
    assert check("", "YES 0.3333333", "YES 0.333333333") == 1.0
    assert check("", "yes 0.3333333", "YES 0.333333333") == 0.0
    assert check("", "abc", "1.0") == 0.0
    assert check("", "1_000", "1000") == 0.0  # Python's spelling, not a contest's
    assert check("", "0x10", "16") == 0.0


def test_floats_need_the_same_number_of_tokens() -> None:
    assert floats().check("", "1.0 2.0", "1.0 2.0 3.0") == 0.0
    assert floats().check("", "", "1.0") == 0.0
    assert floats().check("", "1.0\n\n2.0\n", "1 2") == 1.0


def test_nan_matches_only_nan_and_infinity_only_itself() -> None:
    check = floats().check
    assert check("", "nan", "NaN") == 1.0
    assert check("", "nan", "0") == 0.0
    assert check("", "0", "nan") == 0.0
    assert check("", "inf", "Infinity") == 1.0
    assert check("", "-inf", "inf") == 0.0
    assert check("", "1e308", "inf") == 0.0
    assert check("", "inf", "1e308") == 0.0


def test_floats_with_custom_tolerances() -> None:
    assert floats(abs_tol=1e-2, rel_tol=0).check("", "1.005", "1") == 1.0
    assert floats(abs_tol=1e-9, rel_tol=1e-9).check("", "3.1415926", "3.14159") == 0.0
    with pytest.raises(ValueError, match="abs_tol"):
        floats(abs_tol=-1)
    with pytest.raises(ValueError, match="rel_tol"):
        floats(rel_tol=float("nan"))


def test_floats_on_a_huge_output() -> None:
    answer = " ".join(f"{i / 7:.9f}" for i in range(50_000))
    output = [f"{i / 7:.7f}" for i in range(50_000)]
    assert floats().check("", "\n".join(output), answer) == 1.0
    output[49_999] = "7142.7"
    assert floats().check("", "\n".join(output), answer) == 0.0


# Python checkers


def test_python_checker_scores_bools_and_partial_floats() -> None:
    def same_set(input: str, output: str, answer: str) -> bool:
        return sorted(output.split()) == sorted(answer.split())

    assert PythonChecker(same_set).check("", "3 1 2", "1 2 3") == 1.0
    assert PythonChecker(same_set).check("", "3 1", "1 2 3") == 0.0
    share = PythonChecker(lambda i, o, a: len(set(o.split()) & set(a.split())) / len(a.split()))
    assert share.check("", "1 9 3 8", "1 2 3 4") == 0.5
    assert PythonChecker(same_set).digest_mode is None


def test_a_python_checker_that_raises_is_a_checker_error() -> None:
    def broken(input: str, output: str, answer: str) -> bool:
        return int(output) == int(answer)

    with pytest.raises(CheckerError, match=r"'test_a_python_checker_that_raises_is_a.*ValueError"):
        PythonChecker(broken).check("", "not a number", "1")


@pytest.mark.parametrize("verdict", [1.5, -0.1, float("nan"), "yes", None])
def test_a_python_checker_must_give_a_bool_or_a_score_in_range(verdict: object) -> None:
    with pytest.raises(CheckerError, match="bool or a score in"):
        PythonChecker(lambda i, o, a: verdict).check("", "", "")  # type: ignore[arg-type,return-value]


# Checker programs


@needs_gxx
def test_a_checker_program_accepts_any_right_answer(cache: Path) -> None:
    checker = ProgramChecker(SUM_CHECKER, cache_dir=cache)
    assert checker.check("10\n", "3 7\n", "5 5\n") == 1.0
    assert checker.check("10\n", "-5\n15", "5 5\n") == 1.0
    assert checker.check("10\n", "3 8\n", "5 5\n") == 0.0
    assert checker.check("10\n", "3 7 0\n", "5 5\n") == 0.0  # wrong answer: extra token
    assert checker.check("10\n", "ten\n", "5 5\n") == 0.0  # presentation error
    assert checker.check("10\n", "", "5 5\n") == 0.0
    assert checker.digest_mode is None


@needs_gxx
@pytest.mark.parametrize("convention", ["stdout", "testlib"])
def test_a_checker_program_gives_partial_scores(cache: Path, convention: str) -> None:
    checker = ProgramChecker(PARTIAL_CHECKER, cache_dir=cache)
    assert checker.check(convention, "1 2 3 4", "1 2 3 4") == 1.0
    assert checker.check(convention, "1 2 0 0", "1 2 3 4") == 0.5
    assert checker.check(convention, "1 0 0 0", "1 2 3 4") == 0.25
    assert checker.check(convention, "9 9 9 9", "1 2 3 4") == 0.0


@needs_gxx
@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("fail", r"failed \(exit 3\): jury answer is worse than participant's"),
        ("crash", "killed by signal 6"),
        ("status", "exited 42, not a checker verdict"),
        ("score", r"gave 1.5: a checker gives a bool or a score in \[0, 1\]"),
        ("noscore", "exited 7 with no score"),
        pytest.param("hang", "ran past its 1.0 s time limit", marks=pytest.mark.slow),
    ],
)
def test_a_failing_checker_program_is_a_checker_error(cache: Path, how: str, message: str) -> None:
    checker = ProgramChecker(BROKEN_CHECKER, cache_dir=cache, timeout=1.0)
    with pytest.raises(CheckerError, match=message):
        checker.check(how, "1", "1")


@needs_gxx
@pytest.mark.slow
def test_a_checker_compiles_once_for_many_checks_threads_and_instances(counted_gxx: Path) -> None:
    cache = counted_gxx.parent / "cache"

    def judge(x: int) -> tuple[float, float]:
        checker = ProgramChecker(SUM_CHECKER, cache_dir=cache)
        return checker.check(f"{x}\n", f"{x} 0\n", ""), checker.check(f"{x}\n", f"{x} 1\n", "")

    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(judge, range(40)))
    assert verdicts == [(1.0, 0.0)] * 40
    assert counted_gxx.read_text().splitlines() == ["compile"]
    assert len([p for p in cache.iterdir() if not p.name.endswith(".lock")]) == 1
    ProgramChecker(SUM_CHECKER.replace("x", "y"), cache_dir=cache).check("2", "1 1", "")
    assert counted_gxx.read_text().splitlines() == ["compile"] * 2  # another source compiles


@needs_gxx
@pytest.mark.slow
def test_a_checker_that_does_not_compile_says_why_once(counted_gxx: Path) -> None:
    cache = counted_gxx.parent / "cache"
    source = "int main() { return undeclared; }"
    for _ in range(3):
        with pytest.raises(CheckerError, match=r"(?s)does not compile:.*undeclared"):
            ProgramChecker(source, cache_dir=cache).check("", "", "")
    assert counted_gxx.read_text().splitlines() == ["compile"]


def test_a_missing_compiler_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CheckerError, match=r"g\+\+ is not on PATH: checker programs in cpp"):
        ProgramChecker(SUM_CHECKER, cache_dir=tmp_path / "cache").check("2", "1 1", "")


def test_a_checker_program_in_an_unknown_language_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'pascal': one of \['c', 'cpp'\]"):
        ProgramChecker("begin end.", language="pascal")


@needs_gxx
def test_a_checker_program_in_c(cache: Path) -> None:
    source = SUM_CHECKER.replace("#include <cstdio>", "#include <stdio.h>")
    assert ProgramChecker(source, "c", cache_dir=cache).check("4", "2 2", "") == 1.0


@needs_gxx
def test_hostile_outputs_reach_the_checker_only_as_its_output_file(cache: Path) -> None:
    """Outputs naming the answer file, shell syntax, binary bytes and a 4 MiB line are just
    the output's bytes: compared with the answer, never run, never read as paths."""
    checker = ProgramChecker(EXACT_CHECKER, cache_dir=cache)
    answer = "42\n"
    assert checker.check("", "42\n", answer) == 1.0
    hostile = [
        "answer",
        "../slot-0/answer",
        "/workspace/slot-0/answer",
        "$(cat answer)",
        "`cat answer`\n",
        "input output answer",
        "\x00\x01\xff binary \udcff\udc80",
        "4" * (4 << 20),
        "42\n" * 100_000,
    ]
    for output in hostile:
        assert checker.check("", output, answer) == 0.0, output[:40]
    assert checker.check("", "\udcff\udc80\n", "\udcff\udc80\n") == 1.0  # bytes kept as bytes


@needs_gxx
def test_no_answer_stays_in_the_checker_sandbox_after_its_check(cache: Path) -> None:
    """Where a weaker isolation tier lets sandboxes of one uid read each other's files, no
    answer waits there for a candidate to find."""
    checker = ProgramChecker(EXACT_CHECKER, cache_dir=cache)

    async def many() -> list[float]:
        return list(await asyncio.gather(*(checker.acheck("", "42", "42") for _ in range(8))))

    assert run_sync(many()) == [1.0] * 8
    box = run_sync(_checker_sandbox.get())
    assert box.slots >= 2
    for slot in range(box.slots):
        for name in ("input", "output", "answer"):
            assert box.sandbox.read_file(f"slot-{slot}/{name}") == b""


@needs_gxx
def test_a_checker_program_runs_confined(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checker led astray by its output reads neither the host's files nor its
    environment (in the namespaces tier; lower tiers confine it only by limits)."""
    isolation = get_backend("subprocess").backend_as(SubprocessBackend).isolation
    if isolation.tier is not Tier.NAMESPACES:
        pytest.skip(f"isolation tier {isolation.tier.value}: {isolation.reason}")
    monkeypatch.setenv("CHECKER_SECRET", "hunter2")
    checker = ProgramChecker(PROBE_CHECKER, cache_dir=cache)
    assert checker.check("open", "input", "") == 1.0  # the probe works: its own files
    secret = tmp_path / "secret"
    secret.write_text("hunter2")
    for path in (secret, Path(__file__), Path.home() / ".bashrc"):
        assert path.read_text()
        assert checker.check("open", str(path), "") == 0.0, path
    assert checker.check("env", "", "") == 0.0


@needs_gxx
def test_checks_from_async_code_and_from_sandboxkits_own_loop(cache: Path) -> None:
    """``acheck`` serves a harness judging on the event loop, where ``check`` cannot run (a
    sync judge sent to a thread from there can)."""
    program = ProgramChecker(SUM_CHECKER, cache_dir=cache)

    async def both() -> list[float]:
        return list(
            await asyncio.gather(
                acheck(program, "5", "2 3", ""),
                acheck(program, "5", "2 2", ""),
                acheck(tokens(), "", "1 2", "1\n2"),
                acheck(floats(), "", "0.5", "0.6"),
            )
        )

    assert asyncio.run(both()) == [1.0, 0.0, 1.0, 0.0]
    assert run_sync(both()) == [1.0, 0.0, 1.0, 0.0]
    assert run_sync(asyncio.to_thread(program.check, "5", "2 3", "")) == 1.0  # a sync judge
    with pytest.raises(RuntimeError, match="await the async twin"):
        run_sync(_check_on_the_loop(program))


async def _check_on_the_loop(program: ProgramChecker) -> float:
    return program.check("5", "2 3", "")


# Specs


def test_checker_from_spec_reads_each_shape() -> None:
    assert checker_from_spec({"kind": "tokens"}) == TokenChecker(True)
    assert checker_from_spec({"kind": "tokens", "case_sensitive": False}) == TokenChecker(False)
    assert checker_from_spec({"kind": "floats"}) == FloatChecker(1e-6, 1e-6)
    assert checker_from_spec({"kind": "floats", "abs_tol": 1e-4, "rel_tol": 0}) == FloatChecker(
        1e-4, 0
    )
    program = checker_from_spec({"kind": "program", "source": SUM_CHECKER, "language": "cpp"})
    assert isinstance(program, ProgramChecker) and program.source == SUM_CHECKER


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "testlib"},
        {},
        {"kind": "program"},
        {"kind": "tokens", "case_sensitive": "no"},
        ["tokens"],
    ],
)
def test_an_unknown_checker_spec_names_the_shapes(spec: object) -> None:
    with pytest.raises(ValueError) as raised:
        checker_from_spec(spec)  # type: ignore[arg-type]
    assert SPEC_SHAPES in str(raised.value)


def test_a_spec_with_bad_tolerances_or_language_says_so() -> None:
    with pytest.raises(ValueError, match="abs_tol must be a finite number"):
        checker_from_spec({"kind": "floats", "abs_tol": "tiny"})
    with pytest.raises(ValueError, match="'rust': one of"):
        checker_from_spec({"kind": "program", "source": "fn main() {}", "language": "rust"})


def test_a_checker_cache_others_can_write_is_refused(tmp_path: Path) -> None:
    """A binary another user planted there would run as this user (root, often)."""
    shared = tmp_path / "shared-cache"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(CheckerError, match=r"checker cache .* is not a directory only uid"):
        compile_checker(SUM_CHECKER, "cpp", shared)
