"""Which backend a name means, imported only when asked for (the shape of fsspec's registry).

Each backend has one :class:`BackendEntry`: the dotted path of its class plus the facts about
it (what to install, which credentials and endpoint it reads, how to probe that endpoint), which
``sandboxkit doctor`` reports from. Built-ins are the table below; third-party backends register
an entry, or a bare class or factory, under the ``sandboxkit.backends`` entry point group and
are found without any change here. Names are resolved in one place, :func:`resolve_backend`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .backends._facts import (
    AVIATO_DEFAULT_URL,
    AVIATO_KEY_VARS,
    AVIATO_URL_VAR,
    DAYTONA_DEFAULT_URL,
    DAYTONA_KEY_VAR,
    DAYTONA_URL_VAR,
    DOCKER_DEFAULT_HOST,
    DOCKER_HOST_VAR,
    E2B_DEFAULT_URL,
    E2B_KEY_VAR,
    E2B_URL_VAR,
    MODAL_DEFAULT_URL,
    MODAL_KEY_VARS,
    MODAL_URL_VAR,
    RAY_ADDRESS_VAR,
    RAY_DEFAULT_ADDRESS,
)
from .client import SandboxClient, sandbox_keywords
from .client import refuse_images as client_refuse_images
from .config import BACKEND_VAR, DEFAULT_BACKEND, setting
from .errors import UnknownBackendError, installed_for
from .keywords import accepted_keywords, check_keywords
from .protocol import Backend

ENTRY_POINT_GROUP = "sandboxkit.backends"
HTTP_PROBE = "sandboxkit.doctor:probe_http"
"""Any HTTP answer (401 and 404 included) proves the endpoint is there."""
GRPC_PROBE = "sandboxkit.doctor:probe_grpc"
"""A gRPC channel that becomes ready (TCP, and TLS for https)."""

Probe = Callable[[str, float], str]
"""``probe(url, timeout)``: how the endpoint answered (``"HTTP 401"``, say); raises if not."""


def _import(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return functools.reduce(getattr, attr.split("."), importlib.import_module(module_name))


@dataclass(frozen=True)
class BackendEntry:
    """One backend: where its class is, and what it needs from the machine it runs on.

    Built-ins are :data:`BUILTIN_BACKENDS`. A plugin declares the same facts by pointing its
    ``sandboxkit.backends`` entry point at an instance of this class (kept in a module that
    imports nothing heavy, since ``sandboxkit doctor`` loads it to read the facts); an entry
    point naming a bare class or factory still works, and declares no facts.
    """

    target: str
    """``module:attribute`` of a class or factory returning a :class:`Backend`; imported only
    when the backend is asked for."""
    extra: str | None = None
    """The pip extra of :attr:`package` that installs what the backend imports."""
    package: str | None = None
    """The distribution that provides the backend. None: ``sandboxkit`` for a built-in; for a
    plugin, the distribution that declares the entry point."""
    sdk: str | None = None
    """The distribution of the provider's SDK, whose version ``doctor`` reports; it says what to
    install when it is missing (None: nothing to look for)."""
    key_vars: tuple[str, ...] = ()
    """The credential variables the backend reads, in the order it reads them: the first is the
    one to set, the rest are fallbacks (old names). Their values are scrubbed from
    ``doctor``'s report; empty when it needs no credentials."""
    all_keys: bool = False
    """Whether every variable of :attr:`key_vars` is needed (a token's id and secret), rather
    than the first or a fallback."""
    url_var: str | None = None
    """The variable that overrides the endpoint; None when the backend has no endpoint."""
    default_url: str | None = None
    """The endpoint used when :attr:`url_var` is unset (None: the variable must be set)."""
    min_python: tuple[int, int] = (3, 10)
    """The oldest Python the backend's SDK runs on."""
    probe: str = HTTP_PROBE
    """``module:function`` that ``doctor`` calls as ``function(url, timeout)`` (a :data:`Probe`)
    to check the endpoint before any authenticated call; imported only then.
    :data:`HTTP_PROBE` and :data:`GRPC_PROBE` are provided."""

    @property
    def install(self) -> str:
        """The command that installs what the backend needs."""
        package = self.package or "sandboxkit"
        return f"pip install '{package}[{self.extra}]'" if self.extra else f"pip install {package}"

    def load(self, name: str) -> Callable[..., Backend]:
        """The class or factory, imported; a dependency that is not installed is a
        :class:`~sandboxkit.errors.BackendUnavailableError` saying what to install."""
        with installed_for(f"the {name!r} backend", self.install):
            factory: Callable[..., Backend] = _import(self.target)
        return factory

    def load_probe(self) -> Probe:
        probe: Probe = _import(self.probe)
        return probe


BUILTIN_BACKENDS: dict[str, BackendEntry] = {
    "subprocess": BackendEntry("sandboxkit.backends.subprocess:SubprocessBackend"),
    "daytona": BackendEntry(
        "sandboxkit.backends.daytona:DaytonaBackend",
        extra="daytona",
        sdk="daytona",
        key_vars=(DAYTONA_KEY_VAR,),
        url_var=DAYTONA_URL_VAR,
        default_url=DAYTONA_DEFAULT_URL,
    ),
    "aviato": BackendEntry(
        "sandboxkit.backends.aviato:AviatoBackend",
        extra="aviato",
        sdk="cwsandbox",
        key_vars=AVIATO_KEY_VARS,
        url_var=AVIATO_URL_VAR,
        default_url=AVIATO_DEFAULT_URL,
        min_python=(3, 11),
        probe=GRPC_PROBE,
    ),
    "modal": BackendEntry(
        "sandboxkit.backends.modal:ModalBackend",
        extra="modal",
        sdk="modal",
        key_vars=MODAL_KEY_VARS,
        all_keys=True,
        url_var=MODAL_URL_VAR,
        default_url=MODAL_DEFAULT_URL,
        probe=GRPC_PROBE,
    ),
    "e2b": BackendEntry(
        "sandboxkit.backends.e2b:E2BBackend",
        extra="e2b",
        sdk="e2b",
        key_vars=(E2B_KEY_VAR,),
        url_var=E2B_URL_VAR,
        default_url=E2B_DEFAULT_URL,
        min_python=(3, 11),
    ),
    "ray": BackendEntry(
        "sandboxkit.backends.ray:RayBackend",
        extra="ray",
        sdk="ray",
        url_var=RAY_ADDRESS_VAR,
        default_url=RAY_DEFAULT_ADDRESS,
        probe="sandboxkit.backends.ray:probe_ray",
    ),
    "docker": BackendEntry(
        "sandboxkit.backends.docker:DockerBackend",
        extra="docker",
        sdk="docker",
        url_var=DOCKER_HOST_VAR,
        default_url=DOCKER_DEFAULT_HOST,
        probe="sandboxkit.backends.docker:probe_docker",
    ),
}
ALIASES = {"local": "subprocess", "cwsandbox": "aviato"}


def _plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def backend_names() -> list[str]:
    """Every backend's own name: the built-ins, then the plugins (sorted); no aliases."""
    return [*BUILTIN_BACKENDS, *sorted(set(_plugins()) - set(BUILTIN_BACKENDS))]


def available_backends() -> list[str]:
    """Every name ``get_backend`` accepts, aliases included."""
    return sorted({*backend_names(), *ALIASES})


@dataclass(frozen=True)
class BackendChoice:
    """A backend name resolved by :func:`resolve_backend`; nothing of the backend imported."""

    name: str
    """The backend's own name: stripped, lower-cased, aliases followed."""
    source: str
    """Where the name came from: ``"argument"``, ``SANDBOXKIT_BACKEND`` (the environment or
    ``.env``) or ``"default"``."""
    plugin: EntryPoint | None = None
    """The entry point that declares it, for a plugin (a built-in wins over a plugin of the
    same name)."""

    @property
    def known(self) -> bool:
        return self.name in BUILTIN_BACKENDS or self.plugin is not None

    def entry(self) -> BackendEntry:
        """The backend's entry. A plugin's is what its entry point names (loaded), with
        :attr:`~BackendEntry.package` filled in from the distribution that declares it; a bare
        class or factory stands for an entry without facts."""
        return self._resolve()[0]

    def factory(self) -> Callable[..., Backend]:
        """The backend's class or factory, imported, not called."""
        entry, bare = self._resolve()
        return bare if bare is not None else entry.load(self.name)

    def _resolve(self) -> tuple[BackendEntry, Any]:
        """The entry, and a plugin's bare class or factory (None where the entry names it)."""
        if self.name in BUILTIN_BACKENDS:
            return BUILTIN_BACKENDS[self.name], None
        if self.plugin is None:
            raise UnknownBackendError(
                f"unknown sandbox backend {self.name!r}; available: "
                + ", ".join(available_backends())
            )
        declared = self.plugin.load()
        package = self.plugin.dist.name if self.plugin.dist is not None else None
        if isinstance(declared, BackendEntry):
            return (declared if declared.package else replace(declared, package=package)), None
        return BackendEntry(self.plugin.value, package=package), declared


def resolve_backend(name: str | None = None) -> BackendChoice:
    """What a backend name means: the argument, else ``SANDBOXKIT_BACKEND`` (the environment,
    then ``.env``), else ``subprocess``; stripped, lower-cased, aliases followed, then found
    among the built-ins and the plugins. An unknown name is a choice that is not
    :attr:`~BackendChoice.known` (its ``entry()`` and ``factory()`` raise
    :class:`UnknownBackendError`)."""
    if name:
        source = "argument"
    elif configured := setting(BACKEND_VAR):
        source, name = BACKEND_VAR, configured
    else:
        source, name = "default", DEFAULT_BACKEND
    requested = name.strip().lower()
    canonical = ALIASES.get(requested, requested)
    plugin = None if canonical in BUILTIN_BACKENDS else _plugins().get(canonical)
    return BackendChoice(canonical, source, plugin)


def backend_factory(name: str | None = None) -> tuple[str, Callable[..., Backend]]:
    """The canonical name and the class (or factory) of the backend ``get_backend(name)``
    makes: imported, not called."""
    choice = resolve_backend(name)
    return choice.name, choice.factory()


BackendLike = SandboxClient | Backend | str | None
"""What sandboxkit takes where a backend is wanted: a client, a backend, a backend's name, or
None for the configured one."""


def as_client(target: BackendLike) -> tuple[SandboxClient, bool]:
    """The client ``target`` means, and whether it was made here (the caller then closes it).

    A client is used as is and a backend wrapped: their owner closes them. A name, or None,
    goes through :func:`get_backend`. A client passes for a :class:`Backend` (its sync methods
    have the protocol's names), so it is recognised first.
    """
    given: object = target  # callers need not be type-checked
    if isinstance(given, SandboxClient):
        return given, False
    if given is None or isinstance(given, str):
        return get_backend(given), True
    if isinstance(given, Backend):
        return SandboxClient(given), False
    raise TypeError(
        "expected a SandboxClient, a Backend, a backend name or None, "
        f"got {type(given).__name__}: {given!r}"
    )


def sandbox_keywords_for(target: BackendLike) -> frozenset[str] | None:
    """The keywords a sandbox of ``target`` takes (for a name, its class is imported, not
    instantiated); None if its backend does not say."""
    if target is None or isinstance(target, str):
        return sandbox_keywords(backend_factory(target)[1])
    return sandbox_keywords(as_client(target)[0].backend)


def refuse_images(target: BackendLike, what: str) -> None:
    """:func:`sandboxkit.client.refuse_images` for ``target`` (for a name, its class is
    imported, not instantiated): before a reward or an environment is made, not at its first
    sandbox."""
    if target is None or isinstance(target, str):
        name, factory = backend_factory(target)
        client_refuse_images(factory, name, what)
    else:
        client = as_client(target)[0]
        client_refuse_images(client.backend, client.name, what)


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
