"""Sandboxes of multi-turn rollouts as a TRL environment (:class:`SandboxEnvironment`, for
``GRPOTrainer(environment_factory=...)``).

TRL takes any class with ``reset`` and tool methods, so this module needs neither TRL nor
transformers; :mod:`sandboxkit.integrations.trl` re-exports it next to the TRL callback."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..client import Sandbox
from ..portal import run_sync
from ..registry import BackendLike, refuse_images
from ..rewards import RewardFunction, assert_tests_reward, row_image, submitted
from ..tools import Rollout, SandboxLender, ToolCall

TOOLS = ("run_python", "run_shell", "write_file", "read_file", "submit")


def _text_arguments(tool: Callable[..., str]) -> Callable[..., str]:
    """A tool whose arguments the model wrote: one that is not a string (JSON allows a number,
    a list, null) gets an error the model can read, not an exception."""

    names = list(inspect.signature(tool).parameters)[1:]

    @functools.wraps(tool)
    def checked(self: SandboxEnvironment, *args: Any, **kwargs: Any) -> str:
        if self._row_error is not None:  # the row's, not the model's: no sandbox to run in
            return f"error: {self._row_error}"
        for name, value in [*zip(names, args, strict=False), *kwargs.items()]:
            if not isinstance(value, str):
                return f"error: {name} must be a string, not {type(value).__name__}"
        return tool(self, *args, **kwargs)

    return checked


@dataclass
class _Shared:
    """What every instance of one environment class shares: the sandboxes lent to its
    rollouts, and the reward function (and its own pool) that judges their submissions."""

    lender: SandboxLender
    reward: RewardFunction


class SandboxEnvironment:
    """A sandbox per rollout, as a TRL environment: ``GRPOTrainer(environment_factory=
    SandboxEnvironment)``.

    Each rollout gets a sandbox of its own on its first tool call (from a lender shared by the
    class, which wipes and reuses sandboxes across steps, see :mod:`sandboxkit.tools.lender`),
    and gives it back on ``reset``. Its tools are ``run_python`` (a stateful interpreter),
    ``run_shell``, ``write_file``, ``read_file`` and ``submit``; ``get_reward`` judges the
    last submission against the tests of the row ``reset`` received, with :attr:`reward`
    (default :func:`~sandboxkit.rewards.assert_tests_reward`: MBPP's ``test_list``) in a
    sandbox of its own pool, which no tool call has touched. No submission is empty code,
    scored by the reward's own rule (0.0, or -1.0 under Daytona's), as a reward function given
    the rollouts in ``environments=`` scores it; a failing provider gives ``None``.

    Configure by subclassing (the class attributes below) or with
    :func:`sandbox_environment`. A tool set to ``None`` in a subclass is not offered.
    """

    backend: ClassVar[BackendLike] = None
    """The backend of both the rollouts' and the judge's sandboxes (None: configured)."""
    timeout: ClassVar[float] = 10.0
    """Seconds per tool call."""
    max_output: ClassVar[int] = 4000
    """Characters of a tool's output the model sees (the rest trimmed, with a marker)."""
    reward: ClassVar[RewardFunction | None] = None
    """What judges a submission (None: ``assert_tests_reward(backend)``)."""
    reuse: ClassVar[bool | None] = None
    """Wipe and reuse rollout sandboxes (None: where the backend allows, see the lender)."""
    sandbox_options: ClassVar[Mapping[str, Any]] = {}
    """Keywords for every rollout sandbox (``tags``, ``image``, ``env``, ...)."""
    image_column: ClassVar[str | None] = None
    """The row's column that names the image its rollout and judge run in (see
    :func:`~sandboxkit.rewards.row_image`; None, or a row naming none: ``image``). A row
    whose image is not text gets an error from every tool and no reward (``invalid_row``)."""

    _shared_by_class: ClassVar[dict[type, _Shared]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._rollout: Rollout | None = None
        self._row: dict[str, Any] = {}
        self._image: str | None = None
        self._row_error: str | None = None

    @classmethod
    def _shared(cls) -> _Shared:
        """Made on first use, in the caller's thread (the main one under TRL), so that the
        sessions install the signal handlers that stop their sandboxes."""
        with cls._shared_lock:
            shared = cls._shared_by_class.get(cls)
            if shared is None:
                lender = SandboxLender(cls.backend, reuse=cls.reuse, **dict(cls.sandbox_options))
                reward = cls.reward or assert_tests_reward(
                    cls.backend,
                    image_column=cls.image_column,
                    image=cls.sandbox_options.get("image"),
                )
                _ = reward.pool
                shared = cls._shared_by_class[cls] = _Shared(lender, reward)
            return shared

    @classmethod
    def lender(cls) -> SandboxLender:
        """The lender of this class's rollout sandboxes (its ``session.run_tag`` finds them)."""
        return cls._shared().lender

    @classmethod
    def close_all(cls) -> None:
        """Stop every sandbox of this class's rollouts and judge (at the end of training;
        also done at exit and on SIGINT/SIGTERM). Later use starts afresh."""
        with cls._shared_lock:
            shared = cls._shared_by_class.pop(cls, None)
        if shared is not None:
            run_sync(shared.lender.aclose())
            shared.reward.close()

    def _tools(self) -> Rollout:
        if self._rollout is not None and self._rollout.lender.closed:
            self._rollout = None  # closed under it (close_all): start afresh
        if self._rollout is None:
            self._rollout = Rollout(
                self._shared().lender,
                timeout=self.timeout,
                max_output=self.max_output,
                image=self._image,
            )
        return self._rollout

    @property
    def submission(self) -> str | None:
        """The rollout's last submitted code (None: nothing submitted)."""
        return self._rollout.submission if self._rollout is not None else None

    @property
    def tool_calls(self) -> Sequence[ToolCall]:
        return self._rollout.tool_calls if self._rollout is not None else ()

    @property
    def sandbox(self) -> Sandbox | None:
        """The rollout's sandbox (None before its first tool call)."""
        return self._rollout.sandbox if self._rollout is not None else None

    @property
    def row(self) -> Mapping[str, Any]:
        """The dataset row this rollout was reset with."""
        return self._row

    def reset(self, **row: Any) -> str | None:
        """Start a rollout on ``row``: the previous one's sandbox goes back to the lender."""
        if self._rollout is not None:
            rollout, self._rollout = self._rollout, None
            run_sync(_released(rollout))
        self._row = row
        self._image, self._row_error = None, None
        if self.image_column is not None:
            try:
                self._image = row_image(self.image_column, row.get(self.image_column))
            except TypeError as exc:
                self._row_error = f"this task cannot be run: {exc}"
        return None

    @_text_arguments
    def run_python(self, code: str) -> str:
        """Run Python code in a persistent interpreter, like a notebook cell: variables,
        functions, classes and imports stay defined for later calls. The value of a final
        expression is shown.

        Args:
            code: The Python code to run.

        Returns:
            What the code printed (stdout and stderr), the final expression's value, or the
            error's traceback.
        """
        return run_sync(self._tools().arun_python(code))

    @_text_arguments
    def run_shell(self, command: str) -> str:
        """Run a shell command in the working directory.

        Args:
            command: The command line, run by sh.

        Returns:
            What it printed (stdout and stderr) and its exit status when not 0.
        """
        return run_sync(self._tools().arun_shell(command))

    @_text_arguments
    def write_file(self, path: str, content: str) -> str:
        """Write a text file (relative paths are in the working directory).

        Args:
            path: Where to write it.
            content: The file's whole text.

        Returns:
            A confirmation, or the error.
        """
        return run_sync(self._tools().awrite_file(path, content))

    @_text_arguments
    def read_file(self, path: str) -> str:
        """Read a text file (relative paths are in the working directory).

        Args:
            path: The file to read.

        Returns:
            Its text, or the error.
        """
        return run_sync(self._tools().aread_file(path))

    @_text_arguments
    def submit(self, code: str) -> str:
        """Submit the final solution; it is tested when the conversation ends (the last
        submission counts).

        Args:
            code: The complete solution's Python code.

        Returns:
            A confirmation.
        """
        return self._tools().submit(code)

    async def get_reward(self) -> float | None:
        """The submission's reward under :attr:`reward`, from the row ``reset`` received: the
        reward a reward function given this rollout in TRL's ``environments=`` gives."""
        reward = self._shared().reward
        columns = {name: [value] for name, value in self._row.items()}
        outcomes = await reward.aoutcomes([self._row.get("prompt")], [submitted(self)], **columns)
        return reward.reward(outcomes[0])


async def _released(rollout: Rollout) -> None:
    """Hand a rollout's sandbox back on the portal's loop, where the wipe then runs on its
    own while training goes on."""
    rollout.release()


def sandbox_environment(
    backend: BackendLike = None,
    *,
    timeout: float = 10.0,
    max_output: int = 4000,
    tools: Iterable[str] = TOOLS,
    reward: RewardFunction | None = None,
    reuse: bool | None = None,
    name: str = "SandboxEnvironment",
    image_column: str | None = None,
    **sandbox_options: Any,
) -> type[SandboxEnvironment]:
    """A :class:`SandboxEnvironment` class with these settings, for ``environment_factory``.

    ``tools``: which of ``run_python``, ``run_shell``, ``write_file``, ``read_file`` and
    ``submit`` the model gets; ``reward``: what judges a submission (any sandboxkit reward
    function, e.g. ``stdio_tests_reward()`` for contest rows); ``name``: the class's, under
    which TRL logs its reward; ``image_column``: the row's column that names the image of its
    rollout's sandbox and of its judge's (a given ``reward`` reads the same column); other
    keywords go to every rollout sandbox.
    """
    offered = tuple(tools)
    unknown = sorted(set(offered) - set(TOOLS))
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {', '.join(TOOLS)}")
    if image_column is not None:
        refuse_images(backend, f"sandbox_environment(image_column={image_column!r})")
    if reward is not None and reward.image_column != image_column:
        raise ValueError(
            f"the reward reads images from {reward.image_column!r}, the rollouts from "
            f"{image_column!r}: a submission would be judged in another image than it ran in"
        )
    attributes: dict[str, Any] = {
        "backend": backend,
        "timeout": timeout,
        "max_output": max_output,
        "reward": reward,
        "reuse": reuse,
        "sandbox_options": dict(sandbox_options),
        "image_column": image_column,
        **{tool: None for tool in TOOLS if tool not in offered},
    }
    return type(name, (SandboxEnvironment,), attributes)
