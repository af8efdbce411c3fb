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
for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
    os.kill(1, sig)  # an init gets only the signals it handles: none
libc = ctypes.CDLL(None, use_errno=True)
facts['unshare user'] = libc.unshare(0x10000000) == 0
print(sorted(facts.items()))
"""


@pytest.fixture(scope="module")
def docker() -> Iterator[SandboxClient]:
    with get_backend("docker") as client:
        yield client


def test_code_in_a_container_holds_no_privilege_and_nothing_of_the_host(
    docker: SandboxClient,
) -> None:
    with docker.sandbox() as sb:
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
            "unshare user": False,
        }
        after = sb.exec(["python3", "-c", "print('pid 1 lives')"], timeout=60)
        assert (after.returncode, after.stdout) == (0, "pid 1 lives\n")


def test_the_workdir_and_tmp_hold_disk_mb_each(docker: SandboxClient) -> None:
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
    with docker.sandbox(disk_mb=8) as sb:
        for path in ("fill.bin", "/tmp/fill.bin"):
            result = sb.exec(["python3", "-c", fill, path], timeout=60)
            assert result.stdout.split()[0] == "ENOSPC" and int(result.stdout.split()[1]) <= 8


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
