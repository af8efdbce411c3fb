"""A batch against a provider that refuses more than ``--allowed`` execs at once (429): the
pool's adaptive concurrency budget against the same pool at a fixed concurrency.

The provider is ``FaultyBackend`` (``max_concurrent_execs``) over a backend that runs nothing
and only waits ``--latency-ms`` per call, refusals included, so the rows measure scheduling, not
this machine's CPU. Prints a markdown table and writes JSON (``results/rate_limits.json``,
whose table ``report.py`` puts in the README):

    PYTHONPATH=. python benchmarks/rate_limits.py [--batch 256 1024] [--concurrency 64]
        [--allowed 8] [--latency-ms 50] [--retries 3] [--backoff 0.5] [--json PATH]

A refused evaluation is retried with the pool's backoff; one refused ``--retries`` + 1 times
gets no reward (``None``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from memory_backend import LatencyOnlyBackend
from run import add_output_options, machine_info, machine_line, output_path

from sandboxkit import SandboxClient
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.faults import Faults, FaultyBackend


def run(args: argparse.Namespace, batch: int, *, adaptive: bool) -> dict[str, Any]:
    """One batch of ``batch`` completions; the row of the table."""
    faults = Faults(latency_ms=args.latency_ms, max_concurrent_execs=args.allowed, seed=1)
    provider = FaultyBackend(LatencyOnlyBackend(0.0), faults)
    reward = exec_reward(
        SandboxClient(provider),
        pool_size=args.concurrency,
        retries=args.retries,
        backoff=args.backoff,
        adaptive_concurrency=adaptive,
        progress=False,
    )
    try:
        reward.pool.start()
        started = time.perf_counter()
        scores = reward(["p"] * batch, [f"print({i})" for i in range(batch)])
        wall = time.perf_counter() - started
        stats = reward.pool.stats
    finally:
        reward.close()
    return {
        "method": "adaptive budget" if adaptive else "fixed concurrency",
        "batch": batch,
        "refused": provider.injected["too many execs"],
        "none_rewards": scores.count(None),
        "final_limit": stats.concurrency_limit,
        "peak_execs": provider.peak["exec"],
        "wall_s": wall,
    }


def markdown(results: dict[str, Any]) -> str:
    """The table of a results file of this benchmark."""
    c = results["config"]
    out = [
        machine_line(results["machine"]),
        "",
        "| method | batch | max conc. | provider allows | 429s | 429s per compl. | None rewards "
        "| final limit | peak execs | wall s | compl./s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        out.append(
            f"| {r['method']} | {r['batch']} | {c['concurrency']} | {c['allowed']} "
            f"| {r['refused']} | {r['refused'] / r['batch']:.2f} | {r['none_rewards']} "
            f"| {r['final_limit']} | {r['peak_execs']} | {r['wall_s']:.2f} "
            f"| {r['batch'] / r['wall_s']:.0f} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--concurrency", type=int, default=64, help="pool size (1 per sandbox)")
    parser.add_argument("--allowed", type=int, default=8, help="execs the provider takes at once")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--backoff", type=float, default=0.5)
    add_output_options(parser, "rate_limits")
    args = parser.parse_args(argv)
    logging.getLogger("sandboxkit").setLevel(logging.ERROR)  # one warning per None otherwise
    results = {
        "machine": machine_info("none (nothing runs)"),
        "config": {k: v for k, v in vars(args).items() if k not in ("batch", "json", "record")},
        "rows": [
            run(args, batch, adaptive=adaptive)
            for batch in args.batch
            for adaptive in (False, True)
        ],
    }
    print(markdown(results))
    path = output_path(args, "rate_limits")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
