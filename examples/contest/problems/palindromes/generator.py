"""palindromes: Yes/No answers in any letter case (Kattis's default checker ignores case)."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Palindromes\n\n"
        "Input: the first line holds T (1 <= T <= 10^4). Each of the next T lines holds a word "
        "of lowercase letters; the words have at most 10^6 letters in all.\n"
        'Output: for each word, print "Yes" if it reads the same backwards and "No" otherwise, '
        "one per line. Letter case does not matter: yes, YES and Yes are all accepted."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
    "checker": {"kind": "tokens", "case_sensitive": False},
}


def _word(rng: random.Random, length: int, palindrome: bool) -> str:
    half = "".join(rng.choice("ab") for _ in range((length + 1) // 2))
    word = half + half[: length // 2][::-1]
    if palindrome or length < 2:
        return word
    i = rng.randrange(length // 2)  # break one mirrored pair
    flipped = "b" if word[i] == "a" else "a"
    return word[:i] + flipped + word[i + 1 :]


def _case(rng: random.Random, count: int, length: int) -> str:
    words = [_word(rng, rng.randint(1, length), rng.random() < 0.5) for _ in range(count)]
    return "\n".join([str(count), *words]) + "\n"


def inputs() -> list[str]:
    rng = random.Random(19004)
    return [
        "3\nracecar\nab\na\n",
        "4\naa\nab\naba\nabca\n",
        f"2\n{'ab' * 5}a\n{'ab' * 5}\n",
        _case(rng, 10, 10),
        _case(rng, 1000, 50),
        _case(rng, 2000, 100),
        f"2\n{_word(rng, 10**5, True)}\n{_word(rng, 10**5, False)}\n",
    ]
