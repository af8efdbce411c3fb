"""Stdin/stdout programs end as ``python3`` ends them, and are judged as a contest judge would.

The task: read ``n``, print ``n * (n + 1) // 2`` computed by recursion ``n`` deep. Each program
below is one that plain ``python3`` runs correctly; under :class:`StdioTests` its output must
count the same, and its exit status must be the one ``python3`` gives it.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from sandboxkit import Sandbox
from sandboxkit.harness import StdioTests
from sandboxkit.outcomes import Outcome, OutcomeKind, Verdict

CASES = [("5", "15"), ("1000", "500500"), ("100000", "5000050000")]
RECURSIVE = (
    "import sys\n"
    "sys.setrecursionlimit(10 ** 6)\n"
    "def tri(n):\n"
    "    return n + tri(n - 1) if n else 0\n"
)
THREADED = RECURSIVE + (
    "import threading\n"
    "def main():\n"
    "    print(tri(int(input())))\n"
    "threading.stack_size(1 << 26)\n"
    "threading.Thread(target=main).start()\n"
)


def judge(sb: Sandbox, code: str, cases: list[tuple[str, str]] = CASES, **kw: Any) -> Outcome:
    harness = StdioTests(cases, **kw)
    request = harness.request(code)
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    return harness.judge(result, request)


def test_output_of_a_non_daemon_thread_counts(sandbox: Sandbox) -> None:
    outcome = judge(sandbox, THREADED)
    assert outcome.kind is OutcomeKind.PASSED and outcome.passed == 3, outcome


def test_atexit_output_and_unflushed_writes_count(sandbox: Sandbox) -> None:
    """What ``atexit`` handlers print counts, and so does what a thread writes without a
    newline or a flush (the interpreter flushes ``sys.stdout`` after joining threads)."""
    at_exit = RECURSIVE + "import atexit\natexit.register(lambda: print(tri(int(input()))))\n"
    assert judge(sandbox, at_exit).passed == 3
    unflushed = THREADED.replace(
        "print(tri(int(input())))", "sys.stdout.write(str(tri(int(input()))))"
    )
    outcome = judge(sandbox, unflushed)
    assert outcome.kind is OutcomeKind.PASSED and outcome.passed == 3, outcome


def test_recursion_100000_deep_passes_in_a_thread_and_in_the_main_thread(
    sandbox: Sandbox,
) -> None:
    """With a big ``stack_size`` on a thread, and in the main thread through ``lru_cache`` (a C
    frame per level: 8 MiB of stack, the usual default, is not enough for it)."""
    outcome = judge(sandbox, THREADED, CASES[2:])
    assert outcome.kind is OutcomeKind.PASSED, outcome
    cached = RECURSIVE.replace("def tri", "import functools\n@functools.cache\ndef tri")
    outcome = judge(sandbox, cached + "print(tri(int(input())))\n", CASES[2:])
    assert outcome.kind is OutcomeKind.PASSED, outcome


def test_a_thread_that_never_ends_is_a_timeout(sandbox: Sandbox) -> None:
    """The answer is printed, but the program does not end: its time limit, and the runner
    goes on to the next test."""
    code = (
        "import threading, time\n"
        "n = int(input())\n"
        "print(n * (n + 1) // 2, flush=True)\n"
        "if n == 5:\n"
        "    threading.Thread(target=lambda: time.sleep(1000)).start()\n"
    )
    outcome = judge(sandbox, code, CASES[:2], timeout=0.5)
    assert outcome.kind is OutcomeKind.FAILED and outcome.passed == 1, outcome
    assert outcome.detail.startswith("test 0: time limit (still running after 2.5s"), outcome
    assert outcome.verdict is Verdict.TIME_LIMIT, outcome
    assert outcome.duration < 20, outcome


def test_exit_status_is_the_programs_and_non_zero_is_a_runtime_error(sandbox: Sandbox) -> None:
    """Right output with ``sys.exit(3)``, an uncaught exception or a fatal signal fails, as on
    a contest judge (a runtime error); ``sys.exit(0)``, ``sys.exit()``, ``os._exit(0)`` after a
    flush (fast-exit templates) and an exception in a thread do not."""
    right = RECURSIVE + "print(tri(int(input())))\n"
    failing = {
        "sys.exit(3)": "exit status 3",
        "raise ValueError('late')": "exit status 1: ValueError: late",
        "import os, signal\nsys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)": (
            "killed by signal 9"
        ),
    }
    for ending, said in failing.items():
        outcome = judge(sandbox, right + ending + "\n")
        assert outcome.kind is OutcomeKind.FAILED and outcome.passed == 0, outcome
        assert outcome.detail == f"test 0: runtime error ({said})", outcome
        assert outcome.verdict is Verdict.RUNTIME_ERROR, outcome
    passing = [
        "sys.exit(0)",
        "sys.exit()",
        "import os\nsys.stdout.flush()\nos._exit(0)",
        "import threading\nthreading.Thread(target=lambda: 1 / 0).start()",
    ]
    for ending in passing:
        outcome = judge(sandbox, right + ending + "\n")
        assert outcome.kind is OutcomeKind.PASSED, (ending, outcome)


def _listing(sb: Sandbox) -> list[str]:
    found = sb.exec(["sh", "-c", "cd .sandboxkit 2>/dev/null && find . | sort"]).stdout
    return found.split()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_a_compiled_runs_directory_goes_and_one_left_by_a_killed_run_too(
    sandbox: Sandbox,
) -> None:
    """A run's directory (source, binary) is removed when it ends; one whose runner was killed
    (no one holds its lock) is removed by the next run; a program without the precompiled
    header's include never builds it."""
    sandbox.exec(["mkdir", "-p", ".sandboxkit/run-dead"])
    sandbox.write_file(".sandboxkit/run-dead/.lock", "")
    sandbox.write_file(".sandboxkit/run-dead/main", "left behind")
    code = '#include <stdio.h>\nint main(){long n;scanf("%ld",&n);printf("%ld\\n",n*(n+1)/2);}'
    outcome = judge(sandbox, code, language="c")
    assert outcome.verdict is Verdict.ACCEPTED, outcome
    assert _listing(sandbox) == ["."]
    cpp = '#include <cstdio>\nint main(){long n;scanf("%ld",&n);printf("%ld\\n",n*(n+1)/2);}'
    assert judge(sandbox, cpp, language="cpp17").verdict is Verdict.ACCEPTED
    assert _listing(sandbox) == ["."]  # no cache: nothing included bits/stdc++.h


def test_a_clock_never_reads_waiting_as_cpu_time_once_its_process_is_gone() -> None:
    """Once a test's process has ended and been reaped (a whole program's, by its zygote), its
    CPU time can no longer be read: the clock then waits for what the process left (its end
    of file, its exit status) by the wall-clock backstop alone, and never takes the time it
    waited on a loaded machine for CPU time (a program that used 0.02 s would be past a 0.2 s
    limit)."""
    import os
    import subprocess
    import sys
    import time

    from sandboxkit.harness import runner

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    clock = runner.Clock(child.pid, limit=0.2)
    child.wait()  # reaped: its CPU-time clock is gone
    time.sleep(0.3)  # the judge, slow to look on a busy machine
    read, write = os.pipe()
    os.write(write, b"x")
    try:
        assert clock.used() is None
        assert clock.wait([read]) == [read]
    finally:
        os.close(read)
        os.close(write)
