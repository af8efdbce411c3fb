"""The docker backend's own guarantees on this machine's Engine (``scripts/docker-setup``):
what a container's code holds, its end at ``lifetime_seconds``, images never pulled, and
sandboxes found by label after their run was killed. The contract is ``test_conformance``'s
and the attacks ``test_hostile``'s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
import test_warm

from sandboxkit import SandboxClient, get_backend
from sandboxkit.errors import BackendError, BackendMisconfiguredError, SandboxNotFoundError
from sandboxkit.local import forkserver
from sandboxkit.session import Session

pytestmark = pytest.mark.usefixtures("docker_engine")

HELD = r"""
import ctypes, errno, os, signal
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
facts = {
    'uid': os.getuid(),
    'caps': status['CapEff'].strip() + status['CapBnd'].strip(),
    'no_new_privs': status['NoNewPrivs'].strip(),
    'seccomp': status['Seccomp'].strip(),
    'sockets': [p for p in ('/var/run/docker.sock', '/run/docker.sock') if os.path.exists(p)],
    'interfaces': sorted(os.listdir('/sys/class/net')),
}
for path in ('/etc/pwned', '/usr/pwned', '/pwned'):
    try:
        open(path, 'w')
        facts[path] = 'written'
    except OSError as e:
        facts[path] = errno.errorcode[e.errno]
try:
    open('/proc/1/mem', 'rb').read(1)
    facts['pid1 memory'] = 'read'
except OSError as e:
    facts['pid1 memory'] = errno.errorcode[e.errno]
pid1 = dict(line.split(':', 1) for line in open('/proc/1/status'))
facts['pid 1 uid'] = pid1['Uid'].split()
sent = set()
for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
    try:
        os.kill(1, sig)
        sent.add('sent')
    except OSError as e:
        sent.add(errno.errorcode[e.errno])
facts['signal pid 1'] = sorted(sent)
libc = ctypes.CDLL(None, use_errno=True)
facts['unshare user'] = libc.unshare(0x10000000) == 0
print(sorted(facts.items()))
"""


@pytest.fixture(scope="module")
def docker() -> Iterator[SandboxClient]:
    with get_backend("docker") as client:
        yield client


@pytest.fixture(params=["served", "engine"])
def exec_server(request: pytest.FixtureRequest) -> bool:
    """Both exec paths: through the container's server, and an Engine exec each."""
    return bool(request.param == "served")


def test_code_in_a_container_holds_no_privilege_and_nothing_of_the_host(
    exec_server: bool,
) -> None:
    """No capability, no way to gain one, no way out of the container's namespaces, and pid 1
    (the server, or the tiny init) out of reach: another uid, not dumpable."""
    with get_backend("docker", exec_server=exec_server) as docker, docker.sandbox() as sb:
        result = sb.exec(["python3", "-c", HELD], timeout=60)
        assert result.returncode == 0, result.stderr
        assert dict(eval(result.stdout)) == {
            "uid": 65534,
            "caps": "0000000000000000" * 2,
            "no_new_privs": "1",
            "seccomp": "2",
            "sockets": [],
            "interfaces": ["lo"],
            "/etc/pwned": "EROFS",
            "/usr/pwned": "EROFS",
            "/pwned": "EROFS",
            "pid1 memory": "EACCES",
            "pid 1 uid": ["65533"] * 4,
            "signal pid 1": ["EPERM"],
            "unshare user": False,
        }
        after = sb.exec(["python3", "-c", "print('pid 1 lives')"], timeout=60)
        assert (after.returncode, after.stdout) == (0, "pid 1 lives\n")


def test_the_workdir_tmp_and_dev_shm_hold_disk_mb_each(exec_server: bool) -> None:
    """Every place a sandbox can write is a tmpfs of ``disk_mb``: /dev/shm too (the Engine's
    own is 64 MB whatever ``disk_mb`` says)."""
    fill = (
        "import errno, sys\n"
        "n = 0\n"
        "try:\n"
        "    with open(sys.argv[1], 'wb') as f:\n"
        "        while True:\n"
        "            f.write(b'x' * 2**20); f.flush(); n += 1\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno], n)\n"
    )
    with get_backend("docker", exec_server=exec_server) as docker, docker.sandbox(disk_mb=8) as sb:
        for path in ("fill.bin", "/tmp/fill.bin", "/dev/shm/fill.bin"):
            result = sb.exec(["python3", "-c", fill, path], timeout=60)
            assert result.stdout.split()[0] == "ENOSPC", (path, result)
            assert int(result.stdout.split()[1]) <= 8, (path, result)


def test_a_sandbox_ends_by_itself_at_its_lifetime(docker: SandboxClient) -> None:
    sb = docker.sandbox(lifetime_seconds=1.5)
    assert sb.exec(["python3", "-c", "print('alive')"], timeout=60).stdout == "alive\n"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            docker.get(sb.id)
        except SandboxNotFoundError:
            break
        time.sleep(0.2)
    with pytest.raises(SandboxNotFoundError):
        sb.exec(["python3", "-c", "pass"], timeout=60)


def test_every_exec_gets_the_limits_whichever_way_it_runs(exec_server: bool) -> None:
    """An exec the container's server cannot take (stdin past a request's size) runs as an
    Engine exec, in a container with no limits of its own: it gets the same limits as the
    others, and its stdin whole."""
    limits = (
        "import resource, sys\n"
        "names = ('NOFILE', 'FSIZE', 'CPU', 'CORE')\n"
        "print([resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in names],"
        " len(sys.stdin.buffer.read()))\n"
    )
    options = {"exec_server": exec_server, "open_files": 100, "file_size_mb": 3}
    with get_backend("docker", cpu_seconds=7, **options) as docker, docker.sandbox() as sb:
        small = sb.exec(["python3", "-c", limits], stdin=b"x", timeout=60)
        large = sb.exec(["python3", "-c", limits], stdin=b"x" * (3 << 20), timeout=60)
    expected = f"[(100, 100), ({3 << 20}, {3 << 20}), (7, 8), (0, 0)]"
    assert (small.returncode, small.stdout) == (0, f"{expected} 1\n"), small
    assert (large.returncode, large.stdout) == (0, f"{expected} {3 << 20}\n"), large


@pytest.fixture(scope="module")
def image_with_a_volume(docker_engine: None) -> Iterator[str]:
    """The test image, declaring ``VOLUME /data`` (a writable volume of every container)."""
    import docker as sdk

    from sandboxkit.backends.docker import DEFAULT_IMAGE

    api = sdk.from_env(timeout=60).api
    tag = f"sandboxkit-test-volume:{uuid.uuid4().hex[:8]}"
    made = api.create_container(DEFAULT_IMAGE, command=["true"])
    try:
        repository, _, version = tag.partition(":")
        api.commit(made["Id"], repository=repository, tag=version, changes=["VOLUME /data"])
    finally:
        api.remove_container(made["Id"], force=True)
    yield tag
    api.remove_image(tag, force=True)


def test_a_volume_the_image_declares_is_bounded_as_the_workdir(image_with_a_volume: str) -> None:
    """An image's VOLUME would be a writable volume on the Engine's disk that no limit bounds:
    it is a tmpfs of ``disk_mb`` too, gone with the container."""
    fill = (
        "import errno, sys\n"
        "n = 0\n"
        "try:\n"
        "    with open('/data/fill.bin', 'wb') as f:\n"
        "        while True:\n"
        "            f.write(b'x' * 2**20); f.flush(); n += 1\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno], n)\n"
    )
    with (
        get_backend("docker") as docker,
        docker.sandbox(image=image_with_a_volume, disk_mb=8) as sb,
    ):
        result = sb.exec(["python3", "-c", fill], timeout=60)
        assert result.stdout.split()[0] == "ENOSPC" and int(result.stdout.split()[1]) <= 8, result


def test_a_sandbox_ends_at_its_lifetime_during_an_exec_too(exec_server: bool) -> None:
    """An exec that outlasts the sandbox's lifetime (a program that never ends, run without a
    timeout or a long one) ends with its sandbox, which is then gone."""
    with get_backend("docker", exec_server=exec_server) as docker:
        sb = docker.sandbox(lifetime_seconds=3)
        assert sb.exec(["python3", "-c", "print('alive')"], timeout=60).stdout == "alive\n"
        started = time.monotonic()
        with pytest.raises(SandboxNotFoundError):
            sb.exec(["python3", "-c", "import time; time.sleep(600)"], timeout=120)
        assert time.monotonic() - started < 60
        with pytest.raises(SandboxNotFoundError):
            docker.get(sb.id)


def test_the_container_server_outlives_its_commands_cpu_seconds() -> None:
    """``cpu_seconds`` bounds each command, never what serves them: the server's own CPU
    (reading a flood of output costs it about half a second a second) grows with every exec
    of a pooled sandbox's life, past what any one command may use."""
    import docker as sdk

    flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    spin = "while True:\n    pass\n"
    with get_backend("docker", cpu_seconds=1) as docker, docker.sandbox() as sb:
        pid = sdk.from_env(timeout=30).api.inspect_container(sb.id)["State"]["Pid"]

        def server_cpu() -> float:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        for _ in range(30):  # the server past the 2 s its container's limit would kill it at
            result = sb.exec(["python3", "-c", flood], timeout=3)
            assert result.truncated and result.returncode != 0
            if server_cpu() > 3:
                break
        assert server_cpu() > 3
        started = time.monotonic()
        spun = sb.exec(["python3", "-c", spin], timeout=60)
        assert spun.returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL), spun
        assert not spun.timed_out
        assert time.monotonic() - started < 30  # its own second and a bit: SIGXCPU, SIGKILL
        after = sb.exec(["python3", "-c", "print('served')"], timeout=60)
        assert (after.returncode, after.stdout) == (0, "served\n")


LEAVE = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(0, 160 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT: never removed
ctypes.memset(libc.shmat(segment, None, 0), 1, 160 << 20)  # 160 of the sandbox's 256 MB
libc.semget(0, 1, 0o1600)
libc.msgget(0, 0o1600)
for where in ('/dev/shm', '/tmp', '.'):
    with open(f'{where}/left-MARK', 'wb') as f:
        f.write(b'x' * (16 << 20))
os.makedirs('deep-MARK/er')
os.chmod('deep-MARK', 0)
if os.fork() == 0:  # a daemon, writing on
    os.setsid()
    while True:
        with open('/tmp/beat-MARK', 'a') as f:
            f.write('.')
        time.sleep(0.05)
os.setxattr('.', 'user.mark', b'MARK')
os.chmod('.', 0)  # the next completion could not even start here
"""
"""A completion that leaves all it can for the next in its sandbox: SysV IPC objects (a
shared memory segment holding most of the memory limit), files in /dev/shm, /tmp and the
workdir, an unreadable directory, a running daemon, the workdir's extended attributes and
mode 000."""

FINDS_NOTHING = r"""
import os, sys, time
time.sleep(0.3)  # for the daemon's next beat, if it were alive
found = [n for where in ('/dev/shm', '/tmp', '.') for n in os.listdir(where) if 'MARK' in n]
found += [line for k in ('shm', 'sem', 'msg') for line in list(open(f'/proc/sysvipc/{k}'))[1:]]
found += [n for n in os.listxattr('.')]
block = bytearray(160 << 20)  # the memory the segment took
sys.exit(f'found {found}' if found else 0)
"""
"""A completion that fails where it finds anything the last one left, or lacks the memory."""


def test_nothing_of_one_completion_reaches_the_next_through_a_rewards_pool(
    exec_server: bool,
) -> None:
    """A reward function's pool reuses its sandboxes between completions: each next one finds
    its sandbox as new (renewed in place), never what the last left (which would take its
    memory, or keep it from starting: 1.0 -> 0.0 for every later completion there)."""
    from sandboxkit.rewards import exec_reward

    mark = uuid.uuid4().hex
    options = {"exec_server": exec_server, "memory_mb": 256}
    with get_backend("docker", **options) as docker:
        reward = exec_reward(docker, pool_size=1, timeout=30)
        try:
            assert reward(["p"], [LEAVE.replace("MARK", mark)]) == [1.0]
            for _ in range(2):
                assert reward(["p"], [FINDS_NOTHING.replace("MARK", mark)]) == [1.0]
            assert reward.pool.stats.created == 1  # renewed, not replaced
        finally:
            reward.close()


DEEP = r"""
import os
for _ in range(3000):  # far past PATH_MAX, each level unreadable to its owner
    os.mkdir('d')
    os.chdir('d')
    for i in range(3):
        os.symlink('/etc', f'link{i}')
for _ in range(3000):
    os.chdir('..')
    os.chmod('d', 0)
print('planted')
"""


def test_a_renewal_empties_any_tree_and_refuses_a_used_network(exec_server: bool) -> None:
    """What a renewal cannot undo (a network namespace that carried traffic: sockets in
    TIME_WAIT hold ports for a minute) makes it fail, so that the pool replaces the sandbox;
    a tree however deep and unreadable is emptied, links never followed."""
    from sandboxkit.portal import run_sync

    with get_backend("docker", exec_server=exec_server) as docker, docker.sandbox() as sb:
        assert sb.exec(["python3", "-c", DEEP], timeout=120).stdout == "planted\n"
        run_sync(docker.backend.renew(sb.id))  # type: ignore[attr-defined]
        look = "import os; print(os.listdir('.'), os.listdir('/etc') != [])"
        assert sb.exec(["python3", "-c", look], timeout=60).stdout == "[] True\n"
        talk = (
            "import socket\n"
            "server = socket.create_server(('127.0.0.1', 0))\n"
            "socket.create_connection(server.getsockname()).close()\n"
        )
        assert sb.exec(["python3", "-c", talk], timeout=60).returncode == 0
        with pytest.raises(BackendError, match="network"):
            run_sync(docker.backend.renew(sb.id))  # type: ignore[attr-defined]


def test_rows_naming_images_the_engine_lacks_never_hold_up_their_batch(
    docker: SandboxClient,
) -> None:
    """Rows of several images no sandbox can be made from, waiting behind a full pool: each
    failed create wakes the waiters of every image (not its own only), so the reward call
    returns, with an infrastructure outcome (no reward) for those rows."""
    import threading

    from sandboxkit.rewards import exec_reward

    images = [None, "sandboxkit-no-such-a:1", "sandboxkit-no-such-b:1", "sandboxkit-no-such-c:1"]
    images += [None, "sandboxkit-no-such-b:1"]
    programs = ["import time; time.sleep(1)"] + ["print(1)"] * (len(images) - 1)
    reward = exec_reward(docker, image_column="image", pool_size=1, timeout=30, max_infra_share=1.0)
    scores: list[list[float | None]] = []
    call = threading.Thread(
        target=lambda: scores.append(reward(["p"] * len(images), programs, image=images)),
        daemon=True,
    )
    try:
        call.start()
        call.join(120)
        assert not call.is_alive(), "the reward call hangs"
        assert scores == [[1.0, None, None, None, 1.0, None]]
        assert reward.last_batch is not None and reward.last_batch.outcomes["infra"] == 4
    finally:
        if not call.is_alive():
            reward.close()


@pytest.mark.parametrize("image", ["sandboxkit-no-such-image:1", "localhost:1/nowhere/x:2"])
def test_an_image_the_engine_lacks_is_an_error_naming_it_and_never_pulled(
    docker: SandboxClient, image: str
) -> None:
    with pytest.raises(BackendMisconfiguredError, match=f"image '{image}' is not on the"):
        docker.sandbox(image=image)
    from sandboxkit.backends.docker import DockerBackend

    with pytest.raises(BackendError, match=image.rsplit(":", 1)[0]):
        docker.backend_as(DockerBackend).pull(image, progress=lambda line: None)


def test_sandboxes_a_killed_run_left_are_listed_and_reaped_by_label() -> None:
    tag = f"killed-run-{uuid.uuid4().hex[:8]}"
    code = (
        "import os, sys, time\n"
        "from sandboxkit import get_backend\n"
        "client = get_backend('docker')\n"
        f"ids = [client.sandbox(tags=[{tag!r}]).id for _ in range(2)]\n"
        "print(' '.join(ids), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None
        made = set(child.stdout.readline().decode().split())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with Session("docker", handle_signals=False) as session:
        assert {i.id for i in session.client.list(tags=[tag])} == made
        assert {i.id for i in session.reap(tags=[tag])} == made
        assert session.client.list(tags=[tag]) == []


def _foreign_container(labels: dict[str, str]) -> str:
    """A container this backend did not make, carrying ``labels`` (anyone with the Engine's
    socket can make one); removed by the ``docker_engine`` fixture, or the test."""
    import docker as sdk

    from sandboxkit.backends.docker import CREATOR_LABEL, DEFAULT_IMAGE, creator

    api = sdk.from_env(timeout=30).api
    made = api.create_container(
        DEFAULT_IMAGE, command=["true"], labels={**labels, CREATOR_LABEL: creator()}
    )
    return str(made["Id"])


def _remove(container: str) -> None:
    import docker as sdk

    sdk.from_env(timeout=30).api.remove_container(container, force=True)


def test_a_mangled_label_is_no_sandbox_and_keeps_no_one_from_listing(
    docker: SandboxClient,
) -> None:
    """Labels are anyone's to write: one nested too deep for a parser, or not of the shape
    sandboxkit writes, is a container that is not a sandbox; listing goes on for every user
    of the Engine."""
    from sandboxkit.backends.docker import LABEL

    tag = f"mangled-{uuid.uuid4().hex[:8]}"
    deep = "[" * 100_000 + "]" * 100_000
    shapes = [
        deep,
        '{"id": "' + deep + '"}',
        '{"id": 7, "tags": "' + tag + '", "started_at": "2020-01-01T00:00:00+00:00"}',
        '{"id": "x", "tags": [["' + tag + '"]], "started_at": "2020-01-01T00:00:00+00:00"}',
        '{"id": "x", "tags": ["' + tag + '"], "started_at": 5, "workdir": "/workspace"}',
    ]
    foreign = [_foreign_container({LABEL: shape}) for shape in shapes]
    try:
        with docker.sandbox(tags=[tag]) as sb:
            assert [info.id for info in docker.list(tags=[tag])] == [sb.id]
            assert sb.id in {info.id for info in docker.list()}
    finally:
        for container in foreign:
            _remove(container)


def test_reap_removes_only_sandboxes_that_carry_the_tag_whatever_a_label_claims(
    docker: SandboxClient,
) -> None:
    """A container whose label names another sandbox's id and the tag being reaped must not
    get that sandbox removed: a sandbox is the container the backend made under that name."""
    from sandboxkit.backends.docker import LABEL

    tag = f"forged-{uuid.uuid4().hex[:8]}"
    with docker.sandbox(tags=["innocent"]) as victim:
        forged = {
            "id": victim.id,
            "tags": [tag],
            "started_at": "2020-01-01T00:00:00+00:00",
            "workdir": "/workspace",
        }
        import json

        foreign = _foreign_container({LABEL: json.dumps(forged)})
        try:
            with Session("docker", handle_signals=False) as session:
                assert session.client.list(tags=[tag]) == []
                assert session.reap(tags=[tag]) == []
            alive = victim.exec(["python3", "-c", "print('alive')"], timeout=60)
            assert (alive.returncode, alive.stdout) == (0, "alive\n")
            with pytest.raises(SandboxNotFoundError):  # not a sandbox, by any name
                docker.get(foreign)
        finally:
            _remove(foreign)


def test_runsc_runs_a_sandbox_where_the_engine_has_it(docker: SandboxClient) -> None:
    from sandboxkit.backends.docker import probe_docker

    if "runsc" not in probe_docker("unix:///var/run/docker.sock", 30):
        pytest.skip("the Engine has no runsc runtime (gVisor): apt install runsc, then register it")
    with docker.sandbox(runtime="runsc") as sb:
        result = sb.exec(["python3", "-c", "import os; print(os.uname().release)"], timeout=60)
        assert result.returncode == 0 and result.stdout.strip() == "4.4.0"  # gVisor's kernel


def test_no_served_exec_inherits_the_parse_of_the_container_servers_source(
    docker: SandboxClient,
) -> None:
    """The container's server is started as a template is (``forkserver.LAUNCHER``): the
    parse of its module is freed, not copied into every exec's fork."""
    literal = '"""' + forkserver.__doc__.splitlines()[0]  # the module docstring's raw token
    with docker.sandbox() as sb:
        result = sb.exec(["python3", "-c", test_warm.PARSE_TOKENS, literal], timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "0\n", "")


def test_a_served_exec_gets_the_environment_an_engine_exec_gets_and_runs_python_warm(
    docker: SandboxClient,
) -> None:
    facts = (
        "import os, socket, sys\n"
        "env = dict(os.environ)\n"
        "assert env.pop('HOSTNAME') == socket.gethostname()\n"
        "print(sorted(env.items()), sys.executable, 'json' in sys.modules)\n"
    )
    with get_backend("docker", exec_server=False) as engine, engine.sandbox() as plain:
        by_engine = plain.exec(["python3", "-c", facts], timeout=60)
    with docker.sandbox() as sb:
        served = sb.exec(["python3", "-c", facts], timeout=60)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    expected = [("HOME", "/workspace"), ("LANG", "C.UTF-8"), ("PATH", path), ("TMPDIR", "/tmp")]
    assert (by_engine.returncode, by_engine.stdout) == (0, f"{expected} /usr/bin/python3 False\n")
    # The same, but forked from the server, which imported json: no interpreter started.
    assert (served.returncode, served.stdout) == (0, f"{expected} /usr/bin/python3 True\n")
