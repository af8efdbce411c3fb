"""The local backend: each sandbox is a private directory, each exec a confined process.

Sandboxes need no account and no network, which makes this the default for offline training.
Their state lives in their directory (``<root>/<id>/sandbox.json``; the directory is a tmpfs
of its own where the host can mount, see ``local/disk.py``), so ``list`` and ``stop`` also see
the sandboxes of other processes, including ones a crashed run left behind.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from ..config import setting
from ..errors import (
    BackendError,
    BackendMisconfiguredError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
)
from ..hostdirs import private_directory, state_path
from ..keywords import check_keywords, keyword_only
from ..local import disk, files, ipc, uids, view
from ..local.cgroup import Cgroups
from ..local.isolation import IsolationReport, Tier, bwrap_binary, detect
from ..local.limits import Limits, MiB, check_cpus
from ..local.seccomp import host_filter
from ..local.supervisor import Confinement, kill_session, run
from ..local.toolchains import configured_toolchains
from ..local.warm import ColdPath, LearntSite, WarmTemplate
from ..portal import on_portal
from ..protocol import DEFAULT_WORKDIR, ExecResult, SandboxInfo, SandboxSpec, SandboxStatus

logger = logging.getLogger("sandboxkit.local")

ENV_ALLOWLIST = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
"""The only host variables a sandbox inherits; everything else it sees comes from the spec."""
_META = "sandbox.json"
_GRAVEYARD = ".stopped-"
"""A stopped sandbox's directory is renamed ``.stopped-<id>-<random>``, then deleted."""
_UID_LEFTOVER = "uid-"
_MOUNTED_AGAIN = 10
"""Times ``stop`` takes a tmpfs off a sandbox's directory that a renewal mounted again."""
_VIEW = "view"
"""A namespaced sandbox's view of the host (``local.view``), beside its storage."""
HALF_MADE_GRACE_SECONDS = 60
"""A sandbox's directory this old with no metadata yet belongs to a ``create`` that died (a
live one writes it within milliseconds)."""
_VIRTUAL_ROOTS = ("/workspace", "/tmp")
T = TypeVar("T")


def _end_uid(uid: int, shared_ipc: bool) -> bool:
    """Kill every process of a sandbox's ``uid`` (and its judge's), then, where they ran in the
    host's IPC namespace (``shared_ipc``), remove what they made there (``local.ipc``); False
    if some outlive the kill (then nothing is removed: they could make more)."""
    if not uids.kill_processes_of(uid):
        return False
    if shared_ipc:
        ipc.remove_objects_of((uid, uids.judge_uid(uid)))
    return True


def _bury(graveyard: Path, pids: set[int], uid: int | None, holder: Path, shared_ipc: bool) -> None:
    """Delete a stopped sandbox's directory once the processes killed in it are gone (every
    process of its own ``uid``, if it has one, and what they left in the host's IPC), trying
    again for a few seconds while something still appears in it (a dying process may create
    files); then release the uid. What cannot be deleted or released is left for ``reap``
    (:meth:`SubprocessBackend.leftovers`)."""
    if uid is not None and not _end_uid(uid, shared_ipc):
        logger.warning("processes of uid %s outlived their sandbox: `sandboxkit reap` will", uid)
        uid = None  # not given to another sandbox while they live
    deadline = _wait_gone(pids, 10)
    while True:
        try:
            files.remove_tree(graveyard)
            break
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                logger.warning("could not delete %s (%s): `sandboxkit reap` will", graveyard, exc)
                return
        time.sleep(0.05)
    if uid is not None:
        uids.release(uid, holder)


def _write_meta(path: Path, meta: Mapping[str, Any]) -> None:
    """Write a sandbox's ``sandbox.json`` in its directory ``path`` as a new file renamed over
    any old one: no reader finds it half-written or missing. Only the host reads it (the
    spec's env is no business of other sandboxes, which can list this directory in rlimits)."""
    fresh = path / f".{_META}.{uuid.uuid4().hex}"
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(meta))
    os.replace(fresh, path / _META)


def _wait_gone(pids: set[int], seconds: float) -> float:
    """Wait (at most ``seconds``) until none of ``pids`` is running; returns the deadline."""
    deadline = time.monotonic() + seconds
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return deadline


@dataclasses.dataclass(frozen=True)
class _Known:
    """A sandbox as this process's execs find it, read once: its directory, the path of its
    ``sandbox.json`` (whose presence says it still exists) and what that holds, which nothing
    rewrites while it lives (a renewal writes it again as it was), and so the environment
    its commands start from (with the host's locale as it was then)."""

    path: Path
    marker: str
    meta: dict[str, Any]
    env: dict[str, str]


def _left(timeout: float | None, since: float) -> float | None:
    """What is left of an exec's ``timeout`` (from its call, at ``since``): a template's start
    or a failed one before the cold way is the exec's time too, so that the exec returns
    within its timeout as its caller counts it (a batch's deadline counts on it)."""
    return None if timeout is None else max(0.0, timeout - (time.monotonic() - since))


def _default_root() -> Path:
    return state_path("sandboxkit")


class SubprocessBackend:
    """Local sandboxes, confined as well as this machine allows (see ``isolation``)."""

    name = "subprocess"
    sandbox_options: frozenset[str] = frozenset()
    """Provider options a sandbox takes: none (its spec says all there is)."""
    images = False
    """Its sandboxes run on this machine's ``/usr``, whatever image is named."""

    def __init__(
        self,
        *,
        root: str | os.PathLike[str] | None = None,
        limits: Limits | None = None,
        read_only_paths: Sequence[str] = (),
        toolchains: Sequence[str] | None = None,
        python: str | None = None,
        warm: bool | None = None,
        **limit_overrides: Any,
    ) -> None:
        """``root`` holds the sandboxes (``SANDBOXKIT_LOCAL_ROOT``, else a per-user temp dir);
        ``read_only_paths`` are extra host paths shown read-only inside namespaced sandboxes
        (a virtualenv with numpy, say); ``toolchains`` are directories of compilers outside
        ``/usr``, shown read-only with their ``bin`` on the sandboxes' ``PATH``
        (``SANDBOXKIT_LOCAL_TOOLCHAINS``; :mod:`sandboxkit.local.toolchains`); ``python`` is
        the interpreter sandboxes get (default: this process's, outside any venv); ``warm``
        keeps a warm template per namespaced sandbox that forks each exec
        (``SANDBOXKIT_WARM``, default on); keyword limits override :class:`Limits` fields
        (those of ``limits`` too)."""
        limit_names = {f.name for f in dataclasses.fields(Limits)}
        check_keywords(
            "SubprocessBackend()", limit_overrides, keyword_only(type(self)) | limit_names
        )
        self.root = Path(root or setting("SANDBOXKIT_LOCAL_ROOT") or _default_root())
        try:  # in a shared /tmp, another user could make it first and plant what we run
            private_directory(self.root, "the local backend's root", 0o711)
        except PermissionError as exc:
            raise BackendMisconfiguredError(f"{exc} (SANDBOXKIT_LOCAL_ROOT)") from None
        self.account = f"subprocess {self.root.resolve()}"
        """What its sandboxes share (ranks share a budget per account)."""
        self.limits = (
            dataclasses.replace(limits, **limit_overrides)
            if limits is not None
            else Limits.from_env(**limit_overrides)
        )
        cgroups = Cgroups.shared()
        report = detect(has_cgroup=cgroups.pids is not None, python=python)
        if report.run_as != os.getuid():
            self._check_reachable(report.run_as)
        self._bin = (
            self._python_links(report.python) if report.tier is not Tier.NAMESPACES else None
        )
        self.toolchains = configured_toolchains(toolchains, root=self.root, uid=report.run_as)
        self.confinement = Confinement(
            isolation=report,
            limits=self.limits,
            bwrap=bwrap_binary() if report.tier is Tier.NAMESPACES else None,
            cgroups=cgroups,
            read_only=(*read_only_paths, *self.toolchains.directories),
            syscall_filter=host_filter() if report.tier is not Tier.NONE else None,
        )
        self.warm = report.tier is Tier.NAMESPACES and (
            warm if warm is not None else setting("SANDBOXKIT_WARM", "1") != "0"
        )
        self.disk_limit = (
            "none" if report.tier is Tier.NONE else "tmpfs" if disk.can_mount() else "file size"
        )
        """How ``disk_mb`` holds here: 'tmpfs' (a tmpfs per sandbox), 'file size' (only
        ``file_size_mb``, per file: the host cannot mount) or 'none'."""
        self._templates: dict[str, WarmTemplate] = {}
        self.last_cold_reason: str | None = None
        """Why the last exec that could have used a warm template ran the cold way."""
        self._site = LearntSite()
        self._starting: dict[str, asyncio.Lock] = {}
        self._running: dict[str, set[int]] = {}
        """Supervised pids of this process's execs, per sandbox: ``stop`` kills them."""
        self._execs: dict[str, list[int]] = {}
        """Per sandbox: execs in flight here, and execs started here so far."""
        self._known: dict[str, _Known] = {}
        """Sandboxes execs ran in here, until they are stopped or renewed here."""

    def _check_reachable(self, uid: int) -> None:
        """The unprivileged uid the code runs as must be able to reach its sandbox dirs."""
        os.chmod(self.root, 0o711)
        for parent in self.root.resolve().parents:
            if not parent.stat().st_mode & 0o001:
                raise BackendMisconfiguredError(
                    f"sandboxes run as uid {uid}, which cannot enter {parent} (mode "
                    f"{parent.stat().st_mode & 0o777:o}); choose another root with "
                    "SANDBOXKIT_LOCAL_ROOT or root=..."
                )

    @property
    def isolation(self) -> IsolationReport:
        return self.confinement.isolation

    @property
    def execs_leave_no_processes(self) -> bool:
        """Whether nothing an exec starts outlives it (a pid namespace per exec): then a
        sandbox whose files are wiped is as good as new (:mod:`sandboxkit.tools.lender`)."""
        return self.isolation.tier is Tier.NAMESPACES

    @property
    def _shared_ipc(self) -> bool:
        """Whether commands run in the host's IPC namespace (no namespaces of their own)."""
        return self.isolation.tier is not Tier.NAMESPACES

    @property
    def memory_limit(self) -> str:
        """How ``memory_mb`` holds here: 'cgroup v2' or 'cgroup v1' (per sandbox), 'rlimit'
        (address space per process: no memory cgroup is writable) or 'none'."""
        if self.isolation.tier is Tier.NONE:
            return "none"
        version = self.confinement.cgroups.memory_version
        return "rlimit" if version is None else f"cgroup v{version}"

    @property
    def cpu_limit(self) -> str:
        """How ``cpus`` holds here: 'cgroup v2' or 'cgroup v1' (per sandbox), 'rlimit' (no cpu
        cgroup is writable: only ``cpu_seconds`` per process) or 'none'."""
        if self.isolation.tier is Tier.NONE:
            return "none"
        version = self.confinement.cgroups.cpu_version
        return "rlimit" if version is None else f"cgroup v{version}"

    def _python_links(self, python: str) -> Path:
        """``python``/``python3`` for sandboxes that see the host filesystem."""
        bin_dir = self.root / "bin"
        bin_dir.mkdir(mode=0o755, exist_ok=True)
        for name in ("python", "python3"):
            link = bin_dir / name
            if not link.is_symlink() or os.readlink(link) != python:
                tmp = bin_dir / f".{name}.{uuid.uuid4().hex}"
                tmp.symlink_to(python)
                tmp.replace(link)
        return bin_dir

    # -- sandbox directories ---------------------------------------------------------------

    def _dir(self, sandbox_id: str) -> Path:
        if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith("."):
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}")
        path = self.root / sandbox_id
        if not (path / _META).is_file():
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r} (stopped, or never created)")
        return path

    def _meta(self, path: Path) -> dict[str, Any]:
        try:
            # Never through a link nor from a FIFO: in the rlimits tier the program owns ``path``.
            meta: dict[str, Any] = json.loads(files.read_file(path, (_META,)))
        except (OSError, ValueError) as exc:
            raise SandboxNotFoundError(f"no sandbox {path.name!r}") from exc
        return meta

    def _info(self, path: Path) -> SandboxInfo:
        meta = self._meta(path)
        return SandboxInfo(
            id=path.name,
            status=SandboxStatus.RUNNING,
            tags=tuple(meta["tags"]),
            started_at=datetime.fromisoformat(meta["started_at"]),
        )

    def _uid(self, meta: Mapping[str, Any]) -> int:
        """The host uid the sandbox's code runs as: its own, on a root host (``local.uids``)."""
        return int(meta.get("uid", self.isolation.run_as))

    def _owner(self, meta: Mapping[str, Any]) -> int | None:
        """The uid to give what the host makes for the sandbox, if not this process's."""
        uid = self._uid(meta)
        return uid if uid != os.getuid() else None

    def _discard(self, path: Path) -> None:
        """Delete a sandbox's directory that no sandbox uses (one a ``create`` left half-made,
        its tmpfs maybe still mounted, or a stopped one's)."""
        if self.disk_limit == "tmpfs":
            disk.unmount(path)
        files.remove_tree(path)

    # -- Backend protocol ------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        workdir = PurePosixPath(spec.workdir)
        if workdir.parts[:2] != ("/", "workspace"):
            raise BackendMisconfiguredError(
                f"workdir {spec.workdir!r}: the local backend's workdir is under /workspace"
            )
        cpus = spec.cpu if spec.cpu is not None else self.limits.cpus
        check_cpus(cpus)
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        path = self.root / sandbox_id
        started = datetime.now(timezone.utc)
        meta: dict[str, Any] = {
            "tags": list(spec.tags),
            "env": dict(spec.env),
            "workdir": spec.workdir,
            "cpus": cpus,
            "started_at": started.isoformat(),
            "owner_pid": os.getpid(),
        }
        path.mkdir(mode=0o711)
        try:
            if self.isolation.uids is not None:
                meta["uid"] = uids.claim(self.isolation.uids, path)
            self._lay_out(path, meta)
        except BaseException:
            with contextlib.suppress(OSError):
                self._discard(path)
            if "uid" in meta:
                uids.release(meta["uid"], path)
            raise
        return SandboxInfo(sandbox_id, SandboxStatus.RUNNING, tuple(spec.tags), started)

    def _lay_out(self, path: Path, meta: Mapping[str, Any]) -> None:
        """Make a new sandbox's storage in its directory ``path``: a fresh tmpfs where the
        host can mount, its ``workspace`` (with the workdir) and ``tmp``, in the namespaces
        tier its ``view`` of the host, and its ``sandbox.json`` (``meta``), from which on it
        exists: last, or, where a tmpfs is mounted, beneath it before its first mount and on
        it at once, so that while a renewal swaps the tmpfs the sandbox still exists for every
        reader (a ``stop`` that found none would do nothing)."""
        if self.disk_limit == "tmpfs":
            if not (path / _META).is_file():
                _write_meta(path, meta)
            disk.mount(path, size_mb=self.limits.disk_mb, inodes=self.limits.disk_inodes)
            _write_meta(path, meta)
        if self.isolation.tier is Tier.NAMESPACES:
            judge = uids.judge_uid(meta["uid"]) if "uid" in meta else None
            view.make(path / _VIEW, devices=self.disk_limit == "tmpfs", judge=judge)
        (path / "workspace").mkdir(mode=0o700)
        (path / "tmp").mkdir(mode=0o700)
        path.joinpath(*sandbox_parts(meta["workdir"], DEFAULT_WORKDIR)[1:]).mkdir(
            parents=True, exist_ok=True
        )
        # Only what the program may write is its own: the sandbox's directory, and
        # sandbox.json in it, stay the host's, so a program (in the rlimits tier, where it
        # can name them) can neither rewrite the environment of later execs nor make its
        # sandbox look stopped (a lost sandbox is retried, and ends as None).
        owner = self._owner(meta)
        for sub in ("workspace", "tmp"):
            for dirpath, _dirs, _files in os.walk(path / sub):
                if owner is not None:
                    os.chown(dirpath, owner, owner)
        if self.disk_limit != "tmpfs":
            _write_meta(path, meta)

    async def renew(self, sandbox_id: str) -> None:
        """Make a sandbox as new, keeping its id and spec, for a next holder that must find
        nothing of the last (:mod:`sandboxkit.renewal`: a pool's next completion, a lender's
        next rollout). Its storage is made again: a new tmpfs where the host can mount
        (emptying the old one would keep its inode numbers counting, a channel from one holder
        to the next), else new directories. Its warm template, idle, is shown the new tmpfs
        where it had the old (:meth:`_graft`) and serves on: a command can change nothing of
        the template (each exec has processes, a mount, IPC and network namespace and a
        /dev/shm of its own), and starting one costs several times all the rest. Otherwise
        every process of the sandbox ends, its template with them, and a new template starts
        now rather than in the next holder's first exec."""
        path = self._dir(sandbox_id)
        meta = self._meta(path)
        await asyncio.to_thread(self._remake, sandbox_id, path, meta)
        if self.warm and self.warm_template(sandbox_id) is None:
            self._groups(sandbox_id, meta)
            with contextlib.suppress(ColdPath):  # then its execs run the cold way
                await on_portal(self._template(sandbox_id, path, self._uid(meta)))

    def _remake(self, sandbox_id: str, path: Path, meta: Mapping[str, Any]) -> None:
        """``renew``'s work, in a thread: killing a template spins until its cgroup is empty,
        which would hold up the event loop (a trainer's ``reset`` waits on it)."""
        if self._graft(sandbox_id, path, meta):
            return
        _wait_gone(self._end_processes(sandbox_id), 10)
        uid = meta.get("uid")
        if uid is not None and not _end_uid(uid, self._shared_ipc):  # not for a next holder
            raise BackendError(f"processes of sandbox {sandbox_id}'s uid outlived a renewal")
        if self.disk_limit == "tmpfs":
            self._new_tmpfs(sandbox_id, path, meta)  # the template's views went with it
        else:
            for entry in ("workspace", "tmp", _VIEW):
                files.remove_tree(path / entry)
            self._lay_out(path, meta)

    def _new_tmpfs(self, sandbox_id: str, path: Path, meta: Mapping[str, Any]) -> None:
        """Put a new tmpfs in place of the sandbox's: laid out beside it (on a directory named
        as a stopped sandbox's, which ``reap`` deletes should this process die meanwhile),
        then moved over it once the old one is detached, while the copy of ``sandbox.json``
        beneath shows (:meth:`_lay_out`): the sandbox never looks gone, nor half made. Where
        the host refuses to move a mount, it is laid out in place."""
        staging = self.root / f"{_GRAVEYARD}{sandbox_id}-{uuid.uuid4().hex[:6]}"
        staging.mkdir(mode=0o711)
        try:
            self._lay_out(staging, meta)
            # The judge's cache stays (only the judge writes it: nothing of a holder's).
            with contextlib.suppress(OSError):
                disk.move(path / _VIEW / view.CACHE, staging / _VIEW / view.CACHE)
            disk.unmount(path)
            try:
                disk.move(staging, path)
            except OSError:
                self._lay_out(path, meta)
        finally:
            self._discard(staging)

    def _graft(self, sandbox_id: str, path: Path, meta: Mapping[str, Any]) -> bool:
        """Renew the storage of a sandbox whose warm template is idle, with the template kept:
        the old tmpfs emptied (the template's own mounts hold it), a new one laid out in its
        place and shown to the template's mount namespaces (``disk.graft``). Its processes
        need no other end: each exec's died with the exec's pid namespace, whose init and
        command are the server's children (it has none now), as between any two execs. False
        where that cannot be (no template, an exec in flight, no tmpfs, a kernel before Linux
        5.8), or failed half-way: then :meth:`_remake` ends the template and lays the storage
        out again."""
        template = self._templates.get(sandbox_id)
        execs = self._execs.get(sandbox_id, [0, 0])
        if (
            template is None
            or self.disk_limit != "tmpfs"
            or execs[0]
            or self._running.get(sandbox_id)
        ):
            return False
        serving = template.idle_processes()
        if serving is None:
            return False
        processes: list[int] = []
        try:
            processes += [os.pidfd_open(pid) for pid in serving]
            if template.idle_processes() != serving:  # one died, its pid reused: not ours
                return False
            self._known.pop(sandbox_id, None)
            for place in disk.PLACES:
                for name in os.listdir(path / place):
                    files.remove_tree(path / place / name)
            self._new_tmpfs(sandbox_id, path, meta)
            disk.graft(path, processes[2:], again=template.grafted)
        except OSError as exc:
            logger.info("sandbox %s: its template is started again (%s)", sandbox_id, exc)
            return False
        finally:
            for process in processes:
                os.close(process)
        template.grafted = True
        return True

    def _end_processes(self, sandbox_id: str) -> set[int]:
        """Kill the sandbox's warm template and this process's execs in it (each returns at
        once, killed); the pids to wait for."""
        template = self._templates.pop(sandbox_id, None)
        self._starting.pop(sandbox_id, None)
        pids = self._running.pop(sandbox_id, set())
        self._execs.pop(sandbox_id, None)
        self._known.pop(sandbox_id, None)
        if template is not None:
            template.close()
            pids.add(template.spawned.proc.pid)
        for pid in pids:
            kill_session(pid)
        return pids

    def _env(self, meta: Mapping[str, Any], path: Path) -> dict[str, str]:
        """The environment of the sandbox's commands, but for an exec's own variables."""
        if self.isolation.tier is Tier.NAMESPACES:
            home, tmp, bin_dir = "/workspace", "/tmp", view.SANDBOX_BIN
        else:
            home, tmp, bin_dir = str(path / "workspace"), str(path / "tmp"), str(self._bin)
        env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
        env |= {
            "PATH": ":".join([bin_dir, *self.toolchains.bins, "/usr/local/bin:/usr/bin:/bin"]),
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": env.get("LANG", "C.UTF-8"),
        }
        env |= meta["env"]
        return env

    def _localize(self, path: Path, value: str) -> str:
        """In tiers without a mount namespace, point /workspace and /tmp paths at the host dirs."""
        for root in _VIRTUAL_ROOTS:
            if value == root or value.startswith(root + "/"):
                return str(path / root[1:]) + value[len(root) :]
        return value

    async def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        if not argv:
            raise ValueError("argv is empty")
        known = self._known.get(sandbox_id)
        if known is None or not os.path.isfile(known.marker):
            path = self._dir(sandbox_id)
            meta = self._meta(path)
            known = _Known(path, str(path / _META), meta, self._env(meta, path))
            self._known[sandbox_id] = known
        path, meta = known.path, known.meta
        parts = sandbox_parts(cwd or ".", meta["workdir"])[1:]
        try:
            # Walked from the sandbox's directory through no link: the program cannot point
            # the host's chmod elsewhere. (The command then enters it by path, as the program
            # could itself, which is no more than the program can do.)
            files.give_owner_access(path, parts, ("tmp",))
        except SandboxError:
            raise SandboxError(f"cwd {cwd!r} is not a directory in the sandbox") from None
        run_env = {**known.env, **(env or {})}
        command = list(argv)
        if self.isolation.tier is Tier.NAMESPACES:
            cwd_arg = "/" + "/".join(parts)
        else:
            cwd_arg = str(path.joinpath(*parts))
            command = [self._localize(path, a) for a in command]
        cgroups = self.confinement.cgroups
        execs = self._execs.setdefault(sandbox_id, [0, 0])
        alone, execs[0], execs[1] = execs[0] == 0, execs[0] + 1, execs[1] + 1
        started = execs[1]
        events = None
        try:
            self._groups(sandbox_id, meta)
            if alone and self.isolation.tier is not Tier.NONE:
                # else another exec's memory would count with this one's
                events = cgroups.memory_events(sandbox_id, restart=True)
            result = await self._exec(
                sandbox_id, path, self._uid(meta), command, cwd_arg, run_env, timeout, stdin
            )
        except (OSError, BackendError) as exc:
            if not os.path.exists(known.marker):
                self._lost(sandbox_id)
                raise SandboxLostError(f"sandbox {sandbox_id} was stopped during the exec") from exc
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f"exec in sandbox {sandbox_id} failed: {exc}") from exc
        finally:
            execs[0] -= 1
        if not os.path.exists(known.marker):
            # Stopped under the command, which was killed: not the program's doing.
            self._lost(sandbox_id)
            raise SandboxLostError(f"sandbox {sandbox_id} was stopped during the exec")
        after = None if events is None or execs[1] != started else cgroups.memory_events(sandbox_id)
        if events and after and after[1] > events[1] and after[0] == events[0]:
            # Killed for memory while the sandbox stayed within its own limit (the kernel's
            # counts): the host's memory ran out, or a group's above the sandbox's, not the
            # program's. Run again elsewhere, as where the sandbox died.
            raise SandboxLostError(
                f"the kernel killed processes of sandbox {sandbox_id} for memory it had not "
                "used up: the host's ran out during the exec"
            )
        return result

    def _view(self, path: Path) -> Path | None:
        """The sandbox's view of the host (``local.view``); None where it has none (a tier
        without namespaces), so that it sees the host's own files."""
        own = path / _VIEW
        return own if self.isolation.tier is Tier.NAMESPACES and own.is_dir() else None

    def host_inodes(self, sandbox_id: str) -> list[str]:
        """What the sandbox's programs open as the host's own inodes, whose locks and watches
        every other sandbox sees (``local.view``; ``sandboxkit doctor`` reports it)."""
        if self.isolation.tier is not Tier.NAMESPACES:
            return ["every file"]
        return view.host_inodes(self._view(self._dir(sandbox_id)), self.isolation.overlays)

    def _groups(self, sandbox_id: str, meta: Mapping[str, Any]) -> None:
        """Make the sandbox's cgroups with its limits, unless they are made: before the first
        process of it starts here."""
        if self.isolation.tier is not Tier.NONE:
            self.confinement.cgroups.sandbox(
                sandbox_id,
                memory_bytes=self.limits.memory_mb * MiB,
                cpus=float(meta.get("cpus", self.limits.cpus)),
            )

    def _lost(self, sandbox_id: str) -> None:
        """Drop the cgroups of a sandbox stopped during an exec: a ``stop`` that ran before
        the exec made them dropped none."""
        self.confinement.cgroups.drop(sandbox_id)

    async def _exec(
        self,
        sandbox_id: str,
        path: Path,
        uid: int,
        command: list[str],
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult:
        called = time.monotonic()
        if self.warm:
            try:
                return await on_portal(
                    self._warm_exec(
                        sandbox_id, path, uid, command, cwd, env, timeout, stdin, called
                    )
                )
            except ColdPath as exc:
                self.last_cold_reason = str(exc)
                logger.debug("sandbox %s: cold exec (%s)", sandbox_id, exc)
            timeout = _left(timeout, called)
        return await run(
            self.confinement,
            command,
            sandbox=sandbox_id,
            uid=uid,
            workspace=path / "workspace",
            tmp=path / "tmp",
            view=self._view(path),
            cwd=cwd,
            env=env,
            timeout=timeout,
            stdin=stdin,
            running=self._running.setdefault(sandbox_id, set()),
        )

    async def _warm_exec(
        self,
        sandbox_id: str,
        path: Path,
        uid: int,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        called: float,
    ) -> ExecResult:
        """Run through the sandbox's template; always on the portal loop, which outlives
        any caller's loop and so can own the template's process and socket."""
        template = await self._template(sandbox_id, path, uid)
        left = _left(timeout, called)
        return await template.run(argv, cwd=cwd, env=env, timeout=left, stdin=stdin)

    def warm_template(self, sandbox_id: str) -> WarmTemplate | None:
        """The sandbox's running warm template, if it has one (``sandboxkit doctor`` says
        which way execs run)."""
        return self._templates.get(sandbox_id)

    async def _template(self, sandbox_id: str, path: Path, uid: int) -> WarmTemplate:
        """The sandbox's warm template, started on first use with the sandbox's environment
        (not the exec's: the template compares each exec's locale with its own)."""
        template = self._templates.get(sandbox_id)
        if template is not None and not template.broken:
            return template
        lock = self._starting.setdefault(sandbox_id, asyncio.Lock())
        async with lock:
            template = self._templates.get(sandbox_id)
            if template is None or template.broken:
                template = await WarmTemplate.start(
                    self.confinement,
                    sandbox=sandbox_id,
                    uid=uid,
                    workspace=path / "workspace",
                    tmp=path / "tmp",
                    view=self._view(path),
                    env=self._env(self._meta(path), path),
                    site=self._site,
                )
                self._templates[sandbox_id] = template
            return template

    async def _file_operation(
        self, sandbox_id: str, path: str, operation: Callable[[Path, tuple[str, ...]], T]
    ) -> T:
        """Run ``operation`` on the sandbox's directory and the parts of ``path`` below it, in
        a thread (nothing a program left may hold up the event loop); a failure because the
        sandbox was stopped under it is a lost sandbox, not a missing file."""

        def work() -> T:
            sandbox_dir = self._dir(sandbox_id)
            parts = sandbox_parts(path, self._meta(sandbox_dir)["workdir"])[1:]
            try:
                return operation(sandbox_dir, parts)
            except OSError as exc:
                if not (sandbox_dir / _META).exists():
                    raise SandboxLostError(f"sandbox {sandbox_id} was stopped") from exc
                raise

        return await asyncio.to_thread(work)

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        await self._file_operation(
            sandbox_id,
            path,
            lambda top, parts: files.write_file(top, parts, data, self._owner(self._meta(top))),
        )

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self._file_operation(sandbox_id, path, files.read_file)

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        try:
            path = self._dir(sandbox_id)
            uid = self._meta(path).get("uid")
            if uid is not None:
                uids.renew(uid)
        except SandboxNotFoundError:
            if missing_ok:
                return
            raise
        # Rename first so a concurrent exec or list sees it gone at once, then delete; a
        # mount point cannot be renamed: its tmpfs goes first (and its files with it), again
        # where a renewal in another thread put a new one there meanwhile (that renewal then
        # fails, its sandbox gone).
        graveyard = self.root / f"{_GRAVEYARD}{sandbox_id}-{uuid.uuid4().hex[:6]}"
        for attempt in range(_MOUNTED_AGAIN):
            if self.disk_limit == "tmpfs":
                disk.unmount(path)
            try:
                path.rename(graveyard)
                break
            except FileNotFoundError:
                if missing_ok:
                    return
                raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}") from None
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == _MOUNTED_AGAIN - 1:
                    raise
        pids = self._end_processes(sandbox_id)
        self.confinement.cgroups.drop(sandbox_id)
        try:
            # A thread, shielded: a cancelled stop must still delete the directory.
            await asyncio.shield(
                asyncio.get_running_loop().run_in_executor(
                    None, _bury, graveyard, pids, uid, path, self._shared_ipc
                )
            )
        except RuntimeError:  # interpreter shutdown: no new threads
            _bury(graveyard, pids, uid, path, self._shared_ipc)

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        if status not in (None, SandboxStatus.RUNNING):
            return []  # stopped sandboxes are deleted at once
        wanted = set(tags)
        found = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(".") or not (entry / _META).is_file():
                continue
            with contextlib.suppress(SandboxNotFoundError):
                info = self._info(entry)
                if wanted <= set(info.tags):
                    found.append(info)
        return found

    async def get(self, sandbox_id: str) -> SandboxInfo:
        return self._info(self._dir(sandbox_id))

    async def leftovers(self) -> builtins.list[str]:
        """What half-stopped sandboxes left in ``root`` (names): the directory of a stopped
        sandbox that ``stop`` could not delete (a file it may not delete, a process killed
        before it was done) and that of a ``create`` that died half-way; then, as ``uid-N``,
        the host uids still claimed for sandboxes of ``root`` (or of a deleted root) that are
        gone. ``sandboxkit
        reap`` finds them here and deletes them with :meth:`remove_leftover`."""
        found = sorted(entry.name for entry in os.scandir(self.root) if _is_leftover(entry))
        if self.isolation.uids is not None:
            found += [f"{_UID_LEFTOVER}{uid}" for uid in uids.stale(self.root)]
        return found

    async def remove_leftover(self, name: str) -> None:
        """Delete one of :meth:`leftovers` (nothing else); a uid is released once every
        process of it is killed."""
        if name not in await self.leftovers():
            raise SandboxNotFoundError(f"{name!r} is not a half-stopped sandbox")
        if name.startswith(_UID_LEFTOVER):
            uid = int(name.removeprefix(_UID_LEFTOVER))
            holder = uids.holder_of(uid)
            if not await asyncio.to_thread(_end_uid, uid, self._shared_ipc):
                raise BackendError(f"processes of uid {uid} outlive every kill")
            if holder is not None:
                uids.release(uid, holder)
            return

        try:
            await asyncio.to_thread(self._discard, self.root / name)
        except OSError as exc:
            raise BackendError(f"could not delete {self.root / name}: {exc}") from exc

    async def aclose(self) -> None:
        """Nothing to release per client: sandboxes outlive it until stopped."""


def _is_leftover(entry: os.DirEntry[str]) -> bool:
    if not entry.is_dir(follow_symlinks=False):
        return False
    if entry.name.startswith(_GRAVEYARD):
        return True
    if not entry.name.startswith("sbx-") or os.path.lexists(os.path.join(entry.path, _META)):
        return False
    return time.time() - entry.stat(follow_symlinks=False).st_mtime > HALF_MADE_GRACE_SECONDS


@functools.lru_cache(maxsize=256)  # an exec's cwd, each time
def sandbox_parts(path: str, workdir: str) -> tuple[str, ...]:
    """The parts of ``path`` (relative to ``workdir``) in the sandbox; it must lie under
    /workspace or /tmp, with no ``..``. Without the leading ``/``, they are the parts beneath
    the sandbox's directory on the host (``root / sandbox_id``) that :mod:`sandboxkit.local.files`
    resolves."""
    parts = (PurePosixPath(workdir) / path).parts
    if len(parts) < 2 or "/" + parts[1] not in _VIRTUAL_ROOTS or ".." in parts:
        raise SandboxError(f"{path!r}: only /workspace and /tmp are writable in a sandbox")
    return parts
