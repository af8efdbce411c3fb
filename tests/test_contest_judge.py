"""Every solution in examples/contest, judged end to end as TRL calls the reward: the prompt,
the completion (the source in a code block tagged with its language), the row's columns as
``problemset.as_row`` makes them, on the local backend with real compilers. Each solution must
get the verdict its name promises and no more reward than it earns."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from sandboxkit import get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.contest.languages import language_for
from sandboxkit.local.isolation import Tier
from sandboxkit.rewards import RewardFunction, stdio_tests_reward

pytestmark = pytest.mark.slow

LANGUAGES = ["python", "cpp17", "c", "java", "rust", "go", "javascript"]
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
"""Where a local sandbox finds its tools (it sees the host's /usr, nothing else of it)."""


def needs_toolchain(language: str) -> None:
    found = language_for(language)
    assert found is not None
    if shutil.which(found.toolchain, path=SANDBOX_PATH) is None:
        pytest.skip(f"{found.toolchain} for {found.title} is not installed ({found.install})")


@pytest.fixture(scope="module")
def reward() -> Iterator[RewardFunction]:
    """One reward function for the module, as a training run holds one: its sandbox (and
    its precompiled header, seconds of CPU to build, once) serves every batch."""
    function = stdio_tests_reward("subprocess", pool_size=1)
    yield function
    function.close()


def test_a_pooled_sandbox_precompiles_the_cpp_header_once(problemset: ModuleType) -> None:
    """The judge's precompiled header (seconds of CPU to build) outlives each completion's
    renewal of the pooled sandbox, warm and cold: the completions after the first compile
    with it, several times as fast."""
    needs_toolchain("cpp17")
    (problem,) = [p for p in problemset.load_problems() if p.name == "aplusb"]
    row = problemset.as_row(problem, problemset.LANGUAGES[".cpp"])
    source = problemset.solutions(problem)["accepted.cpp"][1]
    for warm in (True, False):
        with get_backend("subprocess", warm=warm) as client:
            function = stdio_tests_reward(client, pool_size=1)
            try:
                if not _has_judge_cache(client):
                    pytest.skip("no judge's uid here: no header is kept between completions")
                walls = []
                for _ in range(3):
                    start = time.perf_counter()
                    scores = function(
                        [row["prompt"]],
                        [f"```cpp\n{source}```"],
                        verification_info=[row["verification_info"]],
                    )
                    walls.append(time.perf_counter() - start)
                    assert scores == [1.0], function.last_batch
                assert function.pool.stats.renewed >= 2
            finally:
                function.close()
        assert max(walls[1:]) < walls[0] / 2, (warm, walls)


def _has_judge_cache(client: Any) -> bool:
    """Whether the client's sandboxes have a judge's uid (a namespaced root host's)."""
    isolation = client.backend_as(SubprocessBackend).isolation
    return isolation.tier is Tier.NAMESPACES and isolation.uids is not None


def batch(problemset: ModuleType, rows: list[tuple[Any, str, str]]) -> dict[str, Any]:
    """TRL's arguments for ``(problem, variant, source)`` rows: prompts, completions and the
    dataset's columns (a column some rows lack holds None for them, as in a dataset)."""
    made = [
        problemset.as_row(problem, problemset.LANGUAGES["." + variant.rsplit(".", 1)[1]])
        for problem, variant, _ in rows
    ]
    tags = [problemset.PROMPT_NAMES[row["verification_info"]["language"]][1] for row in made]
    names = sorted({name for row in made for name in row} - {"prompt"})
    return {
        "prompts": [row["prompt"] for row in made],
        "completions": [
            f"Reading the input, then printing the answer.\n```{tag}\n{source}```\n"
            for tag, (_, _, source) in zip(tags, rows, strict=True)
        ],
        **{name: [row.get(name) for row in made] for name in names},
    }


def judged(
    reward: RewardFunction, arguments: dict[str, Any]
) -> tuple[list[float | None], list[str]]:
    """The rewards and TRL's logged outcome lines of one call."""
    logged: dict[str, Any] = {}
    rewards = reward(**arguments, log_extra=logged.__setitem__)
    return rewards, logged[f"{reward.__name__}_outcome"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_solution_in_a_language_gets_the_verdict_its_name_says(
    problemset: ModuleType, reward: RewardFunction, language: str
) -> None:
    """One batch per language (every problem's solutions in it but the partial ones, whose
    score needs subtask scoring): accepted ones earn 1.0, the others less, each with its
    verdict in the batch's counts and in its logged outcome."""
    needs_toolchain(language)
    rows = [
        (problem, variant, source)
        for problem in problemset.load_problems()
        for variant, (lang, source) in problemset.solutions(problem).items()
        if lang == language and problemset.expected_verdict(variant) != "partial"
    ]
    assert rows
    rewards, lines = judged(reward, batch(problemset, rows))
    expected = [problemset.expected_verdict(variant) for _, variant, _ in rows]
    for (problem, variant, _), verdict, got, line in zip(
        rows, expected, rewards, lines, strict=True
    ):
        where = f"{problem.name}/{variant}: {line}"
        if verdict == "accepted":
            assert got == 1.0 and line.startswith("passed"), where
        else:
            assert got is not None and 0.0 <= got < 1.0, where
            assert verdict.replace("_", " ") in line, where
    assert reward.last_batch is not None
    assert reward.last_batch.verdicts == Counter(expected)


def test_partial_solutions_earn_their_subtasks_points_and_no_more(problemset: ModuleType) -> None:
    """IOI scoring on max_subarray: the O(n^2) solutions solve the small subtask only (its
    tests come first), in Python and C++ alike; the reference earns everything."""
    needs_toolchain("cpp17")
    (problem,) = [p for p in problemset.load_problems() if p.name == "max_subarray"]
    rows = [
        (problem, variant, source) for variant, (_, source) in problemset.solutions(problem).items()
    ]
    small, *_ = problem.subtasks
    share = small["points"] / sum(s["points"] for s in problem.subtasks)
    scored = stdio_tests_reward("subprocess", pool_size=1, scoring="subtasks")  # one header
    try:
        rewards, lines = judged(scored, batch(problemset, rows))
    finally:
        scored.close()
    earns = {"accepted": 1.0, "partial": share}
    for (_, variant, _), got, line in zip(rows, rewards, lines, strict=True):
        verdict = problemset.expected_verdict(variant)
        if verdict in earns:
            assert got == pytest.approx(earns[verdict]), (variant, line)
        else:
            assert got is not None and got < 1.0, (variant, line)
    partial = [v for _, v, _ in rows if problemset.expected_verdict(v) == "partial"]
    assert partial == ["partial.cpp", "partial.py"]
