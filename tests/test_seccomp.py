"""The generated seccomp programs: run by an interpreter of classic BPF here (for each
architecture), checked against the kernel's syscall tables, and loaded by bwrap."""

from __future__ import annotations

import errno
import os
import re
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from sandboxkit.local import isolation, seccomp
from sandboxkit.local.seccomp import (
    ARCHES,
    AUDIT_ARCH,
    BASE,
    COMMAND,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    SYSCALLS,
    denied_calls,
    program,
    syscall_number,
)

EPERM = RET_ERRNO | errno.EPERM
ENOSYS = RET_ERRNO | errno.ENOSYS
OTHER_ABI = {"x86_64": 0x40000003, "aarch64": 0x40000028}  # AUDIT_ARCH_I386, AUDIT_ARCH_ARM


def verdict(code: bytes, number: int, arch: int, arg0: int = 0) -> int:
    """What seccomp makes of the call: ``code`` run on a ``struct seccomp_data``."""
    data = struct.pack("<IIQ6Q", number, arch, 0, arg0, 0, 0, 0, 0, 0)
    accumulator = pc = 0
    while True:
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
            return int(k)
        else:
            raise AssertionError(f"unexpected instruction {op:#x} at {pc - 1}")


def numbers(names: Sequence[str], arch: str) -> set[int]:
    return {n for name in names if (n := syscall_number(name, arch)) is not None}


def nr(name: str, arch: str) -> int:
    number = syscall_number(name, arch)
    assert number is not None
    return number


RULES = {"base": BASE, "command": COMMAND, "whole": (*BASE, *COMMAND)}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", list(RULES))
def test_each_program_denies_exactly_its_calls(arch: str, which: str) -> None:
    """Every syscall number, with zero arguments: the rules' calls fail (clone3 with ENOSYS),
    all others run (those decided by an argument: below)."""
    rules = RULES[which]
    code = program(rules, arch)
    denied = numbers(denied_calls(rules, arch), arch)
    by_argument = numbers(["clone", "personality", "socket"], arch)
    enosys = numbers(["clone3"], arch)
    assert len(code) % 8 == 0 and len(code) // 8 < 256
    for number in set(range(1024)) - by_argument:
        expected = RET_ALLOW
        if number in denied:
            expected = ENOSYS if number in enosys else EPERM
        assert verdict(code, number, AUDIT_ARCH[arch]) == expected, (arch, number)


def test_the_calls_the_issue_names_are_denied_and_the_template_keeps_its_own() -> None:
    """Keyrings, io_uring, bpf, perf events, userfaultfd, tracing, modules, reboot, the clock
    and mounts are denied to commands; the base filter, which the warm template runs under,
    leaves it what it needs to make each exec's namespaces."""
    base = set(denied_calls(BASE, "x86_64"))
    command = set(denied_calls(COMMAND, "x86_64"))
    keys = "add_key request_key keyctl"
    kernel = "io_uring_setup io_uring_enter io_uring_register bpf perf_event_open userfaultfd"
    tracing = "ptrace process_vm_readv process_vm_writev pidfd_getfd"
    host = "init_module finit_module delete_module kexec_load kexec_file_load reboot swapon"
    more = "swapoff settimeofday clock_settime clock_adjtime open_by_handle_at pivot_root chroot"
    must = set(" ".join((keys, kernel, tracing, host, more)).split())
    assert must - base == set()
    template_needs = {"unshare", "setns", "mount", "capset", "prctl", "execve", "memfd_create"}
    assert template_needs & base == set()
    assert {"unshare", "setns", "mount"} <= command


@pytest.mark.parametrize("arch", ARCHES)
def test_arguments_decide_clone_personality_and_socket(arch: str) -> None:
    code = program(BASE, arch)
    clone, personality, clone3, socket = (
        nr(name, arch) for name in ("clone", "personality", "clone3", "socket")
    )
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
    for family in range(64):
        allowed = family in (unix, inet, inet6, netlink)
        expected = RET_ALLOW if allowed else RET_ERRNO | errno.EAFNOSUPPORT
        assert verdict(code, socket, audit, family) == expected, family


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", list(RULES))
def test_calls_of_another_abi_are_killed(arch: str, which: str) -> None:
    code = program(RULES[which], arch)
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
    """Where the kernel's headers are installed (linux-libc-dev); calls newer than the headers
    are not checked."""
    header = next((Path(p) for p in HEADERS[arch] if os.path.exists(p)), None)
    if header is None:
        pytest.skip(f"no kernel headers for {arch} here")
    defined = {
        name: int(value)
        for name, value in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())
    }
    checked = 0
    for name in SYSCALLS:
        number = syscall_number(name, arch)
        if name in defined:
            assert number == defined[name], name
            checked += 1
        elif number is not None:
            assert number > max(defined.values()), f"{name} is older than the headers"
    assert checked >= 50


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
    assert done.stdout.decode() == f"['2', '{here + 1}']\n-1 1\n{unshare} True\n"
