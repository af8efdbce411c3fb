"""The package's shape: no import cycles, and test machinery stays out of the product.

Read from the source (module-level imports, outside ``if TYPE_CHECKING``), so it holds for
modules whose extras are not installed here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sandboxkit"
MACHINERY = ("sandboxkit.emulators", "sandboxkit.testing", "sandboxkit.cli")
"""What only tests, benchmarks and the command line may import."""
ALLOWED_INTO_MACHINERY = (
    "sandboxkit.emulators",
    "sandboxkit.testing",
    "sandboxkit.cli",
    "sandboxkit.__main__",
)


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Try):
            yield from node.body
            yield from (n for h in node.handlers for n in h.body)
            continue
        yield node


def imports_of(path: Path) -> set[str]:
    """The sandboxkit modules ``path`` imports when it is imported."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _top_level(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] == "sandboxkit"}


def with_packages(name: str, imported: set[str]) -> set[str]:
    """What importing ``imported`` from module ``name`` runs: each module and, first, the
    ``__init__`` of every package above it (``a.b.c`` runs ``a.b``'s), but for the packages
    that hold ``name`` itself, which are being imported already."""
    found = set()
    for module in imported:
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {m for m in found if not (name == m or name.startswith(f"{m}."))}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: with_packages(name, imports_of(path)) & modules.keys()
        for name, path in modules.items()
    }


def test_the_package_has_no_import_cycles(graph: dict[str, set[str]]) -> None:
    """Through packages too: a module that imports ``sandboxkit.harness.runner`` runs the
    ``__init__`` of ``sandboxkit.harness`` first, and every module that imports."""
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        if name in stack:
            cycle = [*stack[stack.index(name) :], name]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*stack, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_product_modules_import_no_test_machinery(graph: dict[str, set[str]]) -> None:
    offenders = {
        name: sorted(m for m in imported if within(m, MACHINERY))
        for name, imported in graph.items()
        if not within(name, ALLOWED_INTO_MACHINERY)
    }
    assert {name: found for name, found in offenders.items() if found} == {}


PRODUCT = sorted(
    name
    for name in map(module_name, PACKAGE.rglob("*.py"))
    if name != "sandboxkit.__main__"  # runs the command line
)


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """Whatever a user imports first (docs name ``sandboxkit.contest.checkers``) imports;
    a module whose extra is not installed may say so, naming the missing package."""
    code = (
        "import importlib, sys\n"
        "try:\n"
        "    importlib.import_module(sys.argv[1])\n"
        "except ModuleNotFoundError as exc:\n"
        "    if (exc.name or '').split('.')[0] == 'sandboxkit':\n"
        "        raise\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    failed = {}
    for at in range(0, len(PRODUCT), 4):  # a few at once: each is an interpreter's start
        batch = PRODUCT[at : at + 4]
        running = [
            subprocess.Popen(
                [sys.executable, "-c", code, name],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in batch
        ]
        for name, process in zip(batch, running, strict=True):
            _, err = process.communicate(timeout=300)
            if process.returncode != 0:
                failed[name] = err.strip().splitlines()[-1:]
    assert failed == {}
