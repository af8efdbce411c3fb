"""The batches ``run.py`` scores: inline MBPP-like tasks and program generators (no dataset files).

Each :class:`Workload` carries the same completions in two forms: what sandboxkit's reward
function receives (completions + dataset columns) and the stand-alone program the naive
patterns and the bare interpreter run (the code, then its asserts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """An MBPP-sized problem: a correct solution, two wrong ones, and its test list."""

    name: str
    correct: str
    wrong: str
    crashes: str
    tests: tuple[str, ...]


TASKS: tuple[Task, ...] = (
    Task(
        "similar_elements",
        "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))\n",
        "def similar_elements(a, b):\n    return tuple(sorted(set(a) | set(b)))\n",
        "def similar_elements(a, b):\n    return tuple(sorted(a & b))\n",
        (
            "assert similar_elements((3, 4, 5, 6), (5, 7, 4, 10)) == (4, 5)",
            "assert similar_elements((1, 2, 3, 4), (5, 4, 3, 7)) == (3, 4)",
            "assert similar_elements((11, 12, 14, 13), (17, 15, 14, 13)) == (13, 14)",
        ),
    ),
    Task(
        "is_not_prime",
        "def is_not_prime(n):\n    if n < 2:\n        return True\n"
        "    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return True\n"
        "        i += 1\n    return False\n",
        "def is_not_prime(n):\n    return n % 2 == 0\n",
        "def is_not_prime(n):\n    return n.is_prime()\n",
        (
            "assert is_not_prime(2) == False",
            "assert is_not_prime(10) == True",
            "assert is_not_prime(35) == True",
            "assert is_not_prime(37) == False",
        ),
    ),
    Task(
        "heap_queue_largest",
        "import heapq\n\ndef heap_queue_largest(nums, n):\n    return heapq.nlargest(n, nums)\n",
        "def heap_queue_largest(nums, n):\n    return sorted(nums)[:n]\n",
        "def heap_queue_largest(nums, n):\n    return heapq.nlargest(n, nums)\n",
        (
            "assert heap_queue_largest([25, 35, 22, 85, 14, 65, 75, 22, 58], 3) == [85, 75, 65]",
            "assert heap_queue_largest([25, 35, 22, 85, 14, 65, 75, 22, 58], 2) == [85, 75]",
            "assert heap_queue_largest([25, 35, 22, 85, 14, 65, 75, 22, 58], 5)"
            " == [85, 75, 65, 58, 35]",
        ),
    ),
    Task(
        "count_ways",
        "def count_ways(n):\n    a = [0] * (n + 1)\n    b = [0] * (n + 1)\n"
        "    a[0] = 1\n    if n >= 1:\n        b[1] = 1\n    for i in range(2, n + 1):\n"
        "        a[i] = a[i - 2] + 2 * b[i - 1]\n        b[i] = a[i - 1] + b[i - 2]\n"
        "    return a[n]\n",
        "def count_ways(n):\n    return 3 ** (n // 2)\n",
        "def count_ways(n):\n    return count_ways(n - 2) * 4 - count_ways(n - 4)\n",
        (
            "assert count_ways(2) == 3",
            "assert count_ways(8) == 153",
            "assert count_ways(12) == 2131",
        ),
    ),
    Task(
        "remove_occ",
        "def remove_occ(s, ch):\n    i, j = s.find(ch), s.rfind(ch)\n    if i < 0:\n"
        "        return s\n    s = s[:i] + s[i + 1 :]\n    j -= 1\n"
        "    return s[:j] + s[j + 1 :] if j >= i else s\n",
        "def remove_occ(s, ch):\n    return s.replace(ch, '')\n",
        "def remove_occ(s, ch):\n    return s.remove(ch)\n",
        (
            'assert remove_occ("hello", "l") == "heo"',
            'assert remove_occ("abcda", "a") == "bcd"',
            'assert remove_occ("PHP", "P") == "H"',
        ),
    ),
)

# Of every 8 completions of a task: 5 correct, 2 wrong, 1 crashing (a plausible GRPO mix).
VARIANTS = ("correct", "wrong", "correct", "correct", "crashes", "correct", "wrong", "correct")
LOOP = "while True:\n    pass\n"


@dataclass(frozen=True)
class Workload:
    """One batch: reward-function inputs and the equivalent stand-alone programs."""

    name: str
    reward: str
    """``exec`` (exec_reward) or ``asserts`` (assert_tests_reward)."""
    timeout: float
    prompts: list[str]
    completions: list[str]
    programs: list[str]
    columns: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.completions)

    def head(self, n: int) -> Workload:
        """The first ``n`` completions (the generators interleave kinds, so heads are mixed)."""
        cols = {k: v[:n] for k, v in self.columns.items()}
        return Workload(
            self.name,
            self.reward,
            self.timeout,
            self.prompts[:n],
            self.completions[:n],
            self.programs[:n],
            cols,
        )


def trivial(n: int) -> Workload:
    """Programs that print one number: the cost of the sandbox, not of the program."""
    codes = [f"print({i} * {i})\n" for i in range(n)]
    return Workload("trivial", "exec", 10.0, ["p"] * n, codes, codes)


def timeouts(n: int, timeout: float = 1.0) -> Workload:
    """Trivial programs with 10% infinite loops (every tenth, the first at index 3)."""
    codes = [LOOP if i % 10 == 3 else f"print({i} + 1)\n" for i in range(n)]
    return Workload("timeouts", "exec", timeout, ["p"] * n, codes, codes)


def mbpp(prompts: int, generations: int, name: str = "mbpp") -> Workload:
    """``prompts`` tasks x ``generations`` completions each, rows interleaved across tasks."""
    out_prompts: list[str] = []
    completions: list[str] = []
    programs: list[str] = []
    tests: list[list[str]] = []
    for g in range(generations):
        for p in range(prompts):
            task = TASKS[p % len(TASKS)]
            code = getattr(task, VARIANTS[(g + p) % len(VARIANTS)])
            out_prompts.append(f"Write {task.name} (prompt {p}).")
            completions.append(code)
            programs.append(code + "\n" + "\n".join(task.tests) + "\n")
            tests.append(list(task.tests))
    return Workload(name, "asserts", 5.0, out_prompts, completions, programs, {"test_list": tests})
