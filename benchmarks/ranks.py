"""Several ranks against one provider that refuses execs beyond a limit (429): each rank's own
budget against one budget shared by the ranks of the machine (``sandboxkit.coordination``).

The provider is the Daytona emulator in a process of its own (``sandboxkit emulate daytona
--max-concurrent-execs A``), so every rank hits the same limit, as the ranks of a training run
hit their account's. Each rank is a real process running ``exec_reward`` with a pool of its own
on a batch of trivial programs, started together once every rank's pool is warm; they see the
launcher's environment (``LOCAL_WORLD_SIZE``), which turns coordination on, and the
uncoordinated rows turn it off with ``SANDBOXKIT_COORDINATE=0``. The baseline is one process
doing the same work with the same total concurrency: what the ranks would do if they were one.

Run through ``run.py --only ranks`` (its ``ranks`` rows; ``results/ranks.json``). A rank runs
this file with ``--rank CONFIG``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sandboxkit.coordination import COORDINATE_VAR, DIRECTORY_VAR
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.remote import child_env, serve_emulator

METHODS = ("1 process", "uncoordinated", "coordinated")


def rank_main(config: dict[str, Any]) -> int:
    """One rank: warm its pool, say so, wait for the start, score its batch, print its counts."""
    logging.getLogger("sandboxkit").setLevel(logging.CRITICAL)  # a warning per None otherwise
    batch = config["batch"]
    reward = exec_reward(
        "daytona",
        pool_size=config["concurrency"],
        retries=config["retries"],
        backoff=config["backoff"],
        progress=False,
    )
    try:
        reward.pool.start()
        print("ready", flush=True)
        sys.stdin.readline()
        started, cpu = time.time(), time.process_time()
        scores = reward(["p"] * batch, [f"print({i})" for i in range(batch)])
        ended, cpu = time.time(), time.process_time() - cpu
        stats = reward.pool.stats
    finally:
        reward.close()
    result = {
        "started": started,
        "ended": ended,
        "refused": stats.rate_limited,
        "none_rewards": scores.count(None),
        "failed": sum(1 for s in scores if s is not None and s != 1.0),
        "final_limit": stats.concurrency_limit,
        "cpu_s": cpu,
    }
    print(json.dumps(result), flush=True)
    return 0


def _row(
    url: str, method: str, ranks: int, config: dict[str, Any], directory: str
) -> dict[str, Any]:
    """``ranks`` processes (one, for the baseline), started together; their counts summed."""
    processes = 1 if method == "1 process" else ranks
    per_rank = {
        **config,
        "batch": config["batch"] * ranks // processes,
        "concurrency": config["concurrency"] * ranks // processes,
    }
    env = child_env("daytona", url) | {DIRECTORY_VAR: directory}
    if method != "1 process":  # what torchrun sets
        env |= {"LOCAL_WORLD_SIZE": str(ranks), "TORCHELASTIC_RUN_ID": uuid.uuid4().hex}
    env[COORDINATE_VAR] = "1" if method == "coordinated" else "0"
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", json.dumps(per_rank)],
            env=env | {"LOCAL_RANK": str(i), "RANK": str(i)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a rank did not start (exit status {child.wait()})")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            out, _ = child.communicate(timeout=600)
            if child.returncode != 0:
                raise RuntimeError(f"a rank failed (exit status {child.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    coordinated = method == "coordinated"
    return {
        "method": method,
        "ranks": ranks,
        "processes": processes,
        "batch": config["batch"] * ranks,
        "concurrency": config["concurrency"] * ranks,
        "allowed": config["allowed"],
        "refused": sum(r["refused"] for r in results),
        "none_rewards": sum(r["none_rewards"] for r in results),
        "failed": sum(r["failed"] for r in results),
        # Shared, every rank reads the same limit; otherwise the ranks' limits add up.
        "final_limit": results[0]["final_limit"]
        if coordinated
        else sum(r["final_limit"] for r in results),
        "latency_ms": config["latency_ms"],
        "retry_after": config["retry_after"],
        "wall_s": max(r["ended"] for r in results) - min(r["started"] for r in results),
        "rank_wall_s": [round(r["ended"] - r["started"], 2) for r in results],
        "ranks_cpu_s": sum(r["cpu_s"] for r in results),
    }


def measure(
    ranks: Sequence[int],
    *,
    batch: int,
    concurrency: int,
    allowed: int,
    latency_ms: float,
    retry_after: float | None = None,
    retries: int = 3,
    backoff: float = 0.5,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows: for each number of ranks, each rank with a batch of ``batch`` and a pool of
    ``concurrency``, against one emulator that takes ``allowed`` execs at once."""
    config = {
        "batch": batch,
        "concurrency": concurrency,
        "allowed": allowed,
        "retries": retries,
        "backoff": backoff,
        "latency_ms": latency_ms,
        "retry_after": retry_after,
    }
    faults = ["--latency-ms", f"{latency_ms:g}", "--max-concurrent-execs", str(allowed)]
    if retry_after is not None:
        faults += ["--retry-after", f"{retry_after:g}"]
    rows = []
    with serve_emulator("daytona", args=faults) as url, tempfile.TemporaryDirectory() as shared:
        for n in ranks:
            for method in METHODS:
                log(f"ranks / {n} x batch {batch}, pool {concurrency}: {method}")
                rows.append(_row(url, method, n, config, shared))
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    out = [
        "",
        "### Ranks sharing one provider that refuses execs beyond a limit (Daytona emulator)",
        "",
        "| ranks | method | processes | batch | conc. | provider allows | 429s "
        "| 429s per compl. | None rewards | final limit | wall s | compl./s | ranks' CPU s |",
        "|---" * 13 + "|",
    ]
    for r in rows:
        out.append(
            f"| {r['ranks']} | {r['method']} | {r['processes']} | {r['batch']} "
            f"| {r['concurrency']} | {r['allowed']} | {r['refused']} "
            f"| {r['refused'] / r['batch']:.2f} | {r['none_rewards']} | {r['final_limit']} "
            f"| {r['wall_s']:.2f} | {r['batch'] / r['wall_s']:.0f} | {r['ranks_cpu_s']:.2f} |"
        )
    out += [
        "",
        "batch and conc.: over all ranks (each rank has its share); 1 process: the same work "
        "and concurrency in one process. 429s: refusals the ranks' pools saw (each retried with "
        "backoff; one refused retries + 1 times gets no reward, None). Final limit: the shared "
        "limit (coordinated), else the sum of the ranks' own. Wall: from the common start to "
        "the last rank's end. Ranks' CPU s: the ranks' processes during the batch, summed.",
    ]
    return out


REFUSALS_SLACK = 1.5
"""Coordinated ranks may see this many times the refusals of one process doing their work
(plus one wave of the ranks' first calls: they start at once, before any refusal)."""


def targets(rows: Sequence[dict[str, Any]], full_batch: int) -> list[dict[str, Any]]:
    """Judged on a full run's batches: a few calls per rank say little."""
    baseline = {r["ranks"]: r for r in rows if r["method"] == "1 process"}
    out = []
    for r in rows:
        alone = baseline.get(r["ranks"])
        if r["method"] != "coordinated" or alone is None or r["batch"] < full_batch * r["ranks"]:
            continue
        bound = REFUSALS_SLACK * alone["refused"] + r["ranks"]
        out.append(
            {
                "target": f"{r['ranks']} ranks, coordinated: 429s <= {REFUSALS_SLACK:g}x one "
                "process's + one per rank, no reward lost",
                "measured": f"{r['refused']} 429s against {alone['refused']} "
                f"(uncoordinated: {_uncoordinated(rows, r['ranks'])}), "
                f"{r['none_rewards']} None",
                "met": r["refused"] <= bound and r["none_rewards"] == 0,
            }
        )
    return out


def _uncoordinated(rows: Sequence[dict[str, Any]], ranks: int) -> str:
    found = [r for r in rows if r["ranks"] == ranks and r["method"] == "uncoordinated"]
    return f"{found[0]['refused']} 429s, {found[0]['none_rewards']} None" if found else "-"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank":
        sys.exit(rank_main(json.loads(sys.argv[2])))
    sys.exit(f"run through run.py --only ranks; {os.path.basename(__file__)} --rank is a rank")
