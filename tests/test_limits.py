"""Memory and disk limits per sandbox: what they let programs do, and their upkeep (the
sandbox's tmpfs and memory cgroup come and go with it, also after a crashed run).

The attacks on these limits are in ``test_hostile.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.doctor import Status, check_local
from sandboxkit.errors import BackendMisconfiguredError, InvalidLimitError
from sandboxkit.local.cgroup import Cgroups
from sandboxkit.local.isolation import Tier
from sandboxkit.local.limits import Limits
from sandboxkit.testing.remote import processes_with, wait_until

REPO = Path(__file__).resolve().parent.parent
MEMORY_MB = 256


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p.startswith(f"{root}/")]


def leftovers(root: Path, sandbox_id: str) -> list[str]:
    """What is left of a sandbox in ``root`` (its directory, or a half-removed one)."""
    return [p.name for p in root.iterdir() if sandbox_id in p.name]


def processes_in(group: Path) -> str:
    try:
        return (group / "cgroup.procs").read_text()
    except FileNotFoundError:
        return ""


def group_of(cgroup_file: str, controller: str) -> str:
    """The ``controller``'s cgroup in a /proc/<pid>/cgroup: v1's line of it, else v2's one."""
    paths = {}
    for line in cgroup_file.splitlines():
        _id, controllers, path = line.split(":", 2)
        paths[controllers] = path
    return next((p for c, p in paths.items() if controller in c.split(",")), paths.get("", ""))


def host_groups(sb: sandboxkit.Sandbox) -> str:
    """The cgroups of an exec's process as the host sees them (inside, a cgroup namespace
    may show them as "/"), as /proc/<pid>/cgroup lists them."""
    marker = f"SBX_GROUP_{uuid.uuid4().hex}"
    holder = threading.Thread(
        target=lambda: sb.exec(["sleep", "60"], env={marker: "1"}, timeout=90)
    )
    holder.start()
    pids: list[int] = []
    try:
        # ``sleep`` itself: before it runs, the host's launcher (not yet in the sandbox's
        # group in the rlimits tier) carries the same environment. It sleeps until read (a
        # short sleep could end before a loaded machine's scan of /proc finds it).
        assert wait_until(
            lambda: pids.extend(sleeping(processes_with(marker, "environ"))) or pids, timeout=30
        )
        return Path(f"/proc/{pids[0]}/cgroup").read_text()
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        holder.join()


def sleeping(pids: list[int]) -> list[int]:
    """Those of ``pids`` that run ``sleep``."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                found.append(pid)
    return found


@pytest.fixture(params=["namespaces", "namespaces-cold", "rlimits"])
def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> Iterator[sandboxkit.SandboxClient]:
    tier, _, cold = str(request.param).partition("-")
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", tier)
    monkeypatch.setenv("SANDBOXKIT_WARM", "0" if cold else "1")
    try:
        backend = sandboxkit.get_backend("subprocess", root=local_root, memory_mb=MEMORY_MB)
    except sandboxkit.IsolationUnavailableError as exc:  # no namespaces on this machine
        pytest.skip(f"{tier} tier unavailable: {exc}")
    with backend:
        yield backend


def test_the_new_limits_are_settings_like_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXKIT_LIMIT_DISK_MB", "100")
    monkeypatch.setenv("SANDBOXKIT_LIMIT_DISK_INODES", "500")
    limits = Limits.from_env(disk_inodes=600)
    assert (limits.disk_mb, limits.disk_inodes) == (100, 600)
    assert (Limits().memory_mb, Limits().disk_mb, Limits().disk_inodes) == (2048, 512, 32768)


WHOLE = "a whole number, at least 1"


@pytest.mark.parametrize(
    ("var", "raw", "message"),
    [
        (
            "MEMORY_MB",
            "lots",
            f"SANDBOXKIT_LIMIT_MEMORY_MB='lots': the memory_mb limit must be {WHOLE}",
        ),
        (
            "MEMORY_MB",
            "-5",
            f"SANDBOXKIT_LIMIT_MEMORY_MB='-5': the memory_mb limit must be {WHOLE}",
        ),
        ("MEMORY_MB", "0", f"SANDBOXKIT_LIMIT_MEMORY_MB='0': the memory_mb limit must be {WHOLE}"),
        (
            "CPU_SECONDS",
            "1.5",
            f"SANDBOXKIT_LIMIT_CPU_SECONDS='1.5': the cpu_seconds limit must be {WHOLE}",
        ),
        (
            "OPEN_FILES",
            "256 files",
            f"SANDBOXKIT_LIMIT_OPEN_FILES='256 files': the open_files limit must be {WHOLE}",
        ),
        (
            "CPUS",
            "nan",
            "SANDBOXKIT_LIMIT_CPUS='nan': the cpus limit must be a number of CPUs, at least 0.01",
        ),
        (
            "CPUS",
            "0",
            "SANDBOXKIT_LIMIT_CPUS='0': the cpus limit must be a number of CPUs, at least 0.01",
        ),
    ],
)
def test_an_invalid_limit_variable_fails_when_the_backend_is_built_and_names_it(
    monkeypatch: pytest.MonkeyPatch, local_root: Path, var: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(f"SANDBOXKIT_LIMIT_{var}", raw)
    with pytest.raises(InvalidLimitError) as raised:
        sandboxkit.get_backend("subprocess", root=local_root)
    assert str(raised.value) == message
    assert isinstance(raised.value, BackendMisconfiguredError)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"memory_mb": -5}, f"memory_mb=-5: the memory_mb limit must be {WHOLE}"),
        ({"disk_mb": 0}, f"disk_mb=0: the disk_mb limit must be {WHOLE}"),
        ({"open_files": "many"}, f"open_files='many': the open_files limit must be {WHOLE}"),
        ({"processes": True}, f"processes=True: the processes limit must be {WHOLE}"),
        ({"output_bytes": 1.5}, f"output_bytes=1.5: the output_bytes limit must be {WHOLE}"),
        ({"cpus": -1}, "cpus=-1: the cpus limit must be a number of CPUs, at least 0.01"),
    ],
)
def test_an_invalid_limit_keyword_fails_when_the_backend_is_built_and_names_it(
    local_root: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidLimitError) as raised:
        sandboxkit.get_backend("subprocess", root=local_root, **options)
    assert str(raised.value) == message
    with pytest.raises(InvalidLimitError) as direct:
        Limits(**options)  # type: ignore[arg-type]
    assert str(direct.value) == message


def test_a_sandboxs_cpus_are_a_setting_a_keyword_and_a_spec_field(
    monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    """``SANDBOXKIT_LIMIT_CPUS`` (a fraction, unlike the other limits), then ``cpus=``, set the
    CPUs of each sandbox; a spec's ``cpu`` sets them for its own. Too few for the kernel to
    bound (under 10 ms per second) is an error at once, not a sandbox that cannot run."""
    assert Limits().cpus == 1.0
    monkeypatch.setenv("SANDBOXKIT_LIMIT_CPUS", "0.25")
    assert Limits.from_env().cpus == 0.25
    assert Limits.from_env(cpus=3).cpus == 3
    with sandboxkit.get_backend("subprocess", root=local_root, cpus=0.5) as client:
        backend = client.backend_as(SubprocessBackend)
        assert backend.limits.cpus == 0.5
        with pytest.raises(ValueError, match=r"^cpus must be at least 0\.01, got 0$"):
            client.sandbox(cpu=0)
        cgroups = backend.confinement.cgroups
        if cgroups.cpu is None:
            pytest.skip("no writable cpu cgroup here")
        quota = "cpu.max" if cgroups.cpu_version == 2 else "cpu.cfs_quota_us"
        quotas = []
        for cpu in (None, 2.5):
            with client.sandbox(cpu=cpu) as sb:
                sb.exec(["true"], timeout=60)
                quotas.append(int((cgroups.cpu / sb.id / quota).read_text().split()[0]))
        assert quotas == [50000, 250000]
    monkeypatch.setenv("SANDBOXKIT_LIMIT_CPUS", "half")
    with pytest.raises(ValueError, match="SANDBOXKIT_LIMIT_CPUS='half'"):
        Limits.from_env()
    monkeypatch.setenv("SANDBOXKIT_LIMIT_CPUS", "0.001")
    at_least = (
        r"^SANDBOXKIT_LIMIT_CPUS='0\.001': the cpus limit must be a number of CPUs, at least 0\.01$"
    )
    with pytest.raises(InvalidLimitError, match=at_least):
        sandboxkit.get_backend("subprocess", root=local_root)


def test_doctor_says_which_limits_the_sandboxes_here_get(
    monkeypatch: pytest.MonkeyPatch, local_root: Path
) -> None:
    """``doctor`` reports what the backend's cgroups enforce, kernel memory included."""
    monkeypatch.setenv("SANDBOXKIT_LOCAL_ROOT", str(local_root))
    monkeypatch.setenv("SANDBOXKIT_LIMIT_CPUS", "0.5")
    monkeypatch.setenv("SANDBOXKIT_LIMIT_MEMORY_MB", "300")
    cgroups = Cgroups.shared()
    if cgroups.memory is None or cgroups.cpu is None or cgroups.uncounted:
        pytest.skip("no memory and cpu cgroups counting all kernel memory here")
    checks = {c.name: c for c in check_local(timeout=30)}
    sockets = (
        "socket buffers included (cgroup v2)"
        if cgroups.memory_version == 2
        else "socket buffers up to 300 MB more (their own limit) (cgroup v1)"
    )
    memory = f"300 MB per sandbox: processes, /dev/shm, files and kernel memory, {sockets}"
    cpu = f"0.5 CPU per sandbox, all its processes (cgroup v{cgroups.cpu_version})"
    assert (checks["memory limit"].status, checks["memory limit"].detail) == (Status.OK, memory)
    assert (checks["cpu limit"].status, checks["cpu limit"].detail) == (Status.OK, cpu)


def test_a_program_may_reserve_more_address_space_than_the_memory_limit(
    client: sandboxkit.SandboxClient,
) -> None:
    """Runtimes, sanitizers and some allocators reserve address space they never touch; only
    where no memory cgroup bounds the sandbox does a per-process address space limit (which
    refuses them) stand in."""
    reserve = f"import mmap\nm = mmap.mmap(-1, {4 * MEMORY_MB} << 20)\nprint('reserved')"
    with client.sandbox() as sb:
        r = sb.exec(["python3", "-c", reserve], timeout=60)
    if client.backend_as(SubprocessBackend).memory_limit == "rlimit":
        assert r.returncode == 1 and "Cannot allocate memory" in r.stderr
    else:
        assert (r.returncode, r.stdout) == (0, "reserved\n"), r.stderr


@pytest.mark.slow
def test_a_sandbox_has_its_own_storage_memory_and_cpu_groups_until_stopped(
    client: sandboxkit.SandboxClient, local_root: Path
) -> None:
    """All belong to the sandbox, not to one exec, and go with ``stop``, also while a program
    still writes there: a long run that creates and stops thousands of sandboxes leaves no
    mounts and no cgroups behind."""
    backend = client.backend
    assert isinstance(backend, SubprocessBackend)
    cgroups = backend.confinement.cgroups
    if backend.disk_limit != "tmpfs" or cgroups.memory is None or cgroups.cpu is None:
        pytest.skip("no tmpfs, memory or cpu cgroup here (tested as nobody below)")
    sb = client.sandbox(cpu=0.75)
    path = local_root / sb.id
    storage = [str(path)]
    if backend.isolation.tier is Tier.NAMESPACES:  # and its view of the host's devices, proc
        storage += [str(path / "view"), str(path / "view" / "proc")]
        if backend.isolation.uids is not None:  # and the judge's cache
            storage.append(str(path / "view" / "cache"))
    assert mounts_under(local_root) == storage
    assert shutil.disk_usage(path).total == backend.limits.disk_mb << 20
    seen = [host_groups(sb) for _ in range(2)]
    for controller in ("memory", "cpu"):
        groups = [group_of(s, controller) for s in seen]
        assert groups[0] == groups[1] and groups[0].endswith(f"/{sb.id}")
    group, cpu_group = cgroups.memory / sb.id, cgroups.cpu / sb.id
    if cgroups.memory_version == 2:
        assert int((group / "memory.max").read_text()) == MEMORY_MB << 20
    else:  # socket buffers have a limit of their own
        for limit_file in ("memory.limit_in_bytes", "memory.kmem.tcp.limit_in_bytes"):
            assert int((group / limit_file).read_text()) == MEMORY_MB << 20
    if cgroups.cpu_version == 2:
        assert (cpu_group / "cpu.max").read_text() == "75000 100000\n"
    else:
        assert int((cpu_group / "cpu.cfs_quota_us").read_text()) == 75000
        assert int((cpu_group / "cpu.cfs_period_us").read_text()) == 100000
    assert [info.id for info in client.list()] == [sb.id]
    writer = "while True:\n    open('x', 'a').write('.')\n"
    outcome: list[BaseException | sandboxkit.ExecResult] = []

    def write() -> None:
        try:
            outcome.append(sb.exec(["python3", "-c", writer], timeout=60))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    assert wait_until(lambda: (path / "workspace" / "x").exists(), timeout=30)
    sb.stop()
    thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], sandboxkit.SandboxLostError)
    assert mounts_under(local_root) == [] and leftovers(local_root, sb.id) == []
    assert client.list() == []
    # The groups go as soon as their killed processes are gone, at the latest with a later stop.
    assert wait_until(lambda: not processes_in(group) and not processes_in(cpu_group))
    client.sandbox().stop()
    assert not group.exists() and not cpu_group.exists()


CRASHING_RUN = """
import os, sandboxkit, sys
client = sandboxkit.get_backend("subprocess", root=sys.argv[1])
sb = client.sandbox(tags=["crashed"])
sb.write_file("result.txt", "kept")
sb.exec(["python3", "-c", "pass"], timeout=60)
print(sb.id, os.getpid(), flush=True)
os._exit(1)  # no stop, no atexit: as a run killed by the OOM killer or a node's preemption
"""


def test_a_crashed_runs_sandboxes_are_listed_read_and_reaped_with_their_storage(
    local_root: Path,
) -> None:
    """A sandbox's storage is a mount point, which cannot be renamed: ``stop`` (and so
    ``sandboxkit reap``) of a sandbox another process left behind still removes it all."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN, str(local_root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert crashed.returncode == 1, crashed.stderr
    sandbox_id, crashed_pid = crashed.stdout.split()
    client = sandboxkit.get_backend("subprocess", root=local_root)
    with client:
        if client.backend_as(SubprocessBackend).disk_limit == "tmpfs":
            assert os.path.ismount(local_root / sandbox_id)
        assert [info.id for info in client.list(tags=["crashed"])] == [sandbox_id]
        assert client.get(sandbox_id).read_file("result.txt") == b"kept"
        done = subprocess.run(
            [sys.executable, "-m", "sandboxkit", "reap", "--tag", "crashed"],
            capture_output=True,
            text=True,
            env={**env, "SANDBOXKIT_LOCAL_ROOT": str(local_root)},
            timeout=300,
        )
        assert done.returncode == 0 and "stopped 1 sandbox" in done.stdout, done.stderr
        assert client.list() == []
    assert mounts_under(local_root) == [] and leftovers(local_root, sandbox_id) == []
    # The crashed run's cgroups, empty (its processes died with it), go with the next run's.
    Cgroups.create().close()
    assert parents_of(int(crashed_pid)) == []


def parents_of(pid: int) -> list[Path]:
    """The private cgroup parents that process ``pid`` (of our pid namespace) made, in every
    hierarchy."""
    shared = Cgroups.shared()
    bases = {p.parent for p in (shared.memory, shared.pids, shared.cpu) if p is not None}
    namespace = os.stat("/proc/self/ns/pid").st_ino
    return sorted(g for base in bases for g in base.glob(f"sandboxkit-{namespace}-{pid}-*"))


KILLED_RUN = """
import json, os, sys
from sandboxkit.local.cgroup import Cgroups
from sandboxkit.local.isolation import Tier
busy, idle = Cgroups.create(), Cgroups.create()
for cgroups in (busy, idle):
    cgroups.sandbox("sbx-left", memory_bytes=64 << 20, cpus=1)
busy.confine(int(sys.argv[1]), sandbox="sbx-left", max_pids=4)
print(json.dumps([[str(p) for p in {c.memory, c.pids, c.cpu}] for c in (busy, idle)]))
os._exit(1)  # no close, no atexit: as a run the OOM killer or a preemption ended
"""


def test_a_killed_runs_cgroups_go_with_the_next_run_once_no_process_is_in_them() -> None:
    """The kernel keeps a group (and its memory accounting) until someone removes it, so each
    killed run would leave its private parents behind for good. The next ``Cgroups`` removes
    those whose maker has exited, but not while a process is still in one of their groups,
    and never a parent named for another pid namespace."""
    shared = Cgroups.shared()
    if shared.memory is None or shared.pids is None or shared.cpu is None:
        pytest.skip("no writable memory, cpu and pids cgroups here")
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_RUN, str(sleeper.pid)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=300,
        )
        assert killed.returncode == 1, killed.stderr
        busy, idle = ([Path(p) for p in c] for c in json.loads(killed.stdout))
        killed_pid = int(busy[0].name.split("-")[2])
        assert parents_of(killed_pid) == sorted(busy + idle)
        namespace = os.stat("/proc/self/ns/pid").st_ino + 1
        foreign = shared.memory.parent / f"sandboxkit-{namespace}-{killed_pid}-0000beef"
        foreign.mkdir()
        Cgroups.create().close()
        assert parents_of(killed_pid) == sorted(busy)  # the sleeper is still in their groups
    finally:
        sleeper.kill()
        sleeper.wait(timeout=60)
    try:
        Cgroups.create().close()
        assert parents_of(killed_pid) == []
        assert foreign.exists()  # another namespace's pid: not ours to judge
    finally:
        foreign.rmdir()


def test_a_sandbox_group_holds_its_commands_and_goes_with_drop() -> None:
    """Real processes in a private set of groups: the sandbox's groups bound memory and CPU,
    each command's its processes (inside the sandbox's where one hierarchy has both); ``drop``
    kills what is left and removes the groups (without waiting for the processes to exit),
    after which no command joins them; ``close`` removes the parents."""
    cgroups = Cgroups.create()
    if cgroups.memory is None or cgroups.pids is None or cgroups.cpu is None:
        cgroups.close()
        pytest.skip("no writable memory, cpu and pids cgroups here")
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        cgroups.sandbox("sbx-test", memory_bytes=64 << 20, cpus=0.5)
        cgroups.sandbox("sbx-test", memory_bytes=128 << 20, cpus=2)  # made already: kept
        limits = {
            (f.name, f.read_text().split()[0])
            for g in (cgroups.memory / "sbx-test", cgroups.cpu / "sbx-test")
            for f in g.iterdir()
            if f.name in ("memory.max", "memory.limit_in_bytes", "cpu.max", "cpu.cfs_quota_us")
        }
        assert {value for _, value in limits} == {str(64 << 20), "50000"}, limits
        confined = [cgroups.confine(p.pid, sandbox="sbx-test", max_pids=8) for p in sleepers[:2]]
        groups = [g for g in confined if g is not None]
        assert len(set(groups)) == 2
        assert [int((g / "pids.max").read_text()) for g in groups] == [8, 8]
        sandbox_groups = {cgroups.memory / "sbx-test", cgroups.cpu / "sbx-test"}
        for sleeper, group in zip(sleepers[:2], groups, strict=True):
            seen = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
            expected = f"/sbx-test/{group.name}" if cgroups.nested else "/sbx-test"
            for controller in ("memory", "cpu"):
                assert group_of(seen, controller).endswith(expected)
        cgroups.drop("sbx-test")
        assert [p.wait(timeout=30) for p in sleepers[:2]] == [-9, -9]
        with pytest.raises(FileNotFoundError):
            cgroups.confine(sleepers[2].pid, sandbox="sbx-test", max_pids=8)
        cgroups.drop("sbx-other")  # removes what was left while its processes were exiting
        assert [g for g in sandbox_groups if g.exists()] == []
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        cgroups.close()
    parents = (cgroups.memory, cgroups.pids, cgroups.cpu)
    assert [p for p in parents if p.exists()] == []


def test_a_sandbox_asking_more_cpus_than_a_group_above_has_gets_that_groups_bound() -> None:
    """Where this process's own group has fewer CPUs (a container's limit), a sandbox asking
    for more runs all the same, within that bound (v1 refuses the larger quota; v2 takes it
    and applies the smaller one)."""
    cgroups = Cgroups.create()
    try:
        if cgroups.cpu is None:
            pytest.skip("no writable cpu cgroup here")
        v2 = cgroups.cpu_version == 2
        above = cgroups.cpu / ("cpu.max" if v2 else "cpu.cfs_quota_us")
        above.write_text("50000 100000" if v2 else "50000")
        cgroups.sandbox("sbx-many", memory_bytes=64 << 20, cpus=4)
        quota = cgroups.cpu / "sbx-many" / ("cpu.max" if v2 else "cpu.cfs_quota_us")
        assert quota.read_text() == ("400000 100000\n" if v2 else "-1\n")
        cgroups.drop("sbx-many")
    finally:
        cgroups.close()


def test_a_processs_sandboxes_weigh_as_one_process_each_against_the_rest_of_the_machine() -> None:
    """The cpu parent of a process's sandboxes weighs one process's share per sandbox in it
    (never less than one), so that a pool on a busy machine gets what its sandboxes would get
    as processes, not one process's share for all of them; each sandbox's own group keeps the
    default weight, however many sessions its processes make."""
    cgroups = Cgroups.create()
    try:
        if cgroups.cpu is None:
            pytest.skip("no writable cpu cgroup here")
        name, one = ("cpu.weight", 100) if cgroups.cpu_version == 2 else ("cpu.shares", 1024)
        names = ["sbx-w1", "sbx-w2", "sbx-w3"]
        seen = [int((cgroups.cpu / name).read_text())]
        for sandbox in names:
            cgroups.sandbox(sandbox, memory_bytes=64 << 20, cpus=1)
            seen.append(int((cgroups.cpu / name).read_text()))
        own = {int((cgroups.cpu / sandbox / name).read_text()) for sandbox in names}
        for sandbox in names:
            cgroups.drop(sandbox)
            seen.append(int((cgroups.cpu / name).read_text()))
        assert (seen, own) == ([one, one, 2 * one, 3 * one, 2 * one, one, one], {one})
    finally:
        cgroups.close()


UNPRIVILEGED_LIMITS = """
import sandboxkit
from sandboxkit.backends.subprocess import SubprocessBackend
client = sandboxkit.get_backend("subprocess", memory_mb=256, disk_mb=4)
local = client.backend_as(SubprocessBackend)
print(local.memory_limit, local.disk_limit)
fill = "for i in range(3):\\n    open(f'f{i}', 'wb').write(b'x' * (2 << 20))\\nprint('wrote 6 MB')"
limit = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)"
with client.sandbox() as sb:
    print(sb.exec(["python3", "-c", fill], timeout=60).stdout.strip())
    print(sb.exec(["python3", "-c", limit], timeout=60).stdout.strip())
"""


@pytest.mark.slow
def test_an_unprivileged_host_bounds_memory_per_process_and_disk_per_file(
    as_nobody: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Where the host can neither write a memory or cpu cgroup nor mount (a user that is not
    root), the limits fall back to what each process and file can hold, and ``doctor`` says
    so."""
    run = as_nobody("-c", UNPRIVILEGED_LIMITS)
    doctor = as_nobody("-m", "sandboxkit", "doctor", "--backend", "subprocess")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["rlimit file size", "wrote 6 MB", "256"]
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "[warn] memory limit  2048 MB of address space per process (RLIMIT_AS)" in doctor.stdout
    assert "[warn] disk limit    256 MB per file only (RLIMIT_FSIZE)" in doctor.stdout
    assert "[warn] cpu limit     60 CPU seconds per process only (RLIMIT_CPU)" in doctor.stdout
