"""The tasks of Daytona's GRPO example, as sandboxkit ``FunctionTask``s.

Adding a task is adding an entry: a completion-mode prompt ending in the signature and
docstring the model continues, the function's name, substrings that disqualify a completion,
test inputs (Python expressions, evaluated on the host with a seeded ``random``), and the
trusted reference whose results the completion's must strictly equal.
"""

from __future__ import annotations

from sandboxkit.harness import FunctionTask


def kadane(xs: list[int]) -> int:
    """Largest sum of a contiguous non-empty subarray (the max-subarray reference)."""
    best = current = xs[0]
    for x in xs[1:]:
        current = max(x, current + x)
        best = max(best, current)
    return best


SORTING_PROMPT = '''# Notes from trying my own sorting algorithms instead of the built-ins.
# No sorted(), no list.sort(), no heapq and no imports: just plain Python.
def sort_numbers(xs: list[int]) -> list[int]:
    """Return a new list with the integers of xs in ascending order."""
'''

MAX_SUBARRAY_PROMPT = '''# A linear-time solution to the maximum subarray problem, in plain Python.
def max_subarray(xs: list[int]) -> int:
    """Return the largest sum of a contiguous, non-empty run of elements of xs."""
'''

TASKS: dict[str, FunctionTask] = {
    "sorting": FunctionTask(
        prompt=SORTING_PROMPT,
        func_name="sort_numbers",
        banned_patterns=["sorted(", ".sort(", "heapq", "import ", "__import__"],
        tests=[
            "[]",
            "[1, 3, 2]",
            "[random.randint(-1000, 1000) for _ in range(200)]",
            "[random.randint(-100, 100) for _ in range(1000)]",
            "list(range(0, 100)) + list(range(200, 100, -1)) + list(range(200, 300))",
        ],
        reference=sorted,
    ),
    "max_subarray": FunctionTask(
        prompt=MAX_SUBARRAY_PROMPT,
        func_name="max_subarray",
        banned_patterns=["import ", "__import__"],
        tests=[
            "[1]",
            "[-3, -1, -2]",
            "[-2, 1, -3, 4, -1, 2, 1, -5, 4]",
            "[random.randint(-50, 50) for _ in range(500)]",
            "[random.randint(-1000, 1000) for _ in range(5000)]",
        ],
        reference=kadane,
    ),
}
