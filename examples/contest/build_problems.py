"""Writes each problem's ``problem.json`` from its ``generator.py`` and ``solutions/accepted.py``.

A generator holds ``PROBLEM`` (everything but the tests) and ``inputs()``, the tests' inputs
from fixed seeds; the expected outputs are what the reference Python solution prints, so they
are never typed by hand. The output is deterministic: rerunning rewrites the same bytes (the
tests check the committed files against a fresh build).

    python examples/contest/build_problems.py            # rewrite problems/*/problem.json
    python examples/contest/build_problems.py --out DIR  # write DIR/<name>/problem.json instead
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
REFERENCE_TIMEOUT = 60.0
"""Seconds for the reference on one input: generous, it is a build step, not a judge."""


def load_generator(directory: Path) -> Any:
    spec = importlib.util.spec_from_file_location(
        f"gen_{directory.name}", directory / "generator.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_output(directory: Path, stdin: str) -> str:
    done = subprocess.run(
        [sys.executable, str(directory / "solutions" / "accepted.py")],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=REFERENCE_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{directory.name}: the reference failed:\n{done.stderr}")
    return done.stdout


def build(directory: Path) -> str:
    """The text of ``directory``'s ``problem.json``."""
    generator = load_generator(directory)
    inputs: list[str] = generator.inputs()
    with ThreadPoolExecutor() as pool:
        outputs = list(pool.map(lambda stdin: reference_output(directory, stdin), inputs))
    problem: dict[str, Any] = {"name": directory.name, **generator.PROBLEM}
    problem["tests"] = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
    return json.dumps(problem, indent=1) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write here instead of over problems/")
    args = parser.parse_args(argv)
    for directory in sorted(d for d in PROBLEMS_DIR.iterdir() if (d / "generator.py").is_file()):
        target = (args.out or PROBLEMS_DIR) / directory.name / "problem.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(build(directory))
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
