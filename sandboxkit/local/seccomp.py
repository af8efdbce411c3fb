"""The syscall filter of local sandboxes: classic-BPF seccomp programs generated here.

A denylist, after Docker's default profile and gVisor's: the calls sandboxed programs never
need and that reach kernel code an attacker wants (keyrings shared with the host, io_uring,
bpf, another process's memory, the host's clock, modules, mounts). Two sets of rules:

- ``BASE`` covers everything in a namespaced sandbox, bwrap's init and the warm template
  included, so it allows what the template needs: ``unshare``, ``setns`` and ``mount``;
- ``COMMAND`` denies those too, to commands alone: a new namespace is where most escapes from
  containers start.

A cold command gets both in one program (from bwrap, or in the rlimits tier from its
launcher); the warm template gets the base one from bwrap and stacks the command one on each
of its commands.

A denied call fails with ``EPERM``, except ``clone3``, which fails with ``ENOSYS`` (its flags
sit in memory a filter cannot read; the C library then falls back to ``clone``, whose flags it
can), as in Docker's profile. A call of another ABI (32-bit calls by ``int 0x80``, x32 calls on
x86-64, 32-bit ARM on aarch64) kills the process, as libseccomp's and gVisor's bad-arch default
does: its numbers differ, so a filter of native numbers would let everything through, and a
process whose every call fails (its exit included) would only spin. Programs are generated for
x86-64 and aarch64; elsewhere there is no filter (``sandboxkit doctor`` says so).

A filter that only compares syscall numbers is cached by the kernel (5.11 and later) as
"always allowed" for every call it allows: only ``clone``, ``personality`` and ``socket`` run
it.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

ARCHES = ("x86_64", "aarch64")
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# Syscall numbers (in the order of ARCHES; None: the call does not exist there), from the kernel's
# arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
SYSCALLS: dict[str, tuple[int, int | None]] = {
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "process_madvise": (440, 440),
    "pidfd_getfd": (438, 438),
    "kcmp": (312, 272),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "create_module": (174, None),
    "get_kernel_syms": (177, None),
    "query_module": (178, None),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "lookup_dcookie": (212, 18),
    "nfsservctl": (180, 42),
    "vhangup": (153, 58),
    "syslog": (103, 116),
    "fanotify_init": (300, 262),
    "iopl": (172, None),
    "ioperm": (173, None),
    "uselib": (134, None),
    "_sysctl": (156, None),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "personality": (135, 92),
    "clone": (56, 220),
    "clone3": (435, 435),
    "chroot": (161, 51),
    "pivot_root": (155, 41),
    "umount2": (166, 39),
    "open_tree": (428, 428),
    "open_tree_attr": (467, 467),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "socket": (41, 198),
}

CLONE_NEW_FLAGS = 0x7E020000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET (CLONE_NEWTIME is
clone3's and unshare's: in clone's flags that bit is part of the exit signal)."""
SOCKET_FAMILIES = (1, 2, 10, 16)
"""AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (the C library's name lookups use it), as in
Flatpak's filter: the other families (vsock, AF_ALG, rds, tipc...) are kernel code most
programs never reach and exploits often do."""
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""Docker's: PER_LINUX, PER_LINUX32, UNAME26, both, and the query; not ADDR_NO_RANDOMIZE or
READ_IMPLIES_EXEC, which turn off exploit mitigations."""


@dataclass(frozen=True)
class Rule:
    """Calls denied for one reason (docs/isolation.md's table groups these)."""

    names: str
    """The calls, separated by spaces."""
    why: str
    errno: int = errno.EPERM
    unless_arg0: tuple[int, ...] = ()
    """Allowed when the low 32 bits of the first argument (all the kernel reads) are one of
    these."""
    if_arg0_has: int = 0
    """Denied only when the first argument has one of these bits."""


BASE = (
    Rule(
        "add_key request_key keyctl",
        "kernel keyrings are not namespaced: the host's session keyring would be readable, and "
        "keys added would outlive the sandbox",
    ),
    Rule(
        "io_uring_setup io_uring_enter io_uring_register",
        "a large kernel surface behind many privilege escalations (Docker and gVisor deny it)",
    ),
    Rule(
        "bpf perf_event_open userfaultfd",
        "kernel surface used by exploits (userfaultfd stalls the kernel mid-copy to win races)",
    ),
    Rule(
        "ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd",
        "reach into another process's memory or descriptors (bwrap's init, the template)",
    ),
    Rule("kcmp", "compares other processes' kernel objects: an address oracle"),
    Rule(
        "open_by_handle_at name_to_handle_at",
        "open files by handle, around the sandbox's mounts (Docker's 'shocker' escape)",
    ),
    Rule(
        "init_module finit_module delete_module create_module get_kernel_syms query_module "
        "kexec_load kexec_file_load reboot swapon swapoff acct quotactl quotactl_fd "
        "lookup_dcookie nfsservctl vhangup syslog fanotify_init iopl ioperm uselib _sysctl",
        "administer the host's kernel: modules, reboot, swap, accounting, quotas, kernel log",
    ),
    Rule("settimeofday clock_settime clock_adjtime adjtimex", "set the host's clock"),
    Rule(
        "personality",
        "only Docker's values: turning off address randomization helps exploits",
        unless_arg0=PERSONALITIES,
    ),
    Rule(
        "socket",
        "other than Unix, IP and netlink sockets (EAFNOSUPPORT, as for a family this kernel "
        "lacks): rarely used kernel code that exploits reach for",
        errno=errno.EAFNOSUPPORT,
        unless_arg0=SOCKET_FAMILIES,
    ),
    Rule(
        "clone",
        "with a CLONE_NEW* flag: new namespaces (the template uses unshare)",
        if_arg0_has=CLONE_NEW_FLAGS,
    ),
    Rule(
        "clone3",
        "its flags cannot be read by a filter: ENOSYS, and the C library falls back to clone",
        errno=errno.ENOSYS,
    ),
    Rule(
        "chroot pivot_root umount2 open_tree open_tree_attr move_mount fsopen fsconfig fsmount "
        "fspick mount_setattr",
        "change the mount view: only a container manager needs them",
    ),
)
COMMAND = (
    Rule(
        "unshare setns mount",
        "new namespaces and mounts open kernel code otherwise reserved to root (commands only: "
        "the template needs them)",
    ),
)

# Classic BPF, as seccomp runs it (linux/filter.h, linux/seccomp.h).
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_J* | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low half: LE)
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000


class _Assembler:
    """Instructions with jumps to labels, resolved to the 8-bit offsets of classic BPF."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int = 0, false: str | int = 0) -> None:
        """Go to ``true`` or ``false`` (a label, or 0: the next instruction)."""
        self.code.append((op, true, false, k))

    def ret(self, k: int) -> None:
        self.code.append((_RET, 0, 0, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def bytes(self) -> bytes:
        out = b""
        for pc, (op, true, false, k) in enumerate(self.code):
            jt, jf = (self.labels[t] - pc - 1 if isinstance(t, str) else t for t in (true, false))
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError(f"jump out of reach at {pc}: the program is too long")
            out += struct.pack("<HBBI", op, jt, jf, k)
        return out


def program(rules: Sequence[Rule], arch: str) -> bytes:
    """The seccomp program (``struct sock_filter`` array) denying ``rules`` on ``arch``."""
    asm = _Assembler()
    asm.load(_ARCH)
    asm.jump(_JEQ, AUDIT_ARCH[arch], false="kill")
    asm.load(_NR)
    if arch == "x86_64":
        asm.jump(_JGE, X32_SYSCALL_BIT, true="kill")
    for index, rule in enumerate(rules):
        for name in rule.names.split():
            number = syscall_number(name, arch)
            if number is None:
                continue
            deny = f"errno {rule.errno}"
            if not rule.unless_arg0 and not rule.if_arg0_has:
                asm.jump(_JEQ, number, true=deny)
                continue
            # Decided here, allowed or denied: the number need not be loaded again.
            after = f"after {index} {name}"
            asm.jump(_JEQ, number, false=after)
            asm.load(_ARG0)
            if rule.if_arg0_has:
                asm.jump(_JSET, rule.if_arg0_has, true=deny, false="allow")
            for i, value in enumerate(rule.unless_arg0, 1):
                last = i == len(rule.unless_arg0)
                asm.jump(_JEQ, value, true="allow", false=deny if last else 0)
            asm.label(after)
    asm.label("allow")
    asm.ret(RET_ALLOW)
    for code in sorted({rule.errno for rule in rules}):
        asm.label(f"errno {code}")
        asm.ret(RET_ERRNO | code)
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.bytes()


def syscall_number(name: str, arch: str) -> int | None:
    """The call's number on ``arch``; None where it does not exist."""
    return SYSCALLS[name][ARCHES.index(arch)]


def denied_calls(rules: Sequence[Rule], arch: str) -> list[str]:
    """The names of the calls ``rules`` deny (some by argument) that exist on ``arch``."""
    names = [name for rule in rules for name in rule.names.split()]
    return [name for name in names if syscall_number(name, arch) is not None]


@dataclass(frozen=True)
class SyscallFilter:
    """The programs for this machine's architecture."""

    arch: str
    base: bytes
    """For the warm template (bwrap loads it)."""
    command: bytes
    """Stacked on ``base`` by the template, in each command."""
    whole: bytes
    """``base`` and ``command`` in one program: for cold commands (bwrap loads it) and those of
    the rlimits tier (its launcher loads it)."""

    @property
    def denied(self) -> list[str]:
        """Every call a command cannot make (``clone``, ``personality`` and ``socket``: by
        argument)."""
        return denied_calls((*BASE, *COMMAND), self.arch)


def native_arch() -> str | None:
    """This machine's architecture as the programs name it, if they cover it."""
    machine = os.uname().machine
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)
    return machine if machine in AUDIT_ARCH else None


def unsupported() -> str | None:
    """Why this machine gets no filter, or None."""
    if native_arch() is None:
        return f"no seccomp program for {os.uname().machine}"
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail") as f:
            actions = set(f.read().split())
    except OSError:
        return "this kernel has no seccomp filters (or predates Linux 4.14)"
    if not {"kill_process", "errno", "allow"} <= actions:
        return f"this kernel's seccomp lacks actions the filter uses (it has {sorted(actions)})"
    return None


@functools.cache
def host_filter() -> SyscallFilter | None:
    """The filter for this machine, or None where it gets none (see ``unsupported``)."""
    arch = native_arch()
    if arch is None or unsupported() is not None:
        return None
    whole = program((*BASE, *COMMAND), arch)
    return SyscallFilter(arch, program(BASE, arch), program(COMMAND, arch), whole)
