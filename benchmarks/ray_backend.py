"""The Ray backend against the local backend on this machine, and what a cluster should give.

On a local Ray cluster (``ray.cluster_utils.Cluster``: a head node, then a second node, one
logical CPU each, both on this machine):

- per call: ``aexec(["true"])`` and ``python3 -c pass`` on a warm sandbox of each backend,
  taking turns round by round (median and p95), and a sandbox's create-to-stop;
- per batch: ``exec_reward`` on trivial programs through a pool, on the local backend (pool 1
  and 2) and on Ray with one node (pool 1: one sandbox per CPU) and with two (pool 2), warm
  calls timed after a cold one; each row's CPU per evaluation, of the driver (this process)
  and of the nodes (every process it started: Ray, its workers, the sandboxes), feeds the
  model of a cluster of N nodes printed below the tables.

    PYTHONPATH=. python benchmarks/ray_backend.py [--rounds 40] [--batch 48] [--calls 5]
        [--json PATH | --record]

``run.py --only ray`` runs the same at its size (tiny with ``--smoke``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from run import (
    add_output_options,
    local_client,
    machine_info,
    machine_line,
    output_path,
    private_root,
    reward_function,
)
from workloads import trivial

from sandboxkit import Sandbox, SandboxClient, get_backend
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.testing.ray import node_environment

NODE_CORES = 16
"""Cores per node in the model's table."""
MODEL_NODES = (1, 2, 8, 32, 128)
PROGRAM_CPU_S = (0.0, 0.1, 1.0)
"""CPU seconds of the program itself, on top of the trivial one measured: none, unit tests
of a short function, a heavy test suite."""
CALLS = {"aexec(['true'])": ["true"], "python3 -c pass": ["python3", "-c", "pass"]}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _descendants() -> dict[int, list[str]]:
    """The ``/proc/<pid>/stat`` fields (after the name) of every descendant of this process:
    the Ray nodes it started, their workers and the sandboxes' processes."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        stats[int(entry)] = fields
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = {}, list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        found[pid] = stats[pid]
        stack += children.get(pid, [])
    return found


def tree_cpu_s() -> tuple[float, float]:
    """CPU seconds of this process, and of all its descendants (a reaped process's time is in
    its parent's ``cutime``): other users of a shared machine are left out."""
    ticks = sum(sum(int(v) for v in f[11:15]) for f in _descendants().values())
    return time.process_time(), ticks / CLK_TCK  # utime stime cutime cstime


def tree_rss_mb() -> dict[int, float]:
    """Resident memory of each of this process's descendants (pages they share counted in
    each), MB by pid."""
    page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
    return {pid: int(f[21]) * page_mb for pid, f in _descendants().items()}


def _quantile_ms(seconds: Sequence[float], q: int) -> float:
    ordered = sorted(seconds)
    if len(ordered) < 2:
        return ordered[0] * 1e3
    return statistics.quantiles(ordered, n=100, method="inclusive")[q - 1] * 1e3


@contextmanager
def ray_cluster() -> Iterator[tuple[Any, dict[str, str]]]:
    """A head node of one CPU, this process connected to it, and the environment of its nodes
    (``add_node`` with it adds another). The nodes keep their sandboxes on a root of this run:
    one whose actor was killed before it stopped (``stop`` falls back on ``ray.kill``) is
    stopped when the run ends, not left running on the machine's default root."""
    import ray
    from ray.cluster_utils import Cluster

    with private_root() as root:
        env = {**node_environment(), "SANDBOXKIT_LOCAL_ROOT": root}
        node = {
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": 100 * 2**20,
            "env_vars": env,
        }
        cluster = Cluster(initialize_head=True, head_node_args=node)
        try:
            ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
            yield cluster, env
        finally:
            ray.shutdown()
            cluster.shutdown()


async def _per_call(sandboxes: dict[str, Sandbox], rounds: int) -> dict[tuple[str, str], list]:
    """Each call on each backend's sandbox, taking turns, ``rounds`` times (seconds each)."""
    times: dict[tuple[str, str], list[float]] = {(b, c): [] for b in sandboxes for c in CALLS}
    keys = list(times)
    for i in range(rounds):
        for backend, call in keys[i % len(keys) :] + keys[: i % len(keys)]:
            started = time.perf_counter()
            result = await sandboxes[backend].aexec(CALLS[call], timeout=60)
            times[backend, call].append(time.perf_counter() - started)
            if not result.ok:
                raise RuntimeError(f"{call} failed on {backend}: {result.stderr[:200]}")
    return times


def _lifecycle(client: SandboxClient, rounds: int) -> list[float]:
    """create, one exec (the local backend's sandbox is made lazily), stop."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with client.sandbox(tags=["sandboxkit-bench=ray"]) as sb:
            sb.exec(["true"])
        times.append(time.perf_counter() - started)
    return times


def _memory(client: SandboxClient, name: str, count: int) -> dict[str, Any]:
    """Resident memory of the processes that ``count`` more idle sandboxes (one exec each)
    add: a Ray worker per actor, and each sandbox's warm template."""
    before = tree_rss_mb()
    # A quarter CPU each: a node of this benchmark has one.
    sandboxes = [client.sandbox(tags=["sandboxkit-bench=ray"], cpu=0.25) for _ in range(count)]
    try:
        for sb in sandboxes:
            sb.exec(["true"])
        held = sum(mb for pid, mb in tree_rss_mb().items() if pid not in before)
    finally:
        for sb in sandboxes:
            sb.stop()
    return {"backend": name, "sandboxes": count, "rss_mb_per_sandbox": held / count}


def _batch(
    client: SandboxClient, label: str, nodes: int, pool: int, batch: int, calls: int
) -> dict[str, Any]:
    """A cold call (it makes the pool's sandboxes), then ``calls`` timed ones: the median's
    wall, and the CPU of the driver and of everything else per evaluation over all of them."""
    work = trivial(batch)
    reward = reward_function(work, client, pool)
    try:
        started = time.perf_counter()
        reward(work.prompts, work.completions)
        cold = time.perf_counter() - started
        driver, tree = tree_cpu_s()
        walls, rewards = [], []
        for _ in range(calls):
            started = time.perf_counter()
            rewards += reward(work.prompts, work.completions)
            walls.append(time.perf_counter() - started)
        driver_after, tree_after = tree_cpu_s()
        stats = reward.last_batch
        assert stats is not None
    finally:
        reward.close()
    wall = statistics.median(walls)
    evaluations = batch * calls
    return {
        "backend": label,
        "nodes": nodes,
        "pool": pool,
        "batch": batch,
        "timed_calls": calls,
        "wall_s": wall,
        "per_s": batch / wall,
        "p50_ms": stats.latency_p50 * 1e3,
        "p95_ms": stats.latency_p95 * 1e3,
        "cold_wall_s": cold,
        "mean_reward": statistics.fmean(r for r in rewards if r is not None),
        "driver_cpu_ms_per_eval": (driver_after - driver) / evaluations * 1e3,
        "node_cpu_ms_per_eval": (tree_after - tree) / evaluations * 1e3,
    }


def measure(rounds: int, batch: int, calls: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Every row of this benchmark (see the module's docstring)."""
    results: dict[str, Any] = {"calls": [], "lifecycle": [], "memory": [], "batches": []}
    with local_client() as local, ray_cluster() as (cluster, node_env):
        tier = local.backend_as(SubprocessBackend).isolation.tier.value
        results["machine"] = machine_info(tier)
        with get_backend("ray", address=cluster.address) as ray_client:
            log(f"ray / per call ({rounds} rounds)")
            with local.sandbox() as a, ray_client.sandbox() as b:
                for sb in (a, b):
                    sb.exec(["true"])  # the local backend's template starts here
                times = asyncio.run(_per_call({"local": a, "ray": b}, rounds))
            for (backend, call), seconds in times.items():
                results["calls"].append(
                    {
                        "backend": backend,
                        "call": call,
                        "calls": len(seconds),
                        "p50_ms": _quantile_ms(seconds, 50),
                        "p95_ms": _quantile_ms(seconds, 95),
                    }
                )
            lifecycles = max(2, rounds // 8)
            log(f"ray / create-exec-stop ({lifecycles} rounds)")
            for name, client in (("local", local), ("ray", ray_client)):
                seconds = _lifecycle(client, lifecycles)
                results["lifecycle"].append(
                    {
                        "backend": name,
                        "sandboxes": len(seconds),
                        "p50_ms": _quantile_ms(seconds, 50),
                        "p95_ms": _quantile_ms(seconds, 95),
                    }
                )
            log("ray / memory of idle sandboxes")
            for name, client in (("local", local), ("ray", ray_client)):
                results["memory"].append(_memory(client, name, 3))
            for pool in (1, 2):
                log(f"ray / batch {batch}, local pool {pool}")
                results["batches"].append(_batch(local, "local", 1, pool, batch, calls))
            log(f"ray / batch {batch}, 1 Ray node, pool 1")
            results["batches"].append(_batch(ray_client, "ray", 1, 1, batch, calls))
            cluster.add_node(num_cpus=1, include_dashboard=False, env_vars=node_env)
            cluster.wait_for_nodes()
            log(f"ray / batch {batch}, 2 Ray nodes, pool 2")
            results["batches"].append(_batch(ray_client, "ray", 2, 2, batch, calls))
    results["model"] = model(results)
    return results


def _rate(seconds: float) -> float:
    """Per second, for a cost of ``seconds``; a smoke run's batch can take less CPU than the
    clock's tick measures: no bound then."""
    return 1 / seconds if seconds > 0 else math.inf


def model(results: dict[str, Any]) -> dict[str, Any]:
    """What a cluster of N nodes of C cores should give, from the costs measured here:

    completions/s = min(N * C / node CPU-s per evaluation, 1 / driver CPU-s per evaluation)

    The first is the nodes' CPUs: every evaluation costs its program's CPU plus what this
    benchmark measures on trivial programs (the exec, the actor's share of Ray, the sandbox's
    process); the second is one driver process sending every call and handling every answer.
    A pool must also hold enough sandboxes (Little's law): pool >= completions/s x seconds per
    evaluation, with one CPU reserved per sandbox by default."""
    two = next(r for r in results["batches"] if r["backend"] == "ray" and r["nodes"] == 2)
    node_s = two["node_cpu_ms_per_eval"] / 1e3
    driver_bound = _rate(two["driver_cpu_ms_per_eval"] / 1e3)
    rows = []
    for nodes in MODEL_NODES:
        for program in PROGRAM_CPU_S:
            cpu_bound = nodes * NODE_CORES * _rate(node_s + program)
            per_s = min(cpu_bound, driver_bound)
            seconds = two["p50_ms"] / 1e3 + program  # an evaluation's time in its sandbox
            rows.append(
                {
                    "nodes": nodes,
                    "program_cpu_s": program,
                    "cpu_bound_per_s": cpu_bound,
                    "per_s": per_s,
                    "limited_by": "nodes' CPUs" if cpu_bound <= driver_bound else "driver",
                    "pool_needed": max(1, math.ceil(min(per_s * seconds, 1e9))),
                }
            )
    return {
        "cores_per_node": NODE_CORES,
        "node_cpu_ms_per_eval": node_s * 1e3,
        "driver_cpu_ms_per_eval": two["driver_cpu_ms_per_eval"],
        "driver_bound_per_s": driver_bound,
        "rows": rows,
    }


def markdown(results: dict[str, Any]) -> str:
    """The tables of a results file of this benchmark, under the machine it ran on."""
    return "\n".join([machine_line(results["machine"]), *tables(results)])


def tables(results: dict[str, Any]) -> list[str]:
    """The tables of :func:`measure`'s results."""
    out = [
        "",
        "| call on a warm sandbox | backend | calls | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    for r in results["calls"]:
        out.append(
            f"| {r['call']} | {r['backend']} | {r['calls']} | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} |"
        )
    for r in results["lifecycle"]:
        out.append(
            f"| create, exec, stop | {r['backend']} | {r['sandboxes']} | {r['p50_ms']:.0f} "
            f"| {r['p95_ms']:.0f} |"
        )
    for r in results["memory"]:
        out.append(
            f"| idle sandbox's memory (RSS of its processes) | {r['backend']} "
            f"| {r['sandboxes']} | {r['rss_mb_per_sandbox']:.0f} MB | |"
        )
    out += [
        "",
        "| backend | nodes | pool | batch | wall s | compl./s | p50 ms | p95 ms | cold wall s "
        "| driver CPU ms/eval | node CPU ms/eval |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["batches"]:
        nodes = r["nodes"] if r["backend"] == "ray" else "-"
        out.append(
            f"| {r['backend']} | {nodes} | {r['pool']} | {r['batch']} "
            f"| {r['wall_s']:.2f} | {r['per_s']:.1f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} "
            f"| {r['cold_wall_s']:.2f} | {r['driver_cpu_ms_per_eval']:.1f} "
            f"| {r['node_cpu_ms_per_eval']:.1f} |"
        )
    m = results["model"]
    out += [
        "",
        f"Model ({m['cores_per_node']}-core nodes), from the 2-node row: "
        f"{m['node_cpu_ms_per_eval']:.1f} ms of node CPU per trivial evaluation plus the "
        f"program's own CPU; {m['driver_cpu_ms_per_eval']:.2f} ms of driver CPU per "
        f"evaluation, so one driver dispatches at most {m['driver_bound_per_s']:.0f} compl./s.",
        "",
        "| nodes | program CPU s | CPU bound compl./s | expected compl./s | limited by "
        "| pool needed |",
        "|---|---|---|---|---|---|",
    ]
    for r in m["rows"]:
        out.append(
            f"| {r['nodes']} | {r['program_cpu_s']:g} | {r['cpu_bound_per_s']:.0f} "
            f"| {r['per_s']:.0f} | {r['limited_by']} | {r['pool_needed']} |"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=40, help="timed calls of each kind")
    parser.add_argument("--batch", type=int, default=48, help="programs per reward call")
    parser.add_argument("--calls", type=int, default=5, help="timed reward calls per row")
    add_output_options(parser, "ray_backend")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    results = measure(args.rounds, args.batch, args.calls, log)
    results["config"] = {"rounds": args.rounds, "batch": args.batch, "calls": args.calls}
    print(markdown(results))
    path = output_path(args, "ray_backend")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
