"""The reward functions as TRL calls them: values, outcomes, logging, async, and what they do
when the code is garbage or the provider fails."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import SandboxClient, get_backend
from sandboxkit.errors import CircuitOpenError
from sandboxkit.evalfile import Row, score
from sandboxkit.evaluation import Plan, plan
from sandboxkit.harness import ExecHarness, FunctionTask, RunRequest, runner
from sandboxkit.outcomes import Outcome, OutcomeKind
from sandboxkit.portal import run_sync
from sandboxkit.protocol import ExecResult
from sandboxkit.rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
    input_tests_reward,
    stdio_tests_reward,
)
from sandboxkit.testing.faults import Faults, FaultyBackend

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]


@pytest.mark.slow
def test_exec_reward_on_toy_programs() -> None:
    reward = exec_reward("subprocess", timeout=5, pool_size=2)
    try:
        completions = [
            "print(2 + 3)",
            "```python\nprint('abc'.upper()[::-1])\n```",
            "def broken(:\n    pass",
            "x = [1, 2][5]",
            "print([i * i for i in range(5)])",
            "",
            "while True: pass",
        ]
        scores = reward(prompts=["p"] * len(completions), completions=completions)
        assert scores == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
        assert reward.__name__ == "exec_reward"
        stats = reward.last_batch
        assert stats is not None
        assert stats.outcomes["timeout"] == 1 and stats.outcomes["empty"] == 1
        assert stats.outcomes["error"] == 2 and stats.outcomes["passed"] == 3
    finally:
        reward.close()


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_completion_cannot_plant_a_module_for_the_next_ones(warm: bool) -> None:
    """Completions share the pool's sandboxes: a module one leaves in the working directory
    must not run in a later one that imports that name (here making it exit 0: a pass)."""
    reward = exec_reward(get_backend("subprocess", warm=warm), timeout=10, pool_size=1)
    try:
        plant = "open('heapq.py', 'w').write('import os\\nos._exit(0)\\n')"
        victim = "import heapq\nraise SystemExit(1)"
        assert reward(prompts=["p"], completions=[plant]) == [1.0]
        assert reward(prompts=["p"], completions=[victim]) == [0.0]
    finally:
        reward.close()


def test_assert_tests_reward_fractions_setup_and_chat() -> None:
    reward = assert_tests_reward("subprocess", timeout=5, pool_size=2)
    metrics: dict[str, float] = {}
    extra: dict[str, list[Any]] = {}
    try:
        completions: list[Any] = [
            "def add(a, b):\n    return a + b",
            "def add(a, b):\n    return a * b",  # passes add(0, 0) only
            [
                {
                    "role": "assistant",
                    "content": "Here:\n```py\ndef add(a, b):\n    return b + a\n```",
                }
            ],
            "def add(a, b):\n    return math.floor(a) + b",  # needs the setup's import
            "not python at all (",
        ]
        scores = reward(
            prompts=["Write add."] * 5,
            completions=completions,
            test_list=[ADD_TESTS] * 5,
            test_setup_code=["", "", "", "import math", ""],
            log_metric=lambda name, value: metrics.__setitem__(name, value),
            log_extra=lambda column, values: extra.__setitem__(column, values),
            trainer_state=object(),
            completion_ids=[[1]] * 5,
        )
        assert scores == [1.0, pytest.approx(1 / 3), 1.0, 1.0, 0.0]
        assert metrics["assert_tests_reward/error_rate"] == pytest.approx(0.2)
        assert metrics["assert_tests_reward/timeout_rate"] == 0.0
        assert "assert_tests_reward/latency_p95" in metrics
        assert extra["assert_tests_reward_outcome"][1].startswith("failed 1/3")
        assert extra["assert_tests_reward_outcome"][4].startswith("error")
    finally:
        reward.close()


def test_a_backend_of_the_wrong_type_is_refused_at_once() -> None:
    """Not when the first batch is due: the reward function is built at the start of a run."""
    with pytest.raises(TypeError, match="a backend name or None, got int: 8"):
        exec_reward(8)  # type: ignore[arg-type]


def test_missing_test_column_is_a_clear_error() -> None:
    reward = assert_tests_reward("subprocess")
    with pytest.raises(ValueError, match="test_list"):
        reward(prompts=["p"], completions=["pass"], tests=[["assert True"]])


@pytest.mark.slow
def test_function_tests_reward_follows_daytona_rule() -> None:
    task = FunctionTask(
        prompt="def double(xs: list[int]) -> list[int]:\n",
        func_name="double",
        tests=["[1, 2]", "[random.randint(0, 9) for _ in range(5)]", "[]"],
        reference=lambda xs: [2 * x for x in xs],
        banned_patterns=["import "],
    )
    reward = function_tests_reward({"double": task}, backend="subprocess", pool_size=2, timeout=2)
    bodies = {
        "right": "    return [x * 2 for x in xs]\n\nprint('trailing junk is cut')",
        "half": "    return [x * 2 for x in xs] if len(xs) < 3 else xs",
        "banned": "    import os\n    return [x * 2 for x in xs]",
        "empty": "print('no body')",
        "raises": "    return [x * 2 for x in xs][10]",
        "loops": "    while True:\n        pass",
        "tuple not list": "    return tuple(x * 2 for x in xs)",
        "syntax": "    return [x * 2 for x in xs",
    }
    try:
        scores = dict(
            zip(bodies, reward([task.prompt] * len(bodies), list(bodies.values())), strict=True)
        )
    finally:
        reward.close()
    assert scores["right"] == 1.0
    assert scores["half"] == pytest.approx(2 / 3)  # [] and [1, 2] pass, 5 numbers do not
    assert scores["raises"] == 0.0  # each call raised: failed tests, as in Daytona's harness
    assert scores["tuple not list"] == 0.0  # strict type equality
    for kind in ("banned", "empty", "loops", "syntax"):
        assert scores[kind] == -1.0, kind


def test_async_twin_shares_name_and_pool() -> None:
    reward = exec_reward("subprocess", pool_size=1)
    try:
        twin = reward.as_async()
        assert twin.__name__ == "exec_reward"
        assert asyncio.iscoroutinefunction(type(twin).__call__)

        async def batch() -> list[float | None]:
            return await twin(prompts=["p", "p"], completions=["print(1)", "raise SystemExit(3)"])

        assert asyncio.run(batch()) == [1.0, 0.0]
        assert reward(["p"], ["print(2)"]) == [1.0]
    finally:
        reward.close()


def test_garbage_never_raises() -> None:
    reward = exec_reward("subprocess", pool_size=1, timeout=5)
    garbage: list[Any] = [
        "\x00\x00print(1)",
        "x" * 200_000,
        "```\n```",
        [],
        [{"role": "assistant", "content": [{"type": "text", "text": "print(1)"}]}],
        "\ud800",
        "import os; os.kill(os.getppid(), 9)",
    ]
    try:
        scores = reward(["p"] * len(garbage), garbage)
    finally:
        reward.close()
    assert scores[:4] == [0.0, 0.0, 0.0, 0.0]
    assert scores[4] == 1.0
    assert all(isinstance(s, float) for s in scores)


@pytest.fixture
def faulty(local_root: Path) -> FaultyBackend:
    return FaultyBackend(get_backend("subprocess", root=local_root).backend)


class Recording(FaultyBackend):
    """The local backend with no faults, noting each exec's stdin in the order they start."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.started: list[bytes] = []

    async def exec(self, sandbox_id: str, argv: Any, **options: Any) -> ExecResult:
        self.started.append(options.get("stdin") or b"")
        return await super().exec(sandbox_id, argv, **options)


BUSY = "def f(x):\n    n = 0\n    for i in range(1_000_000):\n        n += i\n    return x\n"
"""A reference that takes its time on the host (tens of ms of CPU; the others take us)."""


Batch = tuple[RewardFunction, list[str], list[str], dict[str, Any]]
"""A reward, and the prompts, completions and columns of a batch for it."""


def _rows_by_input(backend: Recording) -> Batch:
    reward = input_tests_reward(backend, pool_size=1)
    columns: dict[str, Any] = {
        "entry_point": ["f"] * 4,
        "base_input": [[[row]] for row in "abcd"],
        "plus_input": [[]] * 4,
        "canonical_solution": [
            BUSY if row == "c" else "def f(x):\n    return x\n" for row in "abcd"
        ],
    }
    completions = [f"def f(x):\n    return {'0' if r == 'b' else 'x'}  # row {r}" for r in "abcd"]
    return reward, [""] * 4, completions, columns


def _rows_by_task(backend: Recording) -> Batch:
    namespace: dict[str, Any] = {}
    exec(BUSY, namespace)
    tasks = [
        FunctionTask(f"def f_{r}(x):\n", f"f_{r}", [repr(r)], namespace["f"] if r == "c" else str)
        for r in "abcd"
    ]
    reward = function_tests_reward(tasks, backend=backend, pool_size=1)
    bodies = [f"    return {'0' if r == 'b' else 'x'}  # row {r}" for r in "abcd"]
    return reward, [t.prompt for t in tasks], bodies, {}


def _as_one_call(
    reward: RewardFunction, prompts: list[str], completions: list[str], columns: dict[str, Any]
) -> list[float | None]:
    return reward(prompts=prompts, completions=completions, **columns)


def _as_eval_rows(
    reward: RewardFunction, prompts: list[str], completions: list[str], columns: dict[str, Any]
) -> list[float | None]:
    """As ``sandboxkit eval`` scores a file: each row with columns of its own."""
    rows = [
        Row(prompt, completion, {name: [values[i]] for name, values in columns.items()})
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]
    return [reward.reward(o) for o in run_sync(score(reward, rows, progress=False))]


@pytest.mark.parametrize("through", [_as_one_call, _as_eval_rows], ids=["a call", "eval"])
@pytest.mark.parametrize("rows", [_rows_by_input, _rows_by_task], ids=["inputs", "functions"])
def test_a_batch_starts_the_rows_whose_reference_took_longest_first_and_answers_in_order(
    local_root: Path, rows: Callable[[Recording], Batch], through: Callable[..., list[float | None]]
) -> None:
    """A batch ends with its slowest run: one sandbox, so runs go one at a time, and row c's
    (whose reference took longest on the host) starts first, the others as given; each reward
    is still its own completion's (b's is wrong). ``sandboxkit eval`` reads a file a row at a
    time, and runs its rows as one batch in the same order."""
    backend = Recording(get_backend("subprocess", root=local_root).backend)
    reward, prompts, completions, columns = rows(backend)
    try:
        scores = through(reward, prompts, completions, columns)
    finally:
        reward.close()
    assert scores == [1.0, 0.0, 1.0, 1.0]
    started = [r for stdin in backend.started for r in "abcd" if f"# row {r}".encode() in stdin]
    assert started == ["c", "a", "b", "d"]


@pytest.mark.slow
def test_provider_failures_give_none_and_leak_nothing(
    faulty: FaultyBackend, local_root: Path
) -> None:
    faulty.faults = Faults(error_rate=0.3, die_rate=0.1, seed=7)
    reward = assert_tests_reward(faulty, pool_size=3, retries=0, max_infra_share=None)
    n = 40
    completions = ["def add(a, b):\n    return a + b"] * n
    scores = reward(["p"] * n, completions, test_list=[ADD_TESTS] * n)
    reward.close()
    assert len(scores) == n
    assert set(scores) <= {1.0, None}, scores
    assert None in scores and 1.0 in scores
    assert sum(faulty.injected.values()) > 0
    assert not list(local_root.glob("sbx-*")), "sandboxes were left running"
    assert SandboxClient(faulty.inner).list() == []


def test_retries_hide_transient_faults(faulty: FaultyBackend) -> None:
    faulty.faults = Faults(error_rate=0.2, seed=3)
    reward = assert_tests_reward(faulty, pool_size=2, retries=8, backoff=0.01)
    n = 20
    try:
        scores = reward(
            ["p"] * n, ["def add(a, b):\n    return a + b"] * n, test_list=[ADD_TESTS] * n
        )
    finally:
        reward.close()
    assert scores == [1.0] * n
    assert reward.last_batch is not None and reward.last_batch.pool is not None
    assert reward.last_batch.pool.retries > 0


def test_circuit_breaker_stops_training_with_a_clear_error(faulty: FaultyBackend) -> None:
    reward = exec_reward(faulty, pool_size=1, retries=0, max_infra_share=0.5)
    faulty.faults = Faults(error_rate=1.0, seed=1)
    try:
        with pytest.raises(CircuitOpenError, match="infrastructure"):
            reward(["p"] * 4, ["print(1)"] * 4)
    finally:
        faulty.faults = Faults()
        reward.close()


# -- what no completion and no dataset row can do: raise into the trainer --------------------

ODD_COMPLETIONS: dict[str, Any] = {
    "None": None,
    "an int": 7,
    "a float": 2.5,
    "bytes": b"print(1)",
    "invalid UTF-8 bytes": b"\xff\xfeprint(1)\x80",
    "a dict": {"role": "assistant", "content": "x = 1"},
    "nested message lists": [[{"role": "assistant", "content": "x = 1"}]],
    "a message without text": [{"role": "assistant", "content": None}],
    "content parts that are not text": [
        {"role": "assistant", "content": [None, {"type": "text", "text": 5}]}
    ],
    "a megabyte of code": "x = 1\n" * 200_000,
    "a lone surrogate": "\ud800",
    "an escaped byte in a fenced block": "```python\nprint('\udcff')\n```",
    "NUL bytes": "print(1)\x00",
}
TWICE = FunctionTask(
    prompt="def twice(x: int) -> int:\n", func_name="twice", tests=["1"], reference=lambda x: 2 * x
)
STDIO_ROW = {"input_output": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})}


@pytest.mark.parametrize(
    ("factory", "prompt", "columns", "failure"),
    [
        (lambda: exec_reward("subprocess"), "p", {}, 0.0),
        (lambda: assert_tests_reward("subprocess"), "p", {"test_list": [ADD_TESTS]}, 0.0),
        (lambda: function_tests_reward([TWICE], backend="subprocess"), TWICE.prompt, {}, -1.0),
        (
            lambda: stdio_tests_reward("subprocess"),
            "p",
            {k: [v] for k, v in STDIO_ROW.items()},
            0.0,
        ),
    ],
    ids=["exec", "assert", "function", "stdio"],
)
def test_a_completion_of_any_type_is_its_own_failure(
    factory: Callable[[], RewardFunction],
    prompt: str,
    columns: dict[str, list[Any]],
    failure: float,
) -> None:
    """Whatever TRL hands over as a completion, each reward function scores it as failed code
    under its own rule, without a sandbox: never an exception (a None or an int raised a
    TypeError into the trainer) and never None."""
    reward = factory()
    n = len(ODD_COMPLETIONS)
    try:
        scores = reward(
            [prompt] * n,
            list(ODD_COMPLETIONS.values()),
            **{k: v * n for k, v in columns.items()},
        )
    finally:
        reward.close()
    assert dict(zip(ODD_COMPLETIONS, scores, strict=True)) == dict.fromkeys(
        ODD_COMPLETIONS, failure
    )
    assert reward.last_batch is not None and reward.last_batch.pool is not None
    assert reward.last_batch.pool.leases == 0


def _unjudged_rows(reward: RewardFunction, prompts: list[Any], **columns: list[Any]) -> list[str]:
    """The outcomes of rows none of which can be judged: no reward for any, no exception, no
    trip of a breaker that any infrastructure failure at all would trip."""
    seen: dict[str, list[str]] = {}
    try:
        scores = reward(
            prompts,
            ["def add(a, b):\n    return a + b"] * len(prompts),
            log_extra=seen.__setitem__,
            **columns,
        )
    finally:
        reward.close()
    assert scores == [None] * len(prompts)
    assert reward.last_batch is not None and reward.last_batch.outcomes == {
        "invalid_row": len(prompts)
    }
    return seen[f"{reward.__name__}_outcome"]


def test_assert_rows_that_cannot_be_judged_are_none_naming_the_row() -> None:
    reward = assert_tests_reward("subprocess", max_infra_share=0.0, min_batch_for_breaker=1)
    said = _unjudged_rows(
        reward,
        ["Write add.", [{"role": "user", "content": "Add."}], "p", "p"],
        test_list=[None, 5, [1, 2], ["assert add(1, 1) == 2"]],
        test_setup_code=["", "", "", 3],
    )
    assert said == [
        "invalid_row: row 0 (prompt 'Write add.'): TypeError: 'NoneType' object is not iterable",
        "invalid_row: row 1 (prompt 'Add.'): TypeError: 'int' object is not iterable",
        "invalid_row: row 2 (prompt 'p'): TypeError: its tests and setup must be Python source "
        "text",
        "invalid_row: row 3 (prompt 'p'): TypeError: its tests and setup must be Python source "
        "text",
    ]


def test_a_row_too_large_to_send_is_none_not_an_exception() -> None:
    """One test past the runner's frame limit cannot cross to the runner (a ``CodecError``
    escaped into the trainer), whatever the completion: the row's, named."""
    reward = assert_tests_reward("subprocess", max_infra_share=0.0, min_batch_for_breaker=1)
    huge = "assert add(1, 1) == 2  # " + "x" * runner.MAX_FRAME
    (said,) = _unjudged_rows(reward, ["p"], test_list=[[huge]])
    assert said.startswith(
        "invalid_row: row 0 (prompt 'p'): Unjudgeable: the row's test 0 cannot be sent"
    ), said


def test_function_and_stdio_rows_that_cannot_be_judged_are_none_naming_the_row() -> None:
    reward = function_tests_reward([TWICE], backend="subprocess", min_batch_for_breaker=1)
    said = _unjudged_rows(reward, ["def thrice(x):\n", None])
    assert said == [
        "invalid_row: row 0 (prompt 'def thrice(x):\\n'): KeyError: \"no task has this prompt: "
        "'def thrice(x):\\\\n'\"",
        "invalid_row: row 1 (prompt None): KeyError: \"no task has this prompt: 'None'\"",
    ]
    reward = stdio_tests_reward("subprocess", max_infra_share=0.0, min_batch_for_breaker=1)
    said = _unjudged_rows(
        reward,
        ["p"] * 3,
        input_output=[STDIO_ROW["input_output"], json.dumps({"inputs": [], "outputs": []}), 7],
        checker=["{not json", None, None],
    )
    assert said[0].startswith("invalid_row: row 0 (prompt 'p'): JSONDecodeError: "), said
    assert said[1] == "invalid_row: row 1 (prompt 'p'): ValueError: it has no test cases"
    assert said[2].startswith("invalid_row: row 2 (prompt 'p'): ValueError: test cases of an ")


@dataclass(frozen=True)
class TakesItsWord:
    """A harness that believes the JSON its program prints (as a hasty one might): reading
    anything else raises."""

    def request(self, code: str) -> RunRequest:
        return ExecHarness(timeout=10).request(code)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        kind = OutcomeKind.PASSED if json.loads(result.stdout)["ok"] else OutcomeKind.FAILED
        return Outcome(kind)


def test_a_judge_that_raises_on_a_programs_output_fails_that_program() -> None:
    """What a harness raises while reading a program's output is that program's failure (an
    ``error`` saying so), not an exception into the trainer."""

    def planner(i: int, prompt: Any, columns: Any) -> Callable[[Any], Plan]:
        return lambda completion: plan(completion, TakesItsWord())

    reward = RewardFunction(
        "takes_its_word",
        planner,
        lambda o: 1.0 if o.kind is OutcomeKind.PASSED else 0.0,
        backend="subprocess",
        pool_size=1,
    )
    seen: dict[str, list[str]] = {}
    codes = ["print('{\"ok\": true}')", "print('garbage')", "print('[1]')"]
    try:
        scores = reward(["p"] * 3, codes, log_extra=seen.__setitem__)
    finally:
        reward.close()
    assert scores == [1.0, 0.0, 0.0]
    assert seen["takes_its_word_outcome"][1:] == [
        "error: its result could not be judged: JSONDecodeError: Expecting value: line 1 "
        "column 1 (char 0)",
        "error: its result could not be judged: TypeError: list indices must be integers or "
        "slices, not str",
    ]
