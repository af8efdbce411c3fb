"""pair_sum: many right answers, so a checker program judges them, not a comparison."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Pair sum\n\n"
        "Input: the first line holds n (2 <= n <= 2*10^5) and X (|X| <= 2*10^9), the second n "
        "distinct integers a_1 .. a_n (|a_i| <= 10^9).\n"
        "Output: two indices i and j (1-based, i != j) with a_i + a_j = X, separated by a "
        "space; any such pair is accepted. If there is none, print -1."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
    "checker": {"kind": "program", "file": "checker.cpp"},
}


def _case(rng: random.Random, n: int, pairs: int) -> str:
    """Even numbers, and an odd X unless ``pairs`` of them are made to sum to it."""
    a = rng.sample(range(-(10**9) // 4, 10**9 // 4), n)
    a = [2 * x for x in a]
    x = 2 * rng.randint(-(10**8), 10**8) + (0 if pairs else 1)
    for i in rng.sample(range(n), pairs):
        if x - a[i] not in a:
            a[(i + 1) % n] = x - a[i]
    return f"{n} {x}\n{' '.join(map(str, a))}\n"


def inputs() -> list[str]:
    rng = random.Random(19007)
    return [
        "4 9\n2 7 11 15\n",
        "3 10\n5 1 2\n",
        "2 0\n-3 3\n",
        "5 8\n4 1 7 3 5\n",
        _case(rng, 100, 3),
        _case(rng, 1000, 0),
        _case(rng, 20000, 0),
        _case(rng, 5 * 10**4, 1),
    ]
