"""The generated seccomp programs: run by an interpreter of classic BPF here (for each
architecture), checked against the kernel's syscall tables, and loaded by bwrap."""

from __future__ import annotations

import errno
import itertools
import math
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from sandboxkit.local import isolation, seccomp
from sandboxkit.local.seccomp import (
    ARCHES,
    AUDIT_ARCH,
    BASE,
    COMMAND,
    NETWORK_SOCKETS,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    RET_USER_NOTIF,
    UNLISTED,
    WHOLE,
    Rule,
    named_calls,
    program,
    runs,
    syscall_number,
)
from sandboxkit.local.syscalls import SYSCALLS

EPERM = RET_ERRNO | errno.EPERM
ENOSYS = RET_ERRNO | errno.ENOSYS
EAFNOSUPPORT = RET_ERRNO | errno.EAFNOSUPPORT
OTHER_ABI = {"x86_64": 0x40000003, "aarch64": 0x40000028}  # AUDIT_ARCH_I386, AUDIT_ARCH_ARM


def run_filter(code: bytes, number: int, arch: int, *args: int) -> tuple[int, int]:
    """What seccomp makes of the call with ``args``, ``code`` run on a ``struct
    seccomp_data``, and how many instructions that took."""
    data = struct.pack("<IIQ6Q", number, arch, 0, *(*args, 0, 0, 0, 0, 0, 0)[:6])
    accumulator = pc = 0
    for steps in itertools.count(1):
        op, jt, jf, k = struct.unpack_from("<HBBI", code, 8 * pc)
        pc += 1
        if op == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = int.from_bytes(data[k : k + 4], "little")
        elif op == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += jt if accumulator == k else jf
        elif op == 0x35:  # BPF_JGE
            pc += jt if accumulator >= k else jf
        elif op == 0x45:  # BPF_JSET
            pc += jt if accumulator & k else jf
        elif op == 0x06:  # BPF_RET | BPF_K
            return int(k), steps
        else:
            raise AssertionError(f"unexpected instruction {op:#x} at {pc - 1}")
    raise AssertionError("unreachable")


def verdict(code: bytes, number: int, arch: int, *args: int) -> int:
    return run_filter(code, number, arch, *args)[0]


def nr(name: str, arch: str) -> int:
    number = syscall_number(name, arch)
    assert number is not None
    return number


PROGRAMS: dict[str, tuple[tuple[Rule, ...], int]] = {
    "base": (BASE, UNLISTED),
    "command": (COMMAND, RET_ALLOW),
    "whole": (WHOLE, UNLISTED),
}
BY_ARGUMENT = ("clone", "personality", "socket", "socketpair", "fadvise64", "preadv2")
X32 = seccomp.X32_SYSCALL_BIT


def expected_verdicts(rules: tuple[Rule, ...], arch: str) -> dict[int, int]:
    """Each named call's verdict as the rules' table says (those decided by argument left
    out), read without the program generator."""
    table: dict[int, int] = {}
    for rule in rules:
        for name in rule.names.split():
            number = syscall_number(name, arch)
            if number is not None and name not in BY_ARGUMENT:
                table[number] = RET_ALLOW if rule.allowed else RET_ERRNO | rule.errno
    return table


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", list(PROGRAMS))
def test_each_program_decides_every_number_as_its_table_says(arch: str, which: str) -> None:
    """Every syscall number up to 1023, a few far beyond, and the first after the table's
    newest call, with zero arguments: named calls as their rule says, all others
    ``ENOSYS`` (the command program, stacked on the template's, lets them through)."""
    rules, default = PROGRAMS[which]
    code = program(rules, arch, default)
    table = expected_verdicts(rules, arch)
    by_argument = {nr(name, arch) for name in BY_ARGUMENT}
    newest = max(n for numbers in SYSCALLS.values() for n in numbers if n is not None)
    for number in {*range(1024), newest + 1, 5000, 0x12345678, X32 - 1} - by_argument:
        expected = table.get(number, default)
        assert verdict(code, number, AUDIT_ARCH[arch]) == expected, (arch, number)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_call_of_the_table_has_exactly_one_rule(arch: str) -> None:
    """An allowlist whose every absence is a decision: each call of the table is allowed or
    denied, for a reason, by one rule, in the template's program as in the commands'."""
    here = sorted(name for name in SYSCALLS if syscall_number(name, arch) is not None)
    for rules in (BASE, WHOLE):
        named = sorted(name for rule in rules for name in rule.names.split() if name in here)
        assert named == here
    assert all(rule.why for rule in (*BASE, *COMMAND))
    assert len(named_calls(WHOLE, arch, allowed=True)) >= 250


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", list(PROGRAMS))
def test_a_call_is_decided_in_a_few_instructions_not_a_chain(arch: str, which: str) -> None:
    """A binary search over the runs of numbers with one verdict: about log2 of their number
    of compares, not one per call (the kernel runs the program for each call it does not
    cache, and emulates it for every number when it is installed)."""
    rules, default = PROGRAMS[which]
    code = program(rules, arch, default)
    depth = math.ceil(math.log2(len(runs(rules, arch, default))))
    checks = 2 + 2 + depth  # the architecture, x32, the search
    assert len(code) // 8 < 256
    audit = AUDIT_ARCH[arch]
    for number in range(600):
        steps = run_filter(code, number, audit)[1]
        assert steps <= checks + 1 + len(seccomp.PERSONALITIES) + 1, number
    assert depth <= 7


def test_the_calls_the_issue_names_are_denied_and_the_template_keeps_its_own() -> None:
    """Keyrings, io_uring, bpf, perf events, userfaultfd, tracing, modules, reboot, the clock,
    mounts, and (new with the allowlist) secret memory, the mount listing calls, the LDT and
    NUMA policy are denied to commands; the base filter, which the warm template runs under,
    leaves it what it needs to make each exec's namespaces."""
    arch = "x86_64"
    base = set(named_calls(BASE, arch, allowed=False))
    command = set(named_calls(COMMAND, arch, allowed=False))
    keys = "add_key request_key keyctl"
    kernel = "io_uring_setup io_uring_enter io_uring_register bpf perf_event_open userfaultfd"
    tracing = "ptrace process_vm_readv process_vm_writev pidfd_getfd"
    host = "init_module finit_module delete_module kexec_load kexec_file_load reboot swapon"
    more = "swapoff settimeofday clock_settime clock_adjtime open_by_handle_at pivot_root chroot"
    new = "memfd_secret listmount statmount modify_ldt mbind set_mempolicy"
    must = set(" ".join((keys, kernel, tracing, host, more, new)).split())
    assert must - base == set()
    template_needs = {"unshare", "setns", "mount", "capset", "prctl", "execve", "memfd_create"}
    assert template_needs <= set(named_calls(BASE, arch, allowed=True))
    assert command == {"unshare", "setns", "mount"}
    whole = program(WHOLE, arch)
    for name in must | command:
        expected = ENOSYS if name == "clone3" else EPERM
        assert verdict(whole, nr(name, arch), AUDIT_ARCH[arch]) == expected, name


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", ["base", "whole"])
def test_arguments_decide_clone_personality_socket_and_socketpair(arch: str, which: str) -> None:
    rules, default = PROGRAMS[which]
    code = program(rules, arch, default)
    clone, personality, clone3 = (nr(name, arch) for name in ("clone", "personality", "clone3"))
    audit = AUDIT_ARCH[arch]
    sigchld, vm_vfork = 17, 0x100 | 0x4000
    assert verdict(code, clone, audit, sigchld) == RET_ALLOW  # fork
    assert verdict(code, clone, audit, vm_vfork | sigchld) == RET_ALLOW  # posix_spawn
    assert verdict(code, clone, audit, 0x3D0F00) == RET_ALLOW  # a thread
    for bit in range(32):
        namespace = 1 << bit & seccomp.CLONE_NEW_FLAGS
        expected = EPERM if namespace else RET_ALLOW
        assert verdict(code, clone, audit, 1 << bit | sigchld) == expected, hex(1 << bit)
    assert verdict(code, clone3, audit) == ENOSYS
    for value in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF, 0xFFFFFFFF_FFFFFFFF, 1 << 32):
        assert verdict(code, personality, audit, value) == RET_ALLOW, hex(value)
    for value in (0x0040000, 0x0400000, 0x0440000, 1, 0x20):  # no ASLR, READ_IMPLIES_EXEC...
        assert verdict(code, personality, audit, value) == EPERM, hex(value)
    unix, inet, inet6, netlink = 1, 2, 10, 16
    for name in ("socket", "socketpair"):
        for family in range(64):
            allowed = family in (unix, inet, inet6, netlink)
            expected = RET_ALLOW if allowed else EAFNOSUPPORT
            assert verdict(code, nr(name, arch), audit, family) == expected, (name, family)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", ["base", "whole"])
def test_arguments_keep_the_shared_page_cache_out_of_reach(arch: str, which: str) -> None:
    """The page cache of the host's files is every sandbox's: advice that drops a file's pages
    (``POSIX_FADV_DONTNEED``) returns success without being taken, and a read that must not
    wait (``RWF_NOWAIT``, which tells whether the pages are there) fails with EOPNOTSUPP;
    other advice and reads are allowed (``madvise`` by number: the kernel pages out no file
    the caller cannot write), and AIO, whose contexts come from one pool of the machine, is
    absent (ENOSYS)."""
    rules, default = PROGRAMS[which]
    code = program(rules, arch, default)
    audit = AUDIT_ARCH[arch]
    ignored = RET_ERRNO | 0
    fadvise, preadv2 = (nr(name, arch) for name in ("fadvise64", "preadv2"))
    assert verdict(code, nr("madvise", arch), audit, 0, 4096, 21) == RET_ALLOW
    for advice in range(8):
        expected = ignored if advice == 4 else RET_ALLOW
        assert verdict(code, fadvise, audit, 3, 0, 0, advice) == expected, advice
    for flags in range(32):  # HIPRI, DSYNC, SYNC, NOWAIT, APPEND
        expected = RET_ERRNO | errno.EOPNOTSUPP if flags & 8 else RET_ALLOW
        assert verdict(code, preadv2, audit, 3, 0, 1, 0, 0, flags) == expected, flags
    for name in ("io_setup", "io_submit", "io_getevents", "io_pgetevents", "io_destroy"):
        assert verdict(code, nr(name, arch), audit, 64) == ENOSYS, name


@pytest.mark.parametrize("arch", ARCHES)
def test_warm_commands_send_their_network_sockets_to_the_exec_supervisor(arch: str) -> None:
    """Where the kernel can hand a socket over, the warm command program sends ``socket`` of
    every family but Unix (by the low 32 bits the kernel reads) to the exec's supervisor,
    which makes the exec's network namespace at the first: the template's program, stacked
    under it, has refused the families it does not allow (its errno wins over a
    notification). ``socketpair`` (Unix only, in the kernel) and the rest are unchanged."""
    code = program((*COMMAND, NETWORK_SOCKETS), arch, RET_ALLOW)
    audit = AUDIT_ARCH[arch]
    for family in (*range(64), 1 << 32 | 1, 1 << 32 | 2, 0xFFFFFFFF):
        expected = RET_ALLOW if family & 0xFFFFFFFF == 1 else RET_USER_NOTIF
        assert verdict(code, nr("socket", arch), audit, family) == expected, family
        assert verdict(code, nr("socketpair", arch), audit, family) == RET_ALLOW, family
    assert verdict(code, nr("unshare", arch), audit) == EPERM
    assert verdict(code, nr("read", arch), audit) == RET_ALLOW
    host = seccomp.host_filter()
    if host is not None and seccomp.user_notification() is None:
        assert host.lazy_network and host.command == program(
            (*COMMAND, NETWORK_SOCKETS), host.arch, RET_ALLOW
        )


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", list(PROGRAMS))
def test_calls_of_another_abi_are_killed(arch: str, which: str) -> None:
    rules, default = PROGRAMS[which]
    code = program(rules, arch, default)
    other = AUDIT_ARCH[ARCHES[1 - ARCHES.index(arch)]]
    for number in (0, 1, 20, 39, 60, 172, 250):
        assert verdict(code, number, OTHER_ABI[arch]) == RET_KILL_PROCESS
        assert verdict(code, number, other) == RET_KILL_PROCESS
        if arch == "x86_64":  # x32: the 64-bit entry, numbers with bit 30 set
            assert verdict(code, 0x40000000 | number, AUDIT_ARCH[arch]) == RET_KILL_PROCESS


HEADERS = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
}


@pytest.mark.parametrize("arch", ARCHES)
def test_syscall_numbers_match_the_kernel_headers(arch: str) -> None:
    """Where the kernel's headers are installed (linux-libc-dev): the same numbers, and no call
    of x86-64's headers missing from the table."""
    header = next((Path(p) for p in HEADERS[arch] if os.path.exists(p)), None)
    if header is None:
        pytest.skip(f"no kernel headers for {arch} here")
    defined = {
        name: int(value)
        for name, value in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())
    }
    for count in ("syscalls", "arch_specific_syscall"):  # aarch64's: not calls
        defined.pop(count, None)
    if "fstatat" in defined:  # the generic header's name of newfstatat
        defined["newfstatat"] = defined.pop("fstatat")
    checked = 0
    for name in SYSCALLS:
        number = syscall_number(name, arch)
        if name in defined:
            assert number == defined[name], name
            checked += 1
        elif number is not None and name not in ("uretprobe", "uprobe"):  # x86-64's, after rseq
            assert number > max(defined.values()), f"{name} is older than the headers"
    assert checked >= 250
    if arch == "x86_64":  # the generic header's also has 32-bit calls, behind #if
        assert set(defined) - set(SYSCALLS) == set()


@pytest.mark.parametrize("which", ["base", "whole"])
def test_bwrap_loads_the_programs_and_the_kernel_runs_them(which: str) -> None:
    """bwrap accepts the programs it loads (length, instructions); the calls they deny fail
    inside, and ordinary ones run."""
    bwrap = isolation.bwrap_binary()
    found = seccomp.host_filter()
    if found is None or isolation.namespaces_failure() is not None:
        pytest.skip("no syscall filter or no namespaces here")
    assert bwrap is not None
    read_end, write_end = os.pipe()
    os.write(write_end, found.base if which == "base" else found.whole)
    os.close(write_end)
    python = isolation.interpreter()
    argv = isolation.bwrap_argv(
        bwrap, python=python, workspace=Path("/tmp"), tmp=Path("/tmp"), cwd="/", env={},
        seccomp_fd=read_end,
    )  # fmt: skip
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp')])\n"
        f"print(libc.syscall({nr('keyctl', found.arch)}, 0, -3, 0),"
        " ctypes.get_errno())\n"
        "print(libc.syscall(1000), ctypes.get_errno())\n"  # named by no rule
        "done = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER
        "print(done, ctypes.get_errno() if done else 0, os.getpid() > 0)\n"
    )
    try:
        done = subprocess.run(
            [*argv, python, "-I", "-c", probe], pass_fds=(read_end,), capture_output=True,
            timeout=60,
        )  # fmt: skip
    finally:
        os.close(read_end)
    assert done.returncode == 0, done.stderr
    with open("/proc/self/status") as f:  # filters this process runs under (in a container?)
        here = int(next(line.split()[1] for line in f if line.startswith("Seccomp_filters")))
    unshare = "0 0" if which == "base" else "-1 1"  # the template's, or EPERM
    assert done.stdout.decode() == (f"['2', '{here + 1}']\n-1 1\n-1 38\n{unshare} True\n")
