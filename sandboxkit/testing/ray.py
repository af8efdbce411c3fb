"""pytest fixtures that run the Ray backend on a local Ray cluster: no machines, no account.

Enable them in a ``conftest.py`` with ``pytest_plugins = ["sandboxkit.testing.ray"]``:

- ``ray_cluster`` (session): a head node of 16 logical CPUs started for the tests, no dashboard
  (skips, naming the extra, without ``ray``); this process stays connected to it until the
  session ends, then the cluster's processes are stopped;
- ``ray_env``: ``RAY_ADDRESS`` pointing at it, so code under test that calls
  ``get_backend("ray")``, and the child processes it starts, reach it.
"""

from __future__ import annotations

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
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": CLUSTER_CPUS,
            "include_dashboard": False,
            "object_store_memory": 100 * 2**20,
            "env_vars": node_environment(),
        },
    )
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_env(ray_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv(RAY_ADDRESS_VAR, ray_cluster.address)
    return ray_cluster
