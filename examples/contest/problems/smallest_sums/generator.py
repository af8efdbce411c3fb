"""smallest_sums: sort once, answer from prefix sums; sorting per query or in O(n^2) times out."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Smallest sums\n\n"
        "Input: the first line holds n (1 <= n <= 2*10^5), the second n integers a_1 .. a_n "
        "(1 <= a_i <= 10^6). The third line holds q (1 <= q <= 2*10^5), the fourth q integers "
        "k_1 .. k_q (1 <= k_j <= n).\n"
        "Output: for each k_j, print the sum of the k_j smallest numbers of a, one per line."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
}


def _case(rng: random.Random, n: int, q: int, bound: int = 10**6, descending: bool = False) -> str:
    """``descending``: the worst order for an insertion sort."""
    a = (
        sorted((rng.randint(1, bound) for _ in range(n)), reverse=True)
        if descending
        else [rng.randint(1, bound) for _ in range(n)]
    )
    k = [rng.randint(1, n) for _ in range(q - 1)] + [n]
    return f"{n}\n{' '.join(map(str, a))}\n{q}\n{' '.join(map(str, k))}\n"


def inputs() -> list[str]:
    rng = random.Random(19002)
    return [
        "5\n5 1 4 2 3\n3\n1 3 5\n",
        "1\n1000000\n1\n1\n",
        "6\n7 7 7 7 7 7\n2\n6 2\n",
        _case(rng, 100, 100, 10),
        _case(rng, 2000, 2000),
        _case(rng, 20000, 1000),
        _case(rng, 200000, 2000, descending=True),
    ]
