"""Function-call tests given as inputs and a reference, as EvalPlus (HumanEval+, MBPP+) stores
them: each input is a list of arguments for ``entry_point``; the expected results come from
the reference program, run here on the host, and are compared on the host as EvalPlus's
``untrusted_check`` compares them (:func:`evalplus_equal`). The inputs cross to the sandbox
through the function-test runner job; the expected results never do.

Why the reference runs on the host and not in a sandbox: it is the dataset's own trusted
program (EvalPlus runs it in-process, ``trusted_exec``, to make its expected outputs), its
results are what every completion is compared with, so a sandbox would only add a run whose
answer the host must trust anyway; and it runs once per task (cached), never per completion.
A reference that raises, or whose results cannot cross the codec, makes its row invalid.
"""

from __future__ import annotations

import cmath
import contextlib
import copy
import functools
import hashlib
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..outcomes import Outcome
from ..protocol import ExecResult
from . import runner
from .records import RunRequest, judge_returns, runner_request

RTOL = 1e-07
"""The relative tolerance EvalPlus passes to ``np.allclose`` (``np.testing.assert_allclose``'s
default)."""
FLOATS_ATOL = 1e-6
"""The absolute tolerance EvalPlus uses for float results where the task's ``atol`` is 0."""
_INT64 = 1 << 63


def is_floats(value: Any) -> bool:
    """EvalPlus's ``is_floats``: a float, or a non-empty list or tuple of floats only."""
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, float) for v in value)
    return False


def tolerance(expected: Any, atol: float) -> float:
    """The absolute tolerance EvalPlus compares a result with ``expected`` under (0: exactly),
    ``atol`` being the one it had so far in the task: EvalPlus sets 1e-6 at the first float
    result expected (one its candidate returned a value for) and keeps it for the task's later
    inputs, so that is done here too."""
    return FLOATS_ATOL if atol == 0 and is_floats(expected) else atol


def evalplus_equal(out: Any, expected: Any, atol: float) -> bool:
    """Whether EvalPlus passes ``out`` for ``expected``: ``out == expected``; failing that,
    under a tolerance ``atol`` (:func:`tolerance`'s), the same type, the same length (a list
    or tuple) and ``np.allclose(out, expected, rtol=1e-07, atol=atol)``. NaN never equals
    (``==`` and ``allclose`` both say so); a tuple is never a list."""
    if out == expected:
        return True
    if atol == 0 or type(out) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)) and len(out) != len(expected):
        return False
    return allclose(out, expected, atol)


def allclose(a: Any, b: Any, atol: float) -> bool:
    """``np.allclose(a, b, rtol=RTOL, atol=atol)`` for plain values: numbers, or nested lists
    and tuples of them of one shape. What NumPy cannot compare (text, None, ragged nesting,
    integers past 64 bits) is not close; arrays of different shapes are not close either
    (NumPy would broadcast some)."""
    x, y = _numbers(a), _numbers(b)
    if x is None or y is None or x[0] != y[0]:
        return False
    return all(_close(p, q, atol) for p, q in zip(x[1], y[1], strict=True))


def _numbers(value: Any) -> tuple[tuple[int, ...], list[Any]] | None:
    """A nested list or tuple of numbers as NumPy reads it: its shape and its numbers in order;
    None where NumPy would make no numeric array of it."""
    if isinstance(value, (bool, float, complex)):
        return (), [value]
    if isinstance(value, int):
        return ((), [value]) if -_INT64 <= value < _INT64 else None
    if not isinstance(value, (list, tuple)):
        return None
    parts = [_numbers(v) for v in value]
    if any(p is None for p in parts):
        return None
    shapes = {p[0] for p in parts if p is not None}
    if len(shapes) > 1:
        return None
    inner = shapes.pop() if shapes else ()
    return (len(parts), *inner), [n for p in parts if p is not None for n in p[1]]


def _close(x: Any, y: Any, atol: float) -> bool:
    """NumPy's ``isclose`` for two numbers: infinities equal only themselves, NaN nothing."""
    finite = cmath.isfinite(x) and cmath.isfinite(y)
    if not finite:
        return bool(x == y)
    return bool(abs(x - y) <= atol + RTOL * abs(y))


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, complex):
        return cmath.isnan(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_nan(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nan(k) or _has_nan(v) for k, v in value.items())
    return False


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
        reward's check that the row can be built makes it): as
        :attr:`~sandboxkit.harness.FunctionTests.job`."""
        whole: list[int] = []
        atol = self.atol
        for i, (_, expected) in enumerate(zip(self.inputs, self.expected, strict=True)):
            atol = tolerance(expected, atol)
            if atol:  # maybe compared with a tolerance, so the digest of a long result won't do
                whole.append(i)
        calls = runner.call_texts(self.entry_point, self.inputs)
        job = {"kind": "calls", "timeout": self.timeout, "calls": calls, "loose": True}
        if whole:
            job["whole"] = whole
        if self.stop_at_first_failure:
            job["stop_at_first_failure"] = True
        return job

    def request(self, code: str) -> RunRequest:
        return runner_request({"code": code, "setup": ""}, self.job)

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        atol = [self.atol]  # as EvalPlus: a tolerance once set is kept for the later inputs
        namedtuples = runner.NamedTuples()  # this run's, as every budget its values spend

        def passes(i: int, record: dict[str, Any]) -> bool:
            atol[0] = tolerance(self.expected[i], atol[0])
            return _passes(record, self.expected[i], atol[0], namedtuples)

        return judge_returns(result, request, len(self.inputs), passes)


def _passes(
    record: dict[str, Any], expected: Any, atol: float, namedtuples: runner.NamedTuples
) -> bool:
    """A result sent as itself is compared as EvalPlus compares; one sent as a digest (long,
    and compared exactly) passes when it is ``==`` the expected one. ``namedtuples``: the
    run's own (``runner.decode``)."""
    if "digest" not in record:
        value = runner.decode(record.get("value"), namedtuples=namedtuples)
        return evalplus_equal(value, expected, atol)
    if _has_nan(expected):  # never == itself: the digest cannot say so
        return False
    loose = runner.value_digest(runner.loosened(runner.encode(expected)))
    return bool(record["digest"] == loose)


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
