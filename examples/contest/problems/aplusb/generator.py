"""aplusb: many sums of two 64-bit integers; a 32-bit int or a JavaScript Number fails."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "A plus B\n\n"
        "Input: the first line holds T (1 <= T <= 10^4). Each of the next T lines holds two "
        "integers a and b (|a|, |b| <= 10^18).\n"
        "Output: for each line, print a + b on a line of its own."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
}


def _lines(rng: random.Random, count: int, bound: int) -> str:
    pairs = [f"{rng.randint(-bound, bound)} {rng.randint(-bound, bound)}" for _ in range(count)]
    return "\n".join([str(count), *pairs]) + "\n"


def inputs() -> list[str]:
    rng = random.Random(19001)
    big = 10**18
    return [
        "3\n1 2\n-5 5\n100 -250\n",
        f"4\n{big} {big}\n{-big} {-big}\n{big} {-big}\n0 0\n",
        f"2\n{2**53} 1\n{2**53 + 1} {2**53 + 1}\n",
        _lines(rng, 10, 10**9),
        _lines(rng, 100, 2**31),
        _lines(rng, 1000, big),
        _lines(rng, 10**4, big),
    ]
