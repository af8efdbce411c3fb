"""tree_diameter: a recursive DFS 2*10^5 deep, on a path; needs the large stack judges give."""

from __future__ import annotations

import random

PROBLEM = {
    "statement": (
        "Tree diameter\n\n"
        "Input: the first line holds n (1 <= n <= 2*10^5), the second n integers p_1 .. p_n: "
        "p_i is the parent of node i, and 0 for the root (exactly one). The nodes form a tree.\n"
        "Output: the number of edges on the longest path between two nodes of the tree."
    ),
    "time_limit": 1.0,
    "memory_limit_mb": 256,
}


def _parents(n: int, edges: list[tuple[int, int]], rng: random.Random) -> str:
    """The parent list of the tree with these (parent, child) edges over nodes 1..n, the
    labels shuffled so that reading it in order solves nothing."""
    label = list(range(1, n + 1))
    rng.shuffle(label)
    parent = [0] * (n + 1)
    for p, c in edges:
        parent[label[c - 1]] = label[p - 1]
    return f"{n}\n{' '.join(map(str, parent[1:]))}\n"


def _random_tree(rng: random.Random, n: int) -> str:
    return _parents(n, [(rng.randint(max(1, c - 5), c - 1), c) for c in range(2, n + 1)], rng)


def _path(rng: random.Random, n: int, root: int) -> str:
    """A path 1 - 2 - ... - n hanging from ``root``."""
    edges = [(c + 1, c) for c in range(1, root)] + [(c - 1, c) for c in range(root + 1, n + 1)]
    return _parents(n, edges, rng)


def inputs() -> list[str]:
    rng = random.Random(19006)
    return [
        "5\n0 1 1 2 2\n",
        "1\n0\n",
        "4\n2 3 4 0\n",
        _random_tree(rng, 1000),
        _random_tree(rng, 2 * 10**4),
        _path(rng, 2 * 10**4, 10**4),
        _path(rng, 2 * 10**5, 1),
    ]
