"""sandboxkit: run model-written programs in sandboxes and turn the results into RL rewards.

``get_backend()`` gives a client for the configured provider (``SANDBOXKIT_BACKEND``: the local
``subprocess`` backend by default, ``daytona`` or ``aviato``); everything else is shared above it.
"""

from .client import Sandbox, SandboxClient
from .errors import (
    AuthenticationError,
    BackendError,
    BackendMisconfiguredError,
    BackendUnavailableError,
    DeadlineExceededError,
    IsolationUnavailableError,
    RateLimitedError,
    SandboxError,
    SandboxFileError,
    SandboxLostError,
    SandboxNotFoundError,
    SandboxTimeoutError,
    TransientBackendError,
    UnknownBackendError,
)
from .pool import PoolStats, SandboxPool
from .protocol import Backend, ExecResult, SandboxInfo, SandboxSpec, SandboxStatus
from .registry import available_backends, get_backend
from .session import Session
from .wait import await_first, spawn, wait, wait_async

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "Backend",
    "BackendError",
    "BackendMisconfiguredError",
    "BackendUnavailableError",
    "DeadlineExceededError",
    "ExecResult",
    "IsolationUnavailableError",
    "PoolStats",
    "RateLimitedError",
    "Sandbox",
    "SandboxClient",
    "SandboxError",
    "SandboxFileError",
    "SandboxInfo",
    "SandboxLostError",
    "SandboxNotFoundError",
    "SandboxPool",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTimeoutError",
    "Session",
    "TransientBackendError",
    "UnknownBackendError",
    "__version__",
    "available_backends",
    "await_first",
    "get_backend",
    "spawn",
    "wait",
    "wait_async",
]
