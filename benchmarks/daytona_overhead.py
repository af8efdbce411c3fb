"""What the Daytona path costs on top of running the command locally, at 0 ms latency.

The emulator runs in a thread of this process and executes through the same local backend,
so ``daytona exec - local exec`` is the price of the SDK, HTTP, the emulated daemon and the
exec wrapper (shell pipeline + base64). Run: ``python benchmarks/daytona_overhead.py [N]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from daytona import AsyncDaytona, DaytonaConfig

from sandboxkit import get_backend
from sandboxkit.emulators.daytona import DaytonaEmulator
from sandboxkit.protocol import SandboxSpec

KEY = "bench-key"


async def timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    await call()  # warm up connections and caches
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def row(name: str, samples: list[float], base: float | None = None) -> str:
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1]
    extra = f"{median - base:+9.2f}" if base is not None else " " * 9
    return f"{name:<34} {median:8.2f} {p90:8.2f} {extra}"


async def main(n: int, emu: DaytonaEmulator) -> None:
    local = get_backend("subprocess").backend
    local_id = (await local.create(SandboxSpec())).id
    daytona = get_backend("daytona", api_key=KEY, api_url=emu.url, target="local").backend
    config = DaytonaConfig(api_key=KEY, api_url=emu.url, target="local")
    try:
        local_ms = await timed(n, lambda: local.exec(local_id, ["true"], timeout=30))
        creates: list[float] = []
        ids = []
        for _ in range(max(5, n // 10)):
            started = time.perf_counter()
            ids.append((await daytona.create(SandboxSpec())).id)
            creates.append((time.perf_counter() - started) * 1000)
        sandbox_id = ids[0]
        wrapped = await timed(n, lambda: daytona.exec(sandbox_id, ["true"], timeout=30))
        no_watchdog = await timed(n, lambda: daytona.exec(sandbox_id, ["true"]))
        async with AsyncDaytona(config) as sdk:
            sb = await sdk.get(sandbox_id)
            raw = await timed(n, lambda: sb.process.exec("true", timeout=30))
        stops = []
        for sandbox in ids:
            started = time.perf_counter()
            await daytona.stop(sandbox)
            stops.append((time.perf_counter() - started) * 1000)
    finally:
        await local.stop(local_id)
        await daytona.aclose()
    base = statistics.median(local_ms)
    print(f"{'operation (ms)':<34} {'median':>8} {'p90':>8} {'vs local':>9}")
    print(row("local backend exec `true`", local_ms))
    print(row("SDK process.exec `true` (no wrap)", raw, base))
    print(row("daytona backend exec ['true']", wrapped, base))
    print(row("  same, timeout=None (no watchdog)", no_watchdog, base))
    print(row("daytona backend create", creates))
    print(row("daytona backend stop", stops))


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with DaytonaEmulator(api_key=KEY) as emulator:
        asyncio.run(main(count, emulator))
