"""Tests that share the candidate's process: what a fork per test guaranteed still holds.

The runner answers a completion's tests from one process for as long as it answers each of
their requests with a value, and forks a fresh one from the zygote after any test in which
it did not. A probe function returns what its process has seen so far, so each test's value
says which process answered it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandboxkit import Sandbox
from sandboxkit.harness import AssertTests, FunctionTests, Harness, runner
from sandboxkit.harness.records import read_records
from sandboxkit.outcomes import OutcomeKind

PROBE = (
    "import os, sys, threading, time\n"
    "seen = []\n"
    "def spin():\n"
    "    while True:\n"
    "        pass\n"
    "def probe(x, how=None):\n"
    "    seen.append(x)\n"
    "    if how == 'raise':\n"
    "        raise ValueError(x)\n"
    "    if how == 'exit':\n"
    "        sys.exit(3)\n"
    "    if how == 'interrupt':\n"
    "        raise KeyboardInterrupt\n"
    "    if how == 'end':\n"
    "        os._exit(0)\n"
    "    if how == 'spin':\n"
    "        spin()\n"
    "    if how == 'thread':\n"
    "        threading.Thread(target=spin, daemon=True).start()\n"
    "    if how == 'burn':\n"
    "        start = time.process_time()\n"
    "        while time.process_time() - start < 0.6:\n"
    "            pass\n"
    "    if how == 'wait':\n"
    "        while time.process_time() < 1.5:\n"
    "            time.sleep(0.01)\n"
    "    return list(seen)\n"
)
"""``probe(x)`` returns every ``x`` its process was called with, ``x`` last; ``how`` makes the
call end otherwise, after it has changed the module's state."""

FAILURES = {
    "raises": ("raise", "failed"),
    "exits": ("exit", "error"),
    "raises KeyboardInterrupt": ("interrupt", "error"),
    "ends its process": ("end", "error"),
    "runs out of time": ("spin", "timeout"),
}
"""How the call at FAILS ends, and the status of its test."""
FAILS = 5
TESTS = 10


def records(sb: Sandbox, harness: Harness, code: str) -> list[tuple[str, Any]]:
    """Each test's status, and the value it returned (calls) or None."""
    request = harness.request(code)
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    found = read_records(result, request)
    assert found.done and found.load_error is None, (found, result.stderr)
    assert sorted(found.tests) == list(range(len(found.tests))), found.tests
    tests = [found.tests[i] for i in range(len(found.tests))]
    return [(t["status"], runner.decode(t["value"]) if "value" in t else None) for t in tests]


def probed(i: int) -> list[int]:
    """What test ``i`` returns when only a failure at FAILS ends its process."""
    return list(range(i + 1)) if i < FAILS else list(range(FAILS + 1, i + 1))


def test_the_records_of_many_calls_come_in_few_sealed_lines_and_records_and_all_count(
    sandbox: Sandbox,
) -> None:
    """600 calls, one wrong in the middle of a line's records: the runner seals lines of many
    records, not one line per call, and records the values of the answers it finds already
    there together, not one record per call; the host reads every call's value out of them."""
    code = "def twice(x):\n    return 2 * x + (x == 300)\n"
    harness = FunctionTests("twice", [(i,) for i in range(600)], [2 * i for i in range(600)])
    request = harness.request(code)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    found = read_records(result, request)
    assert found.done and sorted(found.tests) == list(range(600)), result.stderr
    assert [found.tests[i]["value"] for i in range(600)] == [2 * i + (i == 300) for i in range(600)]
    lines = result.stdout.splitlines()
    assert 1 <= len(lines) <= 600 // 10
    records = [r for line in lines for r in json.loads(line.partition(" ")[2])["records"]]
    assert len(records) <= 600 // 3
    assert max(len(r.get("values", ())) for r in records) >= 2
    outcome = harness.judge(result, request)
    assert (outcome.kind, outcome.passed, outcome.detail) == (
        OutcomeKind.FAILED,
        599,
        "test 300: wrong result",
    )


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_call_loses_no_other_test_and_leaves_the_next_nothing(
    sandbox: Sandbox, failure: str
) -> None:
    """Ten calls, the sixth of which changes the module's state and then does not return: the
    nine others return, and those after it see nothing of the process it ended in."""
    how, status = FAILURES[failure]
    args = [(i, how) if i == FAILS else (i,) for i in range(TESTS)]
    harness = FunctionTests("probe", args, [None] * TESTS, timeout=1)
    expected = [(status, None) if i == FAILS else ("returned", probed(i)) for i in range(TESTS)]
    assert records(sandbox, harness, PROBE) == expected


SPY = (
    "import gc, os, re, socket, stat, sys\n"
    "ARGS = re.compile(rb'[\"\\x27]\\$t[\"\\x27]: \\[(\\d+)\\]')\n"
    "def scan(found, value):\n"
    "    data = value if isinstance(value, (bytes, bytearray)) else repr(value).encode()\n"
    "    found.update(int(m) for m in ARGS.findall(data[:1 << 22]))\n"
    "def spy(x):\n"
    "    found = set()\n"
    "    frame = sys._getframe()\n"
    "    while frame is not None:\n"
    "        for value in list(frame.f_locals.values()):\n"
    "            scan(found, value)\n"
    "            for inner in list(getattr(value, '__dict__', {}).values()):\n"
    "                scan(found, inner)\n"
    "        frame = frame.f_back\n"
    "    gc.unfreeze()\n"
    "    for obj in gc.get_objects():\n"
    "        if isinstance(obj, (list, dict, bytearray)):\n"
    "            scan(found, obj)\n"
    "    for fd in range(3, 256):\n"
    "        try:\n"
    "            if not stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
    "                continue\n"
    "            peek = socket.socket(fileno=os.dup(fd))\n"
    "        except OSError:\n"
    "            continue\n"
    "        try:\n"
    "            scan(found, peek.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT))\n"
    "        except OSError:\n"
    "            pass\n"
    "        peek.close()\n"
    "    return sorted(i for i in found if i > x)\n"
)
"""``spy(x)`` returns every argument above ``x`` that it finds anywhere in its process: its
callers' frames and their objects, every container on the heap, and what waits unread on
each of its sockets."""


def test_no_call_sees_the_arguments_of_a_later_call(sandbox: Sandbox) -> None:
    """200 quick calls of ``spy(i)``: none finds any later call's argument, however it
    looks; a candidate holding them could answer with knowledge of inputs still to come."""
    harness = FunctionTests("spy", [(i,) for i in range(200)], [[]] * 200, timeout=5)
    assert records(sandbox, harness, SPY) == [("returned", [])] * 200


def test_long_results_cross_as_digests_and_short_ones_as_themselves(sandbox: Sandbox) -> None:
    """Results that alternate around ``runner.INLINE_VALUE`` bytes of JSON: each longer one
    crosses to the host as its digest (its record within its share of the exec's output),
    each other as itself; all pass."""
    code = "def text(n):\n    return 'x' * n\n"
    sizes = [runner.INLINE_VALUE - 2 + i % 2 for i in range(43)]  # JSON adds two quotes
    harness = FunctionTests("text", [(n,) for n in sizes], ["x" * n for n in sizes])
    request = harness.request(code)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    found = read_records(result, request)
    forms = [sorted(set(found.tests[i]) & {"value", "digest"}) for i in range(43)]
    assert forms == [["digest"] if i % 2 else ["value"] for i in range(43)]
    assert harness.judge(result, request).kind is OutcomeKind.PASSED


FORGER = (
    "import os, stat\n"
    "def echo(x, head):\n"
    "    if head:\n"
    "        for fd in range(3, 256):\n"
    "            try:\n"
    "                if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
    "                    os.write(fd, head.encode())\n"
    "            except OSError:\n"
    "                pass\n"
    "    return x\n"
)
"""``echo(x, head)`` returns ``x``, after writing ``head`` on every socket its process holds."""


@pytest.mark.parametrize("head", ["-5\n", "five\n", "99999999999\n"])
def test_a_forged_frame_head_fails_only_its_call(sandbox: Sandbox, head: str) -> None:
    """Call 40 writes on its process's socket a head that begins no frame (negative, not a
    number, past the frame limit) before its answer: the judge goes on; 40 is an error, and
    every other call returns, those after 40 from a fresh process."""
    args = [(i, head if i == 40 else "") for i in range(100)]
    harness = FunctionTests("echo", args, list(range(100)), timeout=5)
    expected = [("error", None) if i == 40 else ("returned", i) for i in range(100)]
    assert records(sandbox, harness, FORGER) == expected


FORGED_ANSWERS = {
    "no answer": (
        "[]",
        [("error", None) if i == 40 else ("returned", i) for i in range(100)],
    ),
    "an answer of its own": (
        '{"ok": 99}',
        [("returned", 99 if i == 40 else i if i < 40 else i - 1) for i in range(100)],
    ),
}


@pytest.mark.parametrize("forged", FORGED_ANSWERS)
def test_a_forged_frame_is_the_candidates_own_answer(sandbox: Sandbox, forged: str) -> None:
    """Call 40 writes a whole frame on its process's socket before its answer: what it holds
    is taken as that call's answer, as any answer, never the judge's failure. A value is 40's,
    and every later call's answer comes one call late; no value fails 40, and a fresh process
    answers the rest."""
    text, expected = FORGED_ANSWERS[forged]
    args = [(i, f"{len(text)}\n{text}" if i == 40 else "") for i in range(100)]
    harness = FunctionTests("echo", args, list(range(100)), timeout=5)
    assert records(sandbox, harness, FORGER) == expected


@pytest.mark.parametrize("failure", FAILURES)
def test_an_assert_test_sees_nothing_a_previous_tests_failed_call_left(
    sandbox: Sandbox, failure: str
) -> None:
    """The same in assert tests, where the test that made the call may even pass (it expects
    the exception): what the candidate did, not the test's verdict, ends its process."""
    how, status = FAILURES[failure]
    call = f"probe({FAILS}, {how!r})"
    failing = f"try:\n    {call}\nexcept ValueError:\n    pass" if how == "raise" else call
    tests = [failing if i == FAILS else f"assert probe({i}) == {probed(i)}" for i in range(TESTS)]
    failed = "passed" if how == "raise" else status
    expected = [(failed if i == FAILS else "passed", None) for i in range(TESTS)]
    assert records(sandbox, AssertTests(tests, timeout=1), PROBE) == expected


def test_a_failed_assert_does_not_tell_the_candidate_so(sandbox: Sandbox) -> None:
    """An assert that fails on a value the candidate returned changes nothing in its process:
    the next test is answered by the same process (a fresh one would tell the candidate which
    of its answers were wrong)."""
    tests = ["assert probe(0) == [0]", "assert probe(1) == [1]", "assert probe(2) == [0, 1, 2]"]
    harness = AssertTests(tests, timeout=5)
    assert [s for s, _ in records(sandbox, harness, PROBE)] == ["passed", "failed", "passed"]


BURN = (
    "import time\n"
    "def burn(x):\n"
    "    start = time.process_time()\n"
    "    while time.process_time() - start < 0.3:\n"
    "        pass\n"
    "    return x\n"
)


def test_each_test_in_a_shared_process_has_its_own_cpu_limit(sandbox: Sandbox) -> None:
    """Five calls of 0.3 s of CPU each under a 1 s limit, in one process: each is timed from
    where the previous one stopped, so none runs out of time."""
    harness = FunctionTests("burn", [(i,) for i in range(5)], list(range(5)), timeout=1)
    assert records(sandbox, harness, BURN) == [("returned", i) for i in range(5)]


def test_a_thread_that_works_on_past_its_call_ends_its_process(sandbox: Sandbox) -> None:
    """A call that starts a spinning thread and returns at once passes, and its process is
    ended after it: the next test gets a fresh process (which has seen only it), so nothing
    the thread does is any later test's, nor free of every test's clock."""
    harness = FunctionTests("probe", [(0, "thread"), (1,), (2,)], [None] * 3, timeout=1)
    statuses = records(sandbox, harness, PROBE)
    assert statuses == [("returned", [0]), ("returned", [1]), ("returned", [1, 2])]


def test_a_thread_started_at_load_time_is_charged_to_every_test(sandbox: Sandbox) -> None:
    """A module that starts a spinning thread, and calls that wait for their process to have
    used 1.5 s of CPU: each test, each in a fresh process after the one before ran out of
    time, runs out of its 1 s."""
    code = PROBE + "threading.Thread(target=spin, daemon=True).start()\n"
    harness = FunctionTests("probe", [(i, "wait") for i in range(3)], [None] * 3, timeout=1)
    assert records(sandbox, harness, code) == [("timeout", None)] * 3


def test_all_or_nothing_scoring_stops_at_the_first_failure(sandbox: Sandbox) -> None:
    """With ``stop_at_first_failure``, no test runs after the first that did not pass (assert
    tests) or return (function tests); those left out count as failed."""
    calls = FunctionTests("probe", [(0,), (1, "raise"), (2,)], [[0], None, [2]], timeout=5)
    tests = ["assert probe(0) == [0]", "assert probe(1) == [1]", "assert probe(2) == [0, 1, 2]"]
    asserts = AssertTests(tests, timeout=5, stop_at_first_failure=True)
    stopping = FunctionTests(
        calls.func_name, calls.args, calls.expected, timeout=5, stop_at_first_failure=True
    )
    assert [s for s, _ in records(sandbox, calls, PROBE)] == ["returned", "failed", "returned"]
    assert [s for s, _ in records(sandbox, stopping, PROBE)] == ["returned", "failed"]
    assert [s for s, _ in records(sandbox, asserts, PROBE)] == ["passed", "failed"]
    for harness in (stopping, asserts):
        request = harness.request(PROBE)
        result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
        outcome = harness.judge(result, request)
        assert (outcome.kind, outcome.passed, outcome.total) == (OutcomeKind.FAILED, 1, 3)


REBORN = (
    "import os, threading\n"
    "seen = []\n"
    "def spin():\n"
    "    while True:\n"
    "        pass\n"
    "def who(x):\n"
    "    seen.append(x)\n"
    "    if x == FAILS:\n"
    "        threading.Thread(target=spin, daemon=True).start()\n"
    "    return [list(seen), os.getppid(), os.getuid()]\n"
)
"""``who(x)`` returns what its process has seen, its parent and its uid; the call at FAILS
leaves a spinning thread behind."""


def test_a_job_that_stops_at_its_first_failure_goes_on_in_a_fresh_zygotes_process(
    sandbox: Sandbox,
) -> None:
    """All-or-nothing scoring: the zygote becomes the first test's process, so when a passing
    call leaves a thread working behind (its process is ended after it), the next call runs in
    a process of a zygote started afresh (another parent, the same uid), which has seen
    nothing of the first process; the rest run on there."""
    code = REBORN.replace("FAILS", str(FAILS))
    harness = FunctionTests(
        "who", [(i,) for i in range(TESTS)], [None] * TESTS, timeout=5, stop_at_first_failure=True
    )
    found = records(sandbox, harness, code)
    assert [status for status, _ in found] == ["returned"] * TESTS
    values = [value for _, value in found]
    assert [v[0] for v in values] == [
        list(range(FAILS + 1 if i > FAILS else 0, i + 1)) for i in range(TESTS)
    ]
    first = {tuple(v[1:]) for v in values[: FAILS + 1]}
    again = {tuple(v[1:]) for v in values[FAILS + 1 :]}
    assert len(first) == len(again) == 1
    (first_parent, first_uid), (parent, uid) = first.pop(), again.pop()
    assert parent != first_parent and uid == first_uid
