"""Tools an agent calls during a rollout (a stateful Python interpreter, a shell, files), on a
sandbox lent to that rollout alone; :mod:`sandboxkit.integrations.trl` makes them a TRL
environment."""

from .lender import SandboxLender
from .rollout import Rollout, ToolCall, ToolRollout, tool_metrics, trim

__all__ = ["Rollout", "SandboxLender", "ToolCall", "ToolRollout", "tool_metrics", "trim"]
