"""Writes the measured tables of ``benchmarks/README.md`` from ``benchmarks/results/*.json``.

The README holds, between ``<!-- results/NAME.json -->`` and ``<!-- end results -->``, what the
benchmark that wrote that file makes of it (its ``markdown``: ``run.py``'s, unless
:data:`RENDERERS` names another); the prose around the blocks is written by hand. Tables
copied by hand went stale (the README showed a run the results no longer held), so they are
only ever written from the JSON, and ``tests/test_docs.py`` checks the committed page.

    python benchmarks/report.py            # rewrite benchmarks/README.md
    python benchmarks/report.py --print [README]   # print the page, regenerated, instead
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import local_overhead
import rate_limits
import ray_backend
from run import RESULTS, Report, Row, markdown

README = RESULTS.parent / "README.md"
BLOCK = re.compile(r"(<!-- (results/[\w.-]+\.json) -->\n).*?(<!-- end results -->)", re.DOTALL)


def load(path: Path) -> Report:
    """A results file as ``run.py`` wrote it."""
    data = json.loads(path.read_text())
    for section in ("local", "remote", "contest"):
        data[section] = [Row(**row) for row in data.get(section, [])]
    return Report(**data)


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "local_overhead.json": local_overhead.markdown,
    "rate_limits.json": rate_limits.markdown,
    "ray_backend.json": ray_backend.markdown,
}
"""The results files not written by ``run.py``, and the tables each one's benchmark makes."""


def tables(path: Path) -> str:
    """The markdown of one results file."""
    renderer = RENDERERS.get(path.name)
    return markdown(load(path)) if renderer is None else renderer(json.loads(path.read_text()))


def render(text: str) -> str:
    """``text`` with every results block rewritten from its JSON. A results file without a
    block is an error: a run nobody reads is a run the page forgot."""
    named = set(BLOCK.findall(text))
    missing = {f"results/{p.name}" for p in RESULTS.glob("*.json")} - {n for _, n, _ in named}
    if missing:
        raise SystemExit(f"{README.name} has no block for {', '.join(sorted(missing))}")

    def block(match: re.Match[str]) -> str:
        return f"{match[1]}\n{tables(RESULTS.parent / match[2])}\n\n{match[3]}"

    return BLOCK.sub(block, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--print", action="store_true", help="print instead of writing")
    parser.add_argument("readme", nargs="?", type=Path, default=README)
    args = parser.parse_args(argv)
    page = render(args.readme.read_text())
    if args.print:
        sys.stdout.write(page)
    else:
        args.readme.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
