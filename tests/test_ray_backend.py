"""The Ray backend beyond the shared contract: what outlives a driver, what reaches a sandbox
from the driver, and where a sandbox goes (on a local Ray cluster, ``sandboxkit.testing.ray``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxkit import SandboxClient, Session, get_backend
from sandboxkit.config import ISOLATION_VAR, child_pythonpath
from sandboxkit.errors import (
    BackendMisconfiguredError,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
)

pytest.importorskip("ray")

import ray
from ray._private.services import canonicalize_bootstrap_address

from sandboxkit.backends.ray import NAMESPACE, OWNER_TAG, _RemoteSandbox, _running_cluster
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.portal import run_sync
from sandboxkit.protocol import SandboxSpec
from sandboxkit.testing.ray import CLUSTER_CPUS, node_environment
from sandboxkit.testing.remote import wait_until

pytestmark = pytest.mark.slow  # each test starts Ray actors, a second or more on this machine
SECRET_VAR = "SANDBOXKIT_RAY_DRIVER_SECRET"


@pytest.fixture
def ray_client(ray_env: object) -> Iterator[SandboxClient]:
    with get_backend("ray") as client:
        yield client


@pytest.fixture
def tag(ray_client: SandboxClient) -> Iterator[str]:
    tag = f"test-ray-{uuid.uuid4().hex[:10]}"
    yield tag
    for info in ray_client.list(tags=[tag]):
        ray_client.stop(info.id)


def driver(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``code`` run by a new Python process: another driver of the cluster."""
    env = {**env, "PYTHONPATH": child_pythonpath()}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_another_driver_lists_gets_and_stops_by_tags(ray_client: SandboxClient, tag: str) -> None:
    """Tags live with the actor, not in the driver that made it: a fresh backend (no handle
    cached) finds the sandbox by them, and stopping it there ends it for its maker too."""
    sb = ray_client.sandbox(tags=[tag, "role=a"], env={"ROLE": "a"})
    with get_backend("ray") as other:
        assert [i.id for i in other.list(tags=[tag, "role=a"])] == [sb.id]
        assert other.list(tags=[tag, "role=b"]) == []
        found = other.get(sb.id)
        assert found.info().tags == (tag, "role=a")
        assert found.exec(["sh", "-c", "echo $ROLE"]).stdout == "a\n"
        other.stop(sb.id)
        assert other.list(tags=[tag]) == []
    with pytest.raises((SandboxLostError, SandboxNotFoundError)):
        sb.exec(["true"])


def test_a_sandbox_outlives_its_driver_and_a_new_driver_reaps_it(
    ray_client: SandboxClient, tag: str
) -> None:
    """Detached actors: a driver killed before its cleanup leaves a working sandbox that
    `sandboxkit reap --tag` in another process finds and stops."""
    made = driver(
        f"""
        import os
        from sandboxkit import get_backend
        sb = get_backend("ray").sandbox(tags=[{tag!r}, "sandboxkit-run=crashed"])
        sb.write_file("state.txt", "left behind")
        print(sb.id, flush=True)
        os._exit(9)  # no cleanup, no ray.shutdown
        """,
        dict(os.environ),
    )
    assert made.returncode == 9, made.stderr
    sandbox_id = made.stdout.strip()
    assert [i.id for i in ray_client.list(tags=[tag])] == [sandbox_id]
    assert ray_client.get(sandbox_id).exec(["cat", "state.txt"]).stdout == "left behind"

    reaped = subprocess.run(
        [sys.executable, "-m", "sandboxkit", "reap", "--backend", "ray", "--tag", tag],
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert reaped.returncode == 0, reaped.stdout + reaped.stderr
    assert "stopped 1 sandbox" in reaped.stdout
    assert ray_client.list(tags=[tag]) == []
    with pytest.raises(SandboxNotFoundError):
        ray_client.get(sandbox_id)


def test_a_client_keeps_its_sandboxes_across_a_new_ray_session_of_its_process(
    ray_client: SandboxClient, tag: str
) -> None:
    """An actor handle is valid only in the Ray session that got it: after ``ray.shutdown()``
    and a new ``ray.init()`` in the driver (a benchmark that moves to a bigger cluster), a
    handle the backend had kept failed every call on the sandbox, its stop too."""
    sb = ray_client.sandbox(tags=[tag])
    assert sb.exec(["echo", "before"]).stdout == "before\n"
    ray.shutdown()
    assert sb.exec(["echo", "after"]).stdout == "after\n"  # connected again, found by name
    sb.stop()
    assert ray_client.list(tags=[tag]) == []


def test_nothing_of_the_drivers_environment_reaches_a_sandbox() -> None:
    """A driver with a secret starts a local Ray on demand (no address anywhere, and a Ray
    directory of its own, so it finds no cluster of other tests): Ray's workers inherit the
    secret, the programs in its sandboxes see none of it, neither in their environment nor in
    any process they can see."""
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: its sockets live in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": ray_dir}
    env |= node_environment()
    secret = f"secret-{uuid.uuid4().hex}"
    scan = (
        "import glob, os\n"
        f"print(os.environ.get({SECRET_VAR!r}))\n"
        "seen = []\n"
        "for path in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        f"        seen.append({secret!r}.encode() in open(path, 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
        "print(any(seen), len(seen))\n"
    )
    done = driver(
        f"""
        import json, os, ray
        from sandboxkit import get_backend
        with get_backend("ray") as client, client.sandbox() as sb:
            result = sb.exec(["python3", "-c", {scan!r}], timeout=60)
            worker = ray.get(ray.remote(lambda: os.environ.get({SECRET_VAR!r})).remote())
            print(json.dumps([result.stdout, result.stderr, worker]))
        """,
        {**env, SECRET_VAR: secret},
    )
    shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    stdout, stderr, worker = json.loads(done.stdout.strip().splitlines()[-1])
    assert worker == secret  # what Ray itself passes on to its workers
    seen_var, seen_anywhere, processes = stdout.split()
    assert (seen_var, seen_anywhere) == ("None", "False"), stderr
    assert int(processes) > 0


def test_a_sandbox_no_node_can_hold_fails_at_once(ray_client: SandboxClient, tag: str) -> None:
    with pytest.raises(BackendMisconfiguredError, match=r"no node of the Ray cluster has 64 CPUs"):
        ray_client.sandbox(tags=[tag], cpu=64)
    with pytest.raises(BackendMisconfiguredError, match=r"and 100000000 MB"):
        ray_client.sandbox(tags=[tag], memory_mb=10**8)
    assert ray_client.list(tags=[tag]) == []


def test_a_sandbox_that_fits_waits_for_room_then_gives_up(ray_env: object, tag: str) -> None:
    """Placement by CPU: with all the cluster's CPUs held by one sandbox, the next waits for
    room until ``create_timeout``, then fails as a transient error leaving no actor behind;
    once room is made, it is placed."""
    # Generous where room must come (an earlier test's sandboxes may still be going away on a
    # loaded machine); 2 s for the create that must give up.
    with get_backend("ray", create_timeout=60) as roomy:
        big = roomy.sandbox(tags=[tag], cpu=CLUSTER_CPUS)
        with (
            get_backend("ray", create_timeout=2) as client,
            pytest.raises(TransientBackendError, match=r"no room on the Ray cluster"),
        ):
            client.sandbox(tags=[tag])
        assert [i.id for i in roomy.list(tags=[tag])] == [big.id]
        big.stop()
        with roomy.sandbox(tags=[tag], cpu=0.5) as sb:
            assert sb.exec(["echo", "placed"]).stdout == "placed\n"


def waits_for_room(tag: str) -> bool:
    """Whether an actor of a sandbox tagged ``tag`` waits for room. Its name is listed from
    its registration on, but Ray destroys an actor (detached too) whose owner dies before its
    creation was submitted: only one pending creation outlives its driver."""
    if not ray.is_initialized():
        return False
    actors = ray._private.state.actors().values()
    return any(tag in (a["Name"] or "") and a["State"] == "PENDING_CREATION" for a in actors)


def test_a_sandbox_a_dead_driver_left_waiting_for_room_is_found_and_reaped(
    ray_client: SandboxClient, tag: str
) -> None:
    """A driver killed while its create waits for room leaves an actor that Ray would place
    later, holding a CPU with no one to stop it: its tags find it at once, and stopping it
    does not wait for the room it never got."""
    big = ray_client.sandbox(tags=[tag], cpu=CLUSTER_CPUS)
    code = (
        f"from sandboxkit import get_backend\nget_backend('ray').sandbox(tags=[{tag!r}, 'waiting'])"
    )
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    with subprocess.Popen([sys.executable, "-c", code], env=env) as maker:
        try:  # killed once its create waits for room (its start takes seconds under load)
            assert wait_until(lambda: waits_for_room(tag), timeout=120)
        finally:
            maker.kill()
    assert maker.returncode == -9
    waiting = ray_client.list(tags=[tag, "waiting"])
    assert len(waiting) == 1
    with Session(ray_client, handle_signals=False) as session:
        assert [i.id for i in session.reap(tags=[tag, "waiting"])] == [waiting[0].id]
    assert [i.id for i in ray_client.list(tags=[tag])] == [big.id]
    big.stop()
    with ray_client.sandbox(tags=[tag], cpu=CLUSTER_CPUS) as sb:  # nothing holds a CPU any more
        assert sb.exec(["true"]).ok


def test_doctor_reports_the_ray_backend(ray_env: object) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandboxkit", "doctor", "--backend", "ray", "--timeout", "30"],
        env={**os.environ, "PYTHONPATH": child_pythonpath()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ray: ready  <- selected" in done.stdout
    assert "(RAY_ADDRESS) reachable (TCP connect" in done.stdout
    assert "[ok  ] api " in done.stdout


@pytest.mark.parametrize("chosen", ["auto", "rlimits"])
def test_a_node_without_namespaces_is_refused_unless_its_environment_chose_rlimits(
    ray_client: SandboxClient, chosen: str
) -> None:
    """On a node whose sandboxes fell back to the rlimits tier, code has the node's network,
    and with it Ray's GCS, which asks no credentials: the actor refuses to make a sandbox there
    unless the node's environment set that tier itself."""
    ray_client.list()  # this process joins the cluster
    env = {"SANDBOXKIT_BWRAP": "/nonexistent/bwrap", ISOLATION_VAR: chosen}  # no namespaces
    ray_id = f"sbx-tier{uuid.uuid4().hex[:8]}"
    actor = _RemoteSandbox.options(
        name=f"{ray_id} {{}}", namespace=NAMESPACE, runtime_env={"env_vars": env}
    ).remote({}, ray_id)
    try:
        if chosen == "auto":
            with pytest.raises(BackendMisconfiguredError, match=r"GCS.*SANDBOXKIT_ISOLATION="):
                ray.get(actor.create.remote(SandboxSpec()), timeout=120)
            return
        ray.get(actor.create.remote(SandboxSpec()), timeout=120)
        made = ray.get(actor.exec.remote(["echo", "made"], 30, None, None, None), timeout=60)
        assert made.stdout == "made\n"
        ray.get(actor.stop.remote(), timeout=60)
    finally:
        ray.kill(actor)


def test_a_sandbox_whose_actor_died_is_stopped_by_the_next_on_its_node(
    ray_client: SandboxClient, tag: str
) -> None:
    """An actor killed before it stopped its sandbox (``ray.kill``, the OOM killer) leaves the
    sandbox's directory on its node (on a root node a tmpfs, in memory): the next sandbox
    made there stops it, and no sandbox of a live actor."""
    local = SubprocessBackend()
    doomed, kept = ray_client.sandbox(tags=[tag]), ray_client.sandbox(tags=[tag])
    assert len(run_sync(local.list(tags=[tag]))) == 2
    name = next(
        n
        for n in ray.util.list_named_actors(all_namespaces=True)
        if n["name"].startswith(doomed.id)
    )
    ray.kill(ray.get_actor(name["name"], NAMESPACE))
    assert len(run_sync(local.list(tags=[tag]))) == 2  # the directory outlived its actor
    ray_client.sandbox(tags=[tag])
    assert len(run_sync(local.list(tags=[tag]))) == 2  # the orphan went, the next came
    assert kept.exec(["echo", "alive"]).stdout == "alive\n"
    assert all(not t.startswith(OWNER_TAG) for t in kept.info().tags)


def test_a_cluster_that_does_not_answer_is_no_cluster_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster a killed ``ray start`` left recorded on this machine is no cluster to join
    (``ray.init`` would retry its address for minutes: a create starts a local Ray instead);
    an address given outright that does not answer is a transient error, at once."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    tmp_path = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: sockets live in it
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(dead)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    found = canonicalize_bootstrap_address(None)  # what ray.init would have joined
    assert found is not None and found.endswith(dead.partition(":")[2])
    assert _running_cluster(None) is None
    done = driver(
        f"""
        from sandboxkit import get_backend
        from sandboxkit.errors import TransientBackendError
        try:
            with get_backend("ray", address={dead!r}) as client:
                client.list()
        except TransientBackendError as exc:
            print("transient:", exc)
        """,
        dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"transient: no Ray cluster answers at {dead}"), done.stdout


def pytest_with_the_fixtures(
    test_file: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A pytest run of ``test_file`` with sandboxkit's Ray fixtures, in its directory, its
    tests in their order (not the outer run's options: CI's shuffles)."""
    env = {k: v for k, v in env.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "sandboxkit.testing.ray",
            "-p",
            "no:cacheprovider",
            "--timeout=120",
            test_file.name,
        ],
        cwd=test_file.parent,
        env={**env, "PYTHONPATH": child_pythonpath()},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tests_cluster_is_their_own_whatever_the_machine_records() -> None:
    """The fixture's cluster, not one an ambient ``RAY_ADDRESS`` names or one recorded on the
    machine (both dead here: joining either would hang), and its start and end leave the
    machine's record alone; a test that joined another cluster is joined to it again."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    tmp_path = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: sockets live in it
    (tmp_path / "ray").mkdir()
    record = tmp_path / "ray" / "ray_current_cluster"
    record.write_text(dead)
    (tmp_path / "test_own.py").write_text(
        textwrap.dedent(
            """
            import ray
            from sandboxkit import get_backend

            def test_first(ray_env):
                ray.init(address="local", include_dashboard=False)  # another cluster

            def test_second(ray_env):
                with get_backend("ray") as client, client.sandbox() as sb:
                    assert sb.exec(["echo", "ok"], timeout=60).stdout == "ok\\n"
                assert ray.get_runtime_context().gcs_address == ray_env.address
            """
        )
    )
    env = {**os.environ, "RAY_ADDRESS": dead, "RAY_TMPDIR": str(tmp_path)}
    done = pytest_with_the_fixtures(tmp_path / "test_own.py", env)
    recorded = record.read_text()
    shutil.rmtree(tmp_path, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
    assert recorded == dead


def test_a_head_that_does_not_register_in_time_is_stopped_and_started_again_once(
    tmp_path: Path,
) -> None:
    """Ray gives a head's raylet 30 s to register with its GCS, which a busy GCS on a loaded
    machine can miss (seen in CI): that head is stopped and another started, once; the test
    runs on the second. Here the first start is made to fail as Ray fails it, after its
    processes started."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            from ray.cluster_utils import Cluster

            real = Cluster.add_node
            starts = []

            def add_node(self, **kwargs):
                starts.append(kwargs["temp_dir"])
                node = real(self, **kwargs)
                if len(starts) == 1:
                    raise Exception("The current node timed out during startup.")
                return node

            Cluster.add_node = add_node
            """
        )
    )
    (tmp_path / "test_again.py").write_text(
        textwrap.dedent(
            """
            from sandboxkit import get_backend
            from sandboxkit.testing.remote import processes_with
            from conftest import starts

            def test_on_the_second_head(ray_env):
                with get_backend("ray") as client, client.sandbox() as sb:
                    assert sb.exec(["echo", "ok"], timeout=60).stdout == "ok\\n"
                assert len(starts) == 2 and starts[0] != starts[1]
                assert processes_with(starts[0]) == []  # the first head's processes stopped
            """
        )
    )
    done = pytest_with_the_fixtures(tmp_path / "test_again.py", dict(os.environ))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout


def test_a_cluster_that_stopped_fails_the_tests_that_need_it_in_seconds(tmp_path: Path) -> None:
    """The session's head dies (another program's ``ray stop``, the OOM killer): the tests
    after it fail at once, naming it, instead of waiting on its address for minutes."""
    (tmp_path / "test_stopped.py").write_text(
        textwrap.dedent(
            """
            from sandboxkit import get_backend

            def test_first(ray_env):
                with get_backend("ray") as client:
                    client.list()
                ray_env.head_node.kill_all_processes(check_alive=False, allow_graceful=False)

            def test_second(ray_env):
                with get_backend("ray") as client:
                    client.list()
            """
        )
    )
    done = pytest_with_the_fixtures(tmp_path / "test_stopped.py", dict(os.environ))
    assert done.returncode == 1, done.stdout[-3000:]
    summary = re.search(r"1 passed, 1 error in ([\d.]+)s", done.stdout)
    assert summary is not None, done.stdout[-3000:]
    assert "the tests' Ray cluster stopped answering" in done.stdout
    assert float(summary.group(1)) < 60  # the cluster's start, the first test, then at once
