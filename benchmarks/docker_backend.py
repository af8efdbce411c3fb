"""The docker backend on this machine's Engine, beside the naive ``docker run --rm``.

Side by side in one run, on the test image (``scripts/docker-setup``):

- per call: ``docker run --rm --network none IMAGE python3 -c pass`` (the CLI), a sandbox's
  create (to running) and its stop, and ``python3 -c pass`` in a warm sandbox; then the two
  ways to give the next completion a sandbox as new: a used one's renewal (reset in place,
  after a completion that wrote a file) and a new one instead (create, first exec, stop);
- per batch: trivial completions judged by ``exec_reward`` through a pool of 2 warm
  sandboxes, renewed between completions (``--rounds`` batches: one lasts a fraction of a
  second), the same pool given a fresh sandbox per completion (``reuse=False``, one batch),
  and the naive pattern of one ``docker run --rm`` per completion (one batch: it lasts many
  seconds).

    PYTHONPATH=. python benchmarks/docker_backend.py [--rounds 10] [--batch 32]
        [--json PATH | --record]

``run.py --only docker`` runs the same at its size; skipped with the reason without an
Engine or the image.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from run import add_output_options, machine_info, output_path

from sandboxkit import get_backend
from sandboxkit.portal import run_sync
from sandboxkit.rewards import exec_reward

DEFAULT_IMAGE = "sandboxkit-python:bookworm-2"
"""The docker backend's default image (``sandboxkit.backends.docker.DEFAULT_IMAGE``, not
imported: that needs the SDK, whose absence ``unavailable`` reports)."""

POOL = 2
TARGETS = {"pooled execs per second": 100.0, "pooled vs naive": 20.0, "create vs docker run": 2.0}


def unavailable() -> str | None:
    """Why the rows cannot run here, or None."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed: pip install 'sandboxkit[docker]'"
    try:
        client = docker.from_env(timeout=30)
        client.images.get(DEFAULT_IMAGE)
        client.close()
    except Exception as exc:
        return f"no Docker Engine with {DEFAULT_IMAGE} ({exc}): as root, scripts/docker-setup"
    return None


def _p50_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1e3


def _timed(fn: Callable[[], Any], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def docker_run(program: str) -> float:
    """One naive completion: ``docker run --rm`` of ``program``; its reward."""
    argv = ["docker", "run", "--rm", "--network", "none", DEFAULT_IMAGE, "python3", "-c", program]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    return 1.0 if done.returncode == 0 else 0.0


def _renew(client: Any, sandbox: Any) -> None:
    """The renewal a pool runs between two completions of a sandbox."""
    run_sync(client.backend.renew(sandbox.id))


def _fresh(client: Any) -> None:
    """What a pool that does not renew runs instead: a new sandbox, ready, and the old stopped."""
    made = client.sandbox()
    made.exec(["true"], timeout=60)
    made.stop()


def _pooled(
    client: Any, program: str, rounds: int, batch: int, *, reuse: bool | None
) -> tuple[float, list[float | None]]:
    """``rounds`` batches of ``program`` through ``exec_reward``'s pool (made first); the wall
    time and the rewards."""
    reward = exec_reward(backend=client, pool_size=POOL, timeout=10, reuse=reuse)
    try:
        reward(["p"] * POOL, [program] * POOL)  # the pool's sandboxes, made once
        started = time.perf_counter()
        rewards = [r for _ in range(rounds) for r in reward(["p"] * batch, [program] * batch)]
        return time.perf_counter() - started, rewards
    finally:
        reward.close()


def measure(rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {"calls": [], "batches": [], "targets": []}
    program = "print(sum(range(10)))"
    with get_backend("docker") as client:
        run_s = _timed(lambda: docker_run("pass"), rounds)
        made: list[Any] = []
        create_s = _timed(lambda: made.append(client.sandbox()), rounds)
        sb = made[0]
        exec_s = _timed(lambda: sb.exec(["python3", "-c", "pass"], timeout=60), rounds)
        write = ["python3", "-c", "open('left.txt', 'w').write('x')"]
        renew_s = _timed(lambda: (sb.exec(write, timeout=60), _renew(client, sb))[1], rounds)
        stop_s = _timed(lambda: made.pop().stop(), rounds)
        fresh_s = _timed(lambda: _fresh(client), rounds)
        for call, times in (
            ("docker run --rm ... python3 -c pass (CLI)", run_s),
            ("sandbox create (to running)", create_s),
            ("python3 -c pass in a warm sandbox", exec_s),
            ("sandbox stop (container removed)", stop_s),
            ("a used sandbox renewed (reset in place; its exec's write included)", renew_s),
            ("a new sandbox instead (create, first exec, stop)", fresh_s),
        ):
            results["calls"].append({"call": call, "calls": rounds, "p50_ms": _p50_ms(times)})
            log(f"docker: {call}: {_p50_ms(times):.0f} ms")

        started = time.perf_counter()
        naive = [docker_run(program) for _ in range(batch)]
        naive_wall = time.perf_counter() - started
        pooled_wall, pooled = _pooled(client, program, rounds, batch, reuse=None)
        fresh_wall, fresh = _pooled(client, program, 1, batch, reuse=False)
    for method, wall, rewards in (
        ("naive: docker run --rm per completion, sequential", naive_wall, naive),
        (f"exec_reward, pool of {POOL} warm sandboxes, {rounds} batches", pooled_wall, pooled),
        (f"exec_reward, pool of {POOL}, a fresh sandbox per completion", fresh_wall, fresh),
    ):
        mean = statistics.fmean(r or 0.0 for r in rewards)
        done = len(rewards)
        results["batches"].append(
            {"method": method, "batch": done, "wall_s": wall, "per_s": done / wall, "mean": mean}
        )
        log(f"docker: {method}: {done / wall:.1f} completions/s (mean reward {mean:.2f})")
    pooled_rate = len(pooled) / pooled_wall
    speedup = pooled_rate / (batch / naive_wall)
    for target, measured, met in (
        ("pooled trivial execs >= 100/s", f"{pooled_rate:.1f}/s", pooled_rate >= 100),
        ("pooled >= 20x naive docker run", f"{speedup:.1f}x", speedup >= 20),
        (
            "create within 2x of docker run",
            f"{statistics.median(create_s) / statistics.median(run_s):.2f}x",
            statistics.median(create_s) <= 2 * statistics.median(run_s),
        ),
    ):
        results["targets"].append({"target": f"docker: {target}", "measured": measured, "met": met})
    return results


def tables(results: dict[str, Any]) -> list[str]:
    out = ["", "| call | calls | p50 ms |", "|---|---|---|"]
    out += [f"| {r['call']} | {r['calls']} | {r['p50_ms']:.0f} |" for r in results["calls"]]
    out += ["", "| method | batch | wall s | compl./s | mean reward |", "|---|---|---|---|---|"]
    out += [
        f"| {r['method']} | {r['batch']} | {r['wall_s']:.2f} | {r['per_s']:.1f} | {r['mean']:.2f} |"
        for r in results["batches"]
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    add_output_options(parser, "docker_backend")
    args = parser.parse_args()
    reason = unavailable()
    if reason is not None:
        print(f"skipped: {reason}")
        return
    results = measure(args.rounds, args.batch, print)
    print("\n".join(tables(results)))
    for t in results["targets"]:
        print(f"{t['target']}: {t['measured']} ({'met' if t['met'] else 'not met'})")
    path = output_path(args, "docker_backend")
    path.write_text(json.dumps({"machine": machine_info("docker"), **results}, indent=2))


if __name__ == "__main__":
    main()
