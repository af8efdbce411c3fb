"""Session cleanup however a run ends: context exit, cancellation, signals, SIGKILL + reap."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from sandboxkit import SandboxClient, Session, spawn
from sandboxkit.testing.faults import Faults, FaultyBackend

REPO = Path(__file__).resolve().parents[1]


def sandbox_dirs(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if "sbx-" in p.name]


def test_context_exit_stops_everything_it_created(local: SandboxClient, local_root: Path) -> None:
    outsider = local.sandbox(tags=["outsider"])
    with Session(local, tags=["model=tiny", "step=3"]) as session:
        made = [session.sandbox() for _ in range(3)]
        listed = local.list(tags=[session.run_tag, "model=tiny", "step=3"])
        assert {i.id for i in listed} == {sb.id for sb in made}
        assert session.count(status="running") == 3
    assert local.list(tags=[session.run_tag]) == []
    assert sandbox_dirs(local_root) == [outsider.id]
    outsider.stop()


def test_a_session_on_a_backend_wraps_it_and_stops_what_it_created(
    local: SandboxClient, local_root: Path
) -> None:
    """A bare backend is taken as a client is (the same rule as pools and rewards)."""
    with Session(local.backend) as session:
        made = session.sandbox()
        assert session.client.backend is local.backend
        assert sandbox_dirs(local_root) == [made.id]
    assert sandbox_dirs(local_root) == []
    with pytest.raises(TypeError, match="a backend name or None, got bytes"):
        Session(b"subprocess")  # type: ignore[arg-type]


def test_async_context_and_extra_tags(local: SandboxClient) -> None:
    async def main() -> str:
        async with Session(local, handle_signals=False) as session:
            sandbox = await session.asandbox(tags=["env=python"])
            assert "env=python" in sandbox.tags and session.run_tag in sandbox.tags
            return session.run_tag

    run_tag = asyncio.run(main())
    assert local.list(tags=[run_tag]) == []


def test_async_with_a_clients_asandbox_stops_the_sandbox_at_the_end_of_the_block(
    local: SandboxClient, local_root: Path
) -> None:
    async def main() -> tuple[str, list[str], str]:
        with pytest.raises(RuntimeError, match="inside the block"):
            async with local.asandbox(tags=["how=async-with"]) as sb:
                result = await sb.aexec(["echo", "hi"])
                inside = sandbox_dirs(local_root)
                raise RuntimeError("inside the block")
        return sb.id, inside, result.stdout

    made, inside, out = asyncio.run(main())
    assert (inside, out) == ([made], "hi\n")
    assert sandbox_dirs(local_root) == []


def test_awaiting_asandbox_still_gives_a_sandbox_that_stops_with_async_with(
    local: SandboxClient, local_root: Path
) -> None:
    async def main() -> list[str]:
        async with await local.asandbox() as sb:
            return [sb.id, *sandbox_dirs(local_root)]

    made, *inside = asyncio.run(main())
    assert inside == [made]
    assert sandbox_dirs(local_root) == []


def test_asandbox_can_still_be_scheduled_as_the_coroutine_it_was(
    local: SandboxClient, local_root: Path
) -> None:
    """``asyncio.create_task`` and ``spawn`` take only coroutines: what ``asandbox`` returns
    must still be one."""

    async def main() -> list[str]:
        sb = await asyncio.create_task(local.asandbox())
        return [sb.id]

    made = asyncio.run(main())
    with Session(local, handle_signals=False) as session:
        made.append(spawn(session.asandbox()).result(timeout=60).id)
        assert sorted(sandbox_dirs(local_root)) == sorted(made)
    local.stop(made[0])
    assert sandbox_dirs(local_root) == []


def test_async_with_a_sessions_asandbox_stops_it_through_the_session(
    local: SandboxClient,
) -> None:
    async def main() -> tuple[int, int, int]:
        async with Session(local, handle_signals=False) as session:
            async with session.asandbox(tags=["env=python"]) as sb:
                inside = (len(session.sandboxes), await session.acount(tags=["env=python"]))
            assert sb.id not in {s.id for s in session.sandboxes}
            return (*inside, await session.acount())

    assert asyncio.run(main()) == (1, 1, 0)


def test_sessions_of_one_run_are_counted_together(local: SandboxClient) -> None:
    run_id = uuid.uuid4().hex
    with Session(local, run_id=run_id) as rank0, Session(local, run_id=run_id) as rank1:
        rank0.sandbox()
        rank1.sandbox()
        rank1.sandbox()
        assert rank0.count() == rank1.count(status="running") == 3
        assert rank0.count(status="pending") == 0
        rank0.close()  # closes only its own sandboxes
        assert rank1.count() == 2
    assert rank1.count() == 0


def test_cancelled_creation_leaks_nothing(local: SandboxClient, local_root: Path) -> None:
    faulty = FaultyBackend(local.backend, Faults(create_latency_ms=300))
    session = Session(SandboxClient(faulty), handle_signals=False)

    async def main() -> None:
        creating = asyncio.ensure_future(session.asandbox())
        while faulty.calls["create"] == 0:
            await asyncio.sleep(0.01)
        creating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creating
        # The create finishes, then its sandbox is stopped: before close, not reaped by it.
        deadline = time.monotonic() + 30
        while faulty.calls["stop"] == 0 or sandbox_dirs(local_root):
            assert time.monotonic() < deadline, "the abandoned sandbox was not stopped"
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert faulty.calls["create"] == 1
    assert local.list(tags=[session.run_tag]) == []
    session.close()


def test_closes_when_sandboxes_the_provider_made_despite_an_error(
    local: SandboxClient, local_root: Path
) -> None:
    faulty = FaultyBackend(local.backend, Faults(error_rate=1.0, seed=5))
    session = Session(SandboxClient(faulty), handle_signals=False)
    for _ in range(6):
        with pytest.raises(Exception, match="injected fault"):
            session.sandbox()
    made = sum(n for kind, n in faulty.injected.items() if kind.endswith("after create"))
    assert made > 0 and len(local.list(tags=[session.run_tag])) == made
    session.close()
    assert sandbox_dirs(local_root) == []


def test_signal_handlers_are_installed_and_restored(local: SandboxClient) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    session = Session(local)
    assert all(signal.getsignal(s) != h for s, h in before.items())
    session.close()
    assert {s: signal.getsignal(s) for s in before} == before


def test_reap_requires_a_tag(local: SandboxClient) -> None:
    with Session(local) as session, pytest.raises(ValueError, match="tag"):
        session.reap()


def test_reap_by_tag_and_age(local: SandboxClient) -> None:
    tag = f"run=old-{uuid.uuid4().hex}"
    made = {local.sandbox(tags=[tag, "step=1"]).id for _ in range(2)}
    other = local.sandbox(tags=[f"run=other-{uuid.uuid4().hex}"])
    with Session(local) as janitor:
        assert janitor.reap(tags=[tag], older_than=timedelta(hours=1)) == []
        assert {i.id for i in janitor.reap(tags=[tag], older_than=0, dry_run=True)} == made
        assert {i.id for i in local.list(tags=[tag])} == made
        assert {i.id for i in janitor.reap(tags=[tag, "step=1"], older_than=0.0)} == made
    assert local.list(tags=[tag]) == []
    assert local.get(other.id).id == other.id
    other.stop()


CHILD = """
import os, signal, sys, time
from sandboxkit import Session, get_backend

if os.environ.get("USER_HANDLER"):
    def handler(signum, frame):
        print("user handler ran", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, handler)
session = Session(get_backend("subprocess", root=sys.argv[1]), tags=[sys.argv[2]])
for _ in range(3):
    session.sandbox()
print("ready", flush=True)
time.sleep(120)
"""


def start_child(root: Path, tag: str, **env: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(root), tag],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.mark.parametrize("user_handler", [False, True])
def test_sigterm_stops_the_sandboxes_then_chains(
    local: SandboxClient, local_root: Path, user_handler: bool
) -> None:
    tag = f"run={uuid.uuid4().hex}"
    child = start_child(local_root, tag, **({"USER_HANDLER": "1"} if user_handler else {}))
    assert len(local.list(tags=[tag])) == 3

    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)

    if user_handler:
        assert (child.returncode, out) == (7, "user handler ran\n")
    else:
        assert child.returncode == -signal.SIGTERM
    assert local.list(tags=[tag]) == []
    assert sandbox_dirs(local_root) == []


def test_reap_after_sigkill(local: SandboxClient, local_root: Path) -> None:
    tag = f"run={uuid.uuid4().hex}"
    child = start_child(local_root, tag)
    child.kill()
    child.wait(timeout=60)
    assert len(local.list(tags=[tag])) == 3  # nobody cleaned up

    with Session(local) as janitor:
        reaped = janitor.reap(tags=[tag], older_than=0)

    assert len(reaped) == 3
    assert local.list(tags=[tag]) == []
    assert sandbox_dirs(local_root) == []


def test_atexit_stops_what_was_left_open(local: SandboxClient, local_root: Path) -> None:
    tag = f"run={uuid.uuid4().hex}"
    code = textwrap.dedent(CHILD).replace("time.sleep(120)", "")
    subprocess.run(
        [sys.executable, "-c", code, str(local_root), tag],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
        timeout=120,
        capture_output=True,
    )
    assert local.list(tags=[tag]) == []
    assert sandbox_dirs(local_root) == []


@pytest.mark.parametrize("opened_by", ["run_sync", "on_portal"])
def test_what_closes_with_sandboxkits_loop_is_closed_at_exit(opened_by: str) -> None:
    """A provider's connection closes when its loop shuts down (an async generator's
    ``finally``, as Daytona's client does): sandboxkit's own loop, which never stops,
    finalizes them at exit, after the sessions still open were closed (whose last calls
    may open one), as ``asyncio.run`` does for its loop."""
    code = textwrap.dedent(
        """
        import asyncio, sys
        from sandboxkit.portal import on_portal, run_sync

        async def connection():
            try:
                yield
            finally:
                print("closed", flush=True)

        async def open_one():
            global kept
            kept = connection()
            await kept.__anext__()

        if sys.argv[1] == "run_sync":
            run_sync(open_one())
        else:
            asyncio.run(on_portal(open_one()))
        print("exiting", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, opened_by],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "exiting\nclosed\n", done.stderr[-3000:]


def test_a_forked_child_that_exits_leaves_its_parents_sandboxes_running(
    local: SandboxClient,
) -> None:
    with Session(local, handle_signals=False) as session:
        sb = session.sandbox()
        # multiprocessing's forked children run the interpreter's exit hooks, sandboxkit's too.
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0
        assert sb.exec(["true"], timeout=60).ok


def test_a_portal_call_that_raises_as_its_caller_is_cancelled_logs_no_lost_exception() -> None:
    """A caller on another loop gives up (cancelled) just as its call on sandboxkit's loop
    raises: no task is left whose exception nobody retrieved (asyncio logs that as an error,
    which the strict test run fails on)."""
    code = textwrap.dedent(
        """
        import asyncio, gc, logging
        from sandboxkit.portal import on_portal, portal

        logging.basicConfig(level=logging.ERROR, format="LOGGED %(message)s")

        async def raises_when_told():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass  # as a call that ends its work its own way when cancelled
            raise RuntimeError("raised after the caller left")

        async def caller():
            task = asyncio.ensure_future(on_portal(raises_when_told()))
            await asyncio.sleep(0.2)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

        asyncio.run(caller())
        for _ in range(50):  # the portal's task ends, is dropped and collected
            portal().call(asyncio.sleep(0.01))
            gc.collect()
        print("done", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr[-3000:]
    assert "LOGGED" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
