"""The syscall filter of local sandboxes: classic-BPF seccomp programs generated here.

An allowlist, as Docker's default profile and gVisor's are: the calls ordinary programs make
(Python, C and C++, Java, Node, Rust, Go, the shell, git, pip) are allowed, some of them by
argument; the rest fail. A call named here and denied (``DENIED``: kernel surface exploits
start from, or the host's to administer) fails with ``EPERM``; a call the table does not name
(one newer than it, a made-up number) with ``ENOSYS``, as on a kernel without it, so a C
library or runtime trying a new call falls back to an older one. Two sets of rules:

- ``BASE`` covers everything in a namespaced sandbox, bwrap's init and the warm template
  included, so it also allows what the template needs: ``unshare``, ``setns`` and ``mount``;
- ``COMMAND`` denies those three, to commands alone: a new namespace is where most escapes
  from containers start.

A cold command gets ``WHOLE`` (both in one program: from bwrap, or in the rlimits tier from
its launcher); the warm template gets ``BASE`` from bwrap and stacks ``COMMAND`` on each of
its commands, which then get what a cold one gets.

A call of another ABI (32-bit calls by ``int 0x80``, x32 calls on x86-64, 32-bit ARM on
aarch64) kills the process, as libseccomp's and gVisor's bad-arch default does: its numbers
differ, and a process whose every call fails (its exit included) would only spin. Programs
are generated for x86-64 and aarch64; elsewhere there is no filter (``sandboxkit doctor``
says so).

The program is a binary search over the runs of numbers that share a verdict (some 90 runs:
7 compares deep), not a chain of one compare per call. The kernel (5.11 and later)
caches the verdict of every call the program decides by number alone as "always allowed":
only ``clone``, ``personality``, ``socket``, ``socketpair``, ``fadvise64`` and ``preadv2``
run it.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .cgroup import kernel_before
from .syscalls import SYSCALLS

ARCHES = ("x86_64", "aarch64")
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

CLONE_NEW_FLAGS = 0x7E020000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET (CLONE_NEWTIME is
clone3's and unshare's: in clone's flags that bit is part of the exit signal)."""
SOCKET_FAMILIES = (1, 2, 10, 16)
"""AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (the C library's name lookups use it), as in
Flatpak's filter: the other families (vsock, AF_ALG, packet, rds, tipc...) are kernel code
most programs never reach and exploits often do."""
RWF_NOWAIT = 0x8
POSIX_FADV_DONTNEED = 4
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""Docker's: PER_LINUX, PER_LINUX32, UNAME26, both, and the query; not ADDR_NO_RANDOMIZE or
READ_IMPLIES_EXEC, which turn off exploit mitigations."""


@dataclass(frozen=True)
class Rule:
    """Calls with one verdict, for one reason (docs/isolation.md's tables group these)."""

    names: str
    """The calls, separated by spaces."""
    why: str
    allowed: bool
    errno: int = errno.EPERM
    """The error of a denied call, or of an allowed one that its argument rules out (0: it
    returns success without running, as for advice that is taken and ignored)."""
    arg: int = 0
    """The argument the conditions below read: its low 32 bits, all the kernel reads of the
    ``int`` arguments they are for."""
    arg_in: tuple[int, ...] = ()
    """Allowed only when the argument is one of these."""
    arg_not_in: tuple[int, ...] = ()
    """Allowed unless the argument is one of these."""
    arg_without: int = 0
    """Allowed only when the argument has none of these bits."""
    notify: bool = False
    """A call its argument rules out goes to the warm template's supervisor of the exec
    (``SECCOMP_RET_USER_NOTIF``), which makes it on the command's behalf, rather than
    failing."""


def allow(
    names: str,
    why: str,
    *,
    code: int = errno.EPERM,
    arg: int = 0,
    arg_in: tuple[int, ...] = (),
    arg_not_in: tuple[int, ...] = (),
    arg_without: int = 0,
    notify: bool = False,
) -> Rule:
    """Calls allowed (with one of the conditions on their argument number ``arg``, if
    given)."""
    if sum(map(bool, (arg_in, arg_not_in, arg_without))) > 1:
        raise ValueError("one condition per rule")
    return Rule(names, why, True, code, arg, arg_in, arg_not_in, arg_without, notify)


def deny(names: str, why: str, code: int = errno.EPERM) -> Rule:
    """Calls denied: they fail with ``code``."""
    return Rule(names, why, False, code)


ALLOWED = (
    allow(
        "read write open openat openat2 creat close close_range lseek pread64 pwrite64 readv "
        "writev preadv pwritev pwritev2 dup dup2 dup3 fcntl flock fsync fdatasync sync "
        "syncfs sync_file_range truncate ftruncate fallocate readahead sendfile "
        "splice tee vmsplice copy_file_range ioctl stat fstat lstat newfstatat statx statfs "
        "fstatfs access faccessat faccessat2 getdents getdents64 getcwd chdir fchdir mkdir "
        "mkdirat rmdir rename renameat renameat2 link linkat unlink unlinkat symlink symlinkat "
        "readlink readlinkat chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat umask "
        "utime utimes utimensat futimesat mknod mknodat file_getattr file_setattr setxattr "
        "lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr "
        "removexattr lremovexattr fremovexattr setxattrat getxattrat listxattrat removexattrat "
        "inotify_init inotify_init1 inotify_add_watch inotify_rm_watch",
        "files, directories and their I/O (only the sandbox's own are in view)",
    ),
    allow(
        "preadv2",
        "reads; one that must not wait (RWF_NOWAIT) would say whether a file's pages are in "
        "the page cache every sandbox shares: it fails as on a file that cannot honour it",
        code=errno.EOPNOTSUPP,
        arg=5,
        arg_without=RWF_NOWAIT,
    ),
    allow(
        "fadvise64",
        "file advice; POSIX_FADV_DONTNEED, which drops a file's pages from the page cache "
        "every sandbox shares, is taken and ignored",
        code=0,
        arg=3,
        arg_not_in=(POSIX_FADV_DONTNEED,),
    ),
    allow(
        "brk mmap munmap mremap mprotect madvise mincore msync mlock mlock2 munlock mlockall "
        "munlockall memfd_create membarrier pkey_alloc pkey_free pkey_mprotect mseal "
        "map_shadow_stack",
        "memory (bounded by the sandbox's memory cgroup or rlimits)",
    ),
    allow(
        "fork vfork execve execveat exit exit_group wait4 waitid getpid getppid gettid getpgid "
        "setpgid getpgrp getsid setsid set_tid_address set_robust_list get_robust_list rseq "
        "futex futex_waitv futex_wake futex_wait futex_requeue arch_prctl prctl seccomp "
        "landlock_create_ruleset landlock_add_rule landlock_restrict_self sched_yield "
        "sched_getaffinity sched_setaffinity sched_getparam sched_setparam sched_getscheduler "
        "sched_setscheduler sched_get_priority_max sched_get_priority_min sched_rr_get_interval "
        "sched_getattr sched_setattr getpriority setpriority ioprio_get ioprio_set getrlimit "
        "setrlimit prlimit64 getrusage times capget capset restart_syscall pidfd_open "
        "pidfd_send_signal process_mrelease uretprobe uprobe",
        "processes and threads (those of the exec's own pid namespace; uretprobe and uprobe "
        "work only from the kernel's own trampolines)",
    ),
    allow(
        "clone",
        "processes and threads, without a CLONE_NEW* flag: no new namespaces (the template "
        "uses unshare)",
        arg_without=CLONE_NEW_FLAGS,
    ),
    allow(
        "personality",
        "only Docker's values: turning off address randomization helps exploits",
        arg_in=PERSONALITIES,
    ),
    allow(
        "getuid geteuid getgid getegid getresuid getresgid getgroups setuid setgid setreuid "
        "setregid setresuid setresgid setfsuid setfsgid setgroups",
        "identity (with no capability, only among the ids a process already has)",
    ),
    allow(
        "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait rt_sigqueueinfo "
        "rt_tgsigqueueinfo rt_sigsuspend sigaltstack kill tkill tgkill signalfd signalfd4 pause",
        "signals (to the exec's own processes)",
    ),
    allow(
        "time gettimeofday clock_gettime clock_getres clock_nanosleep nanosleep alarm getitimer "
        "setitimer timer_create timer_settime timer_gettime timer_getoverrun timer_delete "
        "timerfd_create timerfd_settime timerfd_gettime",
        "clocks and timers (reading, never setting, the host's clock)",
    ),
    allow(
        "poll ppoll select pselect6 epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait "
        "epoll_pwait2 eventfd eventfd2",
        "waiting for events",
    ),
    allow(
        "bind listen accept accept4 connect getsockname getpeername sendto recvfrom sendmsg "
        "recvmsg sendmmsg recvmmsg shutdown setsockopt getsockopt",
        "sockets (in the sandbox's own network namespace)",
    ),
    allow(
        "socket socketpair",
        "only Unix, IP and netlink sockets (others fail with EAFNOSUPPORT, as a family this "
        "kernel lacks): rarely used kernel code that exploits reach for",
        code=errno.EAFNOSUPPORT,
        arg_in=SOCKET_FAMILIES,
    ),
    allow(
        "pipe pipe2 shmget shmat shmdt shmctl semget semop semtimedop semctl msgget msgsnd "
        "msgrcv msgctl mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr",
        "pipes and IPC (in the exec's own IPC namespace)",
    ),
    allow("uname sysinfo getcpu getrandom", "system information and randomness"),
)
DENIED = (
    deny(
        "add_key request_key keyctl",
        "kernel keyrings are not namespaced: the host's session keyring would be readable, and "
        "keys added would outlive the sandbox",
    ),
    deny(
        "io_uring_setup io_uring_enter io_uring_register",
        "a large kernel surface behind many privilege escalations (runtimes fall back to threads)",
    ),
    deny(
        "bpf perf_event_open userfaultfd",
        "kernel surface used by exploits (userfaultfd stalls the kernel mid-copy to win races)",
    ),
    deny(
        "ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp",
        "reach into another process's memory or descriptors (bwrap's init, the template), or "
        "compare its kernel objects (an address oracle)",
    ),
    deny(
        "open_by_handle_at name_to_handle_at",
        "open files by handle, around the sandbox's mounts (Docker's 'shocker' escape)",
    ),
    deny(
        "init_module finit_module delete_module kexec_load kexec_file_load reboot swapon "
        "swapoff acct quotactl quotactl_fd syslog fanotify_init fanotify_mark iopl ioperm "
        "vhangup sethostname setdomainname lsm_get_self_attr lsm_set_self_attr lsm_list_modules",
        "administer the host's kernel: modules, reboot, swap, accounting, quotas, the kernel "
        "log, whole-filesystem watches, I/O ports, security modules",
    ),
    deny("settimeofday clock_settime clock_adjtime adjtimex", "set the host's clock"),
    deny(
        "chroot pivot_root umount2 open_tree open_tree_attr move_mount fsopen fsconfig fsmount "
        "fspick mount_setattr statmount listmount listns",
        "change the mount view, or list the mounts (the host's paths behind the sandbox's) and "
        "namespaces: only a container manager needs them",
    ),
    deny(
        "clone3",
        "its flags sit in memory a filter cannot read: ENOSYS, and the C library falls back to "
        "clone (as in Docker's profile)",
        errno.ENOSYS,
    ),
    deny(
        "memfd_secret",
        "memory removed from the kernel's own mappings: a rarely used kernel surface",
    ),
    deny(
        "modify_ldt set_thread_area get_thread_area",
        "descriptor tables, for 16- and 32-bit code: behind several kernel exploits",
    ),
    deny(
        "mbind set_mempolicy get_mempolicy set_mempolicy_home_node migrate_pages move_pages",
        "NUMA placement of the host's memory (Docker asks for CAP_SYS_NICE; libnuma takes the "
        "failure as no NUMA)",
    ),
    deny(
        "cachestat",
        "page-cache state of files every sandbox shares: a channel from one exec to the next",
    ),
    deny(
        "io_setup io_destroy io_submit io_cancel io_getevents io_pgetevents",
        "AIO contexts come from one pool of the machine (fs.aio-max-nr) that no limit of a "
        "sandbox bounds: ENOSYS, as a kernel built without AIO (the C library's aio_* use "
        "threads)",
        errno.ENOSYS,
    ),
    deny(
        "uselib ustat sysfs _sysctl remap_file_pages create_module get_kernel_syms "
        "query_module nfsservctl getpmsg putpmsg afs_syscall tuxcall security vserver "
        "epoll_ctl_old epoll_wait_old lookup_dcookie",
        "obsolete or gone from current kernels: ENOSYS, as a kernel without them says",
        errno.ENOSYS,
    ),
)
TEMPLATE_ONLY = "unshare setns mount"
BASE = (
    *ALLOWED,
    allow(TEMPLATE_ONLY, "the warm template builds each exec's namespaces"),
    *DENIED,
)
COMMAND = (
    deny(
        TEMPLATE_ONLY,
        "new namespaces and mounts open kernel code otherwise reserved to root (commands only: "
        "the template needs them)",
    ),
)
WHOLE = (*ALLOWED, *COMMAND, *DENIED)
NETWORK_SOCKETS = allow(
    "socket",
    "a socket of any family but Unix is made by the exec's supervisor, in a network namespace "
    "it makes for the exec on the first one (``forkserver.supervise_sockets``)",
    arg_in=(1,),  # AF_UNIX
    notify=True,
)
"""Stacked on ``COMMAND`` in warm commands where the kernel can hand a socket over
(``user_notification``): an exec that makes no network socket needs no network namespace of
its own (docs/isolation.md)."""

# Classic BPF, as seccomp runs it (linux/filter.h, linux/seccomp.h).
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_J* | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_NR, _ARCH, _ARGS = 0, 4, 16  # offsets in struct seccomp_data (each arg's low half: LE)
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
RET_ALLOW = 0x7FFF0000
UNLISTED = RET_ERRNO | errno.ENOSYS
"""The verdict on a number no rule names."""


class _Assembler:
    """Instructions with jumps to labels, resolved to the 8-bit offsets of classic BPF."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}
        self.names = itertools.count()

    def new_label(self) -> str:
        return f"L{next(self.names)}"

    def load(self, offset: int) -> None:
        self.code.append((_LD_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int = 0, false: str | int = 0) -> None:
        """Go to ``true`` or ``false`` (a label, or a number of instructions to skip)."""
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


Leaf = int | tuple[int, Rule]
"""What a run of numbers comes to: a verdict, or (for one call) its rule's argument check."""


def runs(rules: Sequence[Rule], arch: str, default: int) -> list[tuple[int, Leaf]]:
    """The numbers from 0 up as runs of one verdict: each run's first number and its leaf
    (the last run goes on to the largest number)."""
    leaves: dict[int, Leaf] = {}
    for rule in rules:
        for name in rule.names.split():
            number = syscall_number(name, arch)
            if number is None:
                continue
            if number in leaves:
                raise ValueError(f"{name} has two rules")
            if not rule.allowed:
                leaves[number] = RET_ERRNO | rule.errno
            elif rule.arg_in or rule.arg_not_in or rule.arg_without:
                leaves[number] = (number, rule)
            else:
                leaves[number] = RET_ALLOW
    found: list[tuple[int, Leaf]] = []
    for number in range(max(leaves, default=0) + 2):
        leaf = leaves.get(number, default)
        if not found or found[-1][1] != leaf:
            found.append((number, leaf))
    return found


def _search(asm: _Assembler, found: Sequence[tuple[int, Leaf]]) -> None:
    """A binary search of the syscall number (in the accumulator) over ``found``'s runs."""
    if len(found) > 1:
        middle = len(found) // 2
        upper = asm.new_label()
        asm.jump(_JGE, found[middle][0], true=upper)
        _search(asm, found[:middle])
        asm.label(upper)
        _search(asm, found[middle:])
        return
    leaf = found[0][1]
    if isinstance(leaf, int):
        asm.ret(leaf)
        return
    rule = leaf[1]
    refused = RET_USER_NOTIF if rule.notify else RET_ERRNO | rule.errno
    asm.load(_ARGS + 8 * rule.arg)
    if rule.arg_without:
        asm.jump(_JSET, rule.arg_without, false=1)  # to the RET_ALLOW
    for i, value in enumerate(rule.arg_in):
        asm.jump(_JEQ, value, true=len(rule.arg_in) - i)  # to the RET_ALLOW
    for i, value in enumerate(rule.arg_not_in):
        asm.jump(_JEQ, value, true=len(rule.arg_not_in) - i)  # to the refusal
    if rule.arg_not_in:
        asm.ret(RET_ALLOW)
    asm.ret(refused)
    if not rule.arg_not_in:
        asm.ret(RET_ALLOW)


def program(rules: Sequence[Rule], arch: str, default: int = UNLISTED) -> bytes:
    """The seccomp program (``struct sock_filter`` array) of ``rules`` on ``arch``; numbers
    no rule names get ``default``."""
    asm = _Assembler()
    asm.load(_ARCH)
    asm.jump(_JEQ, AUDIT_ARCH[arch], true=1)
    asm.ret(RET_KILL_PROCESS)
    asm.load(_NR)
    if arch == "x86_64":
        asm.jump(_JGE, X32_SYSCALL_BIT, false=1)
        asm.ret(RET_KILL_PROCESS)
    _search(asm, runs(rules, arch, default))
    return asm.bytes()


DOCKER_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}
LOW_HALF = 0xFFFFFFFF


def docker_profile(rules: Sequence[Rule], arch: str) -> dict[str, Any]:
    """``rules`` as a Docker (OCI) seccomp profile, for the docker backend's containers: the
    same verdicts as :func:`program`'s, as an Engine's libseccomp can say them, arguments
    compared on their low 32 bits (masked) as the program reads them.

    A profile cannot name the complement of a set of values, and runc drops a rule whose
    verdict is the profile's default (``ENOSYS``; ``EPERM`` on Engines before 23, which ignore
    ``defaultErrnoRet``). So a call allowed by argument is allowed for the values that pass,
    and refused by rules of its own (libseccomp lets a refusal win where both match) for the
    values that fail, where a mask can say them (``arg_without``: one rule per bit); a value
    that passes no rule gets the default (``arg_in``'s others). A call allowed unless its
    argument is one of some values (``arg_not_in``) is allowed outright, its refusal winning
    for those values, which therefore must not be the default's. A call the Engine's libseccomp
    does not know by name is left out by runc: it fails with the default."""

    def masked(index: int, mask: int, value: int) -> dict[str, Any]:
        return {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}

    syscalls: list[dict[str, Any]] = []
    for rule in rules:
        names = [name for name in rule.names.split() if syscall_number(name, arch) is not None]
        if not names:
            continue
        refused = {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": rule.errno}
        allowed = {"names": names, "action": "SCMP_ACT_ALLOW"}
        if rule.notify:
            raise ValueError(f"{names}: a profile cannot notify a supervisor")
        if not rule.allowed:
            syscalls.append(refused)
        elif rule.arg_in:  # runc makes each condition on one argument a rule: any of them
            args = [masked(rule.arg, LOW_HALF, value) for value in rule.arg_in]
            syscalls.append({**allowed, "args": args})
        elif rule.arg_without:
            bits = [1 << bit for bit in range(32) if rule.arg_without >> bit & 1]
            syscalls.append({**allowed, "args": [masked(rule.arg, rule.arg_without, 0)]})
            syscalls.append({**refused, "args": [masked(rule.arg, bit, bit) for bit in bits]})
        elif rule.arg_not_in:
            if rule.errno in (errno.ENOSYS, errno.EPERM):
                raise ValueError(f"{names}: a refusal by argument must not be the default's")
            args = [masked(rule.arg, LOW_HALF, value) for value in rule.arg_not_in]
            syscalls.extend((allowed, {**refused, "args": args}))
        else:
            syscalls.append(allowed)
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.ENOSYS,
        "architectures": [DOCKER_ARCH[arch]],
        "syscalls": syscalls,
    }


def syscall_number(name: str, arch: str) -> int | None:
    """The call's number on ``arch``; None where it does not exist."""
    return SYSCALLS[name][ARCHES.index(arch)]


def named_calls(rules: Sequence[Rule], arch: str, *, allowed: bool) -> list[str]:
    """The calls ``rules`` allow (some by argument), or deny, that exist on ``arch``."""
    names = [name for rule in rules if rule.allowed == allowed for name in rule.names.split()]
    return [name for name in names if syscall_number(name, arch) is not None]


@dataclass(frozen=True)
class SyscallFilter:
    """The programs for this machine's architecture."""

    arch: str
    base: bytes
    """For the warm template (bwrap loads it)."""
    command: bytes
    """Stacked on ``base`` by the template, in each command."""
    lazy_network: bool
    """Whether ``command`` sends network sockets to the exec's supervisor
    (``NETWORK_SOCKETS``), so that only an exec that makes one gets a network namespace of its
    own; else each warm exec gets one ahead."""
    whole: bytes
    """``base`` and ``command`` in one program: for cold commands (bwrap loads it) and those of
    the rlimits tier (its launcher loads it)."""

    @property
    def allowed(self) -> list[str]:
        """Every call a command can make (``clone``, ``personality``, ``socket``,
        ``socketpair``, ``fadvise64`` and ``preadv2``: by argument)."""
        return named_calls(WHOLE, self.arch, allowed=True)


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


def user_notification() -> str | None:
    """Why this kernel cannot hand a socket made by a supervisor to a command (seccomp user
    notification, Linux 5.0, with ``SECCOMP_IOCTL_NOTIF_ADDFD``, 5.9), or None."""
    with open("/proc/sys/kernel/seccomp/actions_avail") as f:
        if "user_notif" not in f.read().split():
            return "no seccomp user notification (Linux 5.0)"
    if kernel_before((5, 9)):
        return "no SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9)"
    return None


@functools.cache
def host_filter() -> SyscallFilter | None:
    """The filter for this machine, or None where it gets none (see ``unsupported``)."""
    arch = native_arch()
    if arch is None or unsupported() is not None:
        return None
    lazy = user_notification() is None
    command = program((*COMMAND, *([NETWORK_SOCKETS] if lazy else [])), arch, default=RET_ALLOW)
    return SyscallFilter(arch, program(BASE, arch), command, lazy, program(WHOLE, arch))
