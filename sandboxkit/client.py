"""What ``get_backend`` returns: the user-facing client and sandbox handles over a backend.

The async methods (prefixed ``a``) are the real ones; the sync methods are derived from them
by :func:`sandboxkit.portal.blocking`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from .errors import BackendMisconfiguredError
from .keywords import check_keywords, suggest_keywords
from .portal import blocking
from .protocol import Backend, ExecResult, SandboxInfo, SandboxSpec, SandboxStatus, check_env

B = TypeVar("B")
_SPEC_FIELDS = ("workdir", "cpu", "memory_mb", "disk_mb", "lifetime_seconds")


def sandbox_keywords(backend: object) -> frozenset[str] | None:
    """Every keyword :meth:`SandboxClient.asandbox` takes for ``backend`` (a backend or its
    class); None if the backend does not say which provider options it reads."""
    provider: frozenset[str] | None = getattr(backend, "sandbox_options", None)
    if provider is None:
        return None
    return frozenset({"image", "env", "tags", *_SPEC_FIELDS, *provider})


def makes_images(backend: object) -> bool:
    """Whether sandboxes of ``backend`` (a backend or its class) are made from the image they
    are given: False where it says ``images = False``; one that does not say is taken at its
    word, as a provider with images."""
    return bool(getattr(backend, "images", True))


def refuse_images(backend: object, name: str, what: str) -> None:
    """Raise :class:`BackendMisconfiguredError` for ``what`` (an image, an image column) if
    ``backend`` (named ``name``) cannot make sandboxes from images: a program judged in the
    host's environment instead of the one its task names would get a reward that means
    nothing."""
    if not makes_images(backend):
        raise BackendMisconfiguredError(
            f"{what}: the {name} backend runs every sandbox in one environment (the local "
            "backend: this machine's /usr) and cannot make one from an image; use a backend "
            "that makes sandboxes from images, or name none"
        )


def _as_bytes(data: bytes | str | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


@suggest_keywords
class Sandbox:
    """A handle on one sandbox. Usable as a (sync or async) context manager that stops it."""

    def __init__(self, backend: Backend, info: SandboxInfo) -> None:
        self.backend = backend
        self.id = info.id
        self.tags = info.tags
        self.started_at = info.started_at

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} on {self.backend.name}>"

    async def aexec(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` (a list, never a shell string) and return its result."""
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, e.g. ['python', 'main.py']")
        check_env(env or {})
        return await self.backend.exec(
            self.id, list(argv), timeout=timeout, stdin=_as_bytes(stdin), cwd=cwd, env=env
        )

    async def awrite_file(self, path: str, data: bytes | str) -> None:
        """Write ``data`` to ``path`` (relative paths are under the working directory)."""
        await self.backend.write_file(self.id, path, _as_bytes(data) or b"")

    async def aread_file(self, path: str) -> bytes:
        return await self.backend.read_file(self.id, path)

    async def astop(self, missing_ok: bool = True) -> None:
        """Stop and delete the sandbox; a second stop is a no-op unless ``missing_ok`` is False."""
        await self.backend.stop(self.id, missing_ok=missing_ok)

    async def ainfo(self) -> SandboxInfo:
        return await self.backend.get(self.id)

    exec = blocking(aexec)
    write_file = blocking(awrite_file)
    read_file = blocking(aread_file)
    stop = blocking(astop)
    info = blocking(ainfo)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()


class Opening(Coroutine[Any, Any, Sandbox]):
    """What ``asandbox`` returns: awaited, the new sandbox; entered with ``async with``, the
    sandbox, stopped on leaving the block, as the sync ``with client.sandbox()`` does. It is the
    create's coroutine otherwise (``asyncio.create_task``, ``run_coroutine_threadsafe`` and
    ``spawn`` take it as they took the coroutine ``asandbox`` used to return)."""

    def __init__(
        self, create: Coroutine[Any, Any, Sandbox], stop: Callable[[Sandbox], Awaitable[None]]
    ) -> None:
        self._create = create
        self._stop = stop
        self._sandbox: Sandbox | None = None

    def __await__(self) -> Generator[Any, None, Sandbox]:
        return self._create.__await__()

    def send(self, value: Any) -> Any:
        return self._create.send(value)

    def throw(self, *exc: Any) -> Any:
        return self._create.throw(*exc)

    def close(self) -> None:
        self._create.close()

    async def __aenter__(self) -> Sandbox:
        self._sandbox = await self._create
        return self._sandbox

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sandbox is not None:
            await self._stop(self._sandbox)


@suggest_keywords
class SandboxClient:
    """The object :func:`sandboxkit.get_backend` returns: creates, finds and lists sandboxes."""

    def __init__(self, backend: Backend | SandboxClient) -> None:
        # A client passes for a Backend (its sync twins have the protocol's names): wrapping it
        # again would hand sync methods to code that awaits them, so it is unwrapped.
        if isinstance(backend, str):
            raise TypeError(
                f"SandboxClient wraps a backend object; for the backend named {backend!r}, "
                f"call sandboxkit.get_backend({backend!r})"
            )
        if not isinstance(backend, (SandboxClient, Backend)):
            raise TypeError(f"SandboxClient wraps a Backend, got {type(backend).__name__}")
        self._backend: Backend = backend.backend if isinstance(backend, SandboxClient) else backend

    @property
    def backend(self) -> Backend:
        """The backend this client drives, as the protocol promises it."""
        return self._backend

    def backend_as(self, kind: type[B]) -> B:
        """The backend, as the class whose own facts the caller reads (the local backend's
        ``isolation``, say); a ``TypeError`` if it is another backend."""
        if not isinstance(self._backend, kind):
            raise TypeError(
                f"this client's backend is a {type(self._backend).__name__}, not a {kind.__name__}"
            )
        return self._backend

    @property
    def name(self) -> str:
        return self.backend.name

    def __repr__(self) -> str:
        return f"<SandboxClient {self.name}>"

    def asandbox(
        self,
        /,
        *,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        tags: Iterable[str] = (),
        **options: Any,
    ) -> Opening:
        """Create a sandbox: ``await client.asandbox()``, or ``async with client.asandbox() as
        sb:`` to have it stopped at the end of the block. ``workdir``, ``cpu``, ``memory_mb``,
        ``disk_mb`` and ``lifetime_seconds`` fill the spec; any other keyword goes to the
        provider as is (one the backend says it does not read is a ``TypeError``). An
        ``image`` the backend cannot make a sandbox from (:func:`makes_images`) is a
        ``BackendMisconfiguredError``, never ignored."""
        return Opening(self._create(image, env, tags, options), Sandbox.astop)

    async def _create(
        self,
        image: str | None,
        env: Mapping[str, str] | None,
        tags: Iterable[str],
        options: dict[str, Any],
    ) -> Sandbox:
        if image is not None:
            refuse_images(self.backend, self.name, f"image {image!r}")
        accepted = sandbox_keywords(self.backend)
        if accepted is not None:
            check_keywords("sandbox()", options, accepted)
        known = {k: options.pop(k) for k in _SPEC_FIELDS if k in options}
        check_env(env or {})
        spec = SandboxSpec(
            image=image, env=dict(env or {}), tags=tuple(tags), options=options, **known
        )
        return Sandbox(self.backend, await self.backend.create(spec))

    async def aget(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox; ``SandboxNotFoundError`` if there is none."""
        return Sandbox(self.backend, await self.backend.get(sandbox_id))

    async def alist(
        self, *, tags: Iterable[str] = (), status: SandboxStatus | str | None = None
    ) -> list[SandboxInfo]:
        """Sandboxes carrying every tag in ``tags``, optionally in one status."""
        wanted = SandboxStatus(status) if status is not None else None
        return await self.backend.list(tags=tuple(tags), status=wanted)

    async def astop(self, sandbox_id: str, missing_ok: bool = True) -> None:
        """Stop a sandbox by id (one found by ``list``, say)."""
        await self.backend.stop(sandbox_id, missing_ok=missing_ok)

    async def aclose(self) -> None:
        """Release the backend's connections (sandboxes are left as they are)."""
        await self.backend.aclose()

    sandbox = blocking(asandbox)
    get = blocking(aget)
    list = blocking(alist)
    stop = blocking(astop)
    close = blocking(aclose)

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
