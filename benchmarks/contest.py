"""Contest judging for ``run.py``: stdin/stdout problems in Python and C++, the naive way to
judge one completion, and what the precompiled ``bits/stdc++.h`` saves a compile.

The problem is ``examples/contest``'s ``aplusb`` with 10 tests: its 7 committed ones (3 to
10^4 lines) and 3 more of the same shape, whose answers are plain sums; and, in Python, 10
small ones (1 to 200 lines, 16 KB in all), which a local sandbox's exec takes on its fast path
(a request over 128 KiB, argv and stdin together, does not). Every completion is the
problem's accepted solution, so each method must score 1.0 and only speed differs. The naive
pattern is what a user writes without sandboxkit: a fresh sandbox per completion, the
language table's own compile command (no precompiled header), then one exec per test with the
test's input on stdin.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from workloads import Workload

from sandboxkit import Sandbox, SandboxClient
from sandboxkit.contest.languages import Language, language_for
from sandboxkit.harness.runner import STACK_BYTES
from sandboxkit.harness.stdio import StdioTests
from sandboxkit.outcomes import Verdict

PROBLEMSET = Path(__file__).resolve().parents[1] / "examples" / "contest" / "problemset.py"
PROBLEM = "aplusb"
TESTS = 10
SOLUTIONS = {"python": "accepted.py", "cpp17": "accepted.cpp"}
"""The solution each language's completions are."""
SETS = (("python", "tests"), ("python", "small tests"), ("cpp17", "tests"))
"""The workloads: a language, and which 10 tests (``cases``)."""
SMALL = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200)
"""Lines of each small test."""
TARGETS = {"python": (25.0, 10.0), "cpp17": (2.0, 5.0)}
"""Per language: (completions/s, times the naive pattern) on this project's 2-core machine."""
COMPILE_TIMEOUT = 60.0
ONE_LINE = "#include <bits/stdc++.h>\nint main() {}\n"
"""The one-line program of the compile rows (and its ``main``)."""


def problemset() -> ModuleType:
    """``examples/contest/problemset.py``, by its path: this file's name, ``contest``, hides
    the examples' ``contest`` package."""
    spec = importlib.util.spec_from_file_location("contest_problemset", PROBLEMSET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _sums(rng: random.Random, pairs: int) -> dict[str, str]:
    """One more ``aplusb`` test: ``pairs`` sums of 64-bit operands."""
    bound = 10**18
    rows = [(rng.randint(-bound, bound), rng.randint(-bound, bound)) for _ in range(pairs)]
    given = "\n".join([str(pairs), *(f"{a} {b}" for a, b in rows)]) + "\n"
    return {"input": given, "output": "".join(f"{a + b}\n" for a, b in rows)}


def cases(kind: str) -> list[dict[str, str]]:
    """``tests``: the problem's committed tests, then more of their shape up to ``TESTS``;
    ``small tests``: ``SMALL``'s."""
    rng = random.Random(1919)
    if kind == "small tests":
        return [_sums(rng, lines) for lines in SMALL]
    problem = next(p for p in problemset().load_problems() if p.name == PROBLEM)
    extra = [_sums(rng, 10 ** (i + 1)) for i in range(TESTS - len(problem.tests))]
    return [*problem.tests, *extra][:TESTS]


def workload_name(language: str, kind: str) -> str:
    return f"{PROBLEM} {language}, {TESTS} {kind}"


def goals() -> dict[str, tuple[float, float]]:
    """Each workload's target: (completions/s, times the naive pattern)."""
    return {workload_name(language, kind): TARGETS[language] for language, kind in SETS}


def workloads(batch: int) -> list[Workload]:
    """A batch of the accepted solution for each of ``SETS``."""
    ps = problemset()
    problem = next(p for p in ps.load_problems() if p.name == PROBLEM)
    found = ps.solutions(problem)
    out = []
    for language, kind in SETS:
        code = found[SOLUTIONS[language]][1]
        tag = ps.PROMPT_NAMES[language][1]
        tests = [{"type": "stdin_stdout", **case} for case in cases(kind)]
        info = {"language": language, "test_cases": tests}
        out.append(
            Workload(
                workload_name(language, kind),
                "stdio",
                problem.time_limit,
                [f"Solve {PROBLEM} in {language}."] * batch,
                [f"```{tag}\n{code}```"] * batch,
                [code] * batch,
                {"verification_info": [info] * batch},
            )
        )
    return out


def language_of(work: Workload) -> Language:
    found = language_for(work.columns["verification_info"][0]["language"])
    assert found is not None
    return found


def _argv(command: object) -> list[str]:
    assert isinstance(command, list)
    return [str(arg) for arg in command]


def naive_one(
    client: SandboxClient, code: str, info: dict[str, Any], timeout: float
) -> tuple[float, float]:
    """(reward, seconds) for one completion, judged the naive way: a fresh sandbox, a fresh
    compile (the table's command, no precompiled header), one process per test."""
    lang = language_for(info["language"])
    assert lang is not None
    spec = lang.spec(code, memory_mb=256, stack_mb=STACK_BYTES >> 20)
    source = str(spec["source"]) if lang.source else "main.py"
    build = _argv(spec["compile"])
    run = _argv(spec["run"]) if lang.run else ["python3", source]
    tests = info["test_cases"]
    started = time.perf_counter()
    passed = 0
    with client.sandbox() as sb:
        sb.write_file(source, code)
        built = not build or sb.exec(build, timeout=COMPILE_TIMEOUT).ok
        for test in tests if built else []:
            done = sb.exec(run, stdin=test["input"], timeout=timeout)
            passed += done.ok and done.stdout.split() == test["output"].split()
    return passed / len(tests), time.perf_counter() - started


def _timed_run(sb: Sandbox, tests: StdioTests, code: str) -> float:
    """Seconds of one run of ``code`` through the runner in the sandbox; it must be accepted."""
    request = tests.request(code)
    started = time.perf_counter()
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    elapsed = time.perf_counter() - started
    outcome = tests.judge(result, request)
    if outcome.verdict is not Verdict.ACCEPTED:
        raise RuntimeError(f"the compile-time program was not accepted: {outcome}")
    return elapsed


def compile_times(client: SandboxClient, runs: int) -> list[dict[str, Any]]:
    """A one-line ``bits/stdc++.h`` program built and run on one empty test through the
    runner in one sandbox, as rewards build it: without the header precompiled (the table's
    entry without it), the sandbox's first build with it (which precompiles the header),
    later builds with it; and a Python program, the runner's own share of each row."""
    cpp = language_for("cpp17")
    assert cpp is not None
    bare = dataclasses.replace(cpp, precompiled_header="")
    one = [("", "")]
    plans = [
        ("runner alone: a Python program, no compile", StdioTests(one), "pass\n", runs),
        ("C++17 without the precompiled header", StdioTests(one, language=bare), ONE_LINE, runs),
        (
            "C++17, first build in a sandbox (precompiles the header)",
            StdioTests(one, language=cpp),
            ONE_LINE,
            1,
        ),
        ("C++17 with the precompiled header", StdioTests(one, language=cpp), ONE_LINE, runs),
    ]
    rows = []
    with client.sandbox() as sb:
        for how, tests, code, count in plans:
            seconds = [_timed_run(sb, tests, code) for _ in range(count)]
            rows.append(
                {
                    "how": how,
                    "runs": count,
                    "median_s": statistics.median(seconds),
                    "min_s": min(seconds),
                }
            )
    return rows
