"""pytest fixtures that run the docker backend on this machine's Docker Engine.

Enable them in a ``conftest.py`` with ``pytest_plugins = ["sandboxkit.testing.docker"]``:

- ``docker_engine`` (session): the Engine (``DOCKER_HOST``, else its unix socket) holding
  the test image (:data:`~sandboxkit.backends.docker.DEFAULT_IMAGE`, which
  ``scripts/docker-setup`` installs, starts and builds as root); skips, saying which is
  missing (the SDK, an Engine, the image) where one is. At the session's end it removes every
  container this process made, whatever a failed test left (they carry its ``host:pid``);
- ``docker_env``: the same, for a test (the name ``conftest.EMULATOR_ENVS`` expects).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

SETUP = "scripts/docker-setup"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound

        from ..backends.docker import CREATOR_LABEL, DEFAULT_IMAGE, creator
    except ImportError:
        pytest.skip("the docker SDK is not installed: pip install 'sandboxkit[docker]'")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except DockerException as exc:
        pytest.skip(f"no Docker Engine answers ({exc}); as root, {SETUP} starts one")
    try:
        try:
            client.images.get(DEFAULT_IMAGE)
        except ImageNotFound:
            pytest.skip(f"the Engine has no {DEFAULT_IMAGE}; as root, {SETUP} builds it")
        yield
    finally:
        mine = client.containers.list(all=True, filters={"label": f"{CREATOR_LABEL}={creator()}"})
        for container in mine:
            with contextlib.suppress(DockerException):  # removed meanwhile (--rm)
                container.remove(force=True, v=True)
        client.close()


@pytest.fixture
def docker_env(docker_engine: None) -> None:
    """The Engine, for a test that gets the docker backend by name."""
