"""Real programs trying to raise their own score, against every harness.

The task: ``add(a, b)``. An honest wrong answer (``a - b``) passes none of the tests below; no
cheat may do better. Each cheat is a whole program; in the stdin/stdout harness the same trick
runs around a program that prints nothing useful.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandboxkit import Sandbox, SandboxClient
from sandboxkit.harness import AssertTests, FunctionTests, Harness, StdioTests
from sandboxkit.outcomes import Outcome, OutcomeKind

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


@pytest.fixture(scope="module", params=["warm", "cold"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """One sandbox per path: warm, each exec is forked from the template that received the
    request (it must not pass the tests on to the candidate); cold, one bwrap per exec."""
    from sandboxkit import get_backend

    client: SandboxClient = get_backend("subprocess", warm=request.param == "warm")
    with client.sandbox(tags=["test-cheats"]) as sb:
        yield sb


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
