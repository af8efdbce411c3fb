"""Every solution in examples/contest, judged end to end as TRL calls the reward: the prompt,
the completion (the source in a code block tagged with its language), the row's columns as
``problemset.as_row`` makes them, on the local backend with real compilers. Each solution must
get the verdict its name promises and no more reward than it earns."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from sandboxkit.contest.languages import language_for
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
