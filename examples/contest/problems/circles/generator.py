"""circles: real answers, judged with a tolerance; small areas catch too few decimals."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Circles\n\n"
        "Input: the first line holds n (1 <= n <= 10^5), the second n radii r_1 .. r_n, real "
        "numbers with at most three decimals (0 < r_i <= 1000).\n"
        "Output: the total area of the n circles and their mean area, separated by a space. "
        "An answer within an absolute or relative error of 10^-6 is accepted."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
    "checker": {"kind": "floats", "abs_tol": 1e-6, "rel_tol": 1e-6},
}


def _case(rng: random.Random, n: int, low: int, high: int) -> str:
    radii = [f"{rng.randint(low, high) / 1000:.3f}" for _ in range(n)]
    return f"{n}\n{' '.join(radii)}\n"


def inputs() -> list[str]:
    rng = random.Random(19003)
    return [
        "2\n1 2\n",
        "1\n0.001\n",
        "3\n0.1 0.2 0.05\n",
        "1\n1000\n",
        _case(rng, 10, 1, 1000),
        _case(rng, 1000, 1, 10**6),
        _case(rng, 10**4, 1, 10**6),
        _case(rng, 2 * 10**4, 1, 10**6),
    ]
