"""``sandboxkit eval``: score a JSONL file of completions with one of the reward functions.

The rows go through the same reward function a trainer would call (its planner, pool and
outcome-to-reward mapping), planned a row at a time (each row has columns of its own) and run
as one batch, the longest first; the pool bounds how many run at once.

Fields per row (``--reward``):

- all: ``completion`` (a string, or a list of chat messages), ``prompt`` (optional);
- ``assert``: ``test_list`` (a list of assert snippets, or one string) and optionally
  ``test_setup_code``;
- ``function``: ``prompt`` (the function header the completion continues), ``func_name``,
  ``tests`` (Python expressions, each evaluated to one argument; ``random`` is seeded),
  ``reference`` (a Python expression evaluated on this machine with only builtins in scope: a
  builtin's name such as ``"sorted"`` or a ``"lambda xs: ..."``), optionally
  ``banned_patterns`` and ``seed``. Rows with the same ``func_name`` share one task.
- ``stdio``: the row's other fields are its dataset columns, holding the tests in one of the
  shapes of :mod:`sandboxkit.contest.formats` (and ``subtasks``, ``language``, ``checker``,
  ``time_limit``, ``memory_limit`` where the row has them); ``--language`` names the language
  of rows that do not.
"""

from __future__ import annotations

import argparse
import builtins
import json
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .errors import SandboxError
from .harness import FunctionTask
from .outcomes import Outcome, OutcomeKind, Verdict
from .portal import run_sync
from .rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
    stdio_tests_reward,
)


class EvalInputError(ValueError):
    """The JSONL file does not have what the chosen reward needs."""


@dataclass(frozen=True)
class Row:
    prompt: Any
    completion: Any
    columns: Mapping[str, list[Any]] = field(default_factory=dict)
    """Dataset columns for this row alone (each a one-element list, as TRL passes them)."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise EvalInputError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise EvalInputError(f"{path}:{number}: expected a JSON object")
            if "completion" not in row:
                raise EvalInputError(f"{path}:{number}: no 'completion' field")
            rows.append(row)
    return rows


def _require(row: Mapping[str, Any], number: int, *names: str) -> None:
    missing = [n for n in names if n not in row]
    if missing:
        raise EvalInputError(f"row {number}: missing {', '.join(map(repr, missing))}")


def reference_function(expression: str) -> Callable[..., Any]:
    """A reference implementation from its source: trusted input, evaluated on this machine."""
    try:
        value = eval(expression, {"__builtins__": builtins})
    except Exception as exc:
        raise EvalInputError(f"reference {expression!r}: {exc!r}") from None
    if not callable(value):
        raise EvalInputError(f"reference {expression!r} is not callable")
    return value  # type: ignore[no-any-return]


def function_tasks(rows: Sequence[Mapping[str, Any]]) -> list[FunctionTask]:
    """One task per ``func_name``; rows naming it again must describe the same task."""
    tasks: dict[str, tuple[FunctionTask, tuple[Any, ...]]] = {}
    for number, row in enumerate(rows, 1):
        _require(row, number, "prompt", "func_name", "tests", "reference")
        key = (row["prompt"], tuple(row["tests"]), row["reference"], row.get("seed", 0))
        name = row["func_name"]
        if name in tasks:
            if tasks[name][1] != key:
                raise EvalInputError(f"row {number}: {name!r} differs from its earlier rows")
            continue
        task = FunctionTask(
            prompt=row["prompt"],
            func_name=name,
            tests=list(row["tests"]),
            reference=reference_function(row["reference"]),
            banned_patterns=tuple(row.get("banned_patterns", ())),
            seed=int(row.get("seed", 0)),
        )
        tasks[name] = (task, key)
    prompts = Counter(task.prompt for task, _ in tasks.values())
    shared = [p for p, n in prompts.items() if n > 1]
    if shared:
        raise EvalInputError(f"tasks are found by prompt, and {len(shared)} prompts are shared")
    return [task for task, _ in tasks.values()]


def build(
    kind: str, records: Sequence[Mapping[str, Any]], options: Mapping[str, Any]
) -> tuple[RewardFunction, list[Row]]:
    """The reward function and the per-row inputs for one ``--reward`` choice."""
    rows = []
    for number, record in enumerate(records, 1):
        columns: dict[str, list[Any]] = {}
        if kind == "assert":
            _require(record, number, "test_list")
            columns["test_list"] = [record["test_list"]]
            columns["test_setup_code"] = [record.get("test_setup_code") or ""]
        elif kind == "stdio":
            columns = {k: [v] for k, v in record.items() if k not in ("prompt", "completion")}
        rows.append(Row(record.get("prompt"), record["completion"], columns))
    if kind == "exec":
        reward = exec_reward(**options)
    elif kind == "assert":
        reward = assert_tests_reward(**options)
    elif kind == "stdio":
        reward = stdio_tests_reward(**options)
    else:
        tasks = function_tasks(records)
        backend = options.get("backend")
        rest = {k: v for k, v in options.items() if k != "backend"}
        try:  # evaluates the test inputs and the reference on them
            reward = function_tests_reward(tasks, backend=backend, **rest)
        except Exception as exc:
            raise EvalInputError(f"cannot compute the expected results: {exc!r}") from None
    return reward, rows


async def score(reward: RewardFunction, rows: Sequence[Row], progress: bool) -> list[Outcome]:
    """Every row's outcome, the rows run as one batch (the longest first)."""
    plans = [reward.plans([row.prompt], [row.completion], **row.columns)[0] for row in rows]
    with tqdm(total=len(rows), desc="scoring", unit="row", disable=not progress) as bar:
        return await reward.arun_plans(plans, done=bar.update)


def summary(reward: RewardFunction, outcomes: Sequence[Outcome]) -> str:
    rewards = [reward.reward(o) for o in outcomes]
    given = [r for r in rewards if r is not None]
    mean = sum(given) / len(given) if given else float("nan")
    counts = Counter(o.kind for o in outcomes)
    lines = [
        f"rows: {len(outcomes)}",
        f"mean reward: {mean:.4f} ({len(given)} rewarded, {len(rewards) - len(given)} without "
        "a reward)",
        "",
        *_counts("outcome", {kind.value: counts[kind] for kind in OutcomeKind}),
    ]
    verdicts = Counter(o.verdict for o in outcomes if o.verdict is not None)
    if verdicts:  # contest judging: how the judged programs ended
        lines += ["", *_counts("verdict", {v.value: verdicts[v] for v in Verdict})]
    return "\n".join(lines)


def _counts(title: str, counts: Mapping[str, int]) -> list[str]:
    """A table of ``counts`` and their shares, its columns as wide as its longest name."""
    total = sum(counts.values())
    width = max(len(title), *map(len, counts))
    lines = [f"{title:<{width}}  count   share"]
    for name, count in counts.items():
        lines.append(f"{name:<{width}}  {count:>5}  {count / total if total else 0.0:6.1%}")
    return lines


def write_results(path: Path, reward: RewardFunction, outcomes: Sequence[Outcome]) -> None:
    with path.open("w") as f:
        for index, outcome in enumerate(outcomes):
            record = {
                "index": index,
                "reward": reward.reward(outcome),
                "outcome": outcome.kind.value,
                "verdict": outcome.verdict.value if outcome.verdict is not None else None,
                "passed": outcome.passed,
                "total": outcome.total,
                "detail": outcome.detail,
                "duration": round(outcome.duration, 4),
            }
            f.write(json.dumps(record) + "\n")


def run_eval(args: argparse.Namespace, tags: Sequence[str]) -> int:
    """Print the summary; exit 1 when the provider failed some rows (the numbers are partial).
    An unusable input file raises :class:`EvalInputError`."""
    path = Path(args.file)
    options: dict[str, Any] = {
        "backend": args.backend,
        "timeout": args.timeout,
        "pool_size": args.pool_size,
        "retries": args.retries,
        "tags": list(tags),
        "image": args.image,
    }
    if args.reward == "stdio" and args.language:
        options["language"] = args.language
    try:
        records = read_jsonl(path)
    except OSError as exc:
        raise EvalInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not records:
        raise EvalInputError(f"{path} has no rows")
    reward, rows = build(args.reward, records, options)
    try:
        # A provider that cannot make one sandbox would otherwise cost every row its retries.
        run_sync(reward.pool.astart())
    except SandboxError as exc:
        reward.close()
        print(f"sandboxkit eval: no sandbox could be started: {exc}", file=sys.stderr)
        print("see sandboxkit doctor", file=sys.stderr)
        return 1
    try:
        outcomes = run_sync(score(reward, rows, sys.stderr.isatty()))
    except ValueError as exc:  # the planner could not read a row
        raise EvalInputError(str(exc)) from None
    finally:
        reward.close()
    if args.output:
        write_results(Path(args.output), reward, outcomes)
    print(f"{reward.__name__} on {args.file}")
    print(summary(reward, outcomes))
    infra = sum(o.kind is OutcomeKind.INFRA for o in outcomes)
    if infra:
        print(f"{infra} rows failed for infrastructure reasons: see sandboxkit doctor")
    return 1 if infra else 0
