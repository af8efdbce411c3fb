"""Hostile programs in every language meet the containment Python programs meet: each ends with
the verdict a contest judge gives it, within its test's limits (never the exec's much longer
timeout), and never with more passed tests than it earned; on the warm path (each exec forked
from the sandbox's template) and the cold one (one bwrap per exec). A language the sandbox
lacks is the provider's problem, said as such, never a 0.0 for the model's code."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sandboxkit import Sandbox, get_backend
from sandboxkit.contest import languages
from sandboxkit.contest.languages import Language, language_for, register_language
from sandboxkit.errors import CircuitOpenError
from sandboxkit.harness import AssertTests, StdioTests
from sandboxkit.local.isolation import namespaces_failure
from sandboxkit.local.uids import sandbox_uids
from sandboxkit.outcomes import Outcome, OutcomeKind, Verdict
from sandboxkit.portal import run_sync
from sandboxkit.rewards import stdio_tests_reward

pytestmark = pytest.mark.slow

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
BOUNDED = 60.0
"""Seconds a hostile run may take: its tests' own limits (a few seconds each) and a compile,
far below the exec's timeout (minutes, with the time a precompiled header may take)."""
SUM = ("1 2", "3")
SUM_CPP = (
    "#include <bits/stdc++.h>\n"
    "int main() { long long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }\n"
)


def needs(language: str) -> None:
    found = language_for(language)
    assert found is not None
    if shutil.which(found.toolchain, path=SANDBOX_PATH) is None:
        pytest.skip(f"{found.toolchain} for {found.title} is not installed ({found.install})")


def judge(
    sb: Sandbox,
    code: str,
    language: str,
    cases: list[tuple[str, str]] | None = None,
    *,
    timeout: float = 1.0,
    memory_mb: int = 256,
) -> Outcome:
    """``code`` judged on ``cases`` (by default one sum)."""
    needs(language)
    harness = StdioTests(cases or [SUM], timeout, language=language, memory_mb=memory_mb)
    request = harness.request(code)
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    return harness.judge(result, request)


@dataclass(frozen=True)
class Hostile:
    language: str
    code: str
    verdicts: tuple[Verdict, ...]
    """What a judge makes of it (two where either limit may come first)."""
    said: str = ""
    """Part of the outcome's detail: which limit, what the runtime said."""


HOSTILE = {
    "C++ fork bomb": Hostile(
        "cpp17", "#include <unistd.h>\nint main() { for (;;) fork(); }\n", (Verdict.TIME_LIMIT,)
    ),
    "C++ stdout flood": Hostile(
        "cpp17",
        "#include <cstdio>\n"
        "int main() { static char line[1 << 16]; for (char& c : line) c = 'y';\n"
        "  for (;;) fwrite(line, 1, sizeof line, stdout); }\n",
        (Verdict.OUTPUT_LIMIT,),
        "wrote more than 1048576 bytes",
    ),
    "C++ allocating past its memory limit": Hostile(
        "cpp17",
        "#include <cstring>\n#include <vector>\n"
        "int main() { std::vector<char*> kept;\n"
        "  for (;;) { char* p = new char[1 << 20]; std::memset(p, 1, 1 << 20);\n"
        "    kept.push_back(p); } }\n",
        (Verdict.MEMORY_LIMIT,),
        "bad_alloc",
    ),
    "C++ spinning in 16 threads": Hostile(
        "cpp17",
        "#include <thread>\n#include <vector>\n"
        "int main() { std::vector<std::thread> spin;\n"
        "  for (int i = 0; i < 16; i++)\n"
        "    spin.emplace_back([] { volatile unsigned long n = 0; for (;;) n++; });\n"
        "  for (auto& t : spin) t.join(); }\n",
        (Verdict.TIME_LIMIT,),
        "used more than 1s of CPU time",  # all threads' CPU time, before the wall-clock backstop
    ),
    "Java starting threads without end": Hostile(
        "java",
        "public class Main {\n"
        "    public static void main(String[] args) {\n"
        "        for (;;) new Thread(() -> {\n"
        "            try { Thread.sleep(1 << 30); } catch (InterruptedException e) {}\n"
        "        }).start();\n"
        "    }\n"
        "}\n",
        (Verdict.TIME_LIMIT,),
    ),
    "JavaScript infinite loop": Hostile(
        "javascript", "let n = 0;\nfor (;;) { n++; }\n", (Verdict.TIME_LIMIT,), "CPU time"
    ),
    "JavaScript holding memory outside V8's heap": Hostile(
        "javascript",
        "const kept = Buffer.alloc(600 << 20, 1);  // typed arrays: no --max-old-space-size\n"
        "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
        "console.log(a + b + kept[4096] - 1);\n",
        # Filling 600 MB after Node's start may pass 1 s of CPU on a loaded machine first.
        (Verdict.MEMORY_LIMIT, Verdict.TIME_LIMIT),
    ),
    "Java holding memory outside its heap": Hostile(
        "java",
        "import java.util.Scanner;\n"
        "public class Main {\n"
        "    public static void main(String[] args) throws Exception {\n"
        '        var field = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");\n'
        "        field.setAccessible(true);  // Unsafe: no -Xmx\n"
        "        var unsafe = (sun.misc.Unsafe) field.get(null);\n"
        "        long size = 600L << 20, kept = unsafe.allocateMemory(size);\n"
        "        unsafe.setMemory(kept, size, (byte) 1);\n"
        "        Scanner in = new Scanner(System.in);\n"
        "        int sum = in.nextInt() + in.nextInt();\n"
        "        System.out.println(sum + unsafe.getByte(kept + 4096) - 1);\n"
        "    }\n"
        "}\n",
        # Filling 600 MB after the JVM's start may pass 1 s of CPU on a loaded machine first.
        (Verdict.MEMORY_LIMIT, Verdict.TIME_LIMIT),
    ),
    "Go goroutine flood": Hostile(
        "go",
        "package main\n\nfunc main() {\n\tfor {\n\t\tgo func() { select {} }()\n\t}\n}\n",
        (Verdict.TIME_LIMIT, Verdict.MEMORY_LIMIT),
    ),
    "Rust stack overflow": Hostile(
        "rust",
        "use std::io::Read;\n"
        "fn down(depth: u64, trail: &mut Vec<u64>) -> u64 {\n"
        "    let here = [depth; 16];\n"
        "    trail.push(here[(depth % 16) as usize]);\n"
        "    if trail.len() as u64 == u64::MAX { return 0; }\n"
        "    let below = down(depth + 1, trail);\n"
        "    below + here[(below % 16) as usize]\n"
        "}\n"
        "fn main() {\n"
        "    let mut input = String::new();\n"
        "    std::io::stdin().read_to_string(&mut input).unwrap();\n"
        '    println!("{}", down(input.len() as u64, &mut Vec::new()));\n'
        "}\n",
        (Verdict.RUNTIME_ERROR,),  # its 256 MiB of stack do not make it a memory limit
        "stack overflow",
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_program_gets_its_verdict_within_its_limits(sandbox: Sandbox, name: str) -> None:
    """And leaves nothing behind: what it started dies with its exec, so the sandbox judges
    the next completion as before."""
    hostile = HOSTILE[name]
    outcome = judge(sandbox, hostile.code, hostile.language)
    assert outcome.verdict in hostile.verdicts, outcome
    assert outcome.passed == 0, outcome
    assert hostile.said in outcome.detail, outcome
    assert outcome.duration < BOUNDED, outcome
    assert judge(sandbox, SUM_CPP, "cpp17").verdict is Verdict.ACCEPTED


def test_threads_of_a_correct_program_start_under_the_memory_limit(sandbox: Sandbox) -> None:
    """glibc gives a thread a stack as large as the main thread's limit (256 MiB for a
    program), counted against the memory limit: without an epilogue lowering it, one
    ``std::thread`` or ``pthread_create`` failed (a runtime error, a memory limit)."""
    cpp = (
        "#include <bits/stdc++.h>\nusing namespace std;\n#define int long long\n"
        "signed main() { int a, b; cin >> a >> b; vector<thread> ts; vector<int> got(8);\n"
        "  for (int i = 0; i < 8; i++) ts.emplace_back([&, i] { got[i] = a + b; });\n"
        "  for (auto& t : ts) t.join(); cout << got[7] << endl; }\n"
    )
    c = (
        "#include <pthread.h>\n#include <stdio.h>\nlong long a, b, sum;\n"
        "void* add(void* unused) { sum = a + b; return 0; }\n"
        'int main(void) { scanf("%lld %lld", &a, &b); pthread_t t;\n'
        '  if (pthread_create(&t, 0, add, 0)) { perror("pthread_create"); return 1; }\n'
        '  pthread_join(t, 0); printf("%lld\\n", sum); return 0; }\n'
    )
    for code, language in ((cpp, "cpp17"), (c, "c")):
        outcome = judge(sandbox, code, language)
        assert outcome.verdict is Verdict.ACCEPTED, (language, outcome)


FIND_JUDGE = r"""
#include <bits/stdc++.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
using namespace std;
string read_all(const string& path, size_t cap = 1 << 22) {
    int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK);
    if (fd < 0) return "";
    string out; char buf[65536]; ssize_t n;
    while (out.size() < cap && (n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
    close(fd);
    return out;
}
long status_field(const string& status, const string& name) {
    size_t at = status.find("\n" + name + ":");
    return at == string::npos ? -1 : atol(status.c_str() + at + name.size() + 2);
}
// The judge: this program's grandparent (its parent is the zygote), found through /proc,
// whose numbering may be an outer pid namespace's; ``inner`` is its pid as kill() names it.
struct Judge { long outer = -1, inner = -1; };
Judge find_judge() {
    long zygote = status_field(read_all("/proc/self/status"), "PPid");
    Judge judge;
    judge.outer = status_field(read_all("/proc/" + to_string(zygote) + "/status"), "PPid");
    string status = read_all("/proc/" + to_string(judge.outer) + "/status");
    size_t at = status.find("NSpid:"), end = status.find('\n', at);
    if (at != string::npos) judge.inner = atol(status.substr(status.rfind('\t', end) + 1).c_str());
    return judge;
}
"""
SNOOP = (
    FIND_JUDGE
    + r"""
// Looks for an answer shaped "sk-answer-<32 hex>" in every process's environment, command
// line, memory and open files it can read, or (``files``) in every file under / but the
// system's (/usr, /proc, /sys, /dev) and its own descriptors and environment; prints it, or
// "nothing". Exits with a bitmask of what it could open of its judge.
string found;
void scan(const string& data) {
    // An answer is the prefix and 32 hex digits: this program's own text holds the prefix.
    for (size_t at = data.find("sk-answer-"); at != string::npos && found.empty();
         at = data.find("sk-answer-", at + 1)) {
        string candidate = data.substr(at, 42);
        if (candidate.size() == 42 &&
            candidate.find_first_not_of("0123456789abcdef", 10) == string::npos)
            found = candidate;
    }
}
void walk(const string& dir, int depth) {
    DIR* d = depth < 16 ? opendir(dir.c_str()) : nullptr;
    while (dirent* e = d ? readdir(d) : nullptr) {
        string name = e->d_name, path = (dir == "/" ? "" : dir) + "/" + name;
        if (name == "." || name == ".." || path == "/proc" || path == "/sys" || path == "/usr"
            || path == "/dev") continue;
        struct stat st;
        if (lstat(path.c_str(), &st)) continue;
        if (S_ISDIR(st.st_mode)) walk(path, depth + 1);
        else if (S_ISREG(st.st_mode) && st.st_size < (1 << 22)) scan(read_all(path));
    }
    if (d) closedir(d);
}
int main() {
    string mode;
    cin >> mode;
    int opened = 0;
    if (mode == "proc") {
        Judge judge = find_judge();
        if (judge.outer <= 0) return 64;
        string t = "/proc/" + to_string(judge.outer);
        if (open((t + "/mem").c_str(), O_RDONLY) >= 0) opened |= 1;
        if (open((t + "/fd/1").c_str(), O_WRONLY) >= 0) opened |= 2;  // its sealed records' way out
        if (!read_all(t + "/environ").empty()) opened |= 4;
        if (ptrace(PTRACE_ATTACH, judge.inner, 0, 0) == 0) opened |= 8;
        if (DIR* fds = opendir((t + "/fd").c_str())) { opened |= 16; closedir(fds); }
        DIR* d = opendir("/proc");
        while (dirent* e = d ? readdir(d) : nullptr) {
            if (!isdigit(e->d_name[0])) continue;
            string p = string("/proc/") + e->d_name;
            scan(read_all(p + "/environ"));
            scan(read_all(p + "/cmdline"));
            istringstream maps(read_all(p + "/maps"));
            int mem = open((p + "/mem").c_str(), O_RDONLY);
            for (string line; mem >= 0 && getline(maps, line);) {
                unsigned long lo, hi; char perm[5];
                if (sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perm) != 3) continue;
                if (perm[0] != 'r') continue;
                string chunk(min(hi - lo, 1UL << 24), '\0');
                ssize_t n = pread(mem, chunk.data(), chunk.size(), lo);
                if (n > 0) { chunk.resize(n); scan(chunk); }
            }
            if (mem >= 0) close(mem);
            DIR* fds = opendir((p + "/fd").c_str());
            while (dirent* f = fds ? readdir(fds) : nullptr)
                scan(read_all(p + "/fd/" + f->d_name, 1 << 16));
            if (fds) closedir(fds);
        }
    } else {
        walk("/", 0);
        for (int fd = 3; fd < 1024; fd++) {
            char buf[65536];
            ssize_t n = pread(fd, buf, sizeof buf, 0);
            if (n > 0) scan(string(buf, n));
        }
        for (char** e = environ; *e; e++) scan(*e);
    }
    cout << (found.empty() ? "nothing" : found) << endl;
    return opened;
}
"""
)


@pytest.fixture
def answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test's expected output, kept where a leaky sandbox would show it: a dataset file on
    the host and the host's environment (the judge never sends it into the sandbox)."""
    secret = "sk-answer-" + secrets.token_hex(16)
    (tmp_path / "tests.json").write_text(f'[{{"input": "files", "output": "{secret}"}}]')
    monkeypatch.setenv("SANDBOXKIT_TEST_ANSWER", secret)
    return secret


def test_reading_proc_finds_neither_the_answer_nor_a_way_into_the_judge(
    sandbox: Sandbox, answer: str
) -> None:
    """Every process's environment, command line, memory and descriptors it can read, and
    its judge's memory, stdout, environment and ptrace: it finds no answer (a wrong answer,
    not accepted) and opens nothing of the judge (any of it would be a non-zero exit)."""
    outcome = judge(sandbox, SNOOP, "cpp17", [("proc", answer)], timeout=10.0)
    assert outcome.verdict is Verdict.WRONG_ANSWER, outcome


def test_searching_files_and_descriptors_never_finds_the_answer(
    sandbox: Sandbox, answer: str
) -> None:
    """The search does find an answer the sandbox holds (a file planted in its workspace: the
    program is accepted), and never the one that stays on the host."""
    sandbox.write_file("planted.txt", answer)
    outcome = judge(sandbox, SNOOP, "cpp17", [("files", answer)], timeout=10.0)
    assert outcome.verdict is Verdict.ACCEPTED, outcome
    sandbox.exec(["rm", "planted.txt"])
    outcome = judge(sandbox, SNOOP, "cpp17", [("files", answer)], timeout=10.0)
    assert outcome.verdict is Verdict.WRONG_ANSWER, outcome


TURNS_ON_ITS_JUDGE = (
    FIND_JUDGE
    + r"""
#include <linux/sockios.h>
#include <sys/ioctl.h>
int main() {
    long long a, b;
    cin >> a >> b;
    cout << a + b << endl;  // right every time, but past the first test it turns on its judge
    if (a == 1) return 0;
    Judge judge = find_judge();
    if (judge.inner <= 0) return 64;
"""
)
"""The start of a program that answers each test right, then, past the first, turns on its
judge (the rest of ``main`` follows)."""
KILLER = (
    TURNS_ON_ITS_JUDGE
    + r"""
    // Each must fail: any that reaches its target makes this a runtime error.
    if (kill(judge.inner, SIGNAL) == 0 || kill(getppid(), SIGNAL) == 0) return 3;
    if (kill(-1, SIGNAL) == 0 || kill(0, SIGNAL) == 0) return 4;
    if (syscall(SYS_tkill, judge.inner, SIGNAL) == 0) return 5;
    if (syscall(SYS_tgkill, judge.inner, judge.inner, SIGNAL) == 0) return 6;
    return kill(getpid(), 0) == 0 ? 0 : 7;  // itself it may signal
}
"""
)


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGTERM", "SIGSTOP"])
def test_a_program_cannot_signal_its_judge(sandbox: Sandbox, signal: str) -> None:
    """The judge shares the program's user and pid namespace: a signal would kill it (tests
    never judged) or stop it (the sandbox held until the exec's timeout). A program may signal
    only itself; the rest fails with EPERM and every test is judged, in its time."""
    cases = [("1 1", "2"), ("2 2", "4"), ("3 3", "6"), ("4 4", "8")]
    outcome = judge(sandbox, KILLER.replace("SIGNAL", signal), "cpp17", cases)
    assert outcome.verdict is Verdict.ACCEPTED and outcome.passed == 4, outcome
    assert outcome.duration < BOUNDED, outcome
    assert judge(sandbox, SUM_CPP, "cpp17").verdict is Verdict.ACCEPTED


OWNER_SIGNALLER = (
    TURNS_ON_ITS_JUDGE
    + r"""
    // The kernel signals a descriptor's owner when it is ready: each way of naming the judge
    // the owner must fail (a pipe made ready, and the stdin socket the judge writes to). The
    // exit status says which did not (a runtime error), if the judge lives to read it.
    int p[2], got = 0;
    if (pipe(p) != 0) return 65;
    for (int fd : {p[0], 0}) {
        struct f_owner_ex owner = {F_OWNER_PID, (pid_t)judge.inner};
        int pid = judge.inner, group = -judge.inner;
        if (ioctl(fd, SIOCSPGRP, &group) == 0) got |= 1;
        if (ioctl(fd, FIOSETOWN, &pid) == 0) got |= 2;
        if (fcntl(fd, F_SETOWN_EX, &owner) == 0) got |= 4;
        if (fcntl(fd, F_SETOWN, judge.inner) == 0) got |= 8;
        if (fcntl(fd, F_SETSIG, SIGNAL) == 0) got |= 16;
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0) return 66;
    }
    if (write(p[1], "x", 1) != 1) return 67;
    return got;
}
"""
)
TURNS_ON_ITS_JUDGE_PY = """
import fcntl, os, resource, signal, struct, sys
a, b = map(int, sys.stdin.readline().split())
print(a + b, flush=True)
if a != 1:
    def field(pid, name):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(name + ":"):
                return line.split()[1:]
    # Found as FIND_JUDGE finds it: /proc may number processes in an outer pid namespace.
    judge = int(field(field(field("self", "PPid")[0], "PPid")[0], "NSpid")[-1])
"""
"""``TURNS_ON_ITS_JUDGE`` in Python: the rest runs past the first test, with ``judge``."""
OWNER_SIGNALLER_PY = (
    TURNS_ON_ITS_JUDGE_PY
    + """\
    r, w = os.pipe()
    got = 0
    for fd in (r, 0):
        attempts = {
            1: lambda: fcntl.ioctl(fd, 0x8902, struct.pack("i", -judge)),  # SIOCSPGRP
            2: lambda: fcntl.ioctl(fd, 0x8901, struct.pack("i", judge)),  # FIOSETOWN
            4: lambda: fcntl.fcntl(fd, 15, struct.pack("ii", 1, judge)),  # F_SETOWN_EX, PID
            8: lambda: fcntl.fcntl(fd, fcntl.F_SETOWN, judge),
            16: lambda: fcntl.fcntl(fd, 10, signal.SIGNAL),  # F_SETSIG
        }
        for bit, attempt in attempts.items():
            try:
                attempt()
                got |= bit
            except OSError:  # EPERM: the filter; ENOTTY: no socket
                pass
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
    sys.exit(got)
"""
)


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("language", ["cpp17", "python"])
def test_a_program_cannot_make_the_kernel_signal_its_judge(
    sandbox: Sandbox, signal: str, language: str
) -> None:
    """``fcntl(F_SETOWN)`` (or ``F_SETOWN_EX``, ``FIOSETOWN``, ``SIOCSPGRP``) with ``F_SETSIG``
    and ``O_ASYNC`` would have the kernel send any signal to the judge when a descriptor is
    ready: each fails with EPERM, every test is judged in its time, and the sandbox judges
    the next completion."""
    cases = [("1 1", "2"), ("2 2", "4"), ("3 3", "6"), ("4 4", "8")]
    code = OWNER_SIGNALLER if language == "cpp17" else OWNER_SIGNALLER_PY
    outcome = judge(sandbox, code.replace("SIGNAL", signal), language, cases)
    assert (outcome.verdict, outcome.passed) == (Verdict.ACCEPTED, 4), outcome
    assert outcome.duration < BOUNDED, outcome
    assert judge(sandbox, SUM_CPP, "cpp17").verdict is Verdict.ACCEPTED


CREDENTIAL_PROBE = (
    TURNS_ON_ITS_JUDGE
    + r"""
    // Calls no syscall filter stops, which the kernel allows only between processes of the
    // same uid: reading and setting the judge's limits (a lower RLIMIT_NOFILE or RLIMIT_CPU
    // would end it), its priority and its CPUs. Each that works is a bit of the exit status.
    int got = 0;
    struct rlimit limit;
    if (prlimit(judge.inner, RLIMIT_NOFILE, NULL, &limit) == 0) got |= 1;
    if (got & 1 && prlimit(judge.inner, RLIMIT_NOFILE, &limit, NULL) == 0) got |= 2;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, judge.inner);
    if (errno == 0 && setpriority(PRIO_PROCESS, judge.inner, nice) == 0) got |= 4;
    cpu_set_t cpus;
    if (sched_getaffinity(judge.inner, sizeof cpus, &cpus) == 0 &&
        sched_setaffinity(judge.inner, sizeof cpus, &cpus) == 0) got |= 8;
    // Its own limits stay its own to read.
    return prlimit(0, RLIMIT_NOFILE, NULL, &limit) == 0 ? got : 99;
}
"""
).replace("#include <unistd.h>", "#include <unistd.h>\n#include <sys/resource.h>")
CREDENTIAL_PROBE_PY = (
    TURNS_ON_ITS_JUDGE_PY
    + """\
    got = 0
    attempts = {
        1: lambda: resource.prlimit(judge, resource.RLIMIT_NOFILE),
        2: lambda: resource.prlimit(
            judge, resource.RLIMIT_NOFILE, resource.prlimit(judge, resource.RLIMIT_NOFILE)
        ),
        4: lambda: os.setpriority(os.PRIO_PROCESS, judge, os.getpriority(os.PRIO_PROCESS, judge)),
        8: lambda: os.sched_setaffinity(judge, os.sched_getaffinity(judge)),
    }
    for bit, attempt in attempts.items():
        try:
            attempt()
            got |= bit
        except OSError:
            pass
    sys.exit(got if resource.prlimit(0, resource.RLIMIT_NOFILE) else 99)
"""
)


@pytest.mark.parametrize("language", ["cpp17", "python"])
def test_a_program_is_not_of_its_judges_uid(sandbox: Sandbox, language: str) -> None:
    """On a root host the judge runs as a host uid of its own (``local.judge``): calls that
    no syscall filter stops but the kernel allows only within one uid (the judge's limits,
    priority and CPUs) fail with EPERM, and every test is judged. Where a host has one uid
    for everything, only the filter keeps the program from signalling its judge."""
    if namespaces_failure() is not None or sandbox_uids() is None:
        pytest.skip("no uid of its own for the judge here (not root, or not namespaced)")
    cases = [("1 1", "2"), ("2 2", "4"), ("3 3", "6")]
    code = CREDENTIAL_PROBE if language == "cpp17" else CREDENTIAL_PROBE_PY
    outcome = judge(sandbox, code, language, cases)
    assert (outcome.verdict, outcome.passed) == (Verdict.ACCEPTED, 3), outcome


STOPS_ITS_JUDGE_ON_LOAD = {
    "kill": "os.kill(os.getppid(), signal.SIGNAL)",
    "F_SETOWN": (
        "r, w = os.pipe()\nfcntl.fcntl(r, 10, signal.SIGNAL)\n"
        "fcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())\n"
        "fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)\nos.write(w, b'x')"
    ),
    "FIOSETOWN": (
        "r, w = socket.socketpair()\nfcntl.ioctl(r, 0x8901, struct.pack('i', os.getppid()))\n"
        "fcntl.fcntl(r, 10, signal.SIGNAL)\nfcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC)\n"
        "w.send(b'x')"
    ),
}


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("route", list(STOPS_ITS_JUDGE_ON_LOAD))
def test_code_loaded_for_calls_cannot_signal_its_judge(
    sandbox: Sandbox, signal: str, route: str
) -> None:
    """Function-call tests load the candidate's code in the zygote, the judge's child, which
    then forks a process per call: the code's top level signals the judge (``kill``, or the
    kernel through a descriptor it owns) and fails with EPERM, an error of the code's; the
    judge ends at once, and the sandbox judges the next completion."""
    tests = AssertTests(["assert f() == 1"] * 3, timeout=1.0)
    attack = STOPS_ITS_JUDGE_ON_LOAD[route].replace("SIGNAL", signal)
    code = f"import fcntl, os, signal, socket, struct\n{attack}\ndef f():\n    return 1\n"
    request = tests.request(code)
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    outcome = tests.judge(result, request)
    assert (outcome.kind, outcome.passed) == (OutcomeKind.ERROR, 0), outcome
    assert outcome.detail == "PermissionError: [Errno 1] Operation not permitted"
    assert not result.timed_out and result.duration < BOUNDED, result
    request = tests.request("def f():\n    return 1\n")
    result = sandbox.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    assert tests.judge(result, request).passed == 3


POISON_HEADER = (
    "#include <bits/stdc++.h>\n"
    'static int poisoned = (std::puts("0"), std::fflush(stdout), std::_Exit(0), 0);\n'
)
"""Makes every program that includes it print 0 and stop."""
POISON = r"""
#include <bits/stdc++.h>
#include <filesystem>
namespace fs = std::filesystem;
// Writes poison.gch (in the sandbox's workspace: the program cannot start a compiler of its
// own, but a completion may carry or find the bytes) over every precompiled header it can
// find, in place (``in-place``), as new files renamed over them (``replace``), or as a new
// directory of them where the judge's would be (``plant``); prints how many it found, and
// how many it wrote.
int main() {
    std::string mode;
    std::cin >> mode;
    std::vector<fs::path> found;
    std::error_code ignored;
    for (auto& entry : fs::recursive_directory_iterator("/opt/sandboxkit/cache", ignored))
        if (entry.path().extension() == ".gch") found.push_back(entry.path());
    std::ostringstream read;  // whole, through the library (a byte at a time costs seconds)
    read << std::ifstream("poison.gch", std::ios::binary).rdbuf();
    std::string poison = read.str();
    int written = 0;
    for (auto& target : found) {
        if (mode == "replace") {
            fs::copy_file("poison.gch", target.string() + ".new", ignored);
            fs::rename(target.string() + ".new", target, ignored);
            written += !ignored;
        } else if (mode == "in-place") {
            std::ofstream out(target, std::ios::binary | std::ios::trunc);
            written += bool(out << poison);
        } else {
            fs::path planted = target.parent_path().parent_path().string() + "-planted/bits";
            written += fs::create_directories(planted, ignored);
        }
    }
    std::cout << found.size() << " " << written << std::endl;
}
"""


@pytest.fixture(scope="module")
def poison_gch(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """``POISON_HEADER`` precompiled with the judge's own flags, by the g++ the sandbox runs
    (the host's /usr)."""
    needs("cpp17")
    folder = tmp_path_factory.mktemp("poison")
    (folder / "poison.h").write_text(POISON_HEADER)
    flags = ["-O2", "-std=gnu++17", "-DONLINE_JUDGE", "-pipe", "-x", "c++-header"]
    subprocess.run(["g++", *flags, "poison.h", "-o", "poison.gch"], cwd=folder, check=True)
    return (folder / "poison.gch").read_bytes()


def test_the_judges_precompiled_header_is_out_of_every_completions_reach(
    sandbox: Sandbox, poison_gch: bytes
) -> None:
    """The judge precompiles a C++ header once for the sandbox's later compiles, in a cache of
    its own uid's: programs that write a header of their own over every precompiled header
    they find (in place, renamed over it, planted beside it) write none, and the next C++
    completion is accepted, compiled with the judge's header, untouched."""
    if not sandbox.exec(["test", "-d", "/opt/sandboxkit/cache"]).ok:
        pytest.skip("no judge's cache here (no judge's uid): every compile reads the header")
    built = judge(sandbox, SUM_CPP, "cpp17")
    assert built.verdict is Verdict.ACCEPTED, built
    headers = ["sh", "-c", "stat -c '%i %Y %s %U' /opt/sandboxkit/cache/*/bits/stdc++.h.gch"]
    header = sandbox.exec(headers).stdout
    assert header.count("\n") == 1, header  # the judge's, built once
    sandbox.write_file("poison.gch", poison_gch)
    sandbox.write_file("poison.cpp", POISON.encode())
    compiled = sandbox.exec(["g++", "-std=gnu++17", "-o", "poison", "poison.cpp"], timeout=120)
    assert compiled.returncode == 0, compiled
    for mode in ("in-place", "replace", "plant"):
        poison = sandbox.exec(["./poison"], stdin=mode, timeout=120)
        found, written = poison.stdout.split()
        assert int(found) >= 1 and written == "0", (mode, poison)
        after = judge(sandbox, SUM_CPP, "cpp17")
        assert after.verdict is Verdict.ACCEPTED, (mode, after)
    assert sandbox.exec(headers).stdout == header  # the same file: neither rebuilt nor replaced


NONESUCH = Language(
    "nonesuch",
    "Nonesuch",
    ("nsh",),
    "main.nsh",
    ("nonesuchc", "-o", "main", "main.nsh"),
    ("./main",),
    "nonesuchc",
    "apt install nonesuch",
)


@pytest.fixture
def nonesuch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Language]:
    """A language in the table (for this test only) whose compiler no sandbox has."""
    monkeypatch.setattr(languages, "_LANGUAGES", dict(languages._LANGUAGES))
    monkeypatch.setattr(languages, "_NAMES", dict(languages._NAMES))
    register_language(NONESUCH)
    yield NONESUCH


def test_a_language_the_sandbox_lacks_is_the_providers_problem_and_trips_the_breaker(
    nonesuch: Language,
) -> None:
    """Each completion's outcome is infrastructure (no reward: not a 0.0 teaching the model
    its code is wrong), naming the compiler, the language and what to install; a batch of
    them stops training with that message."""
    reward = stdio_tests_reward("subprocess", pool_size=2)
    tests = {"language": "nonesuch", "test_cases": [{"input": "1 2", "output": "3"}]}
    arguments: dict[str, list[Any]] = {
        "prompts": ["Add two numbers."] * 4,
        "completions": ["```nsh\nprint(read() + read())\n```"] * 4,
        "verification_info": [tests] * 4,
    }
    said = (
        "the sandbox has no nonesuchc for Nonesuch (install it in the image: apt install nonesuch)"
    )
    try:
        few = {name: values[:3] for name, values in arguments.items()}  # too few for the breaker
        assert reward(**few) == [None] * 3
        assert reward.last_batch is not None and reward.last_batch.outcomes == {"infra": 3}
        with pytest.raises(CircuitOpenError, match=f"4 of 4 .*{re.escape(said)}"):
            reward(**arguments)
    finally:
        reward.close()


OFFLOADED = {
    "cpp17": (
        "#include <bits/stdc++.h>\n#include <sys/wait.h>\n#include <unistd.h>\n"
        "int main() { long long a, b; std::cin >> a >> b;\n"
        "  if (fork() == 0) { volatile unsigned long long spin = 0; auto start = clock();\n"
        "    while (clock() - start < 3 * CLOCKS_PER_SEC) spin++;\n"
        "    std::cout << a + b << std::endl; _exit(0); }\n"
        "  wait(nullptr); }\n"
    ),
    "python": (
        "import os, time\na, b = map(int, input().split())\n"
        "if os.fork() == 0:\n    start = time.process_time()\n"
        "    while time.process_time() - start < 3:\n        pass\n"
        "    print(a + b, flush=True)\n    os._exit(0)\nos.wait()\n"
    ),
}


OFFLOADED_VERDICTS = {"cpp17": Verdict.WRONG_ANSWER, "python": Verdict.RUNTIME_ERROR}


@pytest.mark.parametrize("language", OFFLOADED)
def test_work_done_in_a_child_process_counts_towards_the_time_limit(
    sandbox: Sandbox, language: str
) -> None:
    """3 s of CPU time against a limit of 1 s, spent in a child the program waits for: a
    test's clock is its process's CPU time (all its threads), which a child's would escape,
    so a program starts no process (C++: ``fork`` fails, the parent prints nothing)."""
    outcome = judge(sandbox, OFFLOADED[language], language)
    assert outcome.verdict is OFFLOADED_VERDICTS[language], outcome


UNCOUNTED_MEMORY = {
    "cpp17": (
        "#include <bits/stdc++.h>\n#include <sys/mman.h>\n"
        "int main() { long long a, b; std::cin >> a >> b; size_t size = 512UL << 20;\n"
        "  char* p = (char*)mmap(nullptr, size, PROT_READ | PROT_WRITE,\n"
        "                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);\n"
        "  if (p == MAP_FAILED) return 3;\n"
        "  for (size_t i = 0; i < size; i += 4096) p[i] = 1;\n"
        "  std::cout << a + b << std::endl; }\n"
    ),
    "python": (
        "import mmap\na, b = map(int, input().split())\n"
        "shared = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_SHARED)\n"
        "for i in range(0, len(shared), 4096):\n    shared[i] = 1\n"
        "print(a + b)\n"
    ),
}


@pytest.mark.parametrize("language", UNCOUNTED_MEMORY)
def test_memory_the_data_limit_does_not_count_is_still_a_memory_limit(
    sandbox: Sandbox, language: str
) -> None:
    """512 MiB in a shared mapping (``RLIMIT_DATA`` counts private memory only) under a limit
    of 256 MB, and a right answer: judged by its peak memory, as judges do, a memory limit
    (it was accepted). Touching 512 MiB of shared pages can take a loaded machine over a
    second of CPU time, so the time limit here is generous: it is memory under test."""
    outcome = judge(sandbox, UNCOUNTED_MEMORY[language], language, timeout=10.0)
    assert outcome.verdict is Verdict.MEMORY_LIMIT, outcome
    assert "its peak memory was" in outcome.detail, outcome


WIDENED = r"""
#include <bits/stdc++.h>
#include <sched.h>
// Takes every CPU (its judge may use one) and spins in threads until it has used 1.3 s of CPU
// time, a limit of 1 s, in less wall-clock time than the judge waits before it first looks at
// the program's clock; prints the sum only if it got there (a loaded machine may not let it).
double cpu() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main() {
    long long a, b;
    std::cin >> a >> b;
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0; i < CPU_SETSIZE; i++) CPU_SET(i, &all);
    sched_setaffinity(0, sizeof all, &all);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    std::atomic<bool> stop{false};
    std::vector<std::thread> spin;
    for (int i = 0; i < 3; i++) spin.emplace_back([&] { while (!stop) {} });
    while (cpu() < 1.3 && std::chrono::steady_clock::now() < until) {}
    stop = true;
    for (auto& t : spin) t.join();
    std::cout << (cpu() >= 1.3 ? a + b : -1) << std::endl;
}
"""


def test_cpu_time_used_between_the_judges_looks_still_counts(sandbox: Sandbox) -> None:
    """The judge reads a program's CPU clock now and then, first after the limit divided by
    the CPUs it may use itself (one, here: a trainer pinned to some cores); a program that
    takes more CPUs than that, spends 1.3 s of CPU time against a limit of 1 s and exits
    before the judge's first look was accepted. Its CPU time at exit is a time limit."""
    needs("cpp17")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs")
    harness = StdioTests([SUM], 1.0, language="cpp17")
    request = harness.request(WIDENED)
    pinned = ["taskset", "-c", "0", *request.argv]
    result = sandbox.exec(pinned, stdin=request.stdin, timeout=request.timeout)
    outcome = harness.judge(result, request)
    # A wrong answer when the machine was too busy to give it the CPU time; never accepted.
    assert outcome.verdict in (Verdict.TIME_LIMIT, Verdict.WRONG_ANSWER), outcome


ESM_EVERYWHERE = r"""
import os
# Where Node looks for the nearest package.json of a later completion's main.js: its "type"
# would load every CommonJS program as a module (``require`` is not defined: a runtime error).
os.makedirs(".sandboxkit", exist_ok=True)
for place in ("package.json", ".sandboxkit/package.json"):
    with open(place, "w") as planted:
        planted.write('{"type": "module"}')
print(sum(map(int, input().split())))
"""
COMMONJS_SUM = (
    'const fs = require("fs");\n'
    'const [a, b] = fs.readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\n'
    "console.log(a + b);\n"
)


def test_files_an_earlier_completion_leaves_do_not_change_how_a_program_loads(
    sandbox: Sandbox,
) -> None:
    """Completions share a pool's sandboxes: one that leaves a package.json saying
    ``"type": "module"`` in the working directory made every later JavaScript program there
    that uses ``require`` a runtime error (its siblings' rewards lowered, its own advantage
    raised). Each run's directory holds a package.json of its own, the nearest one."""
    needs("javascript")
    try:
        assert judge(sandbox, ESM_EVERYWHERE, "python").verdict is Verdict.RUNTIME_ERROR
        planted = sandbox.exec(["python3", "-c", ESM_EVERYWHERE], stdin="1 2", timeout=60)
        assert planted.stdout == "3\n", planted  # another exec (a program may write no file)
        outcome = judge(sandbox, COMMONJS_SUM, "javascript")
        assert outcome.verdict is Verdict.ACCEPTED, outcome
    finally:
        sandbox.exec(["rm", "-f", "package.json", ".sandboxkit/package.json"])


FILL_FILES = r"""
import os
# Takes every file the sandbox's disk can hold (where it is capped), and leaves them there.
room = os.statvfs(".")
made = 0
if 0 < room.f_files <= 1 << 20:
    os.makedirs("filler", exist_ok=True)
    try:
        while True:
            open(f"filler/{made}", "w").close()
            made += 1
    except OSError:
        pass
print(sum(map(int, input().split())) if made else "uncapped")
"""


def test_a_disk_an_earlier_completion_filled_is_the_sandboxs_problem(sandbox: Sandbox) -> None:
    """A completion that leaves the sandbox's disk full made every later compiled program
    there an error (0.0: no room for its run's directory). Nothing of such a program has run:
    its outcome is ``infra`` (no reward) saying so, and the sandbox builds again once the
    files are gone."""
    needs("cpp17")
    try:
        # Another exec in the sandbox (a contest program may write no file)
        filled = sandbox.exec(["python3", "-c", FILL_FILES], stdin="1 2", timeout=60)
        if filled.stdout != "3\n":
            pytest.skip(f"the sandbox's disk has no cap of files here: {filled}")
        outcome = judge(sandbox, SUM_CPP, "cpp17")
        assert outcome.kind is OutcomeKind.INFRA, outcome
        assert "the sandbox's disk is full" in outcome.detail, outcome
    finally:
        sandbox.exec(["rm", "-rf", "filler"])
    assert judge(sandbox, SUM_CPP, "cpp17").verdict is Verdict.ACCEPTED


def test_a_completion_after_one_that_filled_the_disk_is_judged_on_another_sandbox() -> None:
    """Through a reward, the pool replaces a sandbox whose disk an earlier completion filled
    and judges the next completion again on another: its reward stands (1.0), neither a 0.0
    nor a None it did nothing to earn."""
    needs("cpp17")
    reward = stdio_tests_reward("subprocess", pool_size=1, timeout=20.0)
    sums = {"test_cases": [{"input": "1 2", "output": "3"}]}

    def score(language: str, code: str) -> list[float | None]:
        row = {**sums, "language": language}
        fenced = f"```{language}\n{code}\n```"
        return reward(prompts=["Add."], completions=[fenced], verification_info=[row])

    try:
        fill = ["python3", "-c", FILL_FILES]  # another exec: a contest program writes no file
        filled = run_sync(reward.pool.arun(lambda sb: sb.aexec(fill, stdin="1 2", timeout=60)))
        if filled.stdout != "3\n":
            pytest.skip("the sandbox's disk has no cap of files here")
        assert score("cpp", SUM_CPP) == [1.0]
        assert reward.last_batch is not None and reward.last_batch.outcomes == {"passed": 1}
    finally:
        reward.close()


# -- the language is the row's, never the completion's ---------------------------------------

ADD_PY = "def add(a, b):\n    return a + b\n"
SUM_RS = (
    "use std::io::Read;\nfn main() { let mut s = String::new();\n"
    "  std::io::stdin().read_to_string(&mut s).unwrap();\n"
    "  let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
    '  println!("{}", v[0] + v[1]); }\n'
)
SUM_GO = (
    'package main\nimport "fmt"\n'
    "func main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }\n"
)
APPS_CALLS = {"input_output": json.dumps({"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"})}
LCB_CALLS = {
    "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
    "metadata": json.dumps({"func_name": "add"}),
}
CODECONTESTS = {"public_tests": {"input": ["1 2\n"], "output": ["3\n"]}}
SWITCHED = {
    # name: (row, completion, reward, outcome)
    "APPS call-based row, the function in a C++ block": (
        APPS_CALLS,
        "```cpp\nint add(int a, int b) { return a + b; }\n```",
        0.0,
        "empty: stdio_tests_reward: no Python 3 code in the completion (its code blocks are "
        "tagged cpp)",
    ),
    "APPS call-based row, a right Python block, then a C++ fence": (
        APPS_CALLS,
        f"```python\n{ADD_PY}```\nIn C++:\n```cpp\nint add(int a, int b) {{ return a + b; }}\n```",
        1.0,
        "passed 1/1",
    ),
    "LiveCodeBench functional row, the function in a Java block": (
        LCB_CALLS,
        "```java\nclass Solution { int add(int a, int b) { return a + b; } }\n```",
        0.0,
        "empty: stdio_tests_reward: no Python 3 code in the completion (its code blocks are "
        "tagged java)",
    ),
    "CodeContests row, a right program in Rust": (
        CODECONTESTS,
        f"```rust\n{SUM_RS}```",
        0.0,
        "empty: stdio_tests_reward: no Python 3 code in the completion (its code blocks are "
        "tagged rust)",
    ),
    "CodeContests row, a right program in Go after a Python block": (
        CODECONTESTS,
        f"```python\nprint(0)\n```\n```go\n{SUM_GO}```",
        0.0,
        "failed 0/1: test 0: wrong answer",
    ),
}


@pytest.mark.parametrize("name", SWITCHED)
def test_a_completion_in_another_language_than_its_rows_is_its_own_failure(name: str) -> None:
    """A row that names no language (APPS, TACO, CodeContests, LiveCodeBench) was judged in
    the language of the completion's last block: a C++ fence made a call-based row
    ``unsupported`` (``None``), a language the sandbox lacks (Rust, Go here) ``infra``
    (``None``, and the breaker). By those datasets' convention the row is Python: code in
    another language is the completion's failure, saying so."""
    row, completion, score, said = SWITCHED[name]
    reward = stdio_tests_reward("subprocess", timeout=5, pool_size=1)
    seen: dict[str, list[str]] = {}
    try:
        scores = reward(
            prompts=["p"],
            completions=[completion],
            log_extra=seen.__setitem__,
            **{column: [value] for column, value in row.items()},
        )
    finally:
        reward.close()
    assert (scores, seen["stdio_tests_reward_outcome"]) == ([score], [said])


def test_a_batch_of_completions_in_languages_the_sandbox_lacks_is_scored_not_stopped() -> None:
    """Four completions answering a CodeContests row in Go and Rust: judged in their own
    languages, a sandbox without those compilers made them ``infra`` and the batch a
    ``CircuitOpenError`` into the trainer (where the compilers are there, four rewards the
    row's language did not ask for). Each is a 0.0 now."""
    reward = stdio_tests_reward("subprocess", timeout=5, pool_size=2)
    completions = [f"```go\n{SUM_GO}```", f"```rust\n{SUM_RS}```"] * 2
    try:
        scores = reward(
            prompts=["p"] * 4,
            completions=completions,
            **{column: [value] * 4 for column, value in CODECONTESTS.items()},
        )
        assert reward.last_batch is not None
        assert (scores, reward.last_batch.outcomes) == ([0.0] * 4, {"empty": 4})
    finally:
        reward.close()


# -- a checker the output makes fail ---------------------------------------------------------

STALLED_CHECKER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
// testlib's convention (exit 0 accepts, 1 rejects, 3 is _fail), led astray by its output:
// "fail" makes it _fail, "crash" crashes it, "loop" never ends it.
int main(int argc, char** argv) {
    char out[64] = "", ans[64] = "";
    FILE* o = fopen(argv[2], "r");
    FILE* a = fopen(argv[3], "r");
    if (!o || !a || fscanf(a, "%63s", ans) != 1) return 3;
    if (fscanf(o, "%63s", out) != 1) return 1;
    if (!strcmp(out, "fail")) { fprintf(stderr, "unexpected token %s\n", out); return 3; }
    if (!strcmp(out, "crash")) raise(SIGSEGV);
    if (!strcmp(out, "loop")) for (volatile unsigned long n = 0;; n++) {}
    return strcmp(out, ans) ? 1 : 0;
}
"""
BROKEN_CHECKER = "int main() { return 3; }\n"
"""A checker that fails whatever it reads: the jury's own answer too."""
SAYS = "import sys\nprint({word!r} if input() == '1 2' else 3)\n"
"""A program printing ``word`` on the first test and the right answer on the others."""
THREE_SUMS = [SUM, ("2 1", "3"), ("3 0", "3")]


@pytest.fixture(scope="module")
def checker_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("checker programs compile with g++")
    return tmp_path_factory.mktemp("checkers")


def judge_checked(sb: Sandbox, word: str, checker: Any, cases: list[tuple[str, str]]) -> Outcome:
    harness = StdioTests(cases, 2.0, checker=checker)
    request = harness.request(SAYS.format(word=word))
    result = sb.exec(request.argv, stdin=request.stdin, timeout=request.timeout)
    return harness.judge(result, request)


@pytest.mark.parametrize(
    ("word", "said"),
    [("fail", "failed (exit 3): unexpected token fail"), ("crash", "was killed by signal 11")],
)
def test_an_output_that_makes_the_checker_program_fail_is_a_wrong_answer(
    sandbox: Sandbox, checker_cache: Path, word: str, said: str
) -> None:
    """testlib's ``_fail`` (exit 3) or a crash, brought on by what the program printed, was
    ``infra`` (``None``), where any other wrong output is a wrong answer. The checker accepts
    the jury's answer, so the failure is the output's: a wrong answer (its other tests stand)."""
    from sandboxkit.contest.checkers import ProgramChecker

    checker = ProgramChecker(STALLED_CHECKER, cache_dir=checker_cache)
    outcome = judge_checked(sandbox, word, checker, THREE_SUMS)
    assert (outcome.kind, outcome.verdict, outcome.test_scores) == (
        OutcomeKind.FAILED,
        Verdict.WRONG_ANSWER,
        (0.0, 1.0, 1.0),
    ), outcome
    assert outcome.detail.startswith("test 0: wrong answer (the checker failed on it: "), outcome
    assert said in outcome.detail, outcome


def test_an_output_that_stalls_the_checker_is_a_wrong_answer_that_ends_the_checking(
    sandbox: Sandbox, checker_cache: Path
) -> None:
    """An output that keeps the checker past its limit was ``infra``; each such output held
    the judge for the checker's whole limit. It is a wrong answer, and the program's later
    outputs go unchecked (wrong answers too): one checker limit per program at most."""
    from sandboxkit.contest.checkers import ProgramChecker

    checker = ProgramChecker(STALLED_CHECKER, timeout=1.0, cache_dir=checker_cache)
    outcome = judge_checked(sandbox, "loop", checker, THREE_SUMS)
    assert (outcome.kind, outcome.verdict, outcome.test_scores) == (
        OutcomeKind.FAILED,
        Verdict.WRONG_ANSWER,
        (0.0, 0.0, 0.0),
    ), outcome
    assert "ran past its 1.0 s time limit" in outcome.detail, outcome


def test_an_output_a_python_checker_raises_on_is_a_wrong_answer(sandbox: Sandbox) -> None:
    """A checker function that reads a number raised on ``abc``: ``infra`` (``None``). The
    same function is fine on the jury's answer: a wrong answer. Its check of the jury's
    answer runs once per test, whatever the number of programs judged."""
    from sandboxkit.contest.checkers import PythonChecker

    calls: list[str] = []

    def same_number(input: str, output: str, answer: str) -> bool:
        calls.append(output)
        return int(output) == int(answer)

    checker = PythonChecker(same_number)
    for _ in range(2):
        outcome = judge_checked(sandbox, "abc", checker, THREE_SUMS)
        assert (outcome.verdict, outcome.test_scores) == (Verdict.WRONG_ANSWER, (0.0, 1.0, 1.0))
        assert "ValueError: invalid literal for int()" in outcome.detail, outcome
    assert sorted(calls) == sorted(["abc\n", "3\n", "3\n"] * 2 + ["3"]), calls  # "3": the jury


@pytest.mark.parametrize("kind", ["program", "python"])
def test_a_checker_that_fails_on_the_jurys_answer_too_is_the_problems_fault(
    sandbox: Sandbox, checker_cache: Path, kind: str
) -> None:
    """Only a checker that fails on the jury's own answer as well is broken whatever the
    output: ``infra`` (no reward, and the circuit breaker), saying so."""
    from sandboxkit.contest.checkers import ProgramChecker, PythonChecker

    def broken(input: str, output: str, answer: str) -> bool:
        raise KeyError("no such test")

    checker: Any = (
        ProgramChecker(BROKEN_CHECKER, cache_dir=checker_cache)
        if kind == "program"
        else PythonChecker(broken)
    )
    outcome = judge_checked(sandbox, "fail", checker, [SUM])
    assert outcome.kind is OutcomeKind.INFRA, outcome
    assert "the checker fails on the jury's own answer: " in outcome.detail, outcome


def test_a_batch_of_outputs_that_make_a_rows_checker_fail_is_scored_not_stopped(
    checker_cache: Path,
) -> None:
    """Four completions whose outputs make the row's checker program ``_fail`` or crash
    through ``stdio_tests_reward``: four ``None`` and a ``CircuitOpenError`` into the trainer.
    Each is a 0.0 now."""
    spec = {"kind": "program", "source": STALLED_CHECKER}
    reward = stdio_tests_reward("subprocess", timeout=5, pool_size=2)
    completions = [f"```python\nprint({word!r})\n```" for word in ("fail", "crash") * 2]
    try:
        scores = reward(
            prompts=["p"] * 4,
            completions=completions,
            checker=[spec] * 4,
            **{column: [value] * 4 for column, value in CODECONTESTS.items()},
        )
        assert reward.last_batch is not None
        assert (scores, reward.last_batch.verdicts) == ([0.0] * 4, {"wrong_answer": 4})
    finally:
        reward.close()


# -- memory held in files ------------------------------------------------------------------

HELD_PY = """import os
a, b = map(int, input().split())
{hold}
block = bytes(range(256)) * 4096
for i in range(48):
    os.pwrite(fd, block, i << 20)
assert all(os.pread(fd, 1 << 20, i << 20) == block for i in range(48))
print(a + b)
"""
HELD_CPP = """#include <bits/stdc++.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
int main() {{
  long long a, b; std::cin >> a >> b;
  int fd = {hold};
  if (fd < 0) {{ perror("open"); return 1; }}
  static char block[1 << 20]; memset(block, 7, sizeof block);
  for (long i = 0; i < 48; i++)
    if (pwrite(fd, block, sizeof block, i << 20) != (ssize_t)sizeof block) {{
      perror("pwrite");
      return 1;
    }}
  for (long i = 0; i < 48; i++)
    if (pread(fd, block, sizeof block, i << 20) != (ssize_t)sizeof block || block[9] != 7) return 1;
  std::cout << a + b << std::endl;
}}
"""
SYMLINKS_PY = """import os
a, b = map(int, input().split())
for i in range(12288):  # 48 MiB in the links' targets
    try:
        os.symlink(f"{i:08}" + "x" * 4000, f"/tmp/held-{i}")
    except OSError as error:
        raise OSError(error.strerror) from None  # not the 4 KB target in the traceback
assert all(os.readlink(f"/tmp/held-{i}").startswith(f"{i:08}") for i in range(12288))
print(a + b)
"""
PIPES_CPP = """#include <bits/stdc++.h>
#include <fcntl.h>
#include <unistd.h>
int main() {
  long long a, b; std::cin >> a >> b;
  static char block[1 << 20]; memset(block, 7, sizeof block);
  std::vector<std::array<int, 2>> pipes(48);  // 48 MiB in the pipes' buffers
  for (auto& p : pipes) {
    if (pipe(p.data()) || fcntl(p[1], F_SETPIPE_SZ, 1 << 20) < (1 << 20)) {
      perror("pipe");
      return 1;
    }
    if (write(p[1], block, sizeof block) != (ssize_t)sizeof block) { perror("write"); return 1; }
  }
  for (auto& p : pipes)
    if (read(p[0], block, sizeof block) != (ssize_t)sizeof block || block[9] != 7) return 1;
  std::cout << a + b << std::endl;
}
"""
EROFS, EPERM = "Read-only file system", "Operation not permitted"
HELD = {
    # name: (language, program, what its first refused call says)
    **{
        f"Python, a file in {where}": (
            "python",
            HELD_PY.format(hold=f"fd = os.open({path!r}, os.O_RDWR | os.O_CREAT, 0o600)"),
            EROFS,
        )
        for where, path in (
            ("/tmp", "/tmp/held"),
            ("the working directory", "held"),
            ("/dev/shm", "/dev/shm/held"),
        )
    },
    "Python, a memfd": ("python", HELD_PY.format(hold="fd = os.memfd_create('held')"), EPERM),
    "Python, an unlinked temporary file": (
        "python",
        HELD_PY.format(hold="import tempfile\nheld = tempfile.TemporaryFile()\nfd = held.fileno()"),
        "No usable temporary directory found",  # it tried to write in each
    ),
    "Python, the targets of symlinks": ("python", SYMLINKS_PY, EROFS),
    "C++, a file in /tmp": (
        "cpp17",
        HELD_CPP.format(hold='open("/tmp/held", O_RDWR | O_CREAT, 0600)'),
        EROFS,
    ),
    "C++, a shared memory object": (
        "cpp17",
        HELD_CPP.format(hold='shm_open("/held", O_RDWR | O_CREAT, 0600)'),
        EROFS,
    ),
    "C++, a memfd": ("cpp17", HELD_CPP.format(hold='memfd_create("held", 0)'), EPERM),
    "C++, the buffers of pipes": ("cpp17", PIPES_CPP, EPERM),
    "C++, an unlinked file (O_TMPFILE)": (
        "cpp17",
        HELD_CPP.format(hold='open(".", O_TMPFILE | O_RDWR, 0600)'),
        EROFS,
    ),
}


@pytest.mark.parametrize("name", HELD)
def test_memory_held_in_files_or_shared_memory_is_not_free(sandbox: Sandbox, name: str) -> None:
    """48 MiB of working data kept in a file (in /tmp, the working directory, /dev/shm, a
    memfd, an unlinked file) or in symlinks' targets, through ``pwrite``/``pread``, under a
    limit of 32 MB: accepted, where the same data in memory is a memory limit (its process's
    memory counts; the files' did not). A program may not make or write files, or make
    shared memory, as on a contest judge: the call fails, and the program with it."""
    language, code, said = HELD[name]
    try:
        outcome = judge(sandbox, code, language, memory_mb=32, timeout=5.0)
    finally:
        sandbox.exec(["sh", "-c", "rm -rf /tmp/held* held /dev/shm/held*"])
    assert outcome.verdict is Verdict.RUNTIME_ERROR, outcome
    assert said in outcome.detail, outcome


@pytest.mark.parametrize("language", ["python", "cpp17"])
def test_in_the_rlimits_tier_the_hosts_tmp_holds_no_program_data_either(
    monkeypatch: pytest.MonkeyPatch, language: str
) -> None:
    """Where user namespaces are missing, a sandbox's /tmp is the host's: the runner's own
    filter holds there too, and nothing of the program reaches the host's disk."""
    if os.geteuid() != 0:
        pytest.skip("the rlimits tier runs code as another uid only on a root host")
    monkeypatch.setenv("SANDBOXKIT_ISOLATION", "rlimits")
    place = f"/tmp/held-{secrets.token_hex(4)}"
    holds = {
        "python": (HELD_PY, f"fd = os.open({place!r}, os.O_RDWR | os.O_CREAT, 0o600)"),
        "cpp17": (HELD_CPP, f'open("{place}", O_RDWR | O_CREAT, 0600)'),
    }
    program, hold = holds[language]
    code = program.format(hold=hold)
    with warnings.catch_warnings():  # the tier's own warning, given once per process
        warnings.simplefilter("ignore", RuntimeWarning)
        client = get_backend("subprocess")
    with client.sandbox() as sb:
        outcome = judge(sb, code, language, memory_mb=32, timeout=5.0)
    assert outcome.verdict is Verdict.RUNTIME_ERROR, outcome
    assert EROFS in outcome.detail, outcome
    assert not os.path.exists(place)
