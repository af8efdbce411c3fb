"""Which backend a name means, imported only when asked for (the shape of fsspec's registry).

Built-in backends are a table of dotted paths plus the pip extra that provides their SDK;
third-party backends register a class or factory under the ``sandboxkit.backends`` entry point
group and are found without any change here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .client import SandboxClient, sandbox_keywords
from .config import BACKEND_VAR, DEFAULT_BACKEND, setting
from .errors import BackendUnavailableError, UnknownBackendError
from .keywords import accepted_keywords, check_keywords
from .protocol import Backend

ENTRY_POINT_GROUP = "sandboxkit.backends"


@dataclass(frozen=True)
class BackendEntry:
    target: str
    """``module:attribute`` of a class or factory returning a :class:`Backend`."""
    extra: str | None = None
    """The pip extra that installs what the backend imports."""


BUILTIN_BACKENDS: dict[str, BackendEntry] = {
    "subprocess": BackendEntry("sandboxkit.backends.subprocess:SubprocessBackend"),
    "daytona": BackendEntry("sandboxkit.backends.daytona:DaytonaBackend", extra="daytona"),
    "aviato": BackendEntry("sandboxkit.backends.aviato:AviatoBackend", extra="aviato"),
}
ALIASES = {"local": "subprocess", "cwsandbox": "aviato"}


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """Every name ``get_backend`` accepts, aliases included."""
    return sorted({*BUILTIN_BACKENDS, *ALIASES, *_plugins()})


def _load_builtin(name: str, entry: BackendEntry) -> Callable[..., Backend]:
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and not exc.name.startswith("sandboxkit"):
            raise BackendUnavailableError(
                f"the {name!r} backend needs {exc.name!r}, which is not installed: "
                f"pip install 'sandboxkit[{entry.extra}]'"
            ) from exc
        raise
    factory: Callable[..., Backend] = getattr(module, attr)
    return factory


def backend_factory(name: str | None = None) -> tuple[str, Callable[..., Backend]]:
    """The canonical name and the class (or factory) of the backend ``get_backend(name)``
    makes: imported, not called."""
    requested = (name or setting(BACKEND_VAR) or DEFAULT_BACKEND).strip().lower()
    canonical = ALIASES.get(requested, requested)
    if canonical in BUILTIN_BACKENDS:
        return canonical, _load_builtin(canonical, BUILTIN_BACKENDS[canonical])
    plugin = _plugins().get(canonical)
    if plugin is None:
        raise UnknownBackendError(
            f"unknown sandbox backend {requested!r}; available: " + ", ".join(available_backends())
        )
    factory: Callable[..., Backend] = plugin.load()
    return canonical, factory


def sandbox_keywords_for(client: SandboxClient | str | None) -> frozenset[str] | None:
    """The keywords a sandbox of ``client`` (a client, or a backend's name: its class is
    imported, not instantiated) takes; None if its backend does not say."""
    backend = client.backend if isinstance(client, SandboxClient) else backend_factory(client)[1]
    return sandbox_keywords(backend)


def get_backend(name: str | None = None, **options: Any) -> SandboxClient:
    """The backend named by the argument, else ``SANDBOXKIT_BACKEND``, else ``subprocess``.

    Options go to the backend's constructor (credentials, endpoint, limits, ...); one it does
    not take is a ``TypeError`` naming those it does.
    """
    canonical, factory = backend_factory(name)
    accepted = accepted_keywords(factory)
    if accepted is not None:
        check_keywords(f"get_backend({canonical!r}, ...)", options, accepted)
    backend = factory(**options)
    if not isinstance(backend, Backend):
        raise TypeError(f"backend {canonical!r} does not implement sandboxkit.protocol.Backend")
    return SandboxClient(backend)
