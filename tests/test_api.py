"""The public surface: what ``sandboxkit`` exports, what docs/api.md says, and what importing
it costs."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit.sanitize import parse_python

REPO = Path(__file__).resolve().parents[1]
API_PAGE = REPO / "docs" / "api.md"
TABLE_NAME = re.compile(r"^\| `([A-Za-z_]\w*)", re.MULTILINE)
"""The name a table row of docs/api.md documents (before any signature)."""
DOTTED_NAME = re.compile(r"`(sandboxkit(?:\.\w+)+)`")


def test_every_public_name_can_be_imported_from_the_package() -> None:
    namespace: dict[str, object] = {}
    exec("from sandboxkit import *", namespace)
    missing = [name for name in sandboxkit.__all__ if name not in namespace]
    assert missing == []
    assert len(set(sandboxkit.__all__)) == len(sandboxkit.__all__)


def test_the_rewards_and_the_errors_they_raise_are_public() -> None:
    from sandboxkit.errors import CircuitOpenError
    from sandboxkit.rewards import assert_tests_reward, exec_reward, function_tests_reward

    assert sandboxkit.exec_reward is exec_reward
    assert sandboxkit.assert_tests_reward is assert_tests_reward
    assert sandboxkit.function_tests_reward is function_tests_reward
    assert sandboxkit.CircuitOpenError is CircuitOpenError
    assert set(dir(sandboxkit)) >= set(sandboxkit.__all__)


def test_a_name_the_package_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="get_backnd"):
        sandboxkit.get_backnd  # type: ignore[attr-defined]  # noqa: B018


def test_the_api_page_documents_exactly_the_public_names() -> None:
    documented = TABLE_NAME.findall(API_PAGE.read_text())
    assert sorted(documented) == sorted(sandboxkit.__all__)


def _defines(module: str, name: str) -> bool:
    """Whether ``module``'s source defines or imports ``name`` at its top level (read, not
    imported: some need an extra, such as ``trl``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return False
    tree = parse_python(Path(spec.origin).read_text())  # beside the rewards' parsing threads
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found = {node.name}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found = {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.level:  # a re-export of the package's
            found = {alias.asname or alias.name for alias in node.names}
        else:
            continue
        if name in found:
            return True
    return False


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:  # a parent is a module, not a package
        return False


def _exists(path: str) -> bool:
    """Whether ``sandboxkit.x.y`` names a module, a public name of the package, or a name its
    module defines."""
    module, name = path.rsplit(".", 1)
    if module == "sandboxkit" and name in sandboxkit.__all__:
        return True
    return _is_module(path) or _defines(module, name)


def test_the_names_the_api_page_gives_with_their_module_exist() -> None:
    dotted = DOTTED_NAME.findall(API_PAGE.read_text())
    assert len(dotted) >= 4
    assert [p for p in dotted if not _exists(p)] == []


def test_the_names_the_other_pages_give_with_their_module_exist() -> None:
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    dotted = [p for page in pages for p in DOTTED_NAME.findall(page.read_text())]
    assert len(dotted) >= 4
    assert [p for p in dotted if not _exists(p)] == []


def test_importing_sandboxkit_loads_no_sdk_no_trainer_and_no_rewards() -> None:
    code = "import json, sys, sandboxkit; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    heavy = {"daytona", "cwsandbox", "aiohttp", "socketio", "grpc", "torch", "transformers"}
    heavy |= {"trl", "sandboxkit.rewards", "sandboxkit.harness", "sandboxkit.emulators"}
    assert loaded & heavy == set()


CORE_INSTALL = """
import importlib, sys
sys.modules[sys.argv[2]] = None  # as on a core install: importing it fails
try:
    importlib.import_module(sys.argv[1])
except ImportError as exc:
    print(type(exc).__name__, isinstance(exc, sandboxkit.errors.BackendUnavailableError))
    print(exc.name)
    print(exc)
"""


@pytest.mark.parametrize(
    ("module", "dependency", "message"),
    [
        (
            "sandboxkit.integrations.trl",
            "transformers",
            "sandboxkit.integrations.trl needs 'transformers', which is not installed: "
            "pip install 'sandboxkit[trl]'",
        ),
        (
            "sandboxkit.backends.daytona",
            "daytona",
            "the 'daytona' backend needs 'daytona', which is not installed: "
            "pip install 'sandboxkit[daytona]'",
        ),
        (
            "sandboxkit.backends.aviato",
            "cwsandbox",
            "the 'aviato' backend needs 'cwsandbox', which is not installed: "
            "pip install 'sandboxkit[aviato]'",
        ),
        (
            "sandboxkit.backends.modal",
            "modal",
            "the 'modal' backend needs 'modal', which is not installed: "
            "pip install 'sandboxkit[modal]'",
        ),
        (
            "sandboxkit.backends.ray",
            "ray",
            "the 'ray' backend needs 'ray', which is not installed: pip install 'sandboxkit[ray]'",
        ),
        (
            "sandboxkit.emulators.daytona",
            "socketio",
            "the daytona emulator needs 'socketio', which is not installed: "
            "pip install 'sandboxkit[emulators]'",
        ),
        (
            "sandboxkit.emulators.aviato",
            "grpc",
            "the aviato emulator needs 'grpc', which is not installed: "
            "pip install 'sandboxkit[emulators]'",
        ),
        (
            "sandboxkit.emulators.modal",
            "grpclib",
            "the modal emulator needs 'grpclib', which is not installed: "
            "pip install 'sandboxkit[emulators]'",
        ),
    ],
)
def test_importing_an_optional_module_on_a_core_install_names_its_extra(
    module: str, dependency: str, message: str
) -> None:
    """Imported directly, not only through ``get_backend``: a bare ``No module named
    'transformers'`` says nothing of the extra that brings it."""
    code = "import sandboxkit.errors\n" + CORE_INSTALL
    done = subprocess.run(
        [sys.executable, "-c", code, module, dependency],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    kind, missing, said = done.stdout.splitlines()
    assert kind == "MissingDependencyError True"
    # The blocked dependency, or one the module imports before it that this install lacks
    # (a core install has no aiohttp): the extra named is the same.
    assert missing == dependency or importlib.util.find_spec(missing) is None, missing
    assert said == message.replace(f"needs '{dependency}'", f"needs '{missing}'")
