"""Function-call tests given as inputs and a reference, as EvalPlus (HumanEval+, MBPP+) stores
them: each input is a list of arguments for ``entry_point``; the expected results come from
the reference program, run here on the host, and are compared as EvalPlus's
``untrusted_check`` compares them (:func:`evalplus_equal`) by the trusted runner in the
sandbox, which holds them as it holds its key (no process of the candidate's ever does): it
judges each call as it is answered, and a run that ends at its first failure ends at the
first wrong result, as EvalPlus's does.

Why the reference runs on the host and not in a sandbox: it is the dataset's own trusted
program (EvalPlus runs it in-process, ``trusted_exec``, to make its expected outputs), its
results are what every completion is compared with, so a sandbox would only add a run whose
answer the host must trust anyway; and it runs once per task (cached), never per completion.
A reference that raises, or whose results cannot cross the codec, makes its row invalid.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..outcomes import Outcome
from ..protocol import ExecResult
from . import runner
from .records import RunRequest, Unjudgeable, judge_returns, runner_request
from .runner import allclose, evalplus_equal


@dataclass(frozen=True)
class InputTests:
    """Call ``entry_point`` on each input's arguments in the candidate's process (a fresh one
    after a call that did not return: ``runner.run_loaded``); each result passes when
    :func:`evalplus_equal` says so, and is scored on its own (``test_scores``: contest scoring
    applies). ``timeout``: CPU seconds per call (EvalPlus scales its limits from the
    reference's own times). ``stop_at_first_failure``: for all-or-nothing scoring, no call
    runs after one that did not return."""

    judge_waits: ClassVar[bool] = False
    entry_point: str
    inputs: tuple[tuple[Any, ...], ...]
    expected: tuple[Any, ...]
    atol: float = 0.0
    timeout: float = 5.0
    stop_at_first_failure: bool = False
    reference_seconds: float = 0.0
    """CPU seconds the reference took on these inputs, on the host (0: not known): the run's
    expected length, by which a batch starts its longest runs first
    (:func:`~sandboxkit.evaluation.longest_first`)."""

    @functools.cached_property
    def job(self) -> dict[str, Any]:
        """The runner's job, made once for every completion judged with this harness (the
        reward's check that the row can be built makes it): the calls' JSON texts and the
        expected results', as :attr:`~sandboxkit.harness.FunctionTests.job`."""
        expect = []
        for i, expected in enumerate(self.expected):
            try:
                expect.append(runner.dumps(runner.encode(expected)).encode())
            except runner.CodecError as exc:
                raise Unjudgeable(f"the row's expected result {i} cannot be sent: {exc}") from None
        job: dict[str, Any] = {
            "kind": "calls",
            "timeout": self.timeout,
            "calls": runner.call_texts(self.entry_point, self.inputs),
            "expect": expect,
            "atol": self.atol,
            "floats": [i for i, e in enumerate(self.expected) if runner.is_floats(e)],
        }
        if self.stop_at_first_failure:
            job["stop_at_first_failure"] = True
        return job

    def request(self, code: str) -> RunRequest:
        return runner_request({"code": code, "setup": ""}, self.job)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        return judge_returns(result, request, len(self.inputs))


def reference_outputs(program: str, entry_point: str, inputs: Sequence[Sequence[Any]]) -> list[Any]:
    """The reference program's result for each input, run here (each on a copy of its
    arguments, its printing discarded), as EvalPlus computes its expected outputs."""
    namespace: dict[str, Any] = {"__name__": "__reference__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(program, "<reference>", "exec"), namespace)
        function = namespace[entry_point]
        return [function(*copy.deepcopy(list(args))) for args in inputs]


def inputs_key(program: str, entry_point: str, inputs: Sequence[Any], atol: float) -> str:
    """A task's identity for the cache of its expected outputs."""
    text = repr((program, entry_point, atol, inputs))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


__all__ = ["InputTests", "allclose", "evalplus_equal", "reference_outputs"]
