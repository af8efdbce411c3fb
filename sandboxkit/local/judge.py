"""The judge's credentials: the trusted test runner and the candidate's processes differ in uid.

The kernel lets a process signal another (``kill``, a pidfd, ``F_SETOWN``'s ``SIGIO``) only if
one of its uids matches one of the target's, or if it holds ``CAP_KILL`` over the target's user
namespace; it lets it trace or read the other's memory only with the same uids. On a root host
each namespaced sandbox therefore has two host uids (``uids``): its own, which every command
runs as, and its judge's, mapped to uid 0 of the sandbox's user namespace (the host writes
both maps: an unprivileged bwrap can map only the uid it runs as). The runner's exec alone
starts with ``CAPABILITIES``; the runner takes the judge's uid before it forks the zygote, whose
processes take the sandbox's uid back and lose every capability (``harness.runner``), so no
candidate process can signal, trace or read the judge, whatever a syscall filter allows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..harness.records import PYTHON, RUNNER_SOURCE
from .isolation import IsolationReport, Tier
from .uids import judge_uid

CAPABILITIES = {"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7}
"""What the runner's exec starts with (names as bwrap takes them, numbers as the kernel does),
in the sandbox's user namespace only: to take the judge's uid, to give its zygote the sandbox's
back, and to kill the test processes of that uid. A command of any other program starts with
none."""


def capabilities(argv: Sequence[str], isolation: IsolationReport) -> tuple[str, ...]:
    """What a command starts with: ``CAPABILITIES`` for the trusted runner in a sandbox with a
    judge's uid (namespaced, on a root host), else nothing. Whoever runs the runner (a
    rollout's tool call included) gets only what its own code does with them: the code and
    tests it is given run as the sandbox's uid."""
    judged = isolation.tier is Tier.NAMESPACES and isolation.uids is not None
    return tuple(CAPABILITIES) if judged and is_runner(argv) else ()


def is_runner(argv: Sequence[str]) -> bool:
    """Whether a command is the trusted runner. It alone keeps the OOM score of the process
    that starts it (the host's, the template's), below the commands' ``OOM_SCORE_ADJ``, which
    its zygote takes before anything of the candidate's runs (``harness.runner``): while any
    process of the candidate's lives, the kernel kills that one, never the judge, when the
    sandbox's memory runs out (or the host's)."""
    return list(argv) == [PYTHON, "-I", "-c", RUNNER_SOURCE]


def write_id_maps(pid: int, uid: int) -> None:
    """Map, in the user namespace of ``pid`` (which bwrap made as ``uid`` and holds until the
    maps are written), ``uid`` to itself and uid 0 to the judge's uid; gids alike. Needs
    CAP_SETUID and CAP_SETGID of the host (a root host)."""
    judge = judge_uid(uid)
    for name in ("uid_map", "gid_map"):
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
        try:
            os.write(fd, f"{uid} {uid} 1\n0 {judge} 1\n".encode())
        finally:
            os.close(fd)
