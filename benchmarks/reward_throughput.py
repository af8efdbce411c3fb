"""Throughput of each reward function on one batch of small programs (local backend).

    python benchmarks/reward_throughput.py [--batch 64] [--pool-size 4]

Each row is one call of the reward function as TRL makes it, after a warm-up call that
starts the pool (pool start-up is reported separately).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from sandboxkit.harness import FunctionTask
from sandboxkit.rewards import (
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
)

TASK = FunctionTask(
    prompt="def sort_numbers(xs: list[int]) -> list[int]:\n",
    func_name="sort_numbers",
    tests=["[]", "[3, 1, 2]", "[random.randint(-100, 100) for _ in range(50)]"],
    reference=sorted,
)
BODY = (
    "    out = []\n    for x in xs:\n        i = 0\n"
    "        while i < len(out) and out[i] < x:\n            i += 1\n"
    "        out.insert(i, x)\n    return out\n"
)
MBPP_CODE = "def add(a, b):\n    return a + b\n"
MBPP_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(5, 5) == 10"]

Case = tuple[str, Callable[..., RewardFunction], dict[str, Any], Callable[[int], dict[str, Any]]]
CASES: list[Case] = [
    (
        "exec_reward",
        exec_reward,
        {},
        lambda n: {"prompts": ["p"] * n, "completions": [f"print({i} * {i})" for i in range(n)]},
    ),
    (
        "assert_tests_reward",
        assert_tests_reward,
        {},
        lambda n: {
            "prompts": ["p"] * n,
            "completions": [MBPP_CODE] * n,
            "test_list": [MBPP_TESTS] * n,
        },
    ),
    (
        "function_tests_reward",
        lambda **kw: function_tests_reward([TASK], **kw),
        {},
        lambda n: {"prompts": [TASK.prompt] * n, "completions": [BODY] * n},
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pool-size", type=int, default=4)
    args = parser.parse_args()
    print(f"batch of {args.batch}, pool of {args.pool_size} local sandboxes")
    print("| reward function | pool start (s) | batch wall (s) | completions/s | mean reward |")
    print("|---|---|---|---|---|")
    for name, factory, options, batch in CASES:
        reward = factory(backend="subprocess", pool_size=args.pool_size, **options)
        t0 = time.perf_counter()
        reward(**batch(1))
        start = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores = reward(**batch(args.batch))
        wall = time.perf_counter() - t0
        reward.close()
        mean = sum(s for s in scores if s is not None) / len(scores)
        print(f"| {name} | {start:.2f} | {wall:.2f} | {args.batch / wall:.0f} | {mean:.2f} |")


if __name__ == "__main__":
    main()
