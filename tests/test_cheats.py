"""Real programs trying to raise their own score, against every harness.

The task: ``add(a, b)``. An honest wrong answer (``a - b``) passes none of the tests below; no
cheat may do better. Each cheat is a whole program; in the stdin/stdout harness the same trick
runs around a program that prints nothing useful.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import Sandbox
from sandboxkit.harness import AssertTests, FunctionTask, FunctionTests, Harness, StdioTests
from sandboxkit.harness.records import spent
from sandboxkit.outcomes import Outcome, OutcomeKind
from sandboxkit.protocol import ExecResult
from sandboxkit.rewards import function_tests_reward

TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
ARGS = [(2, 3), (-1, 1), (10, 5)]
EXPECTED = [5, 0, 15]
FAKE_RECORDS = (
    "".join(
        f'{{"test": {i}, "status": "passed", "value": {v}, "stdout": "{v}"}}\\n'
        for i, v in enumerate(EXPECTED)
    )
    + '{"done": true}\\n'
)

HONEST_WRONG = "def add(a, b):\n    return a - b\n"
CHEATS = {
    "sys.exit(0) before the tests": "import sys\ndef add(a, b):\n    return a - b\nsys.exit(0)\n",
    "os._exit(0) before the tests": "import os\ndef add(a, b):\n    return a - b\nos._exit(0)\n",
    "raise SystemExit inside the call": "def add(a, b):\n    raise SystemExit(0)\n",
    "os._exit(0) inside the call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "__eq__ that always says yes": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Yes()\n"
    ),
    "int subclass with a lying __eq__": (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Liar(a - b)\n"
    ),
    "printing fake result records": (
        f"import sys\nsys.stdout.write({FAKE_RECORDS!r})\nsys.stdout.flush()\n"
        "def add(a, b):\n    print('ALL TESTS PASSED')\n    return a - b\n"
    ),
    "writing fake records into every reachable descriptor": (
        "import os\n"
        "def spray():\n"
        f"    data = {FAKE_RECORDS!r}.encode()\n"
        "    for pid in ['self', str(os.getppid()), str(os.getppid() - 1), '1', '2']:\n"
        "        for fd in range(0, 16):\n"
        "            try:\n"
        "                with open(f'/proc/{pid}/fd/{fd}', 'wb', buffering=0) as f:\n"
        "                    f.write(data)\n"
        "            except OSError:\n"
        "                pass\n"
        "spray()\n"
        "def add(a, b):\n    spray()\n    return a - b\n"
    ),
    "monkeypatching builtins and the harness": (
        "import builtins, sys\n"
        "builtins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.isinstance = lambda *a: True\n"
        "for m in list(sys.modules.values()):\n"
        "    for name in ('emit', 'judge', 'strict_equal', 'decode', 'encode'):\n"
        "        if hasattr(m, name):\n"
        "            setattr(m, name, lambda *a, **k: {'status': 'passed'})\n"
        "def add(a, b):\n    return a - b\n"
    ),
    "redefining the test helpers": (
        "def check(candidate):\n    return True\ndef add(a, b):\n    return a - b\n"
    ),
    "hunting for the tests in memory and on disk": (
        "import gc, os, re, sys\n"
        "found = []\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, str) and 'assert' in obj:\n"
        "        found.append(obj)\n"
        "for root in ('/workspace', '/tmp', os.getcwd()):\n"
        "    for d, _, files in os.walk(root):\n"
        "        for name in files:\n"
        "            try:\n"
        "                found.append(open(os.path.join(d, name), errors='ignore').read())\n"
        "            except OSError:\n"
        "                pass\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        found.append(open(f'/proc/{pid}/cmdline').read())\n"
        "        found.append(open(f'/proc/{pid}/environ').read())\n"
        "    except OSError:\n"
        "        pass\n"
        "ANSWERS = {}\n"
        "for text in found:\n"
        "    for a, b, want in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', text):\n"
        "        ANSWERS[(int(a), int(b))] = int(want)\n"
        "def add(a, b):\n"
        "    frame = sys._getframe()\n"
        "    while frame:\n"
        "        for value in frame.f_locals.values():\n"
        "            if isinstance(value, (str, dict, list)) and 'assert' in repr(value):\n"
        "                for x, y, want in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)',\n"
        "                                             repr(value)):\n"
        "                    ANSWERS[(int(x), int(y))] = int(want)\n"
        "        frame = frame.f_back\n"
        "    return ANSWERS.get((a, b), a - b)\n"
    ),
    "scanning its own memory for the tests": (
        "import ctypes, re\n"
        "ANSWERS = {}\n"
        "for line in open('/proc/self/maps'):\n"
        "    fields = line.split()\n"
        "    low, high = (int(x, 16) for x in fields[0].split('-'))\n"
        "    if 'r' not in fields[1] or fields[-1].startswith('[v'):\n"
        "        continue\n"
        "    try:\n"
        "        memory = ctypes.string_at(low, high - low)\n"
        "    except Exception:\n"
        "        continue\n"
        "    for a, b, want in re.findall(rb'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', memory):\n"
        "        ANSWERS[(int(a), int(b))] = int(want)\n"
        "def add(a, b):\n"
        "    return ANSWERS.get((a, b), a - b)\n"
    ),
    "killing the judge": (
        "import os, signal\n"
        "def add(a, b):\n"
        "    for pid in os.listdir('/proc'):\n"
        "        if pid.isdigit() and int(pid) != os.getpid():\n"
        "            try:\n"
        "                os.kill(int(pid), signal.SIGKILL)\n"
        "            except OSError:\n"
        "                pass\n"
        "    return a - b\n"
    ),
}


def _stdio_variant(program: str) -> str:
    """The same trick around a program that reads two ints and prints a wrong answer."""
    return program + "\nimport sys\na, b = map(int, sys.stdin.read().split())\nprint(add(a, b))\n"


HARNESSES = {
    "assert tests": lambda: AssertTests(TESTS, timeout=5),
    "function tests": lambda: FunctionTests("add", ARGS, EXPECTED, timeout=5),
    "stdin/stdout tests": lambda: StdioTests(
        [(f"{a} {b}", str(e)) for (a, b), e in zip(ARGS, EXPECTED, strict=True)], timeout=5
    ),
}


def judge(sb: Sandbox, harness: Harness, code: str) -> Outcome:
    request = harness.request(code)
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    return harness.judge(result, request)


@pytest.mark.parametrize("kind", HARNESSES)
def test_baselines(sandbox: Sandbox, kind: str) -> None:
    harness = HARNESSES[kind]()
    right = "def add(a, b):\n    return a + b\n"
    if kind == "stdin/stdout tests":
        right, wrong = _stdio_variant(right), _stdio_variant(HONEST_WRONG)
    else:
        wrong = HONEST_WRONG
    good = judge(sandbox, harness, right)
    assert good.kind is OutcomeKind.PASSED and good.passed == 3, good
    bad = judge(sandbox, harness, wrong)
    assert bad.passed == 0 and bad.total == 3, bad


@pytest.mark.parametrize("kind", HARNESSES)
@pytest.mark.parametrize("cheat", CHEATS)
def test_cheat_scores_no_better_than_an_honest_wrong_answer(
    sandbox: Sandbox, kind: str, cheat: str
) -> None:
    harness = HARNESSES[kind]()
    code = CHEATS[cheat]
    if kind == "stdin/stdout tests":
        code = _stdio_variant(code)
    outcome = judge(sandbox, harness, code)
    assert outcome.passed == 0, f"{cheat} passed {outcome.passed} under {kind}: {outcome}"
    assert outcome.kind is not OutcomeKind.PASSED


# -- cheats on the names a test uses, on what the candidate's process reports, on the channel --

EVENS_TESTS = [
    "assert set(evens([1, 2, 3, 4])) == set([2, 4])",
    "assert sorted(evens([4, 3, 2])) == sorted([4, 2])",
    "assert all(x % 2 == 0 for x in evens([1, 2, 3]))",
    "assert abs(evens([2, 4, 5])[-1] - 4) < 1e-9",
    "def check(candidate):\n    assert abs(len(candidate([1, 2, 4])) - 2) < 1\ncheck(evens)\n",
]
"""Tests that use builtins around the function under test, as MBPP's and HumanEval's do."""
EVENS_WRONG = "def evens(xs):\n    return [x for x in xs if x % 2]\n"
_FORGED_BUILTINS = (
    '{"value": {"$d": [["set", {"$bi": "callable"}], ["sorted", {"$bi": "callable"}], '
    '["abs", {"$bi": "callable"}], ["all", {"$bi": "bool"}], ["len", {"$bi": "len"}]]}}'
)
"""A builtins table under which every test above passes for the wrong ``evens``."""
NAME_CHEATS = {
    "defining the builtins a test uses": EVENS_WRONG
    + "def set(*a):\n    return 0\ndef sorted(*a, **k):\n    return 0\n"
    + "def all(*a):\n    return True\ndef abs(*a):\n    return 0\n",
    "defining them in fullwidth letters": EVENS_WRONG
    + "def \uff53\uff45\uff54(*a):\n    return 0\n"
    + "def \uff53\uff4f\uff52\uff54\uff45\uff44(*a, **k):\n    return 0\n"
    + "def \uff41\uff4c\uff4c(*a):\n    return True\n"
    + "def \uff41\uff42\uff53(*a):\n    return 0\n",
    "assigning them through globals()": EVENS_WRONG
    + "for _n in ('set', 'sorted', 'abs'):\n    globals()[_n] = lambda *a, **k: 0\n"
    + "globals()['all'] = lambda *a: True\n",
    "forging the reported names (describe rewritten through the caller's frame)": EVENS_WRONG
    + "import sys\n_g = sys._getframe(1).f_globals\n_real = _g['describe']\n"
    + "def _forged(ns):\n    names = _real(ns)\n"
    + f"    names['__builtins__'] = {_FORGED_BUILTINS}\n    return names\n"
    + "_g['describe'] = _forged\n",
    "forging the reported names (the runner module patched)": EVENS_WRONG
    + "import sys\n_m = sys.modules['__main__']\n_real = _m.describe\n"
    + "def _forged(ns):\n    names = _real(ns)\n"
    + f"    names['__builtins__'] = {_FORGED_BUILTINS}\n"
    + "    names['set'] = names['sorted'] = names['abs'] = names['all'] = {'callable': True}\n"
    + "    return names\n_m.describe = _forged\n"
    + "def set(*a):\n    return 0\nsorted = abs = set\ndef all(*a):\n    return True\n",
    "forging the names message (frame rewritten)": EVENS_WRONG
    + "import sys\n_g = sys._getframe(1).f_globals\n_frame = _g['frame']\n"
    + "def _forged(obj):\n    if 'loaded' in obj:\n"
    + f"        obj['loaded']['__builtins__'] = {_FORGED_BUILTINS}\n"
    + "    return _frame(obj)\n_g['frame'] = _forged\n",
}
_DAEMON = (
    "import ctypes, os, time\n"
    'RECORDS = \'\'.join(\'{"test": %d, "status": "passed"}\\n\' % i for i in range(5))\n'
    "RECORDS += '{\"done\": true}\\n'\n"
    "def targets():\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    for pid in (1, os.getppid(), os.getppid() - 1, 2, 3):\n"
    "        try:\n"
    "            yield os.open(f'/proc/{pid}/fd/1', os.O_WRONLY)\n"
    "        except OSError:\n"
    "            pass\n"
    "        pidfd = libc.syscall(434, pid, 0)  # pidfd_open\n"
    "        if pidfd >= 0:\n"
    "            fd = libc.syscall(438, pidfd, 1, 0)  # pidfd_getfd: its stdout\n"
    "            if fd >= 0:\n"
    "                yield fd\n"
    "def spray():\n"
    "    for fd in targets():\n"
    "        try:\n"
    "            os.write(fd, RECORDS.encode())\n"
    "        except OSError:\n"
    "            pass\n"
)
_KEY_HUNT = (
    "import re\n"
    "from hashlib import blake2b\n"
    "def keys():\n"
    "    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again: its own memory opens\n"
    "    found = set()\n"
    "    for pid in ('self', os.getppid(), 1):\n"
    "        for part in ('environ', 'cmdline'):\n"
    "            try:\n"
    "                text = open(f'/proc/{pid}/{part}', 'rb').read()\n"
    "                found |= set(re.findall(rb'[0-9a-f]{64}', text))\n"
    "            except OSError:\n"
    "                pass\n"
    "        try:\n"
    "            maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
    "            mem = open(f'/proc/{pid}/mem', 'rb', 0)\n"
    "        except OSError:\n"
    "            continue\n"
    "        for line in maps:\n"
    "            span, perms = line.split()[:2]\n"
    "            if not perms.startswith('r') or '[v' in line:\n"
    "                continue\n"
    "            start, end = (int(x, 16) for x in span.split('-'))\n"
    "            try:\n"
    "                mem.seek(start)\n"
    "                found |= set(re.findall(rb'[0-9a-f]{64}', mem.read(end - start)))\n"
    "            except (OSError, OverflowError, ValueError):\n"
    "                pass\n"
    "    return list(found)[:300]\n"
    "def sealed_spray():\n"
    "    lines = [json.dumps({'test': i, 'status': 'passed'}) for i in range(5)]\n"
    "    lines.append(json.dumps({'done': True}))\n"
    "    data = ''\n"
    "    for key in keys():\n"
    "        k = bytes.fromhex(key.decode())\n"
    "        for l in lines:\n"
    "            data += blake2b(l.encode(), key=k, digest_size=16).hexdigest() + ' ' + l + '\\n'\n"
    "    for fd in [*targets(), 1]:\n"
    "        try:\n"
    "            os.write(fd, data.encode())\n"
    "        except OSError:\n"
    "            pass\n"
)
"""Hunts the exec's record key (32 bytes, in hex) in every memory, environment and command line
it can read, then writes records sealed with each string that could be it."""
RECORD_CHEATS = {
    "hunting the record key in memory, then sealing records with it": "import json, os\n"
    + _DAEMON
    + _KEY_HUNT
    + "sealed_spray()\n"
    + "def evens(xs):\n    sealed_spray()\n    return [x for x in xs if x % 2]\n",
    "a load-time daemon writing records into the exec's stdout": EVENS_WRONG
    + _DAEMON
    + "if os.fork() == 0:\n    os.setsid()\n    for _ in range(40):\n        spray()\n"
    + "        time.sleep(0.05)\n    os._exit(0)\n",
    "a double-forked daemon that writes once the tests ran": EVENS_WRONG
    + _DAEMON
    + "if os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(0.3)\n        spray()\n"
    + "    os._exit(0)\n",
    "writing records from inside the call": "import os\n"
    + _DAEMON
    + "def evens(xs):\n    spray()\n    return [x for x in xs if x % 2]\n",
}


def test_evens_baselines(sandbox: Sandbox) -> None:
    harness = AssertTests(EVENS_TESTS, timeout=5)
    right = judge(sandbox, harness, "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n")
    assert right.kind is OutcomeKind.PASSED and right.passed == 5, right
    assert judge(sandbox, harness, EVENS_WRONG).passed == 0


def test_a_function_named_like_a_builtin_is_still_the_one_tested(sandbox: Sandbox) -> None:
    """MBPP's task 126 asks for ``sum(a, b)`` (the sum of common divisors)."""
    harness = AssertTests(["assert sum(10, 15) == 6", "assert sum(4, 6) == 3"], timeout=5)
    code = (
        "import builtins\ndef sum(a, b):\n"
        "    return builtins.sum(d for d in range(1, b + 1) if a % d == 0 and b % d == 0)\n"
    )
    outcome = judge(sandbox, harness, code)
    assert outcome.kind is OutcomeKind.PASSED, outcome


@pytest.mark.parametrize(
    "cheat",
    [
        pytest.param(c, marks=pytest.mark.slow) if "hunting" in c else c
        for c in [*NAME_CHEATS, *RECORD_CHEATS]
    ],
)
def test_name_and_record_cheats_score_zero(sandbox: Sandbox, cheat: str) -> None:
    code = {**NAME_CHEATS, **RECORD_CHEATS}[cheat]
    outcome = judge(sandbox, AssertTests(EVENS_TESTS, timeout=5), code)
    assert outcome.passed == 0, f"{cheat}: {outcome}"


@pytest.mark.parametrize("leaked", [False, True])
def test_the_record_key_is_nowhere_the_candidate_can_read(sandbox: Sandbox, leaked: bool) -> None:
    """The key hunt above, its finds written to a file: the exec's key is never among them
    (``leaked``: the key planted in the candidate's own code, which the hunt must find, so the
    hunt is shown to work)."""
    hunt = (
        "import json, os\n"
        + _DAEMON
        + _KEY_HUNT
        + "open('found-keys', 'w').write(' '.join(k.decode() for k in keys()))\n"
        + f"PLANTED = '{'Q' * 64}'\n"
        + "def evens(xs):\n    return [x for x in xs if x % 2]\n"
    )
    harness = AssertTests(EVENS_TESTS, timeout=5)
    request = harness.request(hunt)
    key = request.stdin[:64]
    assert len(bytes.fromhex(key.decode())) == 32
    stdin = request.stdin.replace(b"Q" * 64, key) if leaked else request.stdin
    sandbox.exec(request.argv, stdin=stdin, timeout=request.timeout)
    found = sandbox.read_file("found-keys").decode().split()
    assert (key.decode() in found) == leaked, found[:5]


@pytest.mark.slow
def test_cheats_score_zero_in_shared_sandboxes() -> None:
    """Several completions at once per sandbox: some run warm, those that find the template
    busy run the cold way."""
    from sandboxkit.rewards import assert_tests_reward

    cheats = [*NAME_CHEATS.values(), *RECORD_CHEATS.values()] * 2
    reward = assert_tests_reward("subprocess", timeout=5, pool_size=1, per_sandbox=4)
    try:
        right = "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n"
        scores = reward(
            prompts=[""] * (len(cheats) + 1),
            completions=[right, *cheats],
            test_list=[EVENS_TESTS] * (len(cheats) + 1),
        )
    finally:
        reward.close()
    assert scores == [1.0] + [0.0] * len(cheats)


def test_records_that_are_not_the_runners_never_count(sandbox: Sandbox) -> None:
    """Whatever path a writer finds to the exec's stdout (a weaker tier, another backend),
    records it writes are not sealed with the exec's key and do not count."""
    harness = AssertTests(EVENS_TESTS, timeout=5)
    request = harness.request(EVENS_WRONG)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    forged = "".join(f'{{"test": {i}, "status": "passed"}}\n' for i in range(5))
    replayed = "".join(
        line.partition(" ")[0] + ' {"test": 0, "status": "passed"}\n'
        for line in result.stdout.splitlines()
    )
    for extra in (forged, replayed, forged + '{"done": true}\n'):
        tampered = ExecResult(0, stdout_bytes=(result.stdout + extra).encode())
        assert harness.judge(tampered, request).passed == 0
    other = harness.request(EVENS_WRONG)  # the same records under another exec's key
    assert harness.judge(result, other).kind is OutcomeKind.ERROR


def test_a_forged_full_disk_record_neither_retries_nor_excuses_a_program(
    sandbox: Sandbox,
) -> None:
    """A pool judges a completion again on another sandbox when the runner says the disk is
    full before the build. A wrong program that writes that record (to its stdout, its stderr,
    the exec's stdout where a weaker path reaches it, with a replayed seal) is still judged
    wrong where it ran: not retried, not an ``infra`` outcome."""
    line = '{"load_error": "the sandbox\'s disk is full", "build": "sandbox"}'
    program = f"import sys\nprint({line!r})\nprint({line!r}, file=sys.stderr)\nprint(4)\n"
    harness = StdioTests([("1 2", "3")], timeout=5)
    request = harness.request(program)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    seal = result.stdout.splitlines()[0].partition(" ")[0]
    for extra in ("", f"{line}\n", f"{seal} {line}\n"):
        tampered = ExecResult(0, stdout_bytes=(result.stdout + extra).encode())
        assert spent(tampered, request) is None
        outcome = harness.judge(tampered, request)
        assert outcome.kind is OutcomeKind.FAILED and outcome.passed == 0, outcome


def test_long_results_do_not_overflow_the_judges_channel(sandbox: Sandbox) -> None:
    """150 calls returning 10,000 characters each: 1.5 MB of values, past the 1 MiB cap."""
    code = "def echo(n):\n    return 'x' * n + str(n)\n"
    args = [(10_000 + i,) for i in range(150)]
    harness = FunctionTests("echo", args, ["x" * n + str(n) for (n,) in args], timeout=5)
    outcome = judge(sandbox, harness, code)
    assert outcome.kind is OutcomeKind.PASSED and outcome.passed == 150, outcome
    wrong = judge(sandbox, harness, code.replace("str(n)", "str(n + 1)"))
    assert wrong.passed == 0, wrong
    cases = [(str(n), "x" * n) for n in range(10_000, 10_150)]
    program = "print('x' * int(input()))\n"
    assert judge(sandbox, StdioTests(cases, timeout=5), program).passed == 150


@pytest.mark.slow
def test_time_limits_are_cpu_time_with_a_wall_clock_backstop(sandbox: Sandbox) -> None:
    """Under CPU hogs on every core, a program that needs 1 s of CPU per test still passes a
    5 s limit; one that spins fails on CPU time, one that sleeps on the wall-clock backstop."""
    import os
    import subprocess
    import sys

    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        busy = (
            "import time\ndef slow_add(a, b):\n    start = time.process_time()\n"
            "    while time.process_time() - start < 1:\n        pass\n    return a + b\n"
        )
        harness = AssertTests(["assert slow_add(2, 3) == 5", "assert slow_add(1, 1) == 2"])
        outcome = judge(sandbox, harness, busy)
        assert outcome.kind is OutcomeKind.PASSED, outcome
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    tests = AssertTests(["assert slow_add(2, 3) == 5"], timeout=1)
    spins = judge(sandbox, tests, "def slow_add(a, b):\n    while True:\n        pass\n")
    assert spins.kind is OutcomeKind.TIMEOUT and "1s of CPU time" in spins.detail, spins
    sleeps = judge(sandbox, tests, "import time\ndef slow_add(a, b):\n    time.sleep(60)\n")
    assert sleeps.kind is OutcomeKind.TIMEOUT and "wall-clock" in sleeps.detail, sleeps


# -- banned patterns: Daytona's sort task, dodged as a policy would dodge a substring check ----

SORT_TASK = FunctionTask(
    prompt="def sort_numbers(xs: list[int]) -> list[int]:\n",
    func_name="sort_numbers",
    tests=["[3, 1, 2]", "[random.randint(-100, 100) for _ in range(20)]", "[5, 5, 1]"],
    reference=sorted,
    banned_patterns=["sorted(", ".sort("],
)
INSERTION_SORT = (
    "    out = []\n    for x in xs:\n        i = 0\n"
    "        while i < len(out) and out[i] < x:\n            i += 1\n"
    "        out.insert(i, x)\n    return out\n"
)
SORT_DODGES = {
    "an alias": "    s = sorted\n    return s(xs)\n",
    "fullwidth letters": "    return \uff53\uff4f\uff52\uff54\uff45\uff44(xs)\n",
    "getattr with a computed name": (
        "    out = list(xs)\n    getattr(out, 'so' + 'rt')()\n    return out\n"
    ),
    "getattr on __builtins__": "    return getattr(__builtins__, 'sor' + 'ted')(xs)\n",
    "the builtins module's namespace": (
        "    import builtins\n    return vars(builtins)['sor' + 'ted'](xs)\n"
    ),
    "globals()": (
        "    b = globals()['__builtins__']\n"
        "    return (b if isinstance(b, dict) else b.__dict__)['sor' + 'ted'](xs)\n"
    ),
    "eval": "    return eval('sor' + 'ted')(xs)\n",
    "importlib": (
        "    import importlib\n"
        "    return importlib.import_module('builtins').__dict__['sor' + 'ted'](xs)\n"
    ),
    "operator.methodcaller": (
        "    import operator\n    out = list(xs)\n"
        "    operator.methodcaller('so' + 'rt')(out)\n    return out\n"
    ),
    "a class __dict__": "    out = list(xs)\n    list.__dict__['so' + 'rt'](out)\n    return out\n",
    "another module's builtins": (
        "    import reprlib\n    f = reprlib.builtins.sorted\n    return f(xs)\n"
    ),
    "pydoc.locate": "    from pydoc import locate\n    return locate('sor' + 'ted')(xs)\n",
    "a string.Formatter": (
        "    import string\n    out = list(xs)\n\n    class F(string.Formatter):\n"
        "        def format_field(self, value, spec):\n"
        "            value()\n            return ''\n\n"
        "    F().format('{0.so' + 'rt}', out)\n    return out\n"
    ),
    "timeit running text": (
        "    import timeit\n    ns = {'xs': xs, 'out': []}\n"
        "    timeit.timeit('out.extend(sor' + 'ted(xs))', globals=ns, number=1)\n"
        "    return ns['out']\n"
    ),
    "another Python": (
        "    import json, subprocess, sys\n"
        "    code = 'import json, sys; print(json.dumps(sor' + 'ted(json.loads(sys.argv[1]))))'\n"
        "    run = subprocess.run([sys.executable, '-c', code, json.dumps(xs)],\n"
        "                         capture_output=True, text=True)\n"
        "    return json.loads(run.stdout)\n"
    ),
}


def task_scores(
    task: FunctionTask, bodies: dict[str, str], path: str, **options: Any
) -> dict[str, float | None]:
    """Each body's reward from ``function_tests_reward`` on the local backend's ``path``."""
    from sandboxkit import get_backend

    with get_backend("subprocess", warm=path == "warm") as client:
        reward = function_tests_reward([task], backend=client, pool_size=1, timeout=10, **options)
        try:
            scores = reward([task.prompt] * len(bodies), list(bodies.values()))
        finally:
            reward.close()
    return dict(zip(bodies, scores, strict=True))


@pytest.mark.parametrize("per_sandbox", [1, 2])
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_banned_patterns_cannot_be_dodged(path: str, per_sandbox: int) -> None:
    """Daytona's rule gives banned code -1.0; each dodge scored 1.0 under the substring check."""
    bodies = {"honest": INSERTION_SORT, "wrong": "    return xs[::-1]\n", **SORT_DODGES}
    got = task_scores(SORT_TASK, bodies, path, per_sandbox=per_sandbox)
    assert got.pop("honest") == 1.0
    assert got.pop("wrong") == pytest.approx(1 / 3)  # right for [5, 5, 1] only
    assert got == dict.fromkeys(SORT_DODGES, -1.0)


def test_function_task_names_bans_for_the_ast_check() -> None:
    task = FunctionTask(
        "def total(xs):\n", "total", ["[1, 2]"], sum, banned_names=["sum"], derive_bans=False
    )
    assert task.bans() == (("sum",), (), ())
    assert SORT_TASK.bans() == (("sorted",), ("sorted", "sort"), ())
    assert replace(SORT_TASK, derive_bans=False).bans() == ((), (), ())
    reward = function_tests_reward([task], backend="subprocess", pool_size=1)
    try:
        scores = reward([task.prompt] * 2, ["    f = sum\n    return f(xs)\n", "    return 3\n"])
    finally:
        reward.close()
    assert scores == [-1.0, 1.0]


_RIGHT_OUTPUT = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b, flush=True)\n"
EXIT_STATUS_CHEATS = {
    # The status comes from the zygote, the program's parent: silence it, freeze it or forge it.
    "kill the zygote, then exit 3": _RIGHT_OUTPUT
    + "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(3)\n",
    "stop the zygote, then exit 3": _RIGHT_OUTPUT
    + "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nos._exit(3)\n",
    "write 0 to every fd of the zygote, then exit 3": _RIGHT_OUTPUT
    + "import os\n"
    + "for name in os.listdir(f'/proc/{os.getppid()}/fd'):\n"
    + "    try:\n"
    + "        fd = os.open(f'/proc/{os.getppid()}/fd/{name}', os.O_WRONLY)\n"
    + "        os.write(fd, b'0')\n"
    + "    except OSError:\n"
    + "        pass\n"
    + "os._exit(3)\n",
    "a child exits 0 for it, the program dies by a signal": _RIGHT_OUTPUT
    + "import os, signal\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\n"
    + "os.kill(os.getpid(), signal.SIGKILL)\n",
    "shadow os._exit and sys.exit in the runner's view": _RIGHT_OUTPUT
    + "import os, sys\n_real = os._exit\nos._exit = lambda code: _real(0)\n"
    + "sys.exit = lambda code=0: _real(0)\nraise SystemExit(3)\n",
}


@pytest.mark.parametrize(
    "cheat",
    [
        pytest.param(name, marks=pytest.mark.slow) if "stop" in name else name
        for name in EXIT_STATUS_CHEATS
    ],
)
def test_a_program_cannot_forge_or_silence_its_exit_status(sandbox: Sandbox, cheat: str) -> None:
    """Right output with a failing end is a runtime error on every test, whatever the program
    does to the zygote that reports its status or to the names the runner ends it with; a
    frozen zygote costs the wall-clock backstop of each test, as a sleeping program does."""
    harness = StdioTests(
        [(f"{a} {b}", str(e)) for (a, b), e in zip(ARGS, EXPECTED, strict=True)], timeout=1
    )
    assert judge(sandbox, harness, _RIGHT_OUTPUT).passed == 3  # the honest baseline
    outcome = judge(sandbox, harness, EXIT_STATUS_CHEATS[cheat])
    assert outcome.passed == 0, outcome


def test_work_in_a_child_process_cannot_dodge_a_calls_time_limit(sandbox: Sandbox) -> None:
    """A call's time limit is its process's CPU time: a function that did its work in a child
    it waits for would pass a test it should time out on. Calls start threads, not processes:
    the fork fails and so does the call."""
    slow_in_a_child = (
        "import os\n"
        "def add(a, b):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        n = 0\n"
        "        for _ in range(10**9): n += 1\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    return a + b\n"
    )
    harness = FunctionTests("add", [(1, 2)], [3], timeout=1)
    outcome = judge(sandbox, harness, slow_in_a_child)
    assert outcome.kind is OutcomeKind.FAILED and outcome.passed == 0, outcome
    assert "BlockingIOError" in outcome.detail or "Resource temporarily" in outcome.detail, outcome


# -- a function-body continuation that reaches module level ------------------------------------

DOUBLE_TASK = FunctionTask(
    prompt="def double(x: int) -> int:\n",
    func_name="double",
    tests=["2", "-7", "10"],
    reference=lambda x: 2 * x,
)
REBINDINGS = {
    "a form feed after the indentation": "    \fdouble = lambda x: 2 * x\n",
    "a form feed after a tab": "\t\fdouble = lambda x: 2 * x\n",
    "a form feed after a carriage return": "\r  \fdouble = lambda x: 2 * x\r",
    "a form feed before a def": "    \fdef double(x):\n        return 2 * x\n",
}


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_a_continuation_cannot_rebind_its_function_at_module_level(path: str) -> None:
    """Each rebinding ran at load time under the line heuristic and scored 1.0."""
    wrong = "    return x * 3\n"
    bodies = {"wrong": wrong, **{k: wrong + v for k, v in REBINDINGS.items()}}
    assert task_scores(DOUBLE_TASK, bodies, path) == dict.fromkeys(bodies, 0.0)


# -- bans that hold whatever the route: Daytona's sorting task, and the run-time enforcement -----


def _daytona_sorting() -> FunctionTask:
    """The sorting task of ``examples/daytona_trl`` (bans ``sorted(``, ``.sort(``, ``heapq``,
    ``import `` and ``__import__``; the honest wrong ``xs[::-1]`` scores 0.2)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "daytona_trl" / "tasks.py"
    spec = importlib.util.spec_from_file_location("daytona_tasks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task: FunctionTask = module.TASKS["sorting"]
    return task


DAYTONA_SORTING = _daytona_sorting()
DAYTONA_ROUTES = {
    "a list subclass's __match_args__": (
        "    class L(list):\n        __match_args__ = ('so' + 'rt',)\n"
        "    out = L(xs)\n    match out:\n        case L(f):\n            f()\n"
        "    return list(out)\n"
    ),
    "__match_args__ and a metaclass __instancecheck__ reaching print.__self__": (
        "    class Any(type):\n        def __instancecheck__(cls, obj):\n            return True\n"
        "    class Owner(metaclass=Any):\n        __match_args__ = ('__se' + 'lf__',)\n"
        "    class Sorter(metaclass=Any):\n        __match_args__ = ('sor' + 'ted',)\n"
        "    match print:\n        case Owner(b):\n            match b:\n"
        "                case Sorter(f):\n                    return f(xs)\n"
    ),
    "a metaclass __instancecheck__ handed print.__self__": (
        "    class Grab(type):\n        def __instancecheck__(cls, obj):\n"
        "            cls.seen = obj\n            return True\n"
        "    class Sorter(metaclass=Grab):\n        __match_args__ = ('sor' + 'ted',)\n"
        "    class Owner(metaclass=Grab):\n        __match_args__ = ('__se' + 'lf__',)\n"
        "    match len:\n        case Owner(b):\n            isinstance(b, Sorter)\n"
        "    match Sorter.seen:\n        case Sorter(f):\n            return f(xs)\n"
    ),
    "an import with tabs": (
        "    from\tbisect\timport\tinsort\n    out = []\n    for x in xs:\n        insort(out, x)\n"
        "    return out\n"
    ),
    "an import with a tab after the module": (
        "    import\tbisect as b\n    out = []\n    for x in xs:\n        b.insort(out, x)\n"
        "    return out\n"
    ),
    "an import over a backslash": (
        "    from bisect import\\\n        insort\n    out = []\n    for x in xs:\n"
        "        insort(out, x)\n    return out\n"
    ),
    "xmlrpc's resolver on reprlib": (
        "    from\txmlrpc.server\timport\tresolve_dotted_attribute as r\n    import\treprlib\n"
        "    return r(reprlib, 'built' + 'ins.sor' + 'ted', True)(xs)\n"
    ),
    "xmlrpc's resolver on a list": (
        "    from\txmlrpc.server\timport\tresolve_dotted_attribute as r\n    out = list(xs)\n"
        "    r(out, 'so' + 'rt')()\n    return out\n"
    ),
    "singledispatch evaluating a string annotation": (
        "    from\tfunctools\timport\tsingledispatch\n\n    @singledispatch\n"
        "    def g(x):\n        return x\n\n"
        "    @g.register\n"
        "    def _(x: \"[globals().__setitem__('S', print.__self__.sorted), list][1]\"):\n"
        "        return x\n\n    return S(xs)\n"
    ),
    "singledispatchmethod evaluating a string annotation": (
        "    from\tfunctools\timport\tsingledispatchmethod\n\n    class K:\n"
        "        @singledispatchmethod\n        def g(self, x):\n            return x\n\n"
        "        @g.register\n"
        "        def _(self, x: \"[globals().__setitem__('S', list.sort), list][1]\"):\n"
        "            return x\n\n    out = list(xs)\n    S(out)\n    return out\n"
    ),
    "enum sorting in place, its call site specialized before the patch": (
        "    from\tenum\timport\tEnum\n    out = list(xs)\n"
        "    Enum._generate_next_value_('a', 1, len(out), out)\n    return out\n"
    ),
    "a module written at run time": (
        "    import\tsys\n    with open('/tmp/sk_sort_dyn.py', 'w') as f:\n"
        "        f.write('def go(xs):\\n    return sor' + 'ted(xs)\\n')\n"
        "    sys.path.insert(0, '/tmp')\n    from\tsk_sort_dyn\timport\tgo\n    return go(xs)\n"
    ),
    "a module written at run time, sorting in place": (
        "    import\tsys\n    with open('/tmp/sk_sort_dyn2.py', 'w') as f:\n"
        "        f.write('def go(xs):\\n    out = list(xs)\\n    out.so' + 'rt()\\n'\n"
        "                '    return out\\n')\n"
        "    sys.path.insert(0, '/tmp')\n    from\tsk_sort_dyn2\timport\tgo\n    return go(xs)\n"
    ),
}
MERGE_SORT = (
    "    if len(xs) <= 1:\n        return list(xs)\n    half = len(xs) // 2\n"
    "    left, right = sort_numbers(xs[:half]), sort_numbers(xs[half:])\n"
    "    out = []\n    i = j = 0\n    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n            out.append(left[i])\n            i += 1\n"
    "        else:\n            out.append(right[j])\n            j += 1\n"
    "    return out + left[i:] + right[j:]\n"
)
HONEST_SORTS = {"insertion sort": INSERTION_SORT, "merge sort": MERGE_SORT}


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_bans_hold_whatever_the_route(path: str) -> None:
    """Each route scored 1.0 past the substring and AST checks; honest sorts keep theirs."""
    bodies = {**HONEST_SORTS, "wrong": "    return xs[::-1]\n", **DAYTONA_ROUTES}
    assert task_scores(DAYTONA_SORTING, bodies, path) == {
        **dict.fromkeys(HONEST_SORTS, 1.0),
        "wrong": 0.2,
        **dict.fromkeys(DAYTONA_ROUTES, -1.0),
    }


RUNTIME_ONLY = {
    "the builtins module reloaded": (
        "    from\txmlrpc.server\timport\tresolve_dotted_attribute as r\n    import\tsys\n"
        "    r(sys, 'mod' + 'ules', True).pop('built' + 'ins')\n    import\treprlib\n"
        "    return r(reprlib, 'built' + 'ins.sor' + 'ted', True)(xs)\n"
    ),
    "gc finding the original": (
        "    import gc\n    for d in gc.get_referrers(len):\n"
        "        if type(d) is dict and 'sor' + 'ted' in d:\n"
        "            return d['sor' + 'ted'](xs)\n"
    ),
    "ctypes calling the C sort": (
        "    import ctypes\n    out = list(xs)\n"
        "    ctypes.pythonapi.PyList_Sort(ctypes.py_object(out))\n    return out\n"
    ),
    "a subinterpreter's fresh builtins": (
        "    import _xxsubinterpreters as s\n    s.create()\n    return list(xs)\n"
    ),
    "a process started below subprocess's audit event": (
        "    import _posixsubprocess\n" + INSERTION_SORT
    ),
    "heapq reloaded, its sifts sorting": (
        "    import heapq, importlib\n    importlib.reload(heapq)\n    h = []\n"
        "    for x in xs:\n        h.append(x)\n        heapq._siftdown(h, 0, len(h) - 1)\n"
        "    out = []\n    while h:\n        last = h.pop()\n        if h:\n"
        "            out.append(h[0])\n            h[0] = last\n            heapq._siftup(h, 0)\n"
        "        else:\n            out.append(last)\n    return out\n"
    ),
    "a forged code object": (
        "    f = lambda: 0\n    f.__code__.replace(co_name='x')\n    return list(xs)\n"
    ),
    "exec of built text": "    return eval('sor' + 'ted')(xs)\n",
    "a function that takes the import system's name, called by the runner": (
        INSERTION_SORT + "ns = {}\nexec(compile(\n"
        "    'def go(xs):\\n    import ctypes\\n    out = list(xs)\\n'\n"
        "    '    ctypes.pythonapi.PyList_Sort(ctypes.py_object(out))\\n'\n"
        "    '    return out\\n', '<frozen importlib._bootstrap>', 'exec'), ns)\n"
        "sort_numbers = ns['go']\n"
    ),
    "the hook's globals and builtins rebound first": (
        INSERTION_SORT + "import __main__, builtins\n"
        "for name in ('PROCESS_EVENTS', 'HEAP_EVENTS', 'UNAUDITED_MODULES', 'BAN_KEYS'):\n"
        "    setattr(__main__, name, frozenset())\n"
        "__main__.banned_source = lambda *args: ''\n"
        "builtins.id = builtins.issubclass = lambda *args: 0\n"
        "import gc\ngc.get_referrers(len)\n"
    ),
    "the stub caught and an own sort after": (
        "    try:\n        return getattr(print, '__se' + 'lf__').sorted(xs)\n"
        "    except BaseException:\n        pass\n" + INSERTION_SORT
    ),
}


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_the_run_time_enforcement_alone_holds_against_every_dodge(path: str) -> None:
    """No AST check here: the harness runs each dodge with the task's bans, and each ends
    banned in the candidate's own process (``import`` stays allowed: the keyword is the host
    check's)."""
    from sandboxkit import get_backend

    names, attributes, modules = DAYTONA_SORTING.bans()
    bans = (names, attributes, tuple(m for m in modules if m != "*"))
    harness = replace(DAYTONA_SORTING.harness(10), bans=bans)
    bodies = {**HONEST_SORTS, **SORT_DODGES, **DAYTONA_ROUTES, **RUNTIME_ONLY}
    with get_backend("subprocess", warm=path == "warm") as client, client.sandbox() as sb:
        kinds = {
            name: judge(sb, harness, DAYTONA_SORTING.prompt + body).kind
            for name, body in bodies.items()
        }
    import_routes = {k for k in DAYTONA_ROUTES if "import" in k}
    assert kinds == {
        **dict.fromkeys(HONEST_SORTS, OutcomeKind.PASSED),
        **dict.fromkeys(SORT_DODGES, OutcomeKind.BANNED),
        **{
            k: OutcomeKind.PASSED if k in import_routes else OutcomeKind.BANNED
            for k in DAYTONA_ROUTES
        },
        **dict.fromkeys(RUNTIME_ONLY, OutcomeKind.BANNED),
    }


def test_a_ban_reached_at_load_time_or_inside_a_test_is_banned_in_assert_tests(
    sandbox: Sandbox,
) -> None:
    """The assert harness takes the same bans; a test that catches the ban is still banned."""
    tests = ["assert f([2, 1]) == [1, 2]", "try:\n    f([3])\nexcept BaseException:\n    pass"]
    harness = AssertTests(tests, timeout=5, bans=(("sorted",), ("sort",), ()))
    loading = (
        "import builtins\nS = getattr(builtins, 'sor' + 'ted')\nS([1])\ndef f(xs):\n    return xs\n"
    )
    calling = "def f(xs):\n    out = list(xs)\n    getattr(out, 'so' + 'rt')()\n    return out\n"
    honest = "def f(xs):\n    return [min(xs)] + [x for x in xs if x != min(xs)]\n"
    assert judge(sandbox, harness, loading).kind is OutcomeKind.BANNED
    assert judge(sandbox, harness, calling).kind is OutcomeKind.BANNED
    assert judge(sandbox, harness, honest).kind is OutcomeKind.PASSED
    assert judge(sandbox, replace(harness, bans=((), (), ())), calling).kind is OutcomeKind.PASSED


def test_silencing_the_report_fails_the_test_it_was_silenced_in(sandbox: Sandbox) -> None:
    """A candidate that points every descriptor elsewhere before a banned call cannot be told
    banned, nor answer: its process ends, and the test with it."""
    names, attributes, _ = DAYTONA_SORTING.bans()
    harness = replace(DAYTONA_SORTING.harness(10), bans=(names, attributes, ()))
    body = (
        "    import os\n    for fd in range(3, 256):\n        try:\n"
        "            os.dup2(0, fd)\n        except OSError:\n            pass\n"
        "    return getattr(print, '__se' + 'lf__').sorted(xs)\n"
    )
    outcome = judge(sandbox, harness, DAYTONA_SORTING.prompt + body)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.FAILED, 0)
    assert "ended during a call" in outcome.detail
