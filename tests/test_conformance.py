"""The backend contract, run on every backend in ``conftest.CONFORMANCE_BACKENDS``."""

from sandboxkit.testing.conformance import BackendConformance


class TestConformance(BackendConformance):
    pass
