"""What a local sandbox costs: create + exec + stop, and per-exec overhead over a bare
``subprocess.run`` of the same command, in each isolation tier available here; and what a
host file operation (resolved beneath the sandbox, in a thread) takes.

    python benchmarks/local_overhead.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    bare_python = interpreter()
    rows = []
    file_rows = []
    for tier in ("namespaces", "rlimits"):
        os.environ["SANDBOXKIT_ISOLATION"] = tier
        with tempfile.TemporaryDirectory(dir="/tmp") as root:
            os.chmod(root, 0o711)
            client = sandboxkit.get_backend("subprocess", root=root)
            python = client.backend_as(SubprocessBackend).isolation.python
            for label, argv in COMMANDS.items():
                host_argv = [python if a == "python3" else a for a in argv]
                bare = _median_ms(lambda a=host_argv: subprocess.run(a, check=True), args.runs)
                with client.sandbox() as sb:
                    one = _median_ms(lambda a=argv, s=sb: s.exec(a), args.runs)

                def lifecycle(a: list[str] = argv, c: sandboxkit.SandboxClient = client) -> None:
                    with c.sandbox() as sb:
                        sb.exec(a)

                full = _median_ms(lifecycle, args.runs)
                rows.append((tier, label, bare, one, one - bare, full))
            with client.sandbox() as sb:
                blob = os.urandom(4096)
                write = _median_ms(lambda s=sb, b=blob: s.write_file("d/e/f.bin", b), args.runs)
                read = _median_ms(lambda s=sb: s.read_file("d/e/f.bin"), args.runs)
                file_rows.append((tier, write, read))
    print(f"interpreter: {bare_python}; {os.cpu_count()} cpus; median of {args.runs} runs (ms)")
    header = ("tier", "command", "bare run", "exec", "overhead", "create+exec+stop")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for tier, label, bare, one, over, full in rows:
        print(f"| {tier} | {label} | {bare:.1f} | {one:.1f} | {over:+.1f} | {full:.1f} |")
    print()
    print("| tier | write_file 4 KiB | read_file 4 KiB |")
    print("|---|---|---|")
    for tier, write, read in file_rows:
        print(f"| {tier} | {write:.2f} | {read:.2f} |")


if __name__ == "__main__":
    main()
