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
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from ..config import setting
from ..errors import (
    BackendError,
    BackendMisconfiguredError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
)
from ..local import disk
from ..local.cgroup import Cgroups
from ..local.isolation import SANDBOX_BIN, IsolationReport, Tier, bwrap_binary, detect
from ..local.limits import Limits
from ..local.seccomp import host_filter
from ..local.supervisor import Confinement, kill_session, run
from ..local.warm import ColdPath, LearntSite, WarmTemplate
from ..portal import on_portal
from ..protocol import DEFAULT_WORKDIR, ExecResult, SandboxInfo, SandboxSpec, SandboxStatus

logger = logging.getLogger("sandboxkit.local")

ENV_ALLOWLIST = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
"""The only host variables a sandbox inherits; everything else it sees comes from the spec."""
_META = "sandbox.json"
_VIRTUAL_ROOTS = ("/workspace", "/tmp")


def _bury(graveyard: Path, pids: set[int]) -> None:
    """Delete a stopped sandbox's directory once the processes killed in it are gone (a dying
    process may still create files), retrying for a few seconds."""
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    while True:
        shutil.rmtree(graveyard, ignore_errors=True)
        if not graveyard.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _default_root() -> Path:
    return Path(tempfile.gettempdir()) / f"sandboxkit-{os.getuid()}"


class SubprocessBackend:
    """Local sandboxes, confined as well as this machine allows (see ``isolation``)."""

    name = "subprocess"

    def __init__(
        self,
        *,
        root: str | os.PathLike[str] | None = None,
        limits: Limits | None = None,
        read_only_paths: Sequence[str] = (),
        python: str | None = None,
        warm: bool | None = None,
        **limit_overrides: int,
    ) -> None:
        """``root`` holds the sandboxes (``SANDBOXKIT_LOCAL_ROOT``, else a per-user temp dir);
        ``read_only_paths`` are extra host paths shown read-only inside namespaced sandboxes
        (a virtualenv with numpy, say); ``python`` is the interpreter sandboxes get (default:
        this process's, outside any venv); ``warm`` keeps a warm template per namespaced
        sandbox that forks each exec (``SANDBOXKIT_WARM``, default on); keyword limits
        override :class:`Limits` fields."""
        self.root = Path(root or setting("SANDBOXKIT_LOCAL_ROOT") or _default_root())
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.limits = limits or Limits.from_env(**limit_overrides)
        cgroups = Cgroups.shared()
        report = detect(has_cgroup=cgroups.pids is not None, python=python)
        if report.run_as != os.getuid():
            self._check_reachable(report.run_as)
        self._bin = (
            self._python_links(report.python) if report.tier is not Tier.NAMESPACES else None
        )
        self.confinement = Confinement(
            isolation=report,
            limits=self.limits,
            bwrap=bwrap_binary() if report.tier is Tier.NAMESPACES else None,
            cgroups=cgroups,
            read_only=tuple(read_only_paths),
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
    def memory_limit(self) -> str:
        """How ``memory_mb`` holds here: 'cgroup v2' or 'cgroup v1' (per sandbox), 'rlimit'
        (address space per process: no memory cgroup is writable) or 'none'."""
        if self.isolation.tier is Tier.NONE:
            return "none"
        version = self.confinement.cgroups.memory_version
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
            meta: dict[str, Any] = json.loads((path / _META).read_text())
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

    def _host_path(self, sandbox_dir: Path, path: str, workdir: str) -> Path:
        """Map a sandbox path onto the host, refusing anything that resolves outside it."""
        parts = _sandbox_parts(path, workdir)
        base = sandbox_dir / parts[1]
        host = base.joinpath(*parts[2:])
        # The code may have planted symlinks: resolve and check containment.
        resolved = host.resolve()
        if resolved != base.resolve() and base.resolve() not in resolved.parents:
            raise SandboxError(f"{path!r} resolves outside the sandbox")
        return resolved

    def _chown(self, path: Path) -> None:
        uid = self.isolation.run_as
        if uid != os.getuid():
            os.chown(path, uid, uid)

    # -- Backend protocol ------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        workdir = PurePosixPath(spec.workdir)
        if workdir.parts[:2] != ("/", "workspace"):
            raise BackendMisconfiguredError(
                f"workdir {spec.workdir!r}: the local backend's workdir is under /workspace"
            )
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        path = self.root / sandbox_id
        started = datetime.now(timezone.utc)
        meta = {
            "tags": list(spec.tags),
            "env": dict(spec.env),
            "workdir": spec.workdir,
            "started_at": started.isoformat(),
            "owner_pid": os.getpid(),
        }
        path.mkdir(mode=0o711)
        try:
            if self.disk_limit == "tmpfs":
                disk.mount(path, size_mb=self.limits.disk_mb, inodes=self.limits.disk_inodes)
            (path / "workspace").mkdir(mode=0o700)
            (path / "tmp").mkdir(mode=0o700)
            self._host_path(path, spec.workdir, DEFAULT_WORKDIR).mkdir(parents=True, exist_ok=True)
            for sub in ("workspace", "tmp"):
                for dirpath, _dirs, _files in os.walk(path / sub):
                    self._chown(Path(dirpath))
            self._chown(path)
            (path / _META).write_text(json.dumps(meta))  # last: the sandbox exists from here
        except BaseException:
            if self.disk_limit == "tmpfs":
                disk.unmount(path)
            shutil.rmtree(path, ignore_errors=True)
            raise
        return SandboxInfo(sandbox_id, SandboxStatus.RUNNING, tuple(spec.tags), started)

    def _env(
        self, meta: Mapping[str, Any], extra: Mapping[str, str] | None, path: Path
    ) -> dict[str, str]:
        if self.isolation.tier is Tier.NAMESPACES:
            home, tmp, bin_dir = "/workspace", "/tmp", SANDBOX_BIN
        else:
            home, tmp, bin_dir = str(path / "workspace"), str(path / "tmp"), str(self._bin)
        env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
        env |= {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": env.get("LANG", "C.UTF-8"),
        }
        env |= meta["env"]
        env |= dict(extra or {})
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
        path = self._dir(sandbox_id)
        meta = self._meta(path)
        cwd_host = self._host_path(path, cwd or ".", meta["workdir"])
        _give_owner_access(path, ("tmp",))
        _give_owner_access(path, cwd_host.relative_to(path).parts)
        if not cwd_host.is_dir():
            raise SandboxError(f"cwd {cwd!r} is not a directory in the sandbox")
        run_env = self._env(meta, env, path)
        command = list(argv)
        if self.isolation.tier is Tier.NAMESPACES:
            cwd_arg = "/" + str(cwd_host.relative_to(path))
        else:
            cwd_arg = str(cwd_host)
            command = [self._localize(path, a) for a in command]
        try:
            result = await self._exec(sandbox_id, path, command, cwd_arg, run_env, timeout, stdin)
        except (OSError, BackendError) as exc:
            if not (path / _META).exists():
                raise SandboxLostError(f"sandbox {sandbox_id} was stopped during the exec") from exc
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f"exec in sandbox {sandbox_id} failed: {exc}") from exc
        if not (path / _META).exists():
            # Stopped under the command, which was killed: not the program's doing.
            raise SandboxLostError(f"sandbox {sandbox_id} was stopped during the exec")
        return result

    async def _exec(
        self,
        sandbox_id: str,
        path: Path,
        command: list[str],
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult:
        if self.warm:
            try:
                return await on_portal(
                    self._warm_exec(sandbox_id, path, command, cwd, env, timeout, stdin)
                )
            except ColdPath as exc:
                self.last_cold_reason = str(exc)
                logger.debug("sandbox %s: cold exec (%s)", sandbox_id, exc)
        return await run(
            self.confinement,
            command,
            sandbox=sandbox_id,
            workspace=path / "workspace",
            tmp=path / "tmp",
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
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
    ) -> ExecResult:
        """Run through the sandbox's template; always on the portal loop, which outlives
        any caller's loop and so can own the template's process and socket."""
        template = await self._template(sandbox_id, path)
        return await template.run(argv, cwd=cwd, env=env, timeout=timeout, stdin=stdin)

    def warm_template(self, sandbox_id: str) -> WarmTemplate | None:
        """The sandbox's running warm template, if it has one (``sandboxkit doctor`` says
        which way execs run)."""
        return self._templates.get(sandbox_id)

    async def _template(self, sandbox_id: str, path: Path) -> WarmTemplate:
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
                    workspace=path / "workspace",
                    tmp=path / "tmp",
                    env=self._env(self._meta(path), None, path),
                    site=self._site,
                )
                self._templates[sandbox_id] = template
            return template

    @contextlib.contextmanager
    def _lost_if_stopped(self, sandbox_id: str, sandbox_dir: Path) -> Iterator[None]:
        """A file operation that fails because the sandbox was stopped under it is a lost
        sandbox, not a missing file."""
        try:
            yield
        except OSError as exc:
            if not (sandbox_dir / _META).exists():
                raise SandboxLostError(f"sandbox {sandbox_id} was stopped") from exc
            raise

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        sandbox_dir = self._dir(sandbox_id)
        target = self._host_path(sandbox_dir, path, self._meta(sandbox_dir)["workdir"])
        base = sandbox_dir / PurePosixPath(path if path.startswith("/") else "/workspace").parts[1]
        with self._lost_if_stopped(sandbox_id, sandbox_dir):
            parents = []
            directory = target.parent
            while directory != base and base in directory.parents:
                parents.append(directory)
                directory = directory.parent
            for directory in reversed(parents):  # never above the sandbox: it may be gone
                with contextlib.suppress(FileExistsError):
                    directory.mkdir()
                    self._chown(directory)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(data)
            self._chown(tmp)
            tmp.replace(target)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        sandbox_dir = self._dir(sandbox_id)
        target = self._host_path(sandbox_dir, path, self._meta(sandbox_dir)["workdir"])
        with self._lost_if_stopped(sandbox_id, sandbox_dir):
            try:
                return target.read_bytes()
            except FileNotFoundError:
                if (sandbox_dir / _META).exists():
                    raise FileNotFoundError(
                        f"{path}: no such file in sandbox {sandbox_id}"
                    ) from None
                raise
            except IsADirectoryError:
                raise IsADirectoryError(f"{path}: is a directory in sandbox {sandbox_id}") from None

    async def remove(self, sandbox_id: str, path: str) -> None:
        """Remove a file, or an empty directory, of the sandbox, as ``os.remove`` or
        ``os.rmdir`` would (and with their ``OSError``): for an emulator that cleans up after a
        command it ran itself, without another command. Walked from the host through no link
        on the way, which a program may have planted."""
        sandbox_dir = self._dir(sandbox_id)
        parts = _sandbox_parts(path, self._meta(sandbox_dir)["workdir"])
        if len(parts) < 3:
            raise SandboxError(f"{path!r}: cannot remove a sandbox's /workspace or /tmp")
        with (
            self._lost_if_stopped(sandbox_id, sandbox_dir),
            contextlib.closing(_walk(sandbox_dir, parts[1:-1])) as walk,
        ):
            parent = next(walk)
            for _ in parts[1:-1]:  # to the last directory, not past it (that closes them all)
                parent = next(walk)
            try:
                os.unlink(parts[-1], dir_fd=parent)
            except IsADirectoryError:
                os.rmdir(parts[-1], dir_fd=parent)

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        try:
            path = self._dir(sandbox_id)
        except SandboxNotFoundError:
            if missing_ok:
                return
            raise
        # Rename first so a concurrent exec or list sees it gone at once, then delete; a
        # mount point cannot be renamed: its tmpfs goes first (and its files with it).
        if self.disk_limit == "tmpfs":
            disk.unmount(path)
        graveyard = self.root / f".stopped-{sandbox_id}-{uuid.uuid4().hex[:6]}"
        try:
            path.rename(graveyard)
        except FileNotFoundError:
            if missing_ok:
                return
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}") from None
        template = self._templates.pop(sandbox_id, None)
        self._starting.pop(sandbox_id, None)
        pids = self._running.pop(sandbox_id, set())
        if template is not None:
            template.close()
            pids.add(template.spawned.proc.pid)
        for pid in pids:
            kill_session(pid)  # its exec returns at once, killed
        self.confinement.cgroups.drop(sandbox_id)
        try:
            # A thread, shielded: a cancelled stop must still delete the directory.
            await asyncio.shield(
                asyncio.get_running_loop().run_in_executor(None, _bury, graveyard, pids)
            )
        except RuntimeError:  # interpreter shutdown: no new threads
            _bury(graveyard, pids)

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

    async def aclose(self) -> None:
        """Nothing to release per client: sandboxes outlive it until stopped."""


def _sandbox_parts(path: str, workdir: str) -> tuple[str, ...]:
    """The parts of ``path`` (relative to ``workdir``) in the sandbox; it must lie under
    /workspace or /tmp, with no ``..``."""
    parts = (PurePosixPath(workdir) / path).parts
    if len(parts) < 2 or "/" + parts[1] not in _VIRTUAL_ROOTS or ".." in parts:
        raise SandboxError(f"{path!r}: only /workspace and /tmp are writable in a sandbox")
    return parts


def _walk(sandbox_dir: Path, parts: Sequence[str]) -> Generator[int, None, None]:
    """Descriptors (``O_PATH``) of ``sandbox_dir`` and of each directory of ``parts`` under
    it, each opened from the last with ``O_NOFOLLOW``, so never through a link a program
    planted (``OSError`` for a part that is gone, a link or no directory). They stay open
    until the walk is closed."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = [os.open(sandbox_dir, flags)]
    try:
        yield fds[0]
        for part in parts:
            fds.append(os.open(part, flags, dir_fd=fds[-1]))
            yield fds[-1]
    finally:
        for fd in fds:
            os.close(fd)


def _give_owner_access(sandbox_dir: Path, parts: Sequence[str]) -> None:
    """Give the owner back read, write and search on each directory of ``parts`` under
    ``sandbox_dir``: a program that took them away (``chmod 000 /workspace``) would make every
    later exec there fail to start, and so score the next completions a pool runs in the
    sandbox 0. A part that is gone or not a directory ends the walk (the exec then fails on it
    as it would have)."""
    with contextlib.closing(_walk(sandbox_dir, parts)) as walk, contextlib.suppress(OSError):
        next(walk)  # the sandbox's own directory
        for fd in walk:
            mode = os.stat(fd).st_mode
            if mode & 0o700 != 0o700:
                os.chmod(f"/proc/self/fd/{fd}", (mode & 0o7777) | 0o700)
