"""The tools of one rollout, on a sandbox of its own: what an agent calls between turns.

Every tool returns text for the model, never raises for what the model did (an error, a
timeout, a missing file are text it can read and react to), trims long output with a marker,
and records the call (:class:`ToolCall`) for the batch metrics. The sandbox is leased on the
first call that needs one and given back by :meth:`Rollout.release`; ``submit`` only records
the final answer, which is judged elsewhere, in a sandbox no tool call has touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

from ..client import Sandbox
from ..errors import SandboxError
from ..protocol import ExecResult
from . import kernel
from .lender import SandboxLender

logger = logging.getLogger("sandboxkit.tools")

KERNEL_SOURCE = Path(kernel.__file__).read_text()
STATE_DIR = ".sandboxkit/kernel"
"""Where the interpreter keeps its state and its copy of cloudpickle, in the workdir."""
SHELL = 'exec 2>&1; eval "$1"'
"""Runs the model's command with stderr merged into stdout, in the order written."""


@functools.cache
def _cloudpickle_files() -> dict[str, bytes]:
    """cloudpickle's modules (pure Python), to copy into a sandbox, whose image may lack it
    (``cloudpickle_fast`` is a deprecated alias nothing here needs)."""
    package = resources.files("cloudpickle")
    return {
        f"{STATE_DIR}/lib/cloudpickle/{name}": package.joinpath(name).read_bytes()
        for name in ("__init__.py", "cloudpickle.py")
    }


@dataclass(frozen=True)
class ToolCall:
    """One tool call, as the batch metrics count it."""

    tool: str
    seconds: float
    error: bool = False
    """The call did not do what was asked: a non-zero exit, a traceback, a missing file, a
    failing sandbox."""
    timed_out: bool = False


class ToolRollout(Protocol):
    """What reward functions read of a rollout (``environments=`` in TRL)."""

    @property
    def submission(self) -> str | None: ...

    @property
    def tool_calls(self) -> Sequence[ToolCall]: ...


def trim(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and end (where errors
    are), with a marker saying how much went."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters trimmed ...]\n{text[len(text) - tail :]}"


def _utf8(text: str) -> str:
    """Model-written text as a command line, a path or a message can carry it: the lone
    surrogates JSON can spell (``"\\ud800"``), which no encoder takes, become ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


class Rollout:
    """One rollout's tools; ``timeout`` seconds and ``max_output`` characters per call, in a
    sandbox made from ``image`` (None: the lender's)."""

    def __init__(
        self,
        lender: SandboxLender,
        *,
        timeout: float = 10.0,
        max_output: int = 4000,
        max_file_bytes: int = 1 << 20,
        python: str = "python3",
        image: str | None = None,
    ) -> None:
        self.lender = lender
        self.image = image
        self.timeout = timeout
        self.max_output = max_output
        self.max_file_bytes = max_file_bytes
        self.python = python
        self.submission: str | None = None
        self.tool_calls: list[ToolCall] = []
        self._sandbox: Sandbox | None = None
        self._kernel_ready = False
        self._released = False
        self._busy = 0
        """Calls in flight: the sandbox goes back only once none is (a wipe while a program
        of this rollout still runs could leave its writes to the next rollout)."""
        self._done: list[Sandbox] = []
        """Sandboxes this rollout has finished with, given back once no call is in flight."""
        self._drained: asyncio.Future[None] | None = None
        self._leasing = asyncio.Lock()
        """Concurrent first calls share one lease."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox this rollout holds (None before its first call and after release)."""
        return self._sandbox

    @contextlib.asynccontextmanager
    async def _using(self) -> AsyncIterator[Sandbox]:
        """The rollout's sandbox, leased on first use, for one call."""
        if self._released:
            raise RuntimeError("this rollout has ended")
        self._busy += 1
        try:
            async with self._leasing:
                if self._sandbox is None:
                    self._sandbox = await self.lender.alease(self.image)
            yield self._sandbox
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._idle()

    def _idle(self) -> None:
        """No call in flight: hand back what is done with (all of it once released)."""
        if self._released:
            if self._drained is not None and not self._drained.done():
                self._drained.set_result(None)  # arelease hands back, awaiting it
                return  # (unless it was cancelled while waiting: then handed back here)
            self._finish_sandbox()
        done, self._done = self._done, []
        for sandbox in done:
            self.lender.give_back(sandbox)

    def _finish_sandbox(self) -> None:
        sandbox, self._sandbox, self._kernel_ready = self._sandbox, None, False
        if sandbox is not None:
            self._done.append(sandbox)

    def _record(self, tool: str, started: float, *, error: bool, timed_out: bool = False) -> None:
        self.tool_calls.append(ToolCall(tool, time.monotonic() - started, error, timed_out))

    async def _exec(self, tool: str, argv: list[str], stdin: bytes = b"") -> ExecResult | str:
        """The exec's result, or the text that tells the model why there is none."""
        if any("\0" in arg for arg in argv):
            return "error: a command line or a path cannot hold a NUL character"
        argv = [_utf8(arg) for arg in argv]
        try:
            async with self._using() as sandbox:
                if tool == "run_python" and not self._kernel_ready:
                    files = _cloudpickle_files().items()
                    await asyncio.gather(*(sandbox.awrite_file(p, data) for p, data in files))
                    self._kernel_ready = True
                return await sandbox.aexec(argv, stdin=stdin, timeout=self.timeout)
        except SandboxError as exc:
            return self._lost(exc)

    def _lost(self, exc: SandboxError) -> str:
        """A failing sandbox: forget it (the next call gets another) and say what was lost."""
        logger.warning("a tool's sandbox failed: %r", exc)
        self._finish_sandbox()
        if self._busy == 0:
            self._idle()
        return (
            f"error: the sandbox failed ({type(exc).__name__}); the next call gets a new one, "
            "without the files and variables of earlier calls"
        )

    def _show(self, result: ExecResult, *, status: bool) -> str:
        text = trim(result.stdout + result.stderr, self.max_output).rstrip("\n")
        if result.truncated:
            text += "\n[output cut at the sandbox's cap]"
        if result.timed_out:
            text += f"\n[timed out after {self.timeout:g} s"
            text += "; variables from this call are lost]" if not status else "]"
        elif status and result.returncode != 0:
            text += f"\n[exit status {result.returncode}]"
        return text.strip("\n") or "(no output)"

    async def arun_python(self, code: str) -> str:
        started = time.monotonic()
        argv = [self.python, "-I", "-c", KERNEL_SOURCE, STATE_DIR]
        result = await self._exec("run_python", argv, code.encode("utf-8", "replace"))
        if isinstance(result, str):
            self._record("run_python", started, error=True)
            return result
        failed = result.returncode != 0  # the kernel's: the cell raised
        self._record("run_python", started, error=failed, timed_out=result.timed_out)
        return self._show(result, status=False)

    async def arun_shell(self, command: str) -> str:
        started = time.monotonic()
        result = await self._exec("run_shell", ["sh", "-c", SHELL, "sh", command])
        if isinstance(result, str):
            self._record("run_shell", started, error=True)
            return result
        failed = result.returncode != 0
        self._record("run_shell", started, error=failed, timed_out=result.timed_out)
        return self._show(result, status=True)

    async def awrite_file(self, path: str, content: str) -> str:
        started = time.monotonic()
        path, data = _utf8(path), content.encode("utf-8", "replace")
        if "\0" in path:
            self._record("write_file", started, error=True)
            return "error: a path cannot hold a NUL character"
        if len(data) > self.max_file_bytes:
            self._record("write_file", started, error=True)
            return f"error: {len(data)} bytes is over the limit of {self.max_file_bytes}"
        try:
            async with self._using() as sandbox:
                await sandbox.awrite_file(path, data)
        except SandboxError as exc:
            self._record("write_file", started, error=True)
            return f"error: could not write {path}: {exc}"
        self._record("write_file", started, error=False)
        return f"wrote {len(data)} bytes to {path}"

    async def aread_file(self, path: str) -> str:
        """Read through ``head`` in the sandbox, not the provider's file API, so that a
        file of hundreds of megabytes (or a FIFO, or ``/dev/zero``) costs the host no more
        than ``max_file_bytes``."""
        started = time.monotonic()
        argv = ["head", "-c", str(self.max_file_bytes), "--", path]
        result = await self._exec("read_file", argv)
        if isinstance(result, str) or result.returncode != 0 or result.timed_out:
            self._record(
                "read_file",
                started,
                error=True,
                timed_out=not isinstance(result, str) and result.timed_out,
            )
            why = result if isinstance(result, str) else result.stderr.strip() or "timed out"
            return f"error: could not read {_utf8(path)}: {why}"
        self._record("read_file", started, error=False)
        return trim(result.stdout, self.max_output)

    def submit(self, code: str) -> str:
        """Record the final answer (the last submission counts)."""
        self.submission = code
        self.tool_calls.append(ToolCall("submit", 0.0))
        return "submitted; it will be judged against the task's tests when the rollout ends"

    def release(self) -> None:
        """End the rollout: its sandbox goes back (wiped or replaced, in the background) once
        no call of it is in flight."""
        self._released = True
        if self._busy == 0:
            self._idle()

    async def arelease(self) -> None:
        """:meth:`release`, waiting until the sandbox is back."""
        self._released = True
        if self._busy:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        self._finish_sandbox()
        done, self._done = self._done, []
        await asyncio.shield(asyncio.gather(*(self.lender.give_back(sandbox) for sandbox in done)))


def tool_metrics(rollouts: Sequence[ToolRollout]) -> dict[str, float]:
    """A batch's tool use: calls per rollout, shares of calls that failed or timed out,
    latency percentiles (seconds) and the share of rollouts that submitted."""
    calls = [call for r in rollouts for call in r.tool_calls if call.tool != "submit"]
    seconds = sorted(call.seconds for call in calls)
    count = len(calls)
    values = {
        "tool_calls_per_rollout": count / len(rollouts) if rollouts else 0.0,
        "tool_error_rate": sum(c.error for c in calls) / count if count else 0.0,
        "tool_timeout_rate": sum(c.timed_out for c in calls) / count if count else 0.0,
        "submitted_rate": sum(r.submission is not None for r in rollouts) / len(rollouts)
        if rollouts
        else 0.0,
    }
    if seconds:
        values["tool_latency_p50"] = statistics.median(seconds)
        values["tool_latency_max"] = seconds[-1]
    return values
