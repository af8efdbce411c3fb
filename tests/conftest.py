"""Fixtures shared by the test modules.

``backend_client`` is parametrized over every backend the conformance suite runs on; a backend
that needs a server (an emulator) starts it through its own fixture.

With asyncio's debug mode on (``PYTHONASYNCIODEBUG=1``, as in CI's strict run), a task
exception never retrieved or an unclosed client session or connector that asyncio logs during
a test fails that test: none of them reaches pytest as a warning. (Daytona's SDK can leave its
event socket's websocket response unclosed when a client closes during its background
connect: logged, not failed.)
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType

import pytest

from sandboxkit import Sandbox, SandboxClient, get_backend
from sandboxkit.local import disk, files, uids

pytest_plugins = [
    "sandboxkit.testing.remote",
    "sandboxkit.testing.daytona",
    "sandboxkit.testing.aviato",
    "sandboxkit.testing.modal",
    "sandboxkit.testing.e2b",
    "sandboxkit.testing.ray",
    "sandboxkit.testing.docker",
]

CONFORMANCE_BACKENDS = [
    "subprocess",
    "daytona",
    "aviato",
    "modal",
    "e2b",
    # Each test starts actors (a second or more here), the first a cluster: not the quick loop.
    pytest.param("ray", marks=pytest.mark.slow),
    "docker",
]
EMULATOR_ENVS = {
    "daytona": "daytona_env",
    "aviato": "aviato_env",
    "modal": "modal_env",
    "e2b": "e2b_env",
    "ray": "ray_env",
    "docker": "docker_env",
}
"""Backends served by an emulator (for Ray, a local cluster), and the fixture that starts it and
points the env at it."""
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class _AsyncioErrors(logging.Handler):
    """What asyncio logged, since the last ``take`` and from any thread, of the errors that
    code which forgot a task or a session causes."""

    FAILING = (
        "Task exception was never retrieved",
        "Unclosed client session",
        "Unclosed connector",
    )

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(self.FAILING):
            self.messages.append(message)

    def take(self) -> list[str]:
        taken, self.messages = self.messages, []
        return taken


_asyncio_errors = _AsyncioErrors()
if sys.flags.dev_mode or os.environ.get("PYTHONASYNCIODEBUG"):
    logging.getLogger("asyncio").addHandler(_asyncio_errors)


@pytest.fixture(autouse=True)
def _no_asyncio_errors() -> Iterator[None]:
    _asyncio_errors.take()  # an earlier test's, logged after it ended
    yield
    errors = _asyncio_errors.take()
    if errors:
        pytest.fail("asyncio logged errors:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture(params=CONFORMANCE_BACKENDS)
def backend_client(request: pytest.FixtureRequest) -> Iterator[SandboxClient]:
    if request.param in EMULATOR_ENVS:
        request.getfixturevalue(EMULATOR_ENVS[request.param])
    with get_backend(request.param) as client:
        yield client


@pytest.fixture(scope="session")
def problemset() -> Iterator[ModuleType]:
    """``examples/contest/problemset.py`` (our contest problems), imported as the examples
    import it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXAMPLES))
        yield importlib.import_module("contest.problemset")


@pytest.fixture
def local_root() -> Iterator[Path]:
    """A private sandbox root that an unprivileged uid can traverse (unlike pytest's tmp)."""
    root = Path(tempfile.mkdtemp(prefix="sandboxkit-test-", dir="/tmp"))
    os.chmod(root, 0o711)
    yield root
    with open("/proc/self/mountinfo") as f:  # the storage of sandboxes a failed test left
        points = [line.split()[4] for line in f]
    for point in points:
        if point.startswith(f"{root}/"):
            disk.unmount(Path(point))
    # The uids of the sandboxes a test left running: their processes die first.
    left = {}
    if uids.sandbox_uids() is not None:
        left = {uid: holder for uid, (holder, _) in uids.claims().items() if holder.parent == root}
    alive = {uid for uid in left if not uids.kill_processes_of(uid)}
    with contextlib.suppress(OSError):  # however deep and unreadable a failed test left it
        files.remove_tree(root)
    for uid, holder in left.items():
        if uid not in alive:
            uids.release(uid, holder)


TOOLCHAIN_COMPILER = """#!/bin/sh
# sbx-cc SOURCE: ./main, this toolchain's prelude and then SOURCE, a shell program
{ echo '#!/bin/sh'; cat "$(dirname "$0")/../lib/prelude.sh" "$1"; } > main && chmod +x main
"""


@pytest.fixture
def toolchain() -> Iterator[Path]:
    """A toolchain where rustup's or ``/usr/local/go`` are, outside ``/usr`` and a sandbox's
    own ``/tmp``: ``bin/sbx-cc`` "compiles" a shell program with the prelude ``lib`` holds
    beside it (``greet``, which prints ``hello from the toolchain``)."""
    top = Path(tempfile.mkdtemp(prefix="sandboxkit-toolchain-", dir="/var/tmp"))
    (top / "bin").mkdir()
    (top / "lib").mkdir()
    (top / "bin" / "sbx-cc").write_text(TOOLCHAIN_COMPILER)
    (top / "lib" / "prelude.sh").write_text("greet() { echo hello from the toolchain; }\n")
    for path in (top, *top.rglob("*")):
        path.chmod(0o755)
    yield top
    shutil.rmtree(top)


@pytest.fixture
def local(local_root: Path) -> Iterator[SandboxClient]:
    """The local backend on a private root, so tests can inspect what it leaves on disk."""
    with get_backend("subprocess", root=local_root) as client:
        yield client


@pytest.fixture
def as_nobody() -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """``run(*args)``: ``python3 *args`` as ``nobody`` (from a root host: most users are not
    root), with the system's interpreter, this checkout importable, a home of its own as cwd
    and ``SANDBOXKIT_LOCAL_ROOT`` in it. Skips where that cannot be."""
    if os.geteuid() != 0:
        pytest.skip("not root: cannot become nobody (the tests here already run unprivileged)")
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3")
    home = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path is root's alone
    home.chmod(0o777)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path]),
        "SANDBOXKIT_LOCAL_ROOT": str(home / "root"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, *args],
            capture_output=True,
            text=True,
            timeout=300,
            user=65534,
            group=65534,
            extra_groups=[],
            env=env,
            cwd=home,
        )

    try:
        probe = run("-c", "import sandboxkit")
        if probe.returncode != 0:
            pytest.skip(f"nobody cannot import sandboxkit with {python}: {probe.stderr[-200:]!r}")
        yield run
    finally:
        shutil.rmtree(home, ignore_errors=True)


Installer = Callable[..., Path]


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Installer:
    """``install(dist, version, entry_points={name: "module:attr"}, modules={name: source})``:
    a distribution as pip leaves it (a dist-info beside its modules in a site directory), its
    ``sandboxkit.backends`` entry points found by this process; returns the site directory,
    which a child process needs on its ``PYTHONPATH``."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    monkeypatch.syspath_prepend(str(site))

    def install(
        dist: str,
        version: str = "1.0",
        entry_points: Mapping[str, str] | None = None,
        modules: Mapping[str, str] | None = None,
    ) -> Path:
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        points = "".join(f"{name} = {value}\n" for name, value in (entry_points or {}).items())
        (info / "entry_points.txt").write_text(f"[sandboxkit.backends]\n{points}")
        for name, source in (modules or {}).items():
            (site / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()  # the site's listing changed after it went on sys.path
        return site

    return install


@pytest.fixture(scope="module")
def module_sandboxes() -> Iterator[dict[str, Sandbox]]:
    """The module's sandbox of each path (``sandbox`` makes them), stopped with the module.
    Held here rather than by a module-scoped parametrized fixture: in CI's shuffled order the
    two paths' tests interleave, and such a fixture made a new sandbox at each switch (where
    the next C++ program built the precompiled header again)."""
    made: dict[str, Sandbox] = {}
    yield made
    for sb in made.values():
        sb.stop()


@pytest.fixture(params=["warm", "cold"])
def sandbox(request: pytest.FixtureRequest, module_sandboxes: dict[str, Sandbox]) -> Sandbox:
    """A local sandbox per path, for a module's tests: warm, each exec is forked from the
    template that received the request (it must not pass the tests on to the candidate);
    cold, one bwrap per exec."""
    path = str(request.param)
    if path not in module_sandboxes:
        client = get_backend("subprocess", warm=path == "warm")
        module_sandboxes[path] = client.sandbox(tags=[f"test-{request.module.__name__}"])
    return module_sandboxes[path]
