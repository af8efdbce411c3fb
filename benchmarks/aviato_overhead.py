"""What the cwsandbox client and the gRPC hop add to a trivial exec, and what a create costs.

The same command runs on the local backend directly and through the Aviato backend against
the emulator (in its own process by default, so the two do not share a GIL), which runs it on
the local backend too: the difference is the client's and the wire's overhead. Latency faults
are off. Numbers on a shared machine move; compare medians from the same run.

    PYTHONPATH=. python benchmarks/aviato_overhead.py [--n 100] [--in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from sandboxkit import get_backend
from sandboxkit.backends.aviato import wrap_command
from sandboxkit.emulators.aviato import AviatoEmulator
from sandboxkit.protocol import Backend, SandboxSpec

COMMAND = ["true"]


Row = tuple[str, list[float], float]


async def timed(n: int, calls: dict[str, Callable[[], Awaitable[object]]]) -> list[Row]:
    """Wall times of ``n`` rounds of ``calls``, interleaved so that load drifting on a shared
    machine hits every row alike, and this process's CPU time per call."""
    walls: dict[str, list[float]] = {name: [] for name in calls}
    cpu = dict.fromkeys(calls, 0.0)
    for call in calls.values():
        await call()  # warm up (channels, handles, imports)
    for _ in range(n):
        for name, call in calls.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            await call()
            walls[name].append(time.perf_counter() - started)
            cpu[name] += time.process_time() - started_cpu
    return [(name, walls[name], cpu[name] / n) for name in calls]


async def measure(n: int, url: str, api_key: str) -> list[Row]:
    local: Backend = get_backend("subprocess").backend
    aviato: Backend = get_backend("aviato", base_url=url, api_key=api_key).backend
    here = (await local.create(SandboxSpec())).id
    there = (await aviato.create(SandboxSpec())).id
    # What the Aviato backend runs for the command: a shell that enters the workdir.
    wrapped = wrap_command(COMMAND, "/workspace", None)
    rows = await timed(
        n,
        {
            "exec, local backend": lambda: local.exec(here, COMMAND),
            "exec, local, aviato's wrapper": lambda: local.exec(here, wrapped),
            "exec, aviato + emulator": lambda: aviato.exec(there, COMMAND),
        },
    )
    await local.stop(here)
    await aviato.stop(there)

    made: list[str] = []

    async def create() -> None:
        made.append((await aviato.create(SandboxSpec())).id)

    async def stop() -> None:
        await aviato.stop(made.pop(0))

    rows += await timed(max(n // 4, 5), {"create, aviato + emulator": create})
    rows += await timed(len(made) - 1, {"stop, aviato + emulator": stop})
    for sandbox_id in made:
        await aviato.stop(sandbox_id)
    await aviato.aclose()
    return rows


def report(rows: list[Row]) -> None:
    print(f"{'operation':30} {'n':>4} {'median ms':>10} {'p90 ms':>8} {'client CPU ms':>14}")
    for name, walls, cpu in rows:
        p90 = statistics.quantiles(walls, n=10)[-1]
        median = statistics.median(walls)
        print(
            f"{name:30} {len(walls):>4} {median * 1e3:>10.2f} {p90 * 1e3:>8.2f} {cpu * 1e3:>14.2f}"
        )
    local, wrapped, aviato = (rows[i][1] for i in range(3))
    overhead = statistics.median(a - b for a, b in zip(aviato, local, strict=True))
    wire = statistics.median(a - b for a, b in zip(aviato, wrapped, strict=True))
    print(f"\nclient overhead per exec (aviato - local, same round): {overhead * 1e3:.2f} ms")
    print(f"  of which client and wire (aviato - local with wrapper): {wire * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="execs per row")
    parser.add_argument("--in-process", action="store_true", help="emulator on a thread here")
    args = parser.parse_args()
    if args.in_process:
        with AviatoEmulator(api_key="bench") as emu:
            report(asyncio.run(measure(args.n, emu.url, "bench")))
        return
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    server = subprocess.Popen(
        [sys.executable, "-m", "sandboxkit", "emulate", "aviato", "--api-key", "bench"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip().split("=", 1)[1]
        report(asyncio.run(measure(args.n, url, "bench")))
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
