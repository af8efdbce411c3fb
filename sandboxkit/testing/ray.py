"""pytest fixtures that run the Ray backend on a local Ray cluster: no machines, no account.

Enable them in a ``conftest.py`` with ``pytest_plugins = ["sandboxkit.testing.ray"]``:

- ``ray_cluster`` (session): a head node of 16 logical CPUs started for the tests, no dashboard
  (skips, naming the extra, without ``ray``), in a temporary directory of its own: no cluster
  recorded on the machine or named by an ambient ``RAY_ADDRESS`` is joined, and no other
  program's record is touched. A head that does not come up within ``START_SECONDS`` (twice:
  ``START_ATTEMPTS``) fails the tests that need it at once rather than hanging them; its
  processes are stopped at the end;
- ``ray_env``: ``RAY_ADDRESS`` pointing at it, so code under test that calls
  ``get_backend("ray")``, and the child processes it starts, reach it; a test finds this
  process connected to that cluster or to none, and a cluster that stopped answering fails
  the test in seconds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from ..backends._facts import RAY_ADDRESS_VAR
from ..config import ISOLATION_VAR
from ..local.isolation import namespaces_failure

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

CLUSTER_CPUS = 16
"""Logical CPUs: more sandboxes (one CPU each) than a test holds at once, whatever the host
(an environment's judging pool of 8, with its rollouts' sandboxes and their spares)."""
START_SECONDS = 60
"""How long the head's GCS, then the head itself, may take to come up on a loaded machine."""
START_ATTEMPTS = 2
"""Heads started before the tests that need one fail: a head whose raylet did not register in
time (Ray's own 30 s, which a busy GCS can miss on a loaded machine) is stopped and another
started, once."""
ANSWER_SECONDS = 5.0
"""How long the running head has to accept a connection before each test that uses it."""


def node_environment() -> dict[str, str]:
    """The environment a local node's workers add: on a machine without user namespaces, the
    rlimits tier chosen outright, since the Ray backend refuses a node that only fell back to
    it (tests and benchmarks of this machine run its code anyway)."""
    return {ISOLATION_VAR: "rlimits"} if namespaces_failure() else {}


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Cluster]:
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        pytest.skip("ray is not installed: pip install 'sandboxkit[ray]'")
    # Short: the node's unix sockets live under it (108 bytes at most).
    temp = tempfile.mkdtemp(prefix="sbk-ray-", dir="/tmp")
    with pytest.MonkeyPatch.context() as env:
        env.delenv(RAY_ADDRESS_VAR, raising=False)
        env.setenv("RAY_TMPDIR", temp)  # where Ray records (and at the end forgets) the head
        ray.shutdown()  # a connection an earlier test left, to another cluster
        cluster = Cluster()
        try:
            for attempt in range(START_ATTEMPTS):
                os.makedirs(f"{temp}/ray", exist_ok=True)  # where the head's record goes
                try:
                    with pytest.MonkeyPatch.context() as start:
                        start.setenv("RAY_gcs_server_port_wait_time_s", str(START_SECONDS))
                        cluster.add_node(  # waits up to 30 s more for the head to register
                            num_cpus=CLUSTER_CPUS,
                            include_dashboard=False,
                            object_store_memory=100 * 2**20,
                            env_vars=node_environment(),
                            temp_dir=f"{temp}/ray-{attempt}",
                        )
                    break
                except Exception as exc:
                    cluster.shutdown()  # what of the head did start
                    cluster = Cluster()
                    if attempt + 1 == START_ATTEMPTS:
                        failure = f"the tests' Ray cluster did not come up: {exc!r}"
                        pytest.fail(failure, pytrace=False)
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_env(ray_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    import ray

    from ..backends.ray import probe_ray

    try:
        probe_ray(ray_cluster.address, ANSWER_SECONDS)
    except OSError as exc:
        pytest.fail(f"the tests' Ray cluster stopped answering: {exc!r}", pytrace=False)
    if ray.is_initialized() and ray.get_runtime_context().gcs_address != ray_cluster.address:
        ray.shutdown()  # joined another cluster: the code under test joins this one
    monkeypatch.setenv(RAY_ADDRESS_VAR, ray_cluster.address)
    return ray_cluster
