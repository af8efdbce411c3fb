"""sandboxkit: run model-written programs in sandboxes and turn the results into RL rewards.

``get_backend()`` gives a client for the configured provider (``SANDBOXKIT_BACKEND``: the local
``subprocess`` backend by default, ``daytona`` or ``aviato``); everything else is shared above it.
The public API is what ``__all__`` names (``docs/api.md`` describes each name). The rewards,
harnesses and outcomes load on first use, so that ``import sandboxkit`` stays cheap for code
that only drives sandboxes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .client import Sandbox, SandboxClient
from .errors import (
    AuthenticationError,
    BackendError,
    BackendMisconfiguredError,
    BackendUnavailableError,
    CircuitOpenError,
    DeadlineExceededError,
    InvalidLimitError,
    IsolationUnavailableError,
    RateLimitedError,
    SandboxError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxIsADirectoryError,
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

if TYPE_CHECKING:
    from .contest.languages import Language, register_language
    from .evaluation import Plan, plan, run_plan
    from .harness import (
        AssertTests,
        ExecHarness,
        FunctionTask,
        FunctionTests,
        Harness,
        RunRequest,
        StdioTests,
    )
    from .outcomes import Outcome, OutcomeKind, Verdict
    from .rewards import (
        AsyncRewardFunction,
        BatchStats,
        RewardFunction,
        assert_tests_reward,
        exec_reward,
        function_tests_reward,
        input_tests_reward,
        stdio_tests_reward,
    )

__version__ = "0.1.0"

_LAZY = {
    **dict.fromkeys(("Plan", "plan", "run_plan"), ".evaluation"),
    **dict.fromkeys(
        (
            "AssertTests",
            "ExecHarness",
            "FunctionTask",
            "FunctionTests",
            "Harness",
            "RunRequest",
            "StdioTests",
        ),
        ".harness",
    ),
    **dict.fromkeys(("Outcome", "OutcomeKind", "Verdict"), ".outcomes"),
    **dict.fromkeys(("Language", "register_language"), ".contest.languages"),
    **dict.fromkeys(
        (
            "AsyncRewardFunction",
            "BatchStats",
            "RewardFunction",
            "assert_tests_reward",
            "exec_reward",
            "function_tests_reward",
            "input_tests_reward",
            "stdio_tests_reward",
        ),
        ".rewards",
    ),
}
"""Public names whose modules load when first asked for (a third of the import time)."""

if not TYPE_CHECKING:  # mypy sees the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})


__all__ = [
    "AssertTests",
    "AsyncRewardFunction",
    "AuthenticationError",
    "Backend",
    "BackendError",
    "BackendMisconfiguredError",
    "BackendUnavailableError",
    "BatchStats",
    "CircuitOpenError",
    "DeadlineExceededError",
    "ExecHarness",
    "ExecResult",
    "FunctionTask",
    "FunctionTests",
    "Harness",
    "InvalidLimitError",
    "IsolationUnavailableError",
    "Language",
    "Outcome",
    "OutcomeKind",
    "Plan",
    "PoolStats",
    "RateLimitedError",
    "RewardFunction",
    "RunRequest",
    "Sandbox",
    "SandboxClient",
    "SandboxError",
    "SandboxFileError",
    "SandboxFileNotFoundError",
    "SandboxInfo",
    "SandboxIsADirectoryError",
    "SandboxLostError",
    "SandboxNotFoundError",
    "SandboxPool",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTimeoutError",
    "Session",
    "StdioTests",
    "TransientBackendError",
    "UnknownBackendError",
    "Verdict",
    "__version__",
    "assert_tests_reward",
    "available_backends",
    "await_first",
    "exec_reward",
    "function_tests_reward",
    "get_backend",
    "input_tests_reward",
    "plan",
    "register_language",
    "run_plan",
    "spawn",
    "stdio_tests_reward",
    "wait",
    "wait_async",
]
