"""The reward functions on the remote backends, through the real SDKs and the emulators: the
same rewards as on the local backend, and a flaky provider that costs rewards (``None``) but
never a crash or a sandbox."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sandboxkit.harness import FunctionTask
from sandboxkit.rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
)
from sandboxkit.testing.faults import Faults
from sandboxkit.testing.remote import REMOTE_BACKENDS, Emulator, client_for, start_emulator

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
    for name, score in zip(names, scores, strict=True):
        assert score is None or score == ADD_ANSWERS[name][1], (name, score)
    assert sum(s is not None for s in scores) >= n * 3 // 4, scores
    assert faults.injected["rate_limited"] + faults.injected["server_error"] >= 1, faults.injected
    assert faults.injected["died"] >= 1
    assert stats is not None and stats.pool is not None
    assert stats.pool.replaced >= 1 and stats.pool.retries >= 1, stats.pool


@pytest.mark.parametrize("provider", REMOTE_BACKENDS)
def test_emulators_run_wrapped_python_on_the_warm_template(provider: str) -> None:
    """Both emulators run their backend's wrapped Python directly, so that the local backend's
    warm template serves it (the benchmarks' remote rows rest on it)."""
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
