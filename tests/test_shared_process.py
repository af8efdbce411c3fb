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
"""The first call of a batch (calls 5 to 9: ``runner.GROWTH``), so none before it is run again."""
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


AHEAD = 43
"""Quick calls enough for the runner to send them to the candidate's process in batches, with
no round trip between (``runner.GROWTH`` times larger each, from one call): calls 5 to 20
are one batch, 21 to 42 the next."""


@pytest.mark.parametrize("failure", ["raises", "runs out of time"])
def test_a_call_failing_among_calls_sent_ahead_leaves_the_next_nothing(
    sandbox: Sandbox, failure: str
) -> None:
    """Call 12, in the middle of a batch, changes the module's state and then does not return:
    the calls sent with it after it are answered again, by a fresh process that has seen only
    them. One that runs out of time holds back the answers of its batch (its process holds
    them, ``runner.FLUSH`` at most, until the batch's end), so the batch is judged again from
    its first call (5), one call at a time, in a fresh process: 12's timeout is its own."""
    how, status = FAILURES[failure]
    args = [(i, how) if i == 12 else (i,) for i in range(AHEAD)]
    harness = FunctionTests("probe", args, [None] * AHEAD, timeout=1)
    first = 5 if status == "timeout" else 0
    expected = [
        (
            "returned",
            list(
                range(i + 1) if i < first else range(first, i + 1) if i < 12 else range(13, i + 1)
            ),
        )
        for i in range(AHEAD)
    ]
    expected[12] = (status, None)
    assert records(sandbox, harness, PROBE) == expected


def test_long_results_answered_ahead_cross_as_digests_as_one_answered_alone(
    sandbox: Sandbox,
) -> None:
    """Calls sent ahead in batches whose results alternate around ``runner.INLINE_VALUE``
    bytes of JSON: each longer one crosses to the host as its digest (its record within its
    share of the exec's output), each other as itself, however its answer came; all pass."""
    code = "def text(n):\n    return 'x' * n\n"
    sizes = [runner.INLINE_VALUE - 2 + i % 2 for i in range(AHEAD)]  # JSON adds two quotes
    harness = FunctionTests("text", [(n,) for n in sizes], ["x" * n for n in sizes])
    request = harness.request(code)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    found = read_records(result, request)
    forms = [sorted(set(found.tests[i]) & {"value", "digest"}) for i in range(AHEAD)]
    assert forms == [["digest"] if i % 2 else ["value"] for i in range(AHEAD)]
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
def test_a_forged_frame_head_among_answers_sent_ahead_fails_only_its_call(
    sandbox: Sandbox, head: str
) -> None:
    """Call 40, in the batch of calls 21 to 84, writes on its process's socket a head that
    begins no frame (negative, not a number, past the frame limit), after the answers of 21 to
    36 went back: the judge goes on; 40 is an error (judged again alone, it forges again), and
    every other call returns, those after 36 again from a fresh process."""
    args = [(i, head if i == 40 else "") for i in range(100)]
    harness = FunctionTests("echo", args, list(range(100)), timeout=5)
    expected = [("error", None) if i == 40 else ("returned", i) for i in range(100)]
    assert records(sandbox, harness, FORGER) == expected


FORGED_LISTS = {
    "no answer": (
        "[]",
        [("failed", None) if i in (37, 39, 40) else ("returned", i) for i in range(100)],
    ),
    "an answer of its own": (
        '[{"ok": 99}]',
        [("returned", 99 if i == 37 else i if i < 37 else i - 1) for i in range(100)],
    ),
}


@pytest.mark.parametrize("forged", FORGED_LISTS)
def test_a_forged_frame_of_answers_is_the_candidates_own_answers(
    sandbox: Sandbox, forged: str
) -> None:
    """Call 40, in the batch of calls 21 to 84, writes a whole frame on its process's socket
    after the answers of 21 to 36 went back as one frame of their list: what it holds is taken
    as the next answer to come, as any answer, never the judge's failure. A value is 37's, and
    every later call's answer comes one call late; no value fails 37, then, in the fresh
    process for 38 on, 39 (whose answer that process still held when 40 wrote) and 40."""
    text, expected = FORGED_LISTS[forged]
    args = [(i, f"{len(text)}\n{text}" if i == 40 else "") for i in range(100)]
    harness = FunctionTests("echo", args, list(range(100)), timeout=5)
    assert records(sandbox, harness, FORGER) == expected


def test_a_batch_slower_than_quick_calls_is_judged_again_call_by_call(sandbox: Sandbox) -> None:
    """Calls 40 and 41 use 0.6 s of CPU each under a 1 s limit, sent in one batch (21 to 42),
    whose answers its process holds ``runner.FLUSH`` (16) at a time: 21 to 36 come back from
    the process that answered 0 to 20, and the rest has not answered by the time the batch
    used more than quick calls would (``runner.PATIENCE``), so none of those answers is taken,
    and they are judged again from 37, one call at a time, in a fresh process (which has seen
    only them); none runs out of time."""
    args = [(i, "burn") if i in (40, 41) else (i,) for i in range(AHEAD)]
    harness = FunctionTests("probe", args, [None] * AHEAD, timeout=1)
    expected = [
        ("returned", list(range(i + 1) if i < 37 else range(37, i + 1))) for i in range(AHEAD)
    ]
    assert records(sandbox, harness, PROBE) == expected


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


def test_a_thread_a_call_left_running_is_charged_to_the_next_test(sandbox: Sandbox) -> None:
    """A call that starts a spinning thread and returns at once: the next test, which waits for
    its process to have used 1.5 s of CPU, runs out of its 1 s (the thread's cycles are the
    test's); the test after it gets a fresh process."""
    harness = FunctionTests("probe", [(0, "thread"), (1, "wait"), (2,)], [None] * 3, timeout=1)
    statuses = records(sandbox, harness, PROBE)
    assert statuses == [("returned", [0]), ("timeout", None), ("returned", [2])]


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
    "import os\n"
    "seen = []\n"
    "def who(x):\n"
    "    seen.append(x)\n"
    "    if x == FAILS and len(seen) > 1:\n"
    "        os._exit(0)\n"
    "    return [list(seen), os.getppid(), os.getuid()]\n"
)
"""``who(x)`` returns what its process has seen, its parent and its uid; the call at FAILS
(the first of a batch) ends its process unless it is the first that process got."""


def test_a_job_that_stops_at_its_first_failure_reruns_a_call_in_a_fresh_zygotes_process(
    sandbox: Sandbox,
) -> None:
    """All-or-nothing scoring: the zygote becomes the first test's process, so a call whose
    batch cannot vouch for it (it ended its process with calls after it pending) runs again
    in a process of a zygote started afresh (another parent, the same uid), which has seen
    nothing of the first process; the rest run on there."""
    code = REBORN.replace("FAILS", str(FAILS))
    harness = FunctionTests(
        "who", [(i,) for i in range(TESTS)], [None] * TESTS, timeout=5, stop_at_first_failure=True
    )
    found = records(sandbox, harness, code)
    assert [status for status, _ in found] == ["returned"] * TESTS
    values = [value for _, value in found]
    assert [v[0] for v in values] == [
        list(range(FAILS if i >= FAILS else 0, i + 1)) for i in range(TESTS)
    ]
    first, again = {tuple(v[1:]) for v in values[:FAILS]}, {tuple(v[1:]) for v in values[FAILS:]}
    assert len(first) == len(again) == 1
    (first_parent, first_uid), (parent, uid) = first.pop(), again.pop()
    assert parent != first_parent and uid == first_uid
