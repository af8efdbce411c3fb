"""max_subarray: IOI-style subtasks; an O(n^2) solution earns the small subtask's points only."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Maximum subarray\n\n"
        "Input: the first line holds n, the second n integers a_1 .. a_n (|a_i| <= 10^9).\n"
        "Output: the largest sum of a non-empty run of consecutive a_i.\n"
        "Subtask 1 (30 points): n <= 1000. Subtask 2 (70 points): n <= 10^5."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
    "subtasks": [{"points": 30, "tests": [0, 1, 2, 3]}, {"points": 70, "tests": [4, 5, 6, 7]}],
}


def _case(rng: random.Random, n: int, low: int, high: int) -> str:
    return f"{n}\n{' '.join(str(rng.randint(low, high)) for _ in range(n))}\n"


def inputs() -> list[str]:
    rng = random.Random(19005)
    return [
        "5\n-2 1 -3 4 -1\n",
        "3\n-5 -1 -7\n",
        _case(rng, 1000, -(10**9), 10**9),
        _case(rng, 1000, -1000, 10),
        _case(rng, 10**4, -(10**9), 10**9),
        _case(rng, 10**4, -(10**4), -1),
        _case(rng, 10**5, -(10**4), 10**4),
        _case(rng, 10**5, -10, 10**4),
    ]
