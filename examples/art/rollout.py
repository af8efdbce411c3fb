"""One rollout: a model writes code for an MBPP problem, the tests run in a fresh sandbox, and
failures are fed back to the model for another attempt.

Execution goes through sandboxkit's trusted harness (``AssertTests``, the one behind
``assert_tests_reward``), so a program cannot fake its own test results.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mbpp import MBPPProblem

from sandboxkit.evaluation import plan, run_plan
from sandboxkit.harness import AssertTests
from sandboxkit.outcomes import Outcome, OutcomeKind
from sandboxkit.pool import SandboxPool
from sandboxkit.session import Session

Message = dict[str, str]
Chat = Callable[[Sequence[Message]], Awaitable[str]]

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Answer with the complete solution in a single "
    "```python code block, without example usage."
)


@dataclass
class Trajectory:
    """A whole conversation (every attempt and the feedback between them) and its reward: the
    share of tests the last attempt passed."""

    messages_and_choices: list[Message]
    reward: float
    task_id: int = 0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Per attempt: outcome kind, tests passed and total, the error shown to the model."""

    @property
    def solved(self) -> bool:
        return bool(self.attempts) and self.attempts[-1]["kind"] == OutcomeKind.PASSED.value

    @property
    def infra_failure(self) -> bool:
        """The provider failed: the reward says nothing about the model and is not trained on."""
        return bool(self.attempts) and self.attempts[-1]["kind"] == OutcomeKind.INFRA.value

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "solved": self.solved}


def task_message(problem: MBPPProblem) -> str:
    tests = "\n".join(problem.test_cases)
    return f"{problem.prompt}\nYour code should pass these tests:\n\n{tests}"


def feedback_message(outcome: Outcome) -> str:
    """What the model sees after a failed attempt: how far it got and the first error."""
    if outcome.kind is OutcomeKind.TIMEOUT:
        what = "Your code timed out."
    elif outcome.total:
        what = f"Your code passed {outcome.passed} of {outcome.total} tests."
    else:
        what = "Your code did not run."
    detail = f"\nFirst error: {outcome.detail}" if outcome.detail else ""
    return f"{what}{detail}\nFix it and answer with the complete corrected code."


async def rollout(
    chat: Chat,
    problem: MBPPProblem,
    session: Session,
    *,
    max_attempts: int = 3,
    timeout: float = 5.0,
) -> Trajectory:
    """Up to ``max_attempts`` attempts at ``problem``, each judged in the same fresh sandbox."""
    harness = AssertTests(tuple(problem.test_cases), setup=problem.setup, timeout=timeout)
    messages: list[Message] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task_message(problem)},
    ]
    trajectory = Trajectory(messages, reward=0.0, task_id=problem.task_id)
    async with SandboxPool(session=session, size=1, tags=[f"task={problem.task_id}"]) as pool:
        for attempt in range(1, max_attempts + 1):
            reply = await chat(messages)
            messages.append({"role": "assistant", "content": reply})
            outcome = await run_plan(pool, plan(reply, harness))
            trajectory.attempts.append(
                {
                    "attempt": attempt,
                    "kind": outcome.kind.value,
                    "passed": outcome.passed,
                    "total": outcome.total,
                    "detail": outcome.detail,
                }
            )
            trajectory.reward = outcome.fraction
            if outcome.kind in (OutcomeKind.PASSED, OutcomeKind.INFRA) or attempt == max_attempts:
                break
            messages.append({"role": "user", "content": feedback_message(outcome)})
    return trajectory
