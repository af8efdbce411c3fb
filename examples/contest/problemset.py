"""Our own contest problems, read from ``problems/<name>/``, for tests, benchmarks and examples.

Each problem is a ``problem.json`` (statement, limits, tests, optional checker and subtasks)
and a ``solutions/`` folder of programs whose file name says what a judge must make of them:
``accepted.cpp`` passes, ``slow.py`` runs out of time, and so on (``VERDICTS``). Stdlib only,
so that a test or benchmark can read the set without the examples' extras installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"

LANGUAGES = {
    ".py": "python",
    ".cpp": "cpp17",
    ".c": "c",
    ".java": "java",
    ".rs": "rust",
    ".go": "go",
    ".js": "javascript",
}
"""A solution's language, from its file's extension."""

PROMPT_NAMES = {
    "python": ("Python 3", "python"),
    "cpp17": ("C++17", "cpp"),
    "c": ("C", "c"),
    "java": ("Java (a public class Main)", "java"),
    "rust": ("Rust", "rust"),
    "go": ("Go", "go"),
    "javascript": ("JavaScript (Node.js)", "javascript"),
}
"""How a prompt names each language, and the code block's tag it asks for."""

VERDICTS = {
    "accepted": "accepted",
    "wrong": "wrong_answer",
    "slow": "time_limit",
    "crash": "runtime_error",
    "memory": "memory_limit",
    "compile_error": "compile_error",
    "partial": "partial",
}
"""A variant's name prefix and what a judge must make of it (``partial``: some subtasks'
points, not all)."""


@dataclass(frozen=True)
class Problem:
    """One problem as its ``problem.json`` holds it, and the folder it lives in."""

    name: str
    statement: str
    time_limit: float
    """CPU seconds per test."""
    memory_limit_mb: int
    tests: list[dict[str, str]]
    """``{"input", "output"}`` each; the output is the reference solution's."""
    checker: dict[str, Any] | None
    """``{"kind": "tokens", "case_sensitive": False}``, ``{"kind": "floats", "abs_tol",
    "rel_tol"}`` or ``{"kind": "program", "file": "checker.cpp"}``; None: tokens as written."""
    subtasks: list[dict[str, Any]] | None
    """``[{"points", "tests": [indices]}, ...]``, IOI-style; None: every test counts alike."""
    dir: Path


def load_problem(directory: Path) -> Problem:
    data = json.loads((directory / "problem.json").read_text())
    return Problem(
        name=data["name"],
        statement=data["statement"],
        time_limit=float(data["time_limit"]),
        memory_limit_mb=int(data["memory_limit_mb"]),
        tests=data["tests"],
        checker=data.get("checker"),
        subtasks=data.get("subtasks"),
        dir=directory,
    )


def load_problems(root: Path = PROBLEMS_DIR) -> list[Problem]:
    """Every problem under ``root``, by name."""
    return [load_problem(d) for d in sorted(root.iterdir()) if (d / "problem.json").is_file()]


def solutions(problem: Problem) -> dict[str, tuple[str, str]]:
    """``{file name: (language, source)}`` for each of ``problem``'s solutions, e.g.
    ``{"accepted.cpp": ("cpp17", "#include ...")}``."""
    return {
        path.name: (LANGUAGES[path.suffix], path.read_text())
        for path in sorted((problem.dir / "solutions").iterdir())
        if path.suffix in LANGUAGES
    }


def expected_verdict(variant: str) -> str:
    """What a judge must make of the solution named ``variant`` (``"slow.py"``, ``"wrong"``,
    ``"accepted_upper.cpp"``): one of ``VERDICTS``' values."""
    stem = variant.split(".", 1)[0]
    for prefix in sorted(VERDICTS, key=len, reverse=True):
        if stem == prefix or stem.startswith(prefix + "_"):
            return VERDICTS[prefix]
    raise ValueError(f"{variant!r} starts with none of {sorted(VERDICTS)}")


def as_row(problem: Problem, language: str) -> dict[str, Any]:
    """``problem`` as a dataset row in open-r1's shape, asking for a solution in ``language``
    (one of ``LANGUAGES``' values), with its limits as open-r1's Codeforces rows carry them
    (``time_limit`` in seconds, ``memory_limit`` in MB); a ``subtasks`` column when it has
    subtasks, a ``checker`` one when it has a checker (a program checker's source inline,
    under ``"source"``)."""
    shown, tag = PROMPT_NAMES[language]
    row: dict[str, Any] = {
        "prompt": (
            f"{problem.statement.rstrip()}\n\nWrite a solution in {shown} that reads standard "
            f"input and writes standard output. Put the whole program in one ```{tag} code block."
        ),
        "verification_info": {
            "language": language,
            "test_cases": [
                {"type": "stdin_stdout", "input": t["input"], "output": t["output"]}
                for t in problem.tests
            ],
        },
        "time_limit": problem.time_limit,
        "memory_limit": problem.memory_limit_mb,
    }
    if problem.subtasks is not None:
        row["subtasks"] = problem.subtasks
    if problem.checker is not None:
        row["checker"] = dict(problem.checker)
        if problem.checker["kind"] == "program":
            row["checker"]["source"] = (problem.dir / problem.checker["file"]).read_text()
    return row
