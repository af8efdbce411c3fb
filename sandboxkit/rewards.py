"""Reward functions in TRL's signature, built on the shared evaluation machinery.

Each factory returns a :class:`RewardFunction`: called as ``f(prompts, completions, **kwargs)``
it returns one ``float | None`` per completion. It holds one :class:`SandboxPool` for the whole
run (created on first use, closed at exit), never raises for a completion, maps provider
failures to ``None`` (TRL leaves those out of the group baseline, so a flaky provider never
teaches the model that correct code is wrong), and reports what happened through TRL's
``log_metric``/``log_extra`` when given them.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import functools
import json
import logging
import statistics
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from .contest.calls import call_tests
from .contest.checkers import Checker, checker_from_spec
from .contest.formats import detect_columns, read_tests
from .contest.languages import Language, language_for, languages
from .contest.scoring import SCORINGS, ScoredStdioTests, Scoring, parse_subtasks
from .errors import CircuitOpenError
from .evaluation import Plan, failed, longest_first, plan, run_plan
from .harness import AssertTests, ExecHarness, FunctionTask, Harness, StdioTests
from .harness.inputs import InputTests, inputs_key, reference_outputs
from .keywords import check_keywords, keyword_only, suggest_keywords
from .outcomes import Outcome, OutcomeKind, Verdict
from .pool import PoolStats, SandboxPool
from .portal import run_sync
from .registry import BackendLike, refuse_images, sandbox_keywords_for
from .sanitize import Completion, block_tags, completion_text, extract_code, parse_python
from .tools.rollout import ToolRollout, tool_metrics

Judging = Callable[[Completion], Plan]
"""A row's completion -> what to run for it: the completion's part of planning."""
Planner = Callable[[int, Any, Mapping[str, Sequence[Any]]], Judging]
"""(row index, prompt, dataset columns) -> how that row's completions are planned.

The row's part (reading its tests, building its harness) is done here, before any completion
is looked at, so what it raises is the row's (``INVALID_ROW``: no reward) and what the
returned function raises is the completion's (``ERROR``): no completion can make its row
unjudgeable."""
RewardMapping = Callable[[Outcome], float | None]
"""An outcome's reward; infrastructure outcomes never reach it."""

ROWS_KEPT = 256
"""Rows whose harness a reward keeps for their next completions: a row's completions come
together (TRL's groups), and a harness encodes its tests once."""

logger = logging.getLogger("sandboxkit.rewards")


class MissingColumnError(ValueError):
    """A call lacks a dataset column the reward function reads: raised at once, since every
    row lacks it (the dataset or the reward's ``*_column`` is wrong), unlike one row whose
    value cannot be read."""


def row_image(column: str, value: Any) -> str | None:
    """The image a dataset row names in its ``column``: None (the default image) where it
    names none (no value, or blank text). Any other value than text is the row's error,
    found before any of its completions runs: a row cannot be judged in an environment
    nobody named, and no completion can change which it is."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"its image ({column!r}) must be text, not {type(value).__name__}")
    return value.strip() or None


def submitted(rollout: ToolRollout) -> Completion:
    """What a multi-turn rollout is judged by: its last submission. None is empty code, which
    each reward's own rule scores (0.0, or -1.0 under Daytona's), on either TRL path."""
    return rollout.submission or ""


def buildable(harness: Harness, code: str = "") -> Harness:
    """``harness``, once its run can be built for ``code`` (the row's own part of the program:
    none, or a prompt a body continues): a row whose tests are malformed or too large to send
    fails here, as the row's, not later as a completion's."""
    harness.request(code)
    return harness


@dataclass(frozen=True)
class BatchStats:
    """What one call of a reward function saw; readable as ``reward_fn.last_batch``."""

    outcomes: Counter[str] = field(default_factory=Counter)
    total: int = 0
    latency_p50: float = 0.0
    latency_p95: float = 0.0
    pool: PoolStats | None = None
    verdicts: Counter[str] = field(default_factory=Counter)
    """Contest verdicts (``accepted``, ``wrong_answer``, ...) of the outcomes that have one."""

    def rate(self, kind: OutcomeKind) -> float:
        return self.outcomes[kind.value] / self.total if self.total else 0.0


def _tool_rollouts(environments: Any, count: int) -> list[ToolRollout] | None:
    """TRL's ``environments=``, when they are rollouts with tools and submissions (a
    :class:`~sandboxkit.integrations.trl.SandboxEnvironment`), one per completion."""
    if not isinstance(environments, list) or len(environments) != count:
        return None
    if not all(hasattr(e, "submission") and hasattr(e, "tool_calls") for e in environments):
        return None
    return environments


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _prompt_text(prompt: Any) -> str:
    """A prompt's text: chat messages' contents, one a line."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return str(prompt)


def _excerpt(prompt: Any) -> str:
    """Enough of a row's prompt to find the row by."""
    return repr(_prompt_text(prompt) if isinstance(prompt, list) else prompt)[:80]


def _describe(outcome: Outcome) -> str:
    counts = f" {outcome.passed}/{outcome.total}" if outcome.total else ""
    detail = f": {outcome.detail}" if outcome.detail else ""
    return f"{outcome.kind.value}{counts}{detail}"[:300]


@suggest_keywords
class RewardFunction:
    """A TRL reward function backed by a sandbox pool. Use ``.as_async()`` for TRL's async path.

    ``infra_reward`` is what a completion gets when the provider failed (``None`` by default);
    ``max_infra_share`` is the circuit breaker: when a larger share of a batch (of at least
    ``min_batch_for_breaker`` completions) failed for infrastructure reasons, the call raises
    :class:`CircuitOpenError` and training stops with that message (None disables it).

    ``batch_timeout`` (seconds from the start of a call; None: no limit) bounds how long one
    straggler can hold up a training step. With it, a run ends once it has had its allowance
    (what an honest program within its CPU limits could need: a program that sleeps is a
    timeout, scored as one); when it passes, every evaluation still pending is cancelled (its
    command killed where the backend can, its sandbox replaced): a timeout if its program had
    run its whole allowance, else ``None``, as outcome ``DEADLINE`` (it waited for a sandbox).
    Those do not count towards the circuit breaker: the queue, not a failing provider, is their
    cause; ``<name>/deadline_rate`` shows them. Only ``INFRA`` outcomes count there.

    ``image_column`` names the dataset column in which a row may name the image its
    completions are judged in (see :func:`row_image`; the pool keeps sandboxes per image), so
    that one run judges tasks in different environments; a row without one gets ``image``
    (the pool's; None: the backend's default). A backend that cannot make sandboxes from
    images (the local one) refuses both here, rather than judge in the wrong environment.
    """

    def __init__(
        self,
        name: str,
        planner: Planner,
        mapping: RewardMapping,
        *,
        backend: BackendLike = None,
        pool_size: int = 8,
        per_sandbox: int = 1,
        infra_reward: float | None = None,
        max_infra_share: float | None = 0.5,
        min_batch_for_breaker: int = 4,
        batch_timeout: float | None = None,
        image_column: str | None = None,
        **pool_options: Any,
    ) -> None:
        if batch_timeout is not None and not batch_timeout > 0:
            raise ValueError(f"batch_timeout must be > 0 seconds or None, got {batch_timeout}")
        if image_column is not None:
            refuse_images(backend, f"{name}(image_column={image_column!r})")
        if pool_options.get("image") is not None:
            refuse_images(backend, f"{name}(image={pool_options['image']!r})")
        self.image_column = image_column
        self.__name__ = name
        self.planner = planner
        self.mapping = mapping
        self.infra_reward = infra_reward
        self.max_infra_share = max_infra_share
        self.min_batch_for_breaker = min_batch_for_breaker
        self.batch_timeout = batch_timeout
        self.last_batch: BatchStats | None = None
        accepted = sandbox_keywords_for(backend)
        if accepted is not None:  # else the backend does not say which options it reads
            own = keyword_only(RewardFunction) | _FACTORY_KEYWORDS.get(name, frozenset())
            pool = keyword_only(SandboxPool) - {"size"}  # pool_size here
            check_keywords(f"{name}()", pool_options, own | pool | accepted)
        self._pool_args: dict[str, Any] = {
            "size": pool_size,
            "per_sandbox": per_sandbox,
            **pool_options,
        }
        self._backend = backend
        """Made a client by the pool's session, on first use (a name is not built until then)."""
        self._pool: SandboxPool | None = None

    def __repr__(self) -> str:
        return f"<RewardFunction {self.__name__}>"

    @property
    def pool(self) -> SandboxPool:
        """The run's pool, created on first use."""
        if self._pool is None:
            self._pool = SandboxPool(self._backend, **self._pool_args)
        return self._pool

    def reward(self, outcome: Outcome) -> float | None:
        if outcome.kind is OutcomeKind.INFRA:
            return self.infra_reward
        if outcome.kind in (OutcomeKind.DEADLINE, OutcomeKind.UNSUPPORTED, OutcomeKind.INVALID_ROW):
            return None
        return self.mapping(outcome)

    async def aoutcomes(
        self, prompts: Sequence[Any], completions: Sequence[Completion], **columns: Any
    ) -> list[Outcome]:
        """The outcome of every completion (what the rewards are computed from), in the
        caller's order; their runs start longest first (:func:`longest_first`)."""
        return await self.arun_plans(self.plans(prompts, completions, **columns))

    def plans(
        self, prompts: Sequence[Any], completions: Sequence[Completion], **columns: Any
    ) -> list[Plan]:
        """Each completion's plan: its code and harness, or the outcome it has already."""
        return [
            self._plan(i, prompts[i] if i < len(prompts) else None, completion, columns)
            for i, completion in enumerate(completions)
        ]

    async def arun_plans(
        self, plans: Sequence[Plan], *, done: Callable[[], object] | None = None
    ) -> list[Outcome]:
        """The outcome of every plan, in their order, as one batch: the runs start longest
        first and share the batch's deadline. ``done`` is called as each one ends (a progress
        bar over plans made a row at a time)."""
        deadline = None if self.batch_timeout is None else time.monotonic() + self.batch_timeout
        pool = self.pool

        async def run(i: int) -> Outcome:
            outcome = await run_plan(pool, plans[i], deadline=deadline)
            if done is not None:
                done()
            return outcome

        order = longest_first([p.harness for p in plans])  # the pool serves in this order
        started = await asyncio.gather(*(run(i) for i in order))
        by_row = dict(zip(order, started, strict=True))
        outcomes = [by_row[i] for i in range(len(plans))]
        late = sum(o.kind is OutcomeKind.DEADLINE for o in outcomes)
        if late:
            logger.warning(
                "%s: %d of %d evaluations were cut off at the batch deadline (%g s); no reward",
                self.__name__,
                late,
                len(outcomes),
                self.batch_timeout,
            )
        return outcomes

    def _plan(
        self, i: int, prompt: Any, completion: Completion, columns: Mapping[str, Any]
    ) -> Plan:
        """Row ``i``'s plan for ``completion``; what raises becomes the outcome of the part it
        came from (see :data:`Planner`). Only a missing column raises."""
        try:
            judging = self.planner(i, prompt, columns)
            image = self._row_image(i, columns)
        except MissingColumnError:
            raise
        except Exception as exc:
            said = f"row {i} (prompt {_excerpt(prompt)}): {type(exc).__name__}: {exc}"[:500]
            logger.warning("%s: cannot judge %s; no reward", self.__name__, said)
            return Plan(outcome=Outcome(OutcomeKind.INVALID_ROW, detail=said))
        try:
            return replace(judging(completion), image=image)
        except Exception as exc:
            return Plan(outcome=failed(f"{self.__name__}: completion {i} cannot be read", exc))

    def _row_image(self, i: int, columns: Mapping[str, Any]) -> str | None:
        """The image row ``i`` names in the ``image_column`` (None: the pool's)."""
        if self.image_column is None or self.image_column not in columns:
            return None
        return row_image(self.image_column, columns[self.image_column][i])

    async def acall(
        self, prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any
    ) -> list[float | None]:
        log_metric = kwargs.pop("log_metric", None)
        log_extra = kwargs.pop("log_extra", None)
        rollouts = _tool_rollouts(kwargs.pop("environments", None), len(completions))
        for trl_only in ("trainer_state", "completion_ids"):
            kwargs.pop(trl_only, None)
        if rollouts is not None:  # a multi-turn rollout is judged by what it submitted
            completions = [submitted(r) for r in rollouts]
        outcomes = await self.aoutcomes(prompts, completions, **kwargs)
        stats = self._stats(outcomes)
        self.last_batch = stats
        if callable(log_metric):
            for metric, value in self.metrics(stats).items():
                log_metric(metric, value)
            for metric, value in tool_metrics(rollouts).items() if rollouts is not None else ():
                log_metric(f"{self.__name__}/{metric}", value)
        if callable(log_extra):
            log_extra(f"{self.__name__}_outcome", [_describe(o) for o in outcomes])
        infra = stats.outcomes[OutcomeKind.INFRA.value]
        if (
            self.max_infra_share is not None
            and stats.total >= self.min_batch_for_breaker
            and infra / stats.total > self.max_infra_share
        ):
            example = next(o.detail for o in outcomes if o.kind is OutcomeKind.INFRA)
            raise CircuitOpenError(
                f"{self.__name__}: {infra} of {stats.total} evaluations failed for "
                f"infrastructure reasons (limit {self.max_infra_share:.0%}); e.g. {example}. "
                "Check the sandbox provider (sandboxkit doctor), or raise max_infra_share."
            )
        return [self.reward(o) for o in outcomes]

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any
    ) -> list[float | None]:
        # The pool's session can install the SIGINT/SIGTERM handlers that stop its sandboxes
        # only on the main thread: make the pool here, not on sandboxkit's loop thread.
        _ = self.pool
        return run_sync(self.acall(prompts, completions, **kwargs))

    def as_async(self) -> AsyncRewardFunction:
        """The same function with an ``async __call__``, which TRL runs concurrently (on its own
        thread: the pool is made here, so that its session handles signals, as in ``__call__``)."""
        _ = self.pool
        return AsyncRewardFunction(self)

    def _stats(self, outcomes: Sequence[Outcome]) -> BatchStats:
        ran = sorted(o.duration for o in outcomes if o.duration > 0)
        return BatchStats(
            outcomes=Counter(o.kind.value for o in outcomes),
            total=len(outcomes),
            verdicts=Counter(o.verdict.value for o in outcomes if o.verdict is not None),
            latency_p50=_percentile(ran, 50),
            latency_p95=_percentile(ran, 95),
            pool=self._pool.stats if self._pool is not None else None,
        )

    def metrics(self, stats: BatchStats) -> dict[str, float]:
        """The scalars logged per batch, under ``<name>/``."""
        prefix = self.__name__
        values = {
            f"{prefix}/timeout_rate": stats.rate(OutcomeKind.TIMEOUT),
            f"{prefix}/error_rate": stats.rate(OutcomeKind.ERROR),
            f"{prefix}/infra_error_rate": stats.rate(OutcomeKind.INFRA),
            f"{prefix}/deadline_rate": stats.rate(OutcomeKind.DEADLINE),
            f"{prefix}/unsupported_rate": stats.rate(OutcomeKind.UNSUPPORTED),
            f"{prefix}/invalid_row_rate": stats.rate(OutcomeKind.INVALID_ROW),
            f"{prefix}/pass_rate": stats.rate(OutcomeKind.PASSED),
            f"{prefix}/latency_p50": stats.latency_p50,
            f"{prefix}/latency_p95": stats.latency_p95,
        }
        judged = sum(stats.verdicts.values())
        if judged:  # a contest reward: each verdict's share of the judged programs
            for verdict in Verdict:
                values[f"{prefix}/{verdict.value}_rate"] = stats.verdicts[verdict.value] / judged
        if stats.pool is not None:
            values[f"{prefix}/pool_size"] = float(stats.pool.size)
            values[f"{prefix}/sandboxes_created"] = float(stats.pool.created)
            values[f"{prefix}/sandboxes_renewed"] = float(stats.pool.renewed)
            values[f"{prefix}/sandboxes_evicted"] = float(stats.pool.evicted)
            values[f"{prefix}/retries"] = float(stats.pool.retries)
            values[f"{prefix}/rate_limited"] = float(stats.pool.rate_limited)
            values[f"{prefix}/concurrency_limit"] = float(stats.pool.concurrency_limit)
        return values

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None

    def close(self) -> None:
        run_sync(self.aclose())


class AsyncRewardFunction:
    """The async face of a :class:`RewardFunction` (same pool, same name, same stats)."""

    def __init__(self, inner: RewardFunction) -> None:
        self.inner = inner
        self.__name__ = inner.__name__

    async def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any
    ) -> list[float | None]:
        return await self.inner.acall(prompts, completions, **kwargs)


# -- the factories ------------------------------------------------------------------------


def exec_reward(
    backend: BackendLike = None, *, timeout: float = 10.0, **options: Any
) -> RewardFunction:
    """1.0 if the extracted code runs to completion with exit status 0, else 0.0."""
    harness = ExecHarness(timeout=timeout)

    def planner(i: int, prompt: Any, columns: Any) -> Judging:
        return lambda completion: plan(completion, harness)

    return RewardFunction(
        "exec_reward",
        planner,
        lambda o: 1.0 if o.kind is OutcomeKind.PASSED else 0.0,
        backend=backend,
        **options,
    )


def assert_tests_reward(
    backend: BackendLike = None,
    *,
    tests_column: str = "test_list",
    setup_column: str | None = "test_setup_code",
    timeout: float = 5.0,
    continuation: bool = False,
    **options: Any,
) -> RewardFunction:
    """The fraction of the row's test snippets (MBPP's ``test_list``) that pass.

    ``continuation=True`` treats completions as function bodies continuing the prompt.
    """

    @functools.lru_cache(maxsize=ROWS_KEPT)
    def judging(tests: tuple[str, ...], setup: str, prefix: str | None) -> Judging:
        harness = AssertTests(tests, setup=setup, timeout=timeout, prompt=prefix)
        buildable(harness, prefix or "")
        return lambda completion: plan(completion, harness, prompt=prefix)

    def planner(i: int, prompt: Any, columns: Mapping[str, Any]) -> Judging:
        if tests_column not in columns:
            raise MissingColumnError(
                f"assert_tests_reward: no {tests_column!r} column among {sorted(columns)}; "
                "check the dataset columns this reward function reads (tests_column)"
            )
        tests = columns[tests_column][i]
        tests = [tests] if isinstance(tests, str) else list(tests)
        setups = columns.get(setup_column) if setup_column else None
        setup = (setups[i] or "") if setups else ""
        if not all(isinstance(text, str) for text in (*tests, setup)):
            raise TypeError("its tests and setup must be Python source text")
        prefix = completion_text(prompt) if continuation and prompt is not None else None
        return judging(tuple(tests), setup, prefix)

    return RewardFunction(
        "assert_tests_reward", planner, lambda o: o.fraction, backend=backend, **options
    )


def input_tests_reward(
    backend: BackendLike = None,
    *,
    scoring: Literal["fraction", "all"] = "fraction",
    timeout: float = 5.0,
    continuation: bool = False,
    entry_point_column: str = "entry_point",
    inputs_columns: Sequence[str] = ("base_input", "plus_input"),
    reference_column: str = "canonical_solution",
    expected_column: str = "expected_output",
    atol_column: str = "atol",
    **options: Any,
) -> RewardFunction:
    """EvalPlus's shape (HumanEval+, MBPP+): call the row's ``entry_point`` on each input of its
    ``inputs_columns`` (lists of argument lists, or their JSON text) and compare each result
    with the reference's as EvalPlus does (the row's ``atol``;
    :func:`~sandboxkit.harness.inputs.evalplus_equal`). ``scoring``: the ``"fraction"`` of
    inputs passed, or ``"all"`` or nothing (EvalPlus's pass). The expected results are the
    row's ``expected_column`` where it has one (a list, one per input), else the results of
    its reference program (``reference_column``, after the prompt where it continues it), run
    on the host once per task and cached. ``continuation=True`` treats completions as bodies
    continuing the prompt. The mapping and what differs from EvalPlus: docs/inputs.md."""
    if scoring not in ("fraction", "all"):
        raise ValueError(f"scoring must be 'fraction' or 'all'; got {scoring!r}")
    expected_cache: dict[str, tuple[list[Any], float]] = {}
    """Per task: the reference's results and the CPU seconds it took (``reference_seconds``)."""
    harnesses: OrderedDict[tuple[str, str | None], InputTests] = OrderedDict()
    """The latest rows' harnesses, by task and prompt (``ROWS_KEPT``): a row's completions share
    one, whose calls are encoded once (``InputTests.job``)."""

    def planner(i: int, prompt: Any, columns: Mapping[str, Any]) -> Judging:
        needed = [entry_point_column, *inputs_columns]
        if not all(name in columns for name in needed):
            raise MissingColumnError(
                f"input_tests_reward: the columns {needed} are not all among {sorted(columns)}; "
                "check entry_point_column and inputs_columns"
            )
        entry = columns[entry_point_column][i]
        inputs = [tuple(args) for name in inputs_columns for args in _json(columns[name][i])]
        atols = columns.get(atol_column)
        atol = float(atols[i] or 0.0) if atols else 0.0
        prefix = completion_text(prompt) if prompt is not None else ""
        given = columns.get(expected_column)
        if given and given[i] is not None:
            expected, seconds = list(_json(given[i])), 0.0  # no reference run: none known
            if len(expected) != len(inputs):
                raise ValueError(f"it has {len(inputs)} inputs but {len(expected)} expected")
            key = inputs_key(repr(expected), entry, inputs, atol)
        elif reference_column in columns:
            program = reference_program(prefix, columns[reference_column][i], entry)
            key = inputs_key(program, entry, inputs, atol)
            if key not in expected_cache:
                start = time.thread_time()
                outputs = reference_outputs(program, entry, inputs)
                expected_cache[key] = (outputs, time.thread_time() - start)
            expected, seconds = expected_cache[key]
        else:
            raise MissingColumnError(
                f"input_tests_reward: neither {expected_column!r} nor {reference_column!r} "
                f"among {sorted(columns)}"
            )
        body_of = prefix if continuation else None
        # Taken out and put back last (the latest rows are kept): each step is one operation
        # of the dict's, so planners in other threads cannot make it raise.
        harness = harnesses.pop((key, body_of), None)
        if harness is None:
            harness = InputTests(
                entry, tuple(inputs), tuple(expected), atol, timeout, scoring == "all", seconds
            )
            buildable(harness, body_of or "")
        harnesses[key, body_of] = harness
        while len(harnesses) > ROWS_KEPT:
            with contextlib.suppress(KeyError):
                harnesses.popitem(last=False)
        return lambda completion: plan(completion, harness, prompt=body_of)

    def mapping(outcome: Outcome) -> float:
        if scoring == "all":
            return 1.0 if outcome.kind is OutcomeKind.PASSED else 0.0
        return outcome.fraction

    return RewardFunction("input_tests_reward", planner, mapping, backend=backend, **options)


def reference_program(prompt: str, reference: str, entry_point: str) -> str:
    """The reference as a program: itself where it defines ``entry_point`` (MBPP+'s
    solutions), else the prompt it continues followed by it (HumanEval+'s bodies)."""
    with contextlib.suppress(SyntaxError, ValueError):
        tree = parse_python(reference)
        defined = (n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef))
        if entry_point in defined:
            return reference
    return prompt + reference


def _find_task(tasks: Mapping[str, FunctionTask], prompt: Any) -> str:
    """The name of the task whose prompt this is (exactly, else contained in it: TRL may add
    a system prompt or chat messages around it)."""
    text = _prompt_text(prompt)
    for name, task in tasks.items():
        if task.prompt == text:
            return name
    for name, task in tasks.items():
        if task.prompt.strip() and task.prompt.strip() in text:
            return name
    raise KeyError(f"no task has this prompt: {text[:80]!r}")


TaskLike = FunctionTask | Mapping[str, Any]
"""A :class:`FunctionTask`, or a dict of its fields as Daytona's example writes its ``TASKS``
(``prompt``, ``func_name``, ``tests``, ``reference``, ``banned_patterns``), where
``reference`` may also be a builtin's name such as ``"sorted"``."""


def _function_task(task: TaskLike) -> FunctionTask:
    if isinstance(task, FunctionTask):
        return task
    given = dict(task)
    check_keywords("FunctionTask()", given, {f.name for f in fields(FunctionTask)})
    reference = given.get("reference")
    if isinstance(reference, str):
        found = getattr(builtins, reference, None)
        if not callable(found):
            raise ValueError(
                f"task {given.get('func_name')!r}: reference {reference!r} is not a builtin's "
                "name; pass the reference function itself"
            )
        given["reference"] = found
    return FunctionTask(**given)


def function_tests_reward(
    tasks: Mapping[str, TaskLike] | Sequence[TaskLike],
    *,
    backend: BackendLike = None,
    timeout: float = 5.0,
    **options: Any,
) -> RewardFunction:
    """Daytona's rule: -1.0 for an error, a timeout, empty code or a banned pattern; otherwise
    the fraction of tests whose output strictly equals the reference's. The task is found from
    the prompt; completions continue it (function bodies). ``tasks`` are keyed by name, or
    listed (then named by their ``func_name``)."""
    if isinstance(tasks, Mapping):
        table = {name: _function_task(task) for name, task in tasks.items()}
    else:
        table = {t.func_name: t for t in map(_function_task, tasks)}
    harnesses = {
        name: buildable(task.harness(timeout), task.prompt) for name, task in table.items()
    }
    bans = {name: task.bans() for name, task in table.items()}

    def planner(i: int, prompt: Any, columns: Any) -> Judging:
        name = _find_task(table, prompt)
        task = table[name]
        names, attributes, modules = bans[name]
        return lambda completion: plan(
            completion,
            harnesses[name],
            prompt=task.prompt,
            banned_patterns=task.banned_patterns,
            banned_names=names,
            banned_attributes=attributes,
            banned_modules=modules,
        )

    def mapping(outcome: Outcome) -> float:
        return outcome.fraction if outcome.ran else -1.0

    return RewardFunction("function_tests_reward", planner, mapping, backend=backend, **options)


def _row_language(named: str | None, fixed: str | None) -> Language | str:
    """The language a row's program is judged in: the row's own (open-r1's ``language``, a
    ``language`` column), else the reward's ``language``, else the convention of the
    datasets that name none (APPS, TACO, CodeContests, LiveCodeBench): Python. Never the
    completion's: a completion that picked its language could pick one the sandbox lacks (an
    ``infra`` outcome) or one a call-based row cannot run (``unsupported``), and so turn its
    own failure into no reward. A name the table lacks comes back as that name."""
    wanted = named or fixed or DATASET_CONVENTION
    return language_for(wanted) or wanted


DATASET_CONVENTION = "python"
"""The language of a row that names none, and of a reward given no ``language=``."""


def stdio_tests_reward(
    backend: BackendLike = None,
    *,
    tests_column: str | Sequence[str] | None = None,
    scoring: Scoring = "fraction",
    subtasks_column: str = "subtasks",
    timeout: float = 5.0,
    language: str | None = None,
    memory_mb: int = 256,
    wall: float | None = None,
    output_limit: int = 1 << 20,
    compile_timeout: float = 30.0,
    compile_memory_mb: int = 2048,
    checker: Checker | None = None,
    checker_column: str = "checker",
    language_column: str = "language",
    time_limit_column: str = "time_limit",
    memory_limit_column: str = "memory_limit",
    **options: Any,
) -> RewardFunction:
    """Contest problems: the program reads each test's input on stdin; its stdout must match
    the expected output token by token (or as a checker decides). Tests are read from the
    row's ``tests_column`` (one column or several, combined; None: found among the row's
    columns) in the shapes of :mod:`sandboxkit.contest.formats`. ``scoring``: ``"fraction"``
    of tests passed, ``"all"`` or nothing, or ``"subtasks"`` (IOI: the points of each group
    whose tests all pass, from ``subtasks_column``, as a share of all points).

    Limits per test: ``timeout`` CPU seconds and ``memory_mb``, or the row's
    ``time_limit_column`` (seconds) and ``memory_limit_column`` (MB) where it has them, as
    open-r1's Codeforces rows do; ``wall`` seconds (None: five times the CPU limit) and
    ``output_limit`` bytes; the compile's own ``compile_timeout`` (CPU seconds) and
    ``compile_memory_mb``.

    The language (:mod:`sandboxkit.contest.languages`) is the row's (open-r1's
    ``verification_info`` names it, or the ``language_column``), else ``language``, else
    Python (the convention of APPS, TACO, CodeContests and LiveCodeBench), never the
    completion's: code in another language is that completion's failure (0.0, saying so). A
    language the table lacks gets ``None`` (an ``unsupported`` outcome naming it). The output
    is judged by
    ``checker``, else the row's ``checker_column`` spec
    (:func:`~sandboxkit.contest.checkers.checker_from_spec`), else token by token.

    A call-based row (APPS ``fn_name``, LiveCodeBench ``functional``) calls the function
    instead, comparing results on the host (:mod:`sandboxkit.contest.calls`; Python only),
    under ``timeout`` alone: memory, wall-clock and output limits are a program's."""
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}; got {scoring!r}")
    if language is not None and language_for(language) is None:
        known = ", ".join(lang.name for lang in languages())
        raise ValueError(f"no language {language!r} in the table; known: {known}")
    fixed = (tests_column,) if isinstance(tests_column, str) else tests_column

    def planner(i: int, prompt: Any, columns: Mapping[str, Any]) -> Judging:
        if fixed and not any(name in columns for name in fixed):
            raise MissingColumnError(
                f"stdio_tests_reward: none of the columns {list(fixed)} among {sorted(columns)}; "
                "check tests_column"
            )
        row = {name: values[i] for name, values in columns.items() if isinstance(values, list)}
        problem = read_tests(row, fixed or detect_columns(list(row)))
        named = problem.language or row.get(language_column)
        lang = _row_language(str(named) if named else None, language)
        tests = len(problem.calls or problem.cases)
        if not tests:
            raise ValueError("it has no test cases")
        groups = parse_subtasks(row[subtasks_column], tests) if scoring == "subtasks" else ()
        limit = row.get(time_limit_column)
        seconds = float(limit) if isinstance(limit, (int, float)) and limit > 0 else timeout
        unsupported = ""
        if not isinstance(lang, Language):
            unsupported = f"language {lang!r} is not in the table (register_language)"
        elif problem.call_based and lang.name != "python":
            unsupported = f"call-based problems run in Python only, not {lang.title}"
        if unsupported or not isinstance(lang, Language):
            outcome = Outcome(OutcomeKind.UNSUPPORTED, detail=f"stdio_tests_reward: {unsupported}")
            return lambda completion: Plan(outcome=outcome)
        if problem.call_based:
            judged: Harness = call_tests(problem, timeout=seconds)
        else:
            memory = row.get(memory_limit_column)
            spec = row.get(checker_column)
            judged = StdioTests(
                problem.cases,
                timeout=seconds,
                output_cap=output_limit,
                language=lang,
                memory_mb=int(memory)
                if isinstance(memory, (int, float)) and memory > 0
                else memory_mb,
                wall=wall,
                checker=checker or (checker_from_spec(_json(spec)) if spec else None),
                compile_timeout=compile_timeout,
                compile_memory_mb=compile_memory_mb,
            )
        harness = buildable(ScoredStdioTests(judged, scoring, groups))

        def judging(completion: Completion) -> Plan:
            planned = plan(completion, harness, language=lang)
            if planned.outcome is not None and planned.outcome.kind is OutcomeKind.ERROR:
                # Python's syntax, checked here before any sandbox: its compile error.
                return Plan(outcome=replace(planned.outcome, verdict=Verdict.COMPILE_ERROR))
            empty = planned.outcome is not None and planned.outcome.kind is OutcomeKind.EMPTY
            if empty and not extract_code(completion, language=lang):  # not too large, say
                return Plan(outcome=Outcome(OutcomeKind.EMPTY, detail=_no_code(lang, completion)))
            return planned

        return judging

    def mapping(outcome: Outcome) -> float:
        return outcome.score if outcome.score is not None else 0.0

    return RewardFunction("stdio_tests_reward", planner, mapping, backend=backend, **options)


def _no_code(lang: Language, completion: Completion) -> str:
    """Why a completion has no program in its row's language: what its blocks are in."""
    others = sorted({tag for tag in block_tags(completion) if tag})
    said = f" (its code blocks are tagged {', '.join(others)})" if others else ""
    return f"stdio_tests_reward: no {lang.title} code in the completion{said}"


def _json(value: Any) -> Any:
    """A column's value, decoded when it is JSON text."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


_FACTORY_KEYWORDS = {
    f.__name__: keyword_only(f)
    for f in (
        exec_reward,
        assert_tests_reward,
        function_tests_reward,
        stdio_tests_reward,
        input_tests_reward,
    )
}
"""The factories' own keywords, named with the others when an option is misspelt."""
