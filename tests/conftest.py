"""Fixtures shared by the test modules.

``backend_client`` is parametrized over every backend the conformance suite runs on; a backend
that needs a server (an emulator) starts it through its own fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxkit import SandboxClient, get_backend

pytest_plugins = ["sandboxkit.testing.aviato"]

CONFORMANCE_BACKENDS = ["subprocess", "aviato"]


@pytest.fixture(params=CONFORMANCE_BACKENDS)
def backend_client(request: pytest.FixtureRequest) -> Iterator[SandboxClient]:
    if request.param == "aviato":
        request.getfixturevalue("aviato_env")
    with get_backend(request.param) as client:
        yield client


@pytest.fixture
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    """The local backend on a private root, so tests can inspect what it leaves on disk."""
    with get_backend("subprocess", root=tmp_path_factory.mktemp("sandboxes")) as client:
        yield client
