"""Test support for sandboxkit and for authors of backend plugins.

``sandboxkit.testing.conformance.BackendConformance`` states the backend contract once; a
backend passes it by subclassing it in a test module that provides a ``backend_client``
fixture.
"""
