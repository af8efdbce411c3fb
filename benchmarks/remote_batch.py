"""A batch of reward evaluations on a remote backend: sandboxkit's pool against the naive way.

The provider is its emulator, in a process of its own (``sandboxkit emulate``), with latency
added to every API call. Prints a markdown table per backend:

- client overhead per exec: a trivial exec through the backend against the emulator at 0 ms,
  minus the same exec on the local backend (interleaved rounds, medians);
- sandboxkit: ``exec_reward`` with its pool on a batch, after a warm-up call that starts the
  pool (reported on its own row);
- naive: a fresh sandbox per completion, one after another (create, exec, stop), measured on a
  subset and extrapolated linearly to the batch;
- the lower bound for perfect overlap: ceil(batch / pool) evaluations back to back, each as
  long as one evaluation in a warm sandbox at that latency.

    PYTHONPATH=. python benchmarks/remote_batch.py [--quick] [--backend daytona|aviato|both]
        [--batch 256] [--latency-ms 50] [--pool-size 16] [--naive 32]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sandboxkit import Backend, SandboxClient, get_backend
from sandboxkit.harness import ExecHarness
from sandboxkit.protocol import SandboxSpec
from sandboxkit.rewards import exec_reward
from sandboxkit.testing.remote import REMOTE_BACKENDS, backend_options, serve_emulator

HARNESS = ExecHarness(timeout=30)


def program(i: int) -> str:
    return f"print(sum(range({i} * 1000)))"


async def median_ms(n: int, call: Callable[[], Awaitable[object]]) -> float:
    await call()  # warm up connections and handles
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def overhead(provider: str, url: str, n: int) -> tuple[float, float]:
    """Median ms of a trivial exec through ``provider`` and on the local backend, in
    interleaved rounds so that load drifting on a shared machine hits both alike."""
    remote: Backend = get_backend(provider, **backend_options(provider, url)).backend
    local: Backend = get_backend("subprocess").backend
    there, here = (await remote.create(SandboxSpec())).id, (await local.create(SandboxSpec())).id
    remote_ms, local_ms = [], []
    try:
        for _ in range(5):
            remote_ms.append(await median_ms(n // 5, lambda: remote.exec(there, ["true"])))
            local_ms.append(await median_ms(n // 5, lambda: local.exec(here, ["true"])))
    finally:
        await remote.stop(there)
        await local.stop(here)
        await remote.aclose()
    return statistics.median(remote_ms), statistics.median(local_ms)


async def naive_and_single(client: SandboxClient, count: int, samples: int) -> tuple[float, float]:
    """Seconds for ``count`` completions the naive way, and the median ms of one evaluation's
    exec in a warm sandbox."""
    started = time.perf_counter()
    for i in range(count):
        request = HARNESS.request(program(i))
        sb = await client.asandbox()
        result = await sb.aexec(request.argv, stdin=request.stdin, timeout=request.timeout)
        assert result.ok, result
        await sb.astop()
    naive = time.perf_counter() - started
    request = HARNESS.request(program(1))
    async with await client.asandbox() as sb:
        single = await median_ms(
            samples, lambda: sb.aexec(request.argv, stdin=request.stdin, timeout=request.timeout)
        )
    return naive, single


@dataclass
class Settings:
    batch: int
    latency_ms: float
    pool_size: int
    naive: int
    overhead_n: int


def measure(provider: str, s: Settings) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with serve_emulator(provider) as url:
        remote_ms, local_ms = asyncio.run(overhead(provider, url, s.overhead_n))
    rows.append(
        (
            "client overhead per exec, 0 ms latency",
            f"{remote_ms - local_ms:.2f} ms",
            f"`true`: {remote_ms:.2f} ms via {provider} vs {local_ms:.2f} ms local (medians)",
        )
    )
    with (
        serve_emulator(provider, args=["--latency-ms", str(s.latency_ms)]) as url,
        get_backend(provider, **backend_options(provider, url)) as client,
    ):
        reward = exec_reward(client, timeout=HARNESS.timeout, pool_size=s.pool_size)
        try:
            started = time.perf_counter()
            reward(["p"], [program(0)])
            start = time.perf_counter() - started
            started = time.perf_counter()
            scores = reward(["p"] * s.batch, [program(i) for i in range(s.batch)])
            batch = time.perf_counter() - started
        finally:
            reward.close()
        assert scores == [1.0] * s.batch, scores
        naive, single_ms = asyncio.run(naive_and_single(client, s.naive, 10))
    naive_total = naive * s.batch / s.naive
    bound = math.ceil(s.batch / s.pool_size) * single_ms / 1000
    at = f"{s.latency_ms:g} ms latency"
    rows += [
        ("one evaluation's exec, warm sandbox", f"{single_ms:.0f} ms", f"{at}, median of 10"),
        ("sandboxkit pool start", f"{start:.2f} s", f"{s.pool_size} sandboxes, {at}"),
        (
            f"sandboxkit batch of {s.batch}",
            f"{batch:.2f} s",
            f"exec_reward, pool of {s.pool_size}: {s.batch / batch:.0f} evaluations/s",
        ),
        (
            f"naive batch of {s.batch}",
            f"{naive_total:.2f} s",
            f"extrapolated from {s.naive} measured ({naive:.2f} s): create, exec, stop each",
        ),
        (
            "lower bound, perfect overlap",
            f"{bound:.2f} s",
            f"ceil({s.batch}/{s.pool_size}) x one evaluation's exec",
        ),
        (
            "speed-up over naive",
            f"{naive_total / batch:.1f}x",
            f"sandboxkit at {bound / batch:.0%} of the bound",
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=[*REMOTE_BACKENDS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--batch", type=int, default=None, help="default 256 (64 with --quick)")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--pool-size", type=int, default=16)
    parser.add_argument("--naive", type=int, default=None, help="default 32 (8 with --quick)")
    args = parser.parse_args()
    settings = Settings(
        batch=args.batch or (64 if args.quick else 256),
        latency_ms=args.latency_ms,
        pool_size=args.pool_size,
        naive=args.naive or (8 if args.quick else 32),
        overhead_n=20 if args.quick else 100,
    )
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"  # the SDKs honour proxies even for loopback
    print(f"{os.cpu_count()} CPUs; emulator in its own process, on the same machine\n")
    for provider in REMOTE_BACKENDS if args.backend == "both" else [args.backend]:
        rows = measure(provider, settings)
        print(f"### {provider}\n")
        print("| measurement | value | notes |\n|---|---|---|")
        for name, value, notes in rows:
            print(f"| {name} | {value} | {notes} |")
        print()


if __name__ == "__main__":
    main()
