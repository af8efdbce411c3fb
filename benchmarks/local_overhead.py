"""What a local sandbox costs: create + exec + stop, and per-exec overhead over a bare
``subprocess.run`` of the same command, in each isolation tier available here; and what a
host file operation (resolved beneath the sandbox, in a thread) takes. Prints markdown tables
and writes JSON (``results/local_overhead.json``, whose tables ``report.py`` puts in the README).

    PYTHONPATH=. python benchmarks/local_overhead.py [--runs 30] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from run import add_output_options, machine_info, machine_line, output_path

import sandboxkit
from sandboxkit.backends.subprocess import SubprocessBackend
from sandboxkit.local.isolation import interpreter

COMMANDS = {"true": ["true"], "python -c pass": ["python3", "-c", "pass"]}


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def measure(runs: int) -> dict[str, Any]:
    """Medians in ms of ``runs`` runs each, per tier: execs and file operations."""
    warnings.simplefilter("ignore", RuntimeWarning)
    tiers = ("namespaces", "rlimits")
    results: dict[str, Any] = {
        "machine": machine_info(", ".join(tiers)),
        "runs": runs,
        "interpreter": interpreter(),
        "exec": [],
        "files": [],
    }
    for tier in tiers:
        os.environ["SANDBOXKIT_ISOLATION"] = tier
        with tempfile.TemporaryDirectory(dir="/tmp") as root:
            os.chmod(root, 0o711)
            client = sandboxkit.get_backend("subprocess", root=root)
            python = client.backend_as(SubprocessBackend).isolation.python
            for label, argv in COMMANDS.items():
                host_argv = [python if a == "python3" else a for a in argv]
                bare = _median_ms(lambda a=host_argv: subprocess.run(a, check=True), runs)
                with client.sandbox() as sb:
                    one = _median_ms(lambda a=argv, s=sb: s.exec(a), runs)

                def lifecycle(a: list[str] = argv, c: sandboxkit.SandboxClient = client) -> None:
                    with c.sandbox() as sb:
                        sb.exec(a)

                full = _median_ms(lifecycle, runs)
                results["exec"].append(
                    {"tier": tier, "command": label, "bare_ms": bare, "exec_ms": one}
                    | {"overhead_ms": one - bare, "lifecycle_ms": full}
                )
            with client.sandbox() as sb:
                blob = os.urandom(4096)
                write = _median_ms(lambda s=sb, b=blob: s.write_file("d/e/f.bin", b), runs)
                read = _median_ms(lambda s=sb: s.read_file("d/e/f.bin"), runs)
                results["files"].append({"tier": tier, "write_ms": write, "read_ms": read})
    return results


def markdown(results: dict[str, Any]) -> str:
    """The tables of a results file of this benchmark."""
    out = [
        machine_line(results["machine"]),
        "",
        f"Medians of {results['runs']} runs, in ms.",
        "",
        "| tier | command | bare `subprocess.run` | `sb.exec` | overhead | create + exec + stop |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["exec"]:
        out.append(
            f"| {r['tier']} | `{r['command']}` | {r['bare_ms']:.1f} | {r['exec_ms']:.1f} "
            f"| {r['overhead_ms']:+.1f} | {r['lifecycle_ms']:.1f} |"
        )
    out += ["", "| tier | `write_file` 4 KiB | `read_file` 4 KiB |", "|---|---|---|"]
    for r in results["files"]:
        out.append(f"| {r['tier']} | {r['write_ms']:.2f} | {r['read_ms']:.2f} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    add_output_options(parser, "local_overhead")
    args = parser.parse_args(argv)
    results = measure(args.runs)
    print(markdown(results))
    path = output_path(args, "local_overhead")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
