"""Sandboxes on a Ray cluster's nodes: each one is a Ray actor holding a local sandbox.

When the training nodes' CPUs are not enough, this runs the local backend's sandboxes (full
isolation and limits) on other machines with no cloud account: any Ray cluster will do, found
from ``address=``, ``RAY_ADDRESS``, a cluster ``ray start`` made on this machine, or else a
local Ray started on the first ``create`` (``list``, ``get``, ``stop`` and ``reap`` never start
one). Every node needs sandboxkit installed in the Python its Ray workers run.

Each sandbox is a detached actor named ``<id> <json of tags and start time>`` in the
``sandboxkit`` namespace, so that ``list`` and ``reap`` in a new process find what a crashed
run left with one listing and no call to each actor. It reserves ``cpu`` CPUs (and
``memory_mb`` when the spec asks); a sandbox no node could ever hold fails at once, one that
finds no free room waits up to ``create_timeout`` and then is a transient error pools retry.
Calls go to the actor, whose local backend builds each exec's environment from the spec
alone: nothing of the driver's or the Ray worker's environment reaches a program. An actor
that died under a call is a lost sandbox (the next sandbox made on its node stops what it
left). A node must give the namespaces tier, or its environment must choose rlimits
outright. Setup, costs and limits: docs/scale.md.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import json
import logging
import socket
import threading
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..config import ISOLATION_VAR, setting
from ..errors import (
    BackendError,
    BackendMisconfiguredError,
    SandboxError,
    SandboxLostError,
    SandboxNotFoundError,
    TransientBackendError,
    installed_for,
)
from ..local.isolation import Tier
from ..protocol import ExecResult, SandboxInfo, SandboxSpec, SandboxStatus
from ._facts import RAY_ADDRESS_VAR
from .subprocess import SubprocessBackend

with installed_for("the 'ray' backend", "pip install 'sandboxkit[ray]'"):
    import ray
    from ray._private.services import canonicalize_bootstrap_address
    from ray.actor import ActorHandle
    from ray.exceptions import ActorUnavailableError, RayActorError, RayError, RayTaskError

NAMESPACE = "sandboxkit"
"""The Ray namespace of every sandbox's actor, whatever the driver's own namespace."""
DEFAULT_CREATE_TIMEOUT = 300.0
STOP_GRACE_SECONDS = 10.0
"""How long ``stop`` waits for the actor to stop its sandbox before killing it anyway."""
OWNER_TAG = "sandboxkit-ray-actor="
"""Tags each local sandbox with the cluster (its GCS address) and the Ray id of its actor."""
_PROBE_TIMEOUT = 5.0
"""Seconds a cluster's head has to accept a TCP connection before it counts as down."""
logger = logging.getLogger("sandboxkit.ray")
T = TypeVar("T")
_connecting = threading.Lock()


class SandboxActor:
    """One sandbox: a sandbox of the local backend on the node Ray placed this actor on."""

    def __init__(self, local_options: Mapping[str, Any], ray_id: str) -> None:
        self.local_options = dict(local_options)
        self.ray_id = ray_id
        """The sandbox's id on the Ray backend (its actor's name starts with it)."""
        self.backend: SubprocessBackend | None = None
        self.sandbox_id: str | None = None

    def _sandbox(self) -> tuple[SubprocessBackend, str]:
        """The local backend and the sandbox's id in it."""
        if self.backend is None or self.sandbox_id is None:
            raise SandboxNotFoundError("the sandbox was never made (or was stopped)")
        return self.backend, self.sandbox_id

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        options = self.local_options
        if spec.memory_mb is not None:
            options = {**options, "memory_mb": spec.memory_mb}
        self.backend = SubprocessBackend(**options)
        _check_tier(self.backend)
        owner = f"{OWNER_TAG}{ray.get_runtime_context().gcs_address}/"
        try:
            await _stop_orphans(self.backend, owner)
        except (RayError, SandboxError, OSError) as exc:  # a sweep missed is no failed create
            logger.warning("could not stop this node's orphaned sandboxes: %r", exc)
        spec = dataclasses.replace(spec, tags=(*spec.tags, owner + self.ray_id))
        info = await self.backend.create(spec)
        self.sandbox_id = info.id
        return _untagged(info)

    async def exec(
        self,
        argv: Sequence[str],
        timeout: float | None,
        stdin: bytes | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
    ) -> ExecResult:
        local, sandbox_id = self._sandbox()
        return await local.exec(sandbox_id, argv, timeout=timeout, stdin=stdin, cwd=cwd, env=env)

    async def write_file(self, path: str, data: bytes) -> None:
        local, sandbox_id = self._sandbox()
        await local.write_file(sandbox_id, path, data)

    async def read_file(self, path: str) -> bytes:
        local, sandbox_id = self._sandbox()
        return await local.read_file(sandbox_id, path)

    async def info(self) -> SandboxInfo:
        local, sandbox_id = self._sandbox()
        return _untagged(await local.get(sandbox_id))

    async def renew(self) -> None:
        local, sandbox_id = self._sandbox()
        if not local.execs_leave_no_processes:  # what outlived an exec would stay for the next
            raise BackendError(
                f"Ray node {socket.gethostname()} runs sandboxes in the "
                f"{local.isolation.tier.value} tier, where a renewal cannot end every process"
            )
        await local.renew(sandbox_id)

    async def stop(self) -> None:
        if self.backend is not None and self.sandbox_id is not None:
            sandbox_id, self.sandbox_id = self.sandbox_id, None
            await self.backend.stop(sandbox_id)


_RemoteSandbox = ray.remote(SandboxActor)


def _untagged(info: SandboxInfo) -> SandboxInfo:
    """``info`` without the tag that names its actor (the actor's business, not the user's)."""
    return dataclasses.replace(
        info, tags=tuple(t for t in info.tags if not t.startswith(OWNER_TAG))
    )


async def _stop_orphans(local: SubprocessBackend, owner: str) -> None:
    """Stop this node's sandboxes of this cluster whose actor died without stopping them
    (``ray.kill``, which ``stop`` falls back on, the OOM killer): their directories, on a root
    node a tmpfs in memory, would stay until someone reaped the node by hand. Each sandbox
    carries ``owner`` + its Ray id; an actor is named before its sandbox is made, so a
    sandbox being made has a live name."""
    names = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
    live = {owner + n["name"].partition(" ")[0] for n in names if n["namespace"] == NAMESPACE}
    for info in await local.list():
        orphaned = [t for t in info.tags if t.startswith(owner) and t not in live]
        if orphaned:
            logger.warning("stopping sandbox %s: its actor died without it", orphaned[0])
            await local.stop(info.id)


def _check_tier(local: SubprocessBackend) -> None:
    """Refuse a node that fell back from namespaces, unless its environment chose the weaker
    tier: a sandbox there has the node's network, which reaches the cluster's GCS, and Ray asks
    no credentials, so sandboxed code could rewrite what the cluster's workers load."""
    report = local.isolation
    chosen = (setting(ISOLATION_VAR) or "auto").lower() in ("rlimits", "none")
    if report.tier is not Tier.NAMESPACES and not chosen:
        raise BackendMisconfiguredError(
            f"Ray node {socket.gethostname()} cannot run namespaced sandboxes "
            f"({report.reason}): sandboxed code would reach the cluster's GCS over the node's "
            f"network. Run `sandboxkit doctor` there to see why, or set "
            f"{ISOLATION_VAR}=rlimits in the node's environment to accept the risk"
        )


def _actor_name(sandbox_id: str, tags: Sequence[str], started: datetime) -> str:
    """The label that outlives the driver: the id, then the tags and the start time."""
    return f"{sandbox_id} {json.dumps({'tags': list(tags), 'started_at': started.isoformat()})}"


def _parse_name(name: str) -> SandboxInfo | None:
    sandbox_id, _, label = name.partition(" ")
    try:
        data = json.loads(label)
        return SandboxInfo(
            sandbox_id,
            SandboxStatus.RUNNING,
            tuple(data["tags"]),
            datetime.fromisoformat(data["started_at"]),
        )
    except (ValueError, KeyError, TypeError):
        return None  # an actor of this namespace that is not a sandbox


class RayBackend:
    """Local sandboxes in Ray actors, placed by CPU (and memory) on a Ray cluster's nodes."""

    name = "ray"
    sandbox_options: frozenset[str] = frozenset()
    """Provider options a sandbox takes: none (``cpu`` and ``memory_mb`` place it)."""
    images = False
    """Its sandboxes run in its workers' environment, whatever image is named."""
    execs_leave_no_processes = True
    """Nodes run namespaced sandboxes (a pid namespace per exec); one whose environment chose
    a weaker tier refuses to :meth:`renew`, and a pool or lender replaces the sandbox."""

    def __init__(
        self,
        *,
        address: str | None = None,
        cpu: float = 1.0,
        create_timeout: float = DEFAULT_CREATE_TIMEOUT,
        local: Mapping[str, Any] | None = None,
    ) -> None:
        """``address`` of the cluster (else ``RAY_ADDRESS``, else Ray's own search, else a
        local Ray started on demand); ``cpu`` each sandbox reserves when its spec does not
        say; ``create_timeout`` the seconds a ``create`` waits for room on the cluster;
        ``local`` the options of each node's :class:`SubprocessBackend` (limits,
        ``read_only_paths``, ``warm``...)."""
        if cpu <= 0:
            raise ValueError(f"cpu must be positive, got {cpu}")
        self.address = address or setting(RAY_ADDRESS_VAR)
        self.cpu = cpu
        self.create_timeout = create_timeout
        self.local_options = dict(local or {})
        self.account = f"ray {self.address or 'auto'}"
        """What its sandboxes share: the cluster (ranks on one machine share a budget per
        account)."""
        self._handles: dict[str, ActorHandle] = {}
        self._session: str | None = None
        """The Ray job (session) of this process the handles were got in: a handle is valid
        only there, and ``ray.shutdown()`` then ``ray.init()`` starts another."""

    # -- connection --------------------------------------------------------------------------

    def _connect(self, start: bool) -> bool:
        """Connect this process to the cluster, starting a local one only if ``start``;
        False when there is no cluster to find. An address is tried with a TCP connect
        first: ``ray.init`` retries one that does not answer for minutes (a cluster a killed
        ``ray start`` left recorded, a head that is down)."""
        with _connecting:
            if ray.is_initialized():
                return True
            address = self.address
            if address in (None, "auto"):
                address = _running_cluster("auto" if address or not start else None)
                if address is None and not start:
                    return False
            elif address != "local":
                try:
                    probe_ray(address, _PROBE_TIMEOUT)
                except ValueError as exc:
                    raise BackendMisconfiguredError(f"{exc} ({RAY_ADDRESS_VAR})") from None
                except OSError as exc:
                    raise TransientBackendError(
                        f"no Ray cluster answers at {address}: {exc}"
                    ) from None
            try:
                ray.init(
                    address=address or "local",
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except ConnectionError as exc:
                raise TransientBackendError(f"no Ray cluster at {address}: {exc}") from exc
            return True

    async def _connected(self, start: bool = False) -> bool:
        if ray.is_initialized():
            return True
        return await asyncio.to_thread(self._connect, start)

    async def _names(self) -> builtins.list[str]:
        if not await self._connected():
            return []
        actors = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        return [a["name"] for a in actors if a["namespace"] == NAMESPACE]

    def _remember(self, sandbox_id: str, handle: ActorHandle | None = None) -> ActorHandle | None:
        """The handle kept for ``sandbox_id`` in this Ray session (or keep ``handle``); those
        of an earlier session are forgotten first."""
        session = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        if session != self._session:
            self._handles.clear()
            self._session = session
        if handle is not None:
            self._handles[sandbox_id] = handle
        return self._handles.get(sandbox_id)

    async def _handle(self, sandbox_id: str) -> ActorHandle:
        handle = self._remember(sandbox_id)
        if handle is not None:
            return handle
        name = next((n for n in await self._names() if n.partition(" ")[0] == sandbox_id), None)
        if name is None:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r} (stopped, or never created)")
        try:
            handle = await asyncio.to_thread(ray.get_actor, name, NAMESPACE)
        except ValueError:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r} (stopped)") from None
        self._remember(sandbox_id, handle)
        return handle

    async def _call(self, sandbox_id: str, ref: Awaitable[T]) -> T:
        """The actor's answer; what the local backend raised, raised here."""
        try:
            return await ref
        except RayTaskError as exc:
            if isinstance(exc.cause, Exception):
                raise exc.cause from None
            raise BackendError(f"sandbox {sandbox_id}: {exc}") from exc
        except ActorUnavailableError as exc:
            raise TransientBackendError(f"sandbox {sandbox_id} is unreachable: {exc}") from exc
        except RayActorError as exc:
            self._handles.pop(sandbox_id, None)
            raise SandboxLostError(f"sandbox {sandbox_id}'s actor died: {exc}") from exc

    # -- placement ---------------------------------------------------------------------------

    @staticmethod
    def _check_fits(cpu: float, memory_mb: int | None) -> None:
        """Fail at once for a sandbox no node could ever hold (Ray would wait forever)."""
        nodes: builtins.list[dict[str, float]] = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        memory = (memory_mb or 0) * 2**20
        if any(n.get("CPU", 0) >= cpu and n.get("memory", 0) >= memory for n in nodes):
            return
        largest = max(nodes, key=lambda n: n.get("CPU", 0), default={})
        asked = f"{cpu:g} CPUs" + (f" and {memory_mb} MB" if memory_mb else "")
        raise BackendMisconfiguredError(
            f"no node of the Ray cluster has {asked} (the largest of {len(nodes)} has "
            f"{largest.get('CPU', 0):g} CPUs and {largest.get('memory', 0) / 2**20:.0f} MB): "
            "ask for less (cpu=, memory_mb=) or add a bigger node"
        )

    # -- Backend protocol ----------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        await self._connected(start=True)
        cpu = spec.cpu if spec.cpu is not None else self.cpu
        await asyncio.to_thread(self._check_fits, cpu, spec.memory_mb)
        sandbox_id = f"sbx-{uuid.uuid4().hex[:12]}"
        started = datetime.now(timezone.utc)
        resources: dict[str, Any] = {"num_cpus": cpu}
        if spec.memory_mb is not None:
            resources["memory"] = spec.memory_mb * 2**20
        handle = _RemoteSandbox.options(
            name=_actor_name(sandbox_id, spec.tags, started),
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,
            **resources,
        ).remote(self.local_options, sandbox_id)
        try:
            await asyncio.wait_for(
                self._call(sandbox_id, handle.create.remote(spec)), self.create_timeout
            )
        except asyncio.TimeoutError:
            ray.kill(handle, no_restart=True)
            raise TransientBackendError(
                f"no room on the Ray cluster for a sandbox of {cpu:g} CPUs within "
                f"{self.create_timeout:g} s (free: {ray.available_resources().get('CPU', 0):g} "
                "CPUs); stop sandboxes, add nodes or ask for fewer CPUs"
            ) from None
        except BaseException:
            ray.kill(handle, no_restart=True)
            raise
        self._remember(sandbox_id, handle)
        return SandboxInfo(sandbox_id, SandboxStatus.RUNNING, tuple(spec.tags), started)

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
        handle = await self._handle(sandbox_id)
        return await self._call(
            sandbox_id,
            handle.exec.remote(list(argv), timeout, stdin, cwd, dict(env) if env else None),
        )

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        handle = await self._handle(sandbox_id)
        await self._call(sandbox_id, handle.write_file.remote(path, bytes(data)))

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        handle = await self._handle(sandbox_id)
        data: bytes = await self._call(sandbox_id, handle.read_file.remote(path))
        return data

    async def stop(self, sandbox_id: str, *, missing_ok: bool = True) -> None:
        try:
            handle = await self._handle(sandbox_id)
        except SandboxNotFoundError:
            if missing_ok:
                return
            raise
        self._handles.pop(sandbox_id, None)
        stopping = asyncio.ensure_future(self._call(sandbox_id, handle.stop.remote()))
        # Once nobody waits for it (timed out, cancelled), how it ends is of no interest: the
        # actor is killed below either way. Retrieved, so asyncio logs no lost exception.
        stopping.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            # Shielded: a cancelled stop must still free the actor's resources. Bounded: an
            # actor a dead driver left waiting for room would only answer once placed.
            await asyncio.wait_for(asyncio.shield(stopping), STOP_GRACE_SECONDS)
        except asyncio.TimeoutError:
            logger.warning(
                "sandbox %s did not stop within %g s: killed", sandbox_id, STOP_GRACE_SECONDS
            )
        except SandboxLostError:
            pass  # the actor is gone already, and its sandbox with it
        finally:
            with contextlib.suppress(RayActorError):
                ray.kill(handle, no_restart=True)

    async def list(
        self, *, tags: Sequence[str] = (), status: SandboxStatus | None = None
    ) -> builtins.list[SandboxInfo]:
        if status not in (None, SandboxStatus.RUNNING):
            return []  # a stopped sandbox's actor is gone
        wanted = set(tags)
        found = [info for name in await self._names() if (info := _parse_name(name))]
        return sorted((i for i in found if wanted <= set(i.tags)), key=lambda i: i.id)

    async def renew(self, sandbox_id: str) -> None:
        """Make a sandbox as new in place, as the local backend's ``renew`` does, on its node
        (see :mod:`sandboxkit.renewal`)."""
        handle = await self._handle(sandbox_id)
        await self._call(sandbox_id, handle.renew.remote())

    async def get(self, sandbox_id: str) -> SandboxInfo:
        handle = await self._handle(sandbox_id)
        try:
            info: SandboxInfo = await self._call(sandbox_id, handle.info.remote())
        except SandboxLostError as exc:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id!r} ({exc})") from exc
        return dataclasses.replace(info, id=sandbox_id)

    async def aclose(self) -> None:
        """Forget the actor handles; the connection is the process's (others may use it) and
        the sandboxes outlive the client until stopped."""
        self._handles.clear()


def _running_cluster(search: str | None) -> str | None:
    """The address of the cluster Ray's own ``search`` finds on this machine, if it answers:
    None, the one ``ray start`` recorded; ``auto``, else any head running here."""
    try:
        found: str | None = canonicalize_bootstrap_address(search)
    except ConnectionError:  # nothing recorded, no head running
        return None
    if found is None:
        return None
    try:
        probe_ray(found, _PROBE_TIMEOUT)
    except OSError as exc:
        logger.warning("the Ray cluster recorded at %s does not answer (%s): ignored", found, exc)
        return None
    return found


def probe_ray(address: str, timeout: float) -> str:
    """``sandboxkit doctor``'s endpoint check: a TCP connection to the head's address; the
    default (``auto``) is a search on this machine, left to the ``list`` call that follows."""
    if address == "auto":
        return "a cluster running here if there is one, else a local Ray started on first use"
    if address == "local":
        return "a new local Ray, started on first use"
    parts = urlsplit(address if "://" in address else f"//{address}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"{address!r} is not host:port or ray://host:port")
    socket.create_connection((parts.hostname, parts.port), timeout).close()
    return "TCP connect"
