"""A host uid of its own for each sandbox of a root host, from a range kept for sandboxkit.

Per-user kernel limits (inotify instances, the pipe-buffer allowance, ``RLIMIT_NPROC``, user
namespaces) are counted per host uid, and the kernel lets a process signal, trace and open the
files of processes of its own uid: sandboxes sharing a uid would share all of that. As Docker's
userns-remap, systemd's DynamicUser and nsjail do, a root host gives each sandbox a uid (and
the gid of the same number) from ``SANDBOXKIT_UID_RANGE`` (``first-last``; by default the
65536 uids from 0x70000000, a range systemd leaves unused) that no other sandbox holds while it
lives, and the next uid for its judge (:func:`judge_uid`: the trusted test runner, which must
differ in credentials from the candidate's processes so that none of them can signal it). The
last uid of the range is never given out: the host's probes run as it.

A claim is a file named by the uid in a directory only root can write (``/run/sandboxkit-uids``,
else the temporary directory's), made with ``O_EXCL`` (the kernel decides between concurrent
claims, of any process) and holding the sandbox's directory; ``stop`` kills every process of
the uid, deletes the sandbox, then releases it, and ``reap`` does so for those whose sandbox
is gone.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path

from ..config import setting
from ..errors import BackendError, BackendMisconfiguredError
from ..hostdirs import private_directory, state_path

RANGE_VAR = "SANDBOXKIT_UID_RANGE"
DEFAULT_RANGE = range(0x70000000, 0x70000000 + 65536)
STALE_AFTER_SECONDS = 60
"""A claim untouched this long whose sandbox is gone is a leftover (``stop`` touches the claim
it is about to release: see :func:`renew`)."""
_KILL_SECONDS = 10.0


def sandbox_uids() -> range | None:
    """The uids sandboxes get two each: ``SANDBOXKIT_UID_RANGE`` on a root host (at least three
    uids: one is the probes'), None where this process cannot give any uid but its own."""
    if os.geteuid() != 0:
        return None
    text = setting(RANGE_VAR)
    if text is None:
        return DEFAULT_RANGE
    first, _, last = text.partition("-")
    try:
        uids = range(int(first), int(last) + 1)
    except ValueError:
        uids = range(0)
    if len(uids) < 3 or uids.start < 1 or uids.stop > 2**32 - 1:
        raise BackendMisconfiguredError(
            f"{RANGE_VAR}={text!r}; expected first-last, three uids or more between 1 and "
            f"{2**32 - 2}, held by no user of this host"
        )
    return uids


def claims_directory() -> Path:
    """Where claims are kept: the same directory for every process of the host."""
    try:
        return private_directory(state_path("sandboxkit-uids"), "the uid claims")
    except PermissionError as exc:  # another user's: its claims would mean nothing
        raise BackendMisconfiguredError(str(exc)) from None


def judge_uid(uid: int) -> int:
    """The host uid of the judge of the sandbox that claimed ``uid``."""
    return uid + 1


def claim(uids: range, holder: Path) -> int:
    """A uid of ``uids`` that no other sandbox holds, now ``holder``'s with its judge's (the
    next, never the range's last). Tried from a random place, so that a uid just released is
    seldom the next one given."""
    directory = claims_directory()
    given = range(uids.start, uids.stop - 2, 2)
    start = random.SystemRandom().randrange(len(given))  # not the state forked ranks share
    for index in range(len(given)):
        uid = given[(start + index) % len(given)]
        try:
            fd = os.open(directory / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(holder))
        return uid
    raise BackendError(f"all {len(given)} sandbox uid pairs of {RANGE_VAR} are in use")


def holder_of(uid: int) -> Path | None:
    """The sandbox directory that holds ``uid``, or None if no one does."""
    try:
        return Path((claims_directory() / str(uid)).read_text())
    except FileNotFoundError:
        return None


def release(uid: int, holder: Path) -> None:
    """Free ``uid`` if ``holder`` still holds it; first kill every process of it
    (:func:`kill_processes_of`), or a later sandbox would share them."""
    if holder_of(uid) == holder:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claims_directory() / str(uid))


def renew(uid: int) -> None:
    """Mark ``uid``'s claim as in use now: a ``stop`` renames the sandbox's directory away
    before it is done with the uid, and a ``reap`` meanwhile must not take the claim for a
    leftover."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(claims_directory() / str(uid))


def claims() -> dict[int, tuple[Path, float]]:
    """Every claimed uid: its holder and when its claim was last touched."""
    found = {}
    for entry in os.scandir(claims_directory()):
        with contextlib.suppress(OSError, ValueError):
            found[int(entry.name)] = (Path(Path(entry.path).read_text()), entry.stat().st_mtime)
    return found


def stale(root: Path) -> list[int]:
    """Claimed uids whose sandbox, of ``root`` or of a root deleted whole, is gone, and whose
    claim no one touched for ``STALE_AFTER_SECONDS`` (``reap`` releases them)."""
    return sorted(
        uid
        for uid, (holder, touched) in claims().items()
        if time.time() - touched > STALE_AFTER_SECONDS
        and not (holder / "sandbox.json").exists()
        and (holder.parent == root or not holder.parent.exists())
    )


def processes_of(uid: int) -> list[int]:
    """Pids of the live processes (not zombies) with ``uid`` or its judge's as their real,
    effective or saved uid."""
    wanted = {str(uid).encode(), str(judge_uid(uid)).encode()}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status", "rb") as status:
                    data = status.read()
            except OSError:
                continue
            at = data.find(b"\nUid:")
            ids = data[at + 5 : data.find(b"\n", at + 1)].split()[:3]
            if wanted.intersection(ids) and b"\nState:\tZ" not in data:
                found.append(int(name))
    return found


def kill_processes_of(uid: int) -> bool:
    """SIGKILL every process of ``uid`` and its judge's until none is left; False if some outlive
    ``_KILL_SECONDS``."""
    deadline = time.monotonic() + _KILL_SECONDS
    while pids := processes_of(uid):
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    return True
