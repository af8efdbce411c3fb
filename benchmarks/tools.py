"""Tool-call latency of multi-turn rollouts for ``run.py``: what a call of
``sandboxkit.tools.Rollout``'s tools costs on a warm sandbox over the bare exec it wraps, and
what a rollout's reset costs.

Per call: each tool (``run_python`` with an empty state and with a function defined in it,
``run_shell``, ``write_file``, ``read_file``) on a sandbox that has served the rollout's
first call, next to the raw ``Sandbox`` calls on the same sandboxes (``aexec(["true"])``, the
floor of any exec; ``python3 -I -c pass``, an interpreter's start; ``awrite_file`` and
``aread_file``). The calls take turns, one round at a time, so that a burst of other work on
a shared machine lands on every method alike. The async core is timed inside the event loop
(what a rollout awaits); on the local backend the sync facade of TRL's environment
(``SandboxEnvironment``) is timed from the caller's thread, as TRL calls it, its calls taking
turns with the core's.

Per reset: a rollout's ``release`` (the wipe in the background) against ``arelease``
(awaited: the wipe with ``reuse=True``, the stop with ``reuse=False``), and the next
rollout's first call (which also copies cloudpickle in for the interpreter): on a sandbox the
lender wiped and reused, on the spare it created in the background (``reuse=False``), and on
one its lease creates (no idle sandbox).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sandboxkit import SandboxClient
from sandboxkit.integrations.environment import SandboxEnvironment, sandbox_environment
from sandboxkit.portal import run_sync
from sandboxkit.tools import Rollout, SandboxLender

TARGETS = {"run_python('pass')": 25.0, "run_shell('true')": 10.0}
"""Local backend: the most a tool may add to a bare exec of ``true`` (its median), ms."""
FILE = "notes.txt"
TEXT = ("sandboxkit " * 187)[:2048]
"""What the file calls write and read: 2 KiB of text (under the 4000 characters a
rollout shows, so read_file returns it whole)."""
DEFINE = "def f(x):\n    return x + 1\n"
"""A function in the state: only cloudpickle pickles it (by value), so every later cell
imports cloudpickle to load and save the state."""
FLOOR = "raw aexec(['true'])"
SYNC_FLOOR = "raw exec(['true'])"
PYTHON_CALLS = ("run_python('pass')", "run_python('f(1)'), a function in the state")


def _ms(seconds: Sequence[float], q: float) -> float:
    ordered = sorted(seconds)
    if len(ordered) < 2:
        return ordered[0] * 1e3
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q) - 1] * 1e3


def _expect(got: object, want: object, what: str) -> None:
    if got != want:
        raise RuntimeError(f"{what} answered {str(got)[:200]!r}, not {str(want)[:200]!r}")


Plan = dict[tuple[str, str], Callable[[], float]]
"""(API, call) -> a function that makes the call once and says how many seconds it took."""
CORE = "async core"
FACADE = "sync facade (TRL environment)"


def _take_turns(plan: Plan, rounds: int) -> dict[tuple[str, str], list[float]]:
    """``rounds`` turns of each call (starting one later each round), seconds each."""
    times: dict[tuple[str, str], list[float]] = {key: [] for key in plan}
    keys = list(plan)
    for i in range(rounds):
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            times[key].append(plan[key]())
    return times


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def _in_loop(call: Callable[[], Awaitable[Any]]) -> Callable[[], float]:
    """An async call timed inside sandboxkit's event loop (the hop there is not counted)."""
    return lambda: run_sync(_timed(call))


def _from_thread(call: Callable[[], Any]) -> Callable[[], float]:
    """A sync call timed from this thread, as TRL calls the environment's tools."""

    def timed() -> float:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    return timed


def _call_rows(times: dict[tuple[str, str], list[float]], **keys: Any) -> list[dict[str, Any]]:
    rows = []
    for (api, name), seconds in times.items():
        floor = (CORE_FLOORS if api == CORE else FACADE_FLOORS).get(name)
        p50 = _ms(seconds, 50)
        rows.append(
            {
                **keys,
                "api": api,
                "call": name,
                "calls": len(seconds),
                "p50_ms": p50,
                "p95_ms": _ms(seconds, 95),
                "min_ms": min(seconds) * 1e3,
                "floor": floor,
                "overhead_p50_ms": p50 - _ms(times[api, floor], 50) if floor else None,
            }
        )
    return rows


CORE_FLOORS = {
    PYTHON_CALLS[0]: FLOOR,
    PYTHON_CALLS[1]: "raw aexec(['true']), the state's sandbox",
    "run_shell('true')": FLOOR,
    "write_file 2 KiB": "raw awrite_file 2 KiB",
    "read_file 2 KiB": "raw aread_file 2 KiB",
}
"""Each async tool's raw call on the same sandbox."""
FACADE_FLOORS = {
    PYTHON_CALLS[0]: SYNC_FLOOR,
    "run_shell('true')": SYNC_FLOOR,
    "write_file 2 KiB": "raw write_file 2 KiB",
    "read_file 2 KiB": "raw read_file 2 KiB",
}
"""Each sync tool's raw call (the ``Sandbox``'s sync method) on the same sandbox."""


class _Core:
    """Two rollouts of one lender, past their first calls: one with an empty interpreter
    state, one with a function in it."""

    async def start(self, client: SandboxClient) -> Plan:
        self.lender = lender = SandboxLender(client)
        self.empty, self.stateful = empty, stateful = Rollout(lender), Rollout(lender)
        # Their first calls: the lease, and cloudpickle copied in for the interpreter.
        _expect(await empty.arun_python("pass"), "(no output)", "run_python('pass')")
        _expect(await stateful.arun_python(DEFINE), "(no output)", "defining f")
        _expect(await stateful.arun_python("f(1)"), "2", "f(1)")
        _expect(await empty.awrite_file(FILE, TEXT), f"wrote {len(TEXT)} bytes to {FILE}", "write")
        sb, other = empty.sandbox, stateful.sandbox  # the sandboxes they hold
        assert sb is not None and other is not None
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            FLOOR: lambda: sb.aexec(["true"]),
            "raw aexec(['true']), the state's sandbox": lambda: other.aexec(["true"]),
            "raw aexec python3 -I -c pass": lambda: sb.aexec(["python3", "-I", "-c", "pass"]),
            "raw awrite_file 2 KiB": lambda: sb.awrite_file(FILE, TEXT),
            "raw aread_file 2 KiB": lambda: sb.aread_file(FILE),
            PYTHON_CALLS[0]: lambda: empty.arun_python("pass"),
            PYTHON_CALLS[1]: lambda: stateful.arun_python("f(1)"),
            "run_shell('true')": lambda: empty.arun_shell("true"),
            "write_file 2 KiB": lambda: empty.awrite_file(FILE, TEXT),
            "read_file 2 KiB": lambda: empty.aread_file(FILE),
        }
        return {(CORE, name): _in_loop(call) for name, call in calls.items()}

    async def check(self) -> None:
        """The calls did what they were asked: a timing of failures would mean nothing."""
        _expect(await self.empty.aread_file(FILE), TEXT, "read_file")
        _expect(await self.stateful.arun_python("f(2)"), "3", "f(2)")
        failed = [c for c in (*self.empty.tool_calls, *self.stateful.tool_calls) if c.error]
        if failed:
            raise RuntimeError(f"tool calls failed: {failed[:3]}")

    async def close(self) -> None:
        await self.lender.aclose()


def _facade_plan(env: SandboxEnvironment) -> Plan:
    """TRL's environment past its first call: its sync tools, and the raw sync calls."""
    env.reset(prompt="benchmark")
    _expect(env.run_python("pass"), "(no output)", "run_python('pass')")
    env.write_file(FILE, TEXT)
    sb = env.sandbox
    assert sb is not None
    calls: dict[str, Callable[[], Any]] = {
        SYNC_FLOOR: lambda: sb.exec(["true"]),
        "raw write_file 2 KiB": lambda: sb.write_file(FILE, TEXT),
        "raw read_file 2 KiB": lambda: sb.read_file(FILE),
        PYTHON_CALLS[0]: lambda: env.run_python("pass"),
        "run_shell('true')": lambda: env.run_shell("true"),
        "write_file 2 KiB": lambda: env.write_file(FILE, TEXT),
        "read_file 2 KiB": lambda: env.read_file(FILE),
    }
    return {(FACADE, name): _from_thread(call) for name, call in calls.items()}


def _env_resets(
    env_class: type[SandboxEnvironment], env: SandboxEnvironment, runs: int
) -> list[float]:
    """Seconds of ``SandboxEnvironment.reset`` after a rollout that used its sandbox."""
    resets = []
    for _ in range(runs):
        env.run_shell("true")
        started = time.perf_counter()
        env.reset(prompt="benchmark")
        resets.append(time.perf_counter() - started)
        run_sync(env_class.lender().asettle())
    return resets


async def _first_call(rollout: Rollout) -> float:
    started = time.perf_counter()
    _expect(await rollout.arun_python("pass"), "(no output)", "a first run_python")
    return time.perf_counter() - started


async def _used(rollout: Rollout) -> None:
    """What a rollout leaves for the wipe: a file, and the interpreter's state."""
    await rollout.awrite_file(FILE, TEXT)
    await rollout.arun_shell("mkdir -p out && echo done > out/log")


async def _resets(client: SandboxClient, cycles: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        "release(): the wipe in the background": [],
        "arelease(), reuse=True: the wipe awaited": [],
        "arelease(), reuse=False: the stop awaited": [],
        "first call, a new sandbox (the lease creates it)": [],
        "first call, a reused sandbox (wiped)": [],
        "first call, the spare made in the background (reuse=False)": [],
    }
    for _ in range(cycles):  # a new lender each time: nothing idle to lease
        lender = SandboxLender(client)
        try:
            rollout = Rollout(lender)
            times["first call, a new sandbox (the lease creates it)"].append(
                await _first_call(rollout)
            )
        finally:
            await lender.aclose()
    for reuse in (True, False):
        lender = SandboxLender(client, reuse=reuse)
        try:
            rollout = Rollout(lender)
            await _first_call(rollout)
            for i in range(cycles):
                await _used(rollout)
                started = time.perf_counter()
                if reuse and i % 2:
                    rollout.release()
                    times["release(): the wipe in the background"].append(
                        time.perf_counter() - started
                    )
                else:
                    await rollout.arelease()
                    name = "the wipe" if reuse else "the stop"
                    times[f"arelease(), reuse={reuse}: {name} awaited"].append(
                        time.perf_counter() - started
                    )
                await lender.asettle()
                rollout = Rollout(lender)
                seconds = await _first_call(rollout)
                if reuse:
                    times["first call, a reused sandbox (wiped)"].append(seconds)
                else:
                    times["first call, the spare made in the background (reuse=False)"].append(
                        seconds
                    )
            await rollout.arelease()
            expected = 1 if reuse else cycles + 1
            if lender.stats.created != expected:
                raise RuntimeError(f"the lender made {lender.stats} (reuse={reuse})")
        finally:
            await lender.aclose()
    return times


def measure(
    client: SandboxClient,
    backend: str,
    latency_ms: float,
    rounds: int,
    cycles: int,
    *,
    facade: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-call rows, reset rows) of one backend; ``facade``: TRL's sync environment too,
    its calls taking turns with the async core's."""
    keys = {"backend": backend, "latency_ms": latency_ms}
    core = _Core()
    env_class = sandbox_environment(client, name="BenchToolsEnvironment")
    try:
        plan = run_sync(core.start(client))
        env = env_class() if facade else None
        if env is not None:
            plan |= _facade_plan(env)
        times = _take_turns(plan, rounds)
        run_sync(core.check())
        env_resets = _env_resets(env_class, env, max(2, rounds // 4)) if env else []
    finally:
        env_class.close_all()
        run_sync(core.close())
    calls = _call_rows(times, **keys)
    resets = run_sync(_resets(client, cycles))
    if env_resets:
        resets["SandboxEnvironment.reset() (sync, the wipe in the background)"] = env_resets
    reset_rows = [
        {
            **keys,
            "step": step,
            "runs": len(seconds),
            "p50_ms": _ms(seconds, 50),
            "p95_ms": _ms(seconds, 95),
            "min_ms": min(seconds) * 1e3,
        }
        for step, seconds in resets.items()
        if seconds
    ]
    return calls, reset_rows


def markdown(calls: Sequence[dict[str, Any]], resets: Sequence[dict[str, Any]]) -> list[str]:
    """The section's two tables."""
    out = [
        "",
        "### Tool calls of a rollout: per call, on a warm sandbox",
        "",
        "| backend | latency ms | API | call | calls | p50 ms | p95 ms | overhead p50 ms | over |",
        "|---" * 9 + "|",
    ]
    for r in calls:
        over = "" if r["overhead_p50_ms"] is None else f"{r['overhead_p50_ms']:+.1f}"
        out.append(
            f"| {r['backend']} | {r['latency_ms']:g} | {r['api']} | {r['call']} | {r['calls']} "
            f"| {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {over} | {r['floor'] or ''} |"
        )
    out += [
        "",
        "### A rollout's reset: giving the sandbox back, and the next rollout's first call",
        "",
        "| backend | latency ms | step | runs | p50 ms | p95 ms | min ms |",
        "|---" * 7 + "|",
    ]
    for r in resets:
        out.append(
            f"| {r['backend']} | {r['latency_ms']:g} | {r['step']} | {r['runs']} "
            f"| {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['min_ms']:.1f} |"
        )
    out += [
        "",
        "Tool notes: the calls take turns, round by round, on two warm sandboxes of one lender "
        "(one with an empty interpreter state, one with a function in it); overhead = the "
        "tool's median minus its raw call's (`over`) on the same sandbox. Async core: timed "
        "inside sandboxkit's event loop; sync facade: `SandboxEnvironment`'s methods timed "
        "from the calling thread, as TRL calls them. A first call also leases the sandbox and "
        "copies cloudpickle in for the interpreter. Emulators run the commands on this "
        "machine's cores and answer for the provider, so their raw calls are the emulator's "
        "cost plus the added latency per round trip.",
    ]
    return out


def targets(calls: Sequence[dict[str, Any]], full: int) -> list[dict[str, Any]]:
    """The targets of the local rows (both APIs), judged on a full run's ``full`` rounds."""
    out = []
    for r in calls:
        limit = TARGETS.get(r["call"])
        if limit is None or r["backend"] != "local" or r["calls"] < full:
            continue
        out.append(
            {
                "target": f"local {r['call']}, {r['api']}: < {limit:g} ms over {r['floor']} "
                "(median)",
                "measured": f"{r['overhead_p50_ms']:+.1f} ms ({r['p50_ms']:.1f} against "
                f"{r['p50_ms'] - r['overhead_p50_ms']:.1f})",
                "met": r["overhead_p50_ms"] < limit,
            }
        )
    return out
