"""The exceptions sandboxkit raises; every backend maps its SDK's errors into these.

Callers above the backends (pools, rewards) decide on retries and rewards by class alone:
``TransientBackendError`` is worth retrying, ``SandboxLostError`` needs a new sandbox, and the
rest are the caller's or the configuration's fault.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class SandboxError(Exception):
    """Base class of every sandboxkit error."""


class SandboxNotFoundError(SandboxError):
    """The sandbox id is unknown to the backend, or the sandbox was already stopped."""


class SandboxTimeoutError(SandboxError):
    """A control-plane operation (create, upload, ...) did not finish in time.

    An exec that runs past its own timeout is not an error: it returns an ``ExecResult`` with
    ``timed_out=True``.
    """


class SandboxFileError(SandboxError, OSError):
    """A file of a sandbox could not be read, written or removed: missing, a link the program
    planted (never followed), a FIFO or device (never opened). An ``OSError`` too, with the
    ``errno`` when the system gave one, so code written for local files handles it unchanged."""


class SandboxFileNotFoundError(SandboxFileError, FileNotFoundError):
    """No such file (or directory on the way) in the sandbox."""


class SandboxIsADirectoryError(SandboxFileError, IsADirectoryError):
    """A file was asked for where the sandbox has a directory."""


class BackendError(SandboxError):
    """A failure of the provider or of the local machinery rather than of the program run."""


class TransientBackendError(BackendError):
    """Rate limiting, 5xx answers, dropped connections: retrying later may succeed."""


class RateLimitedError(TransientBackendError):
    """The provider refused a call for its rate (HTTP 429, gRPC ``RESOURCE_EXHAUSTED``).

    Retrying later may succeed, as for any transient error, but a pool also takes it as the
    signal to have fewer calls in flight. ``retry_after`` is the wait the provider asked for,
    in seconds, when it said one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SandboxLostError(BackendError):
    """The sandbox died under a running call; the work must move to another sandbox."""


class BackendUnavailableError(BackendError):
    """The backend cannot be used here: its SDK is missing or the platform lacks a feature."""


class MissingDependencyError(BackendUnavailableError, ModuleNotFoundError):
    """A third-party module that an optional part of sandboxkit needs is not installed; the
    message says which extra installs it. Also a ``ModuleNotFoundError`` (``name`` is the
    missing module), so ``except ImportError`` around an optional import still catches it."""


@contextlib.contextmanager
def installed_for(what: str, install: str) -> Iterator[None]:
    """Imports in the block that find a third-party module missing raise
    :class:`MissingDependencyError` saying that ``what`` needs it and how to ``install`` it
    (each optional module wraps its own third-party imports in it, so importing it on a core
    install names the extra; the outermost block says it, being nearest to what the user
    asked for); a missing module of sandboxkit's own is a bug and stays what it is."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith("sandboxkit"):
            raise
        raise MissingDependencyError(
            f"{what} needs {exc.name!r}, which is not installed: {install}", name=exc.name
        ) from exc


class BackendMisconfiguredError(BackendError):
    """Missing or invalid credentials, endpoint or option; retrying cannot help."""


class InvalidLimitError(BackendMisconfiguredError, ValueError):
    """A resource limit (a ``SANDBOXKIT_LIMIT_*`` variable or a keyword) that no sandbox could
    run under: not a number, negative, or zero; the message names the setting, its value and
    what it may be."""


class AuthenticationError(BackendMisconfiguredError):
    """The provider refused the credentials (401/403)."""


class UnknownBackendError(SandboxError, LookupError):
    """No backend of that name is registered."""


class IsolationUnavailableError(BackendUnavailableError):
    """``SANDBOXKIT_ISOLATION=strict`` was asked for but namespaces cannot be had here."""


class DeadlineExceededError(SandboxError):
    """An evaluation was cut off at its deadline (a reward function's ``batch_timeout``).

    Says nothing about the program, which may merely be slow, nor about the provider.
    """


class CircuitOpenError(SandboxError):
    """Too many evaluations of a batch failed for infrastructure reasons: training stops
    rather than learn from a batch where most rewards are missing."""


INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (BackendError, SandboxTimeoutError)
"""Errors that say nothing about the program under test: rewards map them to ``None``."""
