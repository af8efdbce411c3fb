"""The reward functions on the remote backends, through the real SDKs and the emulators: the
same rewards as on the local backend (contest judging in every kind of language included), and
a flaky provider that costs rewards (``None``) but never a crash or a sandbox."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from sandboxkit import CircuitOpenError, SandboxClient, get_backend
from sandboxkit.contest import languages
from sandboxkit.contest.languages import Language, register_language
from sandboxkit.harness import FunctionTask
from sandboxkit.portal import run_sync
from sandboxkit.rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
    stdio_tests_reward,
)
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import Emulator, client_for, start_emulator

ADD_TESTS = [
    "assert add(1, 2) == 3",
    "assert add(0, 0) == 0",
    "assert add(-1, 1) == 0",
    "assert add(2, 2) == 4",
]
ADD_ANSWERS: dict[str, tuple[Any, float]] = {
    "right": ("def add(a, b):\n    return a + b", 1.0),
    "half right": ("def add(a, b):\n    return a | b", 0.5),  # wrong for -1 | 1 and 2 | 2
    "wrong": ("def add(a, b):\n    return str(a) + str(b)", 0.0),
    "chat": (
        [{"role": "assistant", "content": "```python\ndef add(a, b):\n    return b + a\n```"}],
        1.0,
    ),
    "raises": ("def add(a, b):\n    return a + b + undefined_name", 0.0),
    "not python": ("add = lambda a, b: (", 0.0),
}
EXEC_PROGRAMS = {
    "prints": ("print(2 + 3)", 1.0),
    "fenced": ("```python\nprint('abc'.upper()[::-1])\n```", 1.0),
    "syntax error": ("def broken(:\n    pass", 0.0),
    "runtime error": ("x = [1, 2][5]", 0.0),
    "exit status": ("import sys; sys.exit(3)", 0.0),
    "timeout": ("while True: pass", 0.0),
}
SORT = FunctionTask(
    prompt="def sort_numbers(xs: list[int]) -> list[int]:\n",
    func_name="sort_numbers",
    tests=["[]", "[3, 1, 2]", "[random.randint(-100, 100) for _ in range(20)]", "[5, 5, 1]"],
    reference=sorted,
    banned_patterns=["sorted(", ".sort("],
)
SORT_BODIES = {
    "insertion sort": (
        "    out = []\n    for x in xs:\n        i = 0\n"
        "        while i < len(out) and out[i] < x:\n            i += 1\n"
        "        out.insert(i, x)\n    return out\n",
        1.0,
    ),
    "reversed": ("    return xs[::-1]", 0.5),  # right for [] and [5, 5, 1] only
    "banned": ("    return sorted(xs)", -1.0),
    "loops": ("    while True:\n        pass", -1.0),
    "raises": ("    return xs[len(xs)]", 0.0),
    "syntax": ("    return [x for x in xs", -1.0),
}


@dataclass(frozen=True)
class Case:
    """One batch for one reward function, with the rewards the local backend gives."""

    make: Callable[..., RewardFunction]
    answers: dict[str, tuple[Any, float]]
    prompt: str = "p"
    columns: dict[str, Any] = field(default_factory=dict)

    def run(self, backend: Any) -> dict[str, float | None]:
        reward = self.make(backend=backend, pool_size=3)
        n = len(self.answers)
        completions = [completion for completion, _ in self.answers.values()]
        columns = {k: [v] * n for k, v in self.columns.items()}
        try:
            scores = reward([self.prompt] * n, completions, **columns)
        finally:
            reward.close()
        return dict(zip(self.answers, scores, strict=True))

    @property
    def expected(self) -> dict[str, float | None]:
        return {name: value for name, (_, value) in self.answers.items()}


ADD_IO = {"input_output": {"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"]}}
STDIO_PROGRAMS = {
    "right": ("a, b = map(int, input().split())\nprint(a + b)", 1.0),
    "wrong on the second": ("a, b = map(int, input().split())\nprint(3)", 0.5),
    "crashing": ("raise SystemExit(input())", 0.0),
}

CASES = {
    "exec_reward": Case(lambda **kw: exec_reward(timeout=3, **kw), EXEC_PROGRAMS),
    "assert_tests_reward": Case(
        lambda **kw: assert_tests_reward(timeout=5, **kw),
        ADD_ANSWERS,
        columns={"test_list": ADD_TESTS},
    ),
    "function_tests_reward": Case(
        lambda **kw: function_tests_reward([SORT], timeout=2, **kw), SORT_BODIES, SORT.prompt
    ),
    "stdio_tests_reward": Case(
        lambda **kw: stdio_tests_reward(timeout=2, **kw), STDIO_PROGRAMS, columns=ADD_IO
    ),
}


@pytest.fixture(scope="module")
def local_rewards() -> dict[str, dict[str, float | None]]:
    """Each case's rewards on the local backend, computed once for both remote backends."""
    return {name: case.run("subprocess") for name, case in CASES.items()}


@pytest.mark.slow
def test_local_rewards_are_the_reference(local_rewards: dict[str, dict[str, float | None]]) -> None:
    for name, case in CASES.items():
        assert local_rewards[name] == pytest.approx(case.expected), name


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_same_rewards_as_the_local_backend(
    remote_provider: str,
    remote_emulator: Emulator,
    case: str,
    local_rewards: dict[str, dict[str, float | None]],
) -> None:
    with client_for(remote_provider, remote_emulator.url) as client:
        assert CASES[case].run(client) == local_rewards[case]
    assert remote_emulator.live_sandboxes() == 0


# -- contest judging ----------------------------------------------------------------------------

CONTEST = {
    ("aplusb", "accepted.cpp"): 7,
    ("aplusb", "wrong.cpp"): 2,
    ("aplusb", "compile_error.cpp"): 0,
    ("aplusb", "accepted.java"): 7,
    ("aplusb", "accepted.go"): 7,
    ("aplusb", "wrong.js"): 4,
    ("aplusb", "accepted.py"): 7,
    ("aplusb", "crash.py"): 0,
    ("smallest_sums", "accepted.js"): 7,
    ("smallest_sums", "slow.cpp"): 6,
    ("smallest_sums", "memory.cpp"): 0,
    ("palindromes", "wrong.py"): 2,
    ("pair_sum", "accepted.py"): 8,
    ("circles", "accepted_digits.py"): 8,
}
"""Solutions from ``examples/contest`` (problem, file) and how many of the problem's tests
each passes: a compiled language, a JVM, Go, Node and Python's zygote, every verdict but the
output limit, inputs of 1.4 MB (past what Daytona's wrapper carries inline: uploaded), a checker
program compiled in the sandbox, float and case-insensitive checkers."""


@dataclass(frozen=True)
class ContestBatch:
    """One row per solution of :data:`CONTEST`, as a dataset of ``as_row`` rows (with the
    problem's own limits); each completion is its solution in a fenced block."""

    prompts: list[str]
    completions: list[str]
    columns: dict[str, list[Any]]
    expected: list[tuple[float, str]]
    """Each solution's score and what a judge must make of it (its file's name says)."""

    def judge(self, backend: Any) -> list[tuple[float | None, str]]:
        """Each completion's reward and verdict (or outcome kind, where there is none), all
        judged in one sandbox: each sandbox precompiles the C++ header on its first compile
        (seconds of CPU), so a pool of three paid that three times over for what one sandbox
        shows (a pool's rows in flight at once are what ``Case.run`` covers)."""
        reward = stdio_tests_reward(backend, pool_size=1)
        _ = reward.pool  # made on this thread, as a call makes it
        try:
            outcomes = run_sync(reward.aoutcomes(self.prompts, self.completions, **self.columns))
        finally:
            reward.close()
        return [(reward.reward(o), (o.verdict or o.kind).value) for o in outcomes]


@pytest.fixture(scope="module")
def contest(problemset: ModuleType) -> ContestBatch:
    problems = {p.name: p for p in problemset.load_problems()}
    rows, completions, expected = [], [], []
    for (name, variant), passed in CONTEST.items():
        problem = problems[name]
        language, source = problemset.solutions(problem)[variant]
        rows.append(problemset.as_row(problem, language))
        completions.append(f"```{problemset.PROMPT_NAMES[language][1]}\n{source}```")
        expected.append((passed / len(problem.tests), problemset.expected_verdict(variant)))
    names = sorted({k for row in rows for k in row} - {"prompt"})
    columns = {k: [row.get(k) for row in rows] for k in names}
    return ContestBatch([row["prompt"] for row in rows], completions, columns, expected)


@pytest.fixture(scope="module")
def local_contest(contest: ContestBatch) -> list[tuple[float | None, str]]:
    return contest.judge("subprocess")


@pytest.mark.slow
def test_local_contest_rewards_and_verdicts_are_the_reference(
    contest: ContestBatch, local_contest: list[tuple[float | None, str]]
) -> None:
    assert local_contest == contest.expected


@pytest.fixture
def wrapped_emulator(remote_provider: str) -> Iterator[Emulator]:
    """An emulator that runs every command inside its backend's own exec wrapper, as the
    provider does (Daytona's shell script: stdin from a file uploaded first, output through
    ``head -c``), not Python directly."""
    with start_emulator(remote_provider, direct_python=False) as emu:
        yield emu


WRAPPING = ["daytona", "aviato"]
"""The backends that run commands in an exec wrapper of their own (the contest judge's C++
and Python through it are what these tests add; Modal's and E2B's commands are their argv,
whose rewards ``test_same_rewards_as_the_local_backend`` covers, stdio tests included)."""


@pytest.mark.slow
@pytest.mark.parametrize("remote_provider", WRAPPING)
def test_contest_rewards_and_verdicts_are_the_local_ones(
    remote_provider: str,
    wrapped_emulator: Emulator,
    contest: ContestBatch,
    local_contest: list[tuple[float | None, str]],
) -> None:
    with client_for(remote_provider, wrapped_emulator.url) as client:
        assert contest.judge(client) == local_contest
    assert wrapped_emulator.live_sandboxes() == 0


@pytest.fixture
def missing_toolchains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two languages no sandbox here has the tools of (a compiled one and an interpreted one),
    registered for this test only."""
    monkeypatch.setattr(languages, "_LANGUAGES", dict(languages._LANGUAGES))
    monkeypatch.setattr(languages, "_NAMES", dict(languages._NAMES))
    register_language(
        Language(
            "nolang",
            "NoLang",
            ("nl",),
            "main.nl",
            ("nolangc", "-O2", "-o", "main", "main.nl"),
            ("./main",),
            "nolangc",
            "apt install nolang-compiler",
        )
    )
    register_language(
        Language(
            "noscript",
            "NoScript",
            ("ns",),
            "main.ns",
            (),
            ("nsrun", "main.ns"),
            "nsrun",
            "apt install noscript",
        )
    )


ADD_ROW = {"input_output": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}}
MISSING = {
    "```nl\nprint a + b\n```": (
        "the sandbox has no nolangc for NoLang (install it in the image: "
        "apt install nolang-compiler)"
    ),
    "```ns\nprint a + b\n```": (
        "the sandbox has no nsrun for NoScript (install it in the image: apt install noscript)"
    ),
}


@pytest.mark.slow
def test_a_toolchain_the_sandbox_lacks_is_an_infra_outcome_naming_it(
    missing_toolchains: None, backend_client: SandboxClient
) -> None:
    """Never a 0.0 that would teach the model its code is wrong: no reward, and a message
    that says what the image lacks and how to install it, on every backend."""
    python = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    completions = [*MISSING, python]
    seen: dict[str, list[str]] = {}
    logged: dict[str, float] = {}
    reward = stdio_tests_reward(backend_client, pool_size=2)
    try:
        scores = reward(
            ["p"] * 3,
            completions,
            log_extra=seen.__setitem__,
            log_metric=logged.__setitem__,
            language=["nl", "ns", None],  # the rows' languages, which the image lacks
            **{k: [v] * 3 for k, v in ADD_ROW.items()},
        )
        assert scores == [None, None, 1.0]
        assert seen["stdio_tests_reward_outcome"] == [
            *(f"infra 0/2: {said}" for said in MISSING.values()),
            "passed 2/2",
        ]
        assert logged["stdio_tests_reward/infra_error_rate"] == pytest.approx(2 / 3)
        # A batch mostly made of them stops training with that message.
        with pytest.raises(CircuitOpenError, match=r"4 of 5 .*install it in the image: apt"):
            reward(
                ["p"] * 5,
                [*MISSING, *completions],
                language=["nl", "ns", "nl", "ns", None],
                **{k: [v] * 5 for k, v in ADD_ROW.items()},
            )
    finally:
        reward.close()


# -- a flaky provider ---------------------------------------------------------------------------


@dataclass
class CountedFaults(Faults):
    """Faults that count what they inject, and kill the sandbox of the ``die_at``-th exec for
    sure, so that no run of the test misses that case by chance."""

    die_at: int = 3
    injected: Counter[str] = field(default_factory=Counter)
    execs: int = 0

    def transient_error(self) -> str | None:
        kind = super().transient_error()
        if kind is not None:
            self.injected[kind] += 1
        return kind

    def dies(self) -> bool:
        self.execs += 1
        died = self.execs == self.die_at or super().dies()
        self.injected["died"] += died
        return died


@pytest.fixture
def flaky(remote_provider: str) -> Iterator[tuple[str, Emulator, CountedFaults]]:
    faults = CountedFaults(latency_ms=20, error_rate=0.1, die_rate=0.03, seed=11)
    with start_emulator(remote_provider, faults=faults) as emu:
        yield remote_provider, emu, faults


@pytest.mark.slow
# The pool's answer to faults is the same for every backend once its errors are mapped: Modal's
# and E2B's mappings under the same faults are tests/test_modal.py's and tests/test_e2b.py's.
@pytest.mark.parametrize("remote_provider", ["daytona", "aviato"])
def test_faults_cost_rewards_not_crashes_or_sandboxes(
    flaky: tuple[str, Emulator, CountedFaults],
) -> None:
    provider, emu, faults = flaky
    n = 48
    names = [list(ADD_ANSWERS)[i % len(ADD_ANSWERS)] for i in range(n)]
    with client_for(provider, emu.url) as client:
        reward = assert_tests_reward(client, timeout=5, pool_size=4, backoff=0.05)
        try:
            scores = reward(
                ["p"] * n, [ADD_ANSWERS[k][0] for k in names], test_list=[ADD_TESTS] * n
            )
            stats = reward.last_batch
        finally:
            reward.close()
        assert emu.live_sandboxes() == 0
    assert len(scores) == n
    # A completion whose sandbox dies under it twice is charged with it (docs/isolation.md):
    # a right answer may score 0.0 only that way, so at most once per two deaths.
    charged = [
        (k, s) for k, s in zip(names, scores, strict=True) if s not in (None, ADD_ANSWERS[k][1])
    ]
    assert all(s == 0.0 for _, s in charged), charged
    assert len(charged) <= faults.injected["died"] // 2, (charged, faults.injected)
    assert sum(s is not None for s in scores) >= n * 3 // 4, scores
    assert faults.injected["rate_limited"] + faults.injected["server_error"] >= 1, faults.injected
    assert faults.injected["died"] >= 1
    assert stats is not None and stats.pool is not None
    assert stats.pool.replaced >= 1 and stats.pool.retries >= 1, stats.pool


@pytest.mark.parametrize("provider", WRAPPING)
def test_emulators_run_wrapped_python_on_the_warm_template(provider: str) -> None:
    """The emulators of backends that wrap commands run their wrapped Python directly, so that
    the local backend's warm template serves it (the benchmarks' remote rows rest on it). Modal's
    and E2B's commands are their argv, with no wrapper: the warm template serves them either
    way."""
    in_process = ["python3", "-c", "import sys; print('json' in sys.modules)"]
    seen = {}
    for direct in (True, False):
        with (
            start_emulator(provider, direct_python=direct) as emu,
            client_for(provider, emu.url) as client,
            client.sandbox() as sb,
        ):
            seen[direct] = sb.exec(in_process, timeout=60).stdout
    # The warm template imported json before forking; an interpreter started by sh did not.
    assert seen == {True: "True\n", False: "False\n"}


# -- on a Docker Engine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client(docker_engine: None) -> Iterator[SandboxClient]:
    with get_backend("docker") as client:
        yield client


@pytest.mark.slow
def test_the_rewards_on_docker_are_the_local_ones(
    docker_client: SandboxClient, local_rewards: dict[str, dict[str, float | None]]
) -> None:
    """Assert tests, function tests and plain execs, in the test image's containers."""
    for name, case in CASES.items():
        assert case.run(docker_client) == local_rewards[name], name


def test_python_contest_judging_on_docker_gives_the_files_verdicts(
    docker_client: SandboxClient, contest: ContestBatch
) -> None:
    """Stdio judging of the five Python solutions (the test image's only language): each passes
    as many tests, with the verdict, as its file's name says."""
    python = [i for i, c in enumerate(contest.completions) if c.startswith("```python")]
    batch = ContestBatch(
        [contest.prompts[i] for i in python],
        [contest.completions[i] for i in python],
        {k: [v[i] for i in python] for k, v in contest.columns.items()},
        [contest.expected[i] for i in python],
    )
    assert len(python) == 5
    assert batch.judge(docker_client) == batch.expected
