"""A batch against a provider that refuses more than ``--allowed`` execs at once (429): the
pool's adaptive concurrency budget against the same pool at a fixed concurrency.

The provider is ``FaultyBackend`` (``max_concurrent_execs``) over a backend that runs nothing
and only waits ``--latency-ms`` per call, refusals included, so the rows measure scheduling, not
this machine's CPU. Prints a markdown table:

    PYTHONPATH=. python benchmarks/rate_limits.py [--batch 256] [--concurrency 64]
        [--allowed 8] [--latency-ms 50] [--retries 3] [--backoff 0.5]

A refused evaluation is retried with the pool's backoff; one refused ``--retries`` + 1 times
gets no reward (``None``).
"""

from __future__ import annotations

import argparse
import logging
import time

from memory_backend import LatencyOnlyBackend

from sandboxkit import SandboxClient
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.faults import Faults, FaultyBackend


def run(args: argparse.Namespace, *, adaptive: bool) -> str:
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
        scores = reward(["p"] * args.batch, [f"print({i})" for i in range(args.batch)])
        wall = time.perf_counter() - started
        stats = reward.pool.stats
    finally:
        reward.close()
    method = "adaptive budget" if adaptive else "fixed concurrency"
    refused = provider.injected["too many execs"]
    return (
        f"| {method} | {args.batch} | {args.concurrency} | {args.allowed} | {refused} "
        f"| {refused / args.batch:.2f} | {scores.count(None)} | {stats.concurrency_limit} "
        f"| {provider.peak['exec']} | {wall:.2f} | {args.batch / wall:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64, help="pool size (1 per sandbox)")
    parser.add_argument("--allowed", type=int, default=8, help="execs the provider takes at once")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--backoff", type=float, default=0.5)
    args = parser.parse_args()
    logging.getLogger("sandboxkit").setLevel(logging.ERROR)  # one warning per None otherwise
    print(
        "| method | batch | max conc. | provider allows | 429s | 429s per compl. | None rewards "
        "| final limit | peak execs | wall s | compl./s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for adaptive in (False, True):
        print(run(args, adaptive=adaptive))


if __name__ == "__main__":
    main()
