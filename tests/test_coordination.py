"""Ranks on one machine sharing one budget per provider account (``sandboxkit.coordination``).

The ranks are real processes; what they hold in flight is counted through a file they append
to (appends are atomic), never by timing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandboxkit import SandboxClient, SandboxPool, Session, coordination, get_backend
from sandboxkit.config import child_pythonpath
from sandboxkit.coordination import (
    COORDINATE_VAR,
    DIRECTORY_VAR,
    SharedBudget,
    coordination_wanted,
    launcher_run_id,
)

LAUNCHER_VARS = (
    "LOCAL_WORLD_SIZE",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    COORDINATE_VAR,
)


@pytest.fixture(autouse=True)
def shared_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A coordination directory of the test's own, and no launcher around it."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    directory = tmp_path / "coordination"
    monkeypatch.setenv(DIRECTORY_VAR, str(directory))
    return directory


def rank(code: str, *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A process running ``code`` (with ``asyncio``, ``os``, ``sys`` and ``SharedBudget``
    imported), in this test's coordination directory."""
    prelude = "import asyncio, os, sys, time\nfrom sandboxkit.coordination import SharedBudget\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": child_pythonpath(), **(env or {})},
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    return out


async def waits(budget: SharedBudget) -> bool:
    """Whether taking one more exec token has to wait (it is given back if not)."""
    try:
        token = await asyncio.wait_for(budget.acquire("exec"), 0.3)
    except asyncio.TimeoutError:
        return True
    token.release()
    return False


# -- the budget across processes ----------------------------------------------------------------


@pytest.mark.slow
def test_ranks_never_have_more_calls_in_flight_than_the_shared_limit(tmp_path: Path) -> None:
    log, ranks = tmp_path / "in-flight.log", 3
    code = f"""
        budget = SharedBudget("acct", 2)  # 3 ranks of 2: the shared limit is 6
        open({str(tmp_path)!r} + f"/joined-{{os.getpid()}}", "w").close()
        while len([n for n in os.listdir({str(tmp_path)!r}) if n.startswith("joined")]) < {ranks}:
            time.sleep(0.01)
        out = os.open({str(log)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

        async def call():
            token = await budget.acquire("exec")
            os.write(out, b"+\\n")
            await asyncio.sleep(0.01)
            os.write(out, b"-\\n")
            token.release()

        async def main():
            await asyncio.gather(*(call() for _ in range(40)))  # 40 at once, 2 allowed each
        asyncio.run(main())
        print(budget.limit)
    """
    outputs = [finish(p) for p in [rank(code) for _ in range(ranks)]]
    assert all(out.split() == ["6"] for out in outputs)
    in_flight = peak = 0
    for line in log.read_text().split():
        in_flight += 1 if line == "+" else -1
        peak = max(peak, in_flight)
    assert len(log.read_text().split()) == 2 * 40 * ranks
    assert 1 <= peak <= 6


@pytest.mark.slow
def test_a_rate_limit_seen_by_one_rank_slows_every_rank() -> None:
    budget = SharedBudget("acct", 4)
    other = rank(
        """
        budget = SharedBudget("acct", 4)
        async def main():
            token = await budget.acquire("exec")
            budget.rate_limited(token, retry_after=600)  # a 429 asking for 10 minutes
            token.release()
        asyncio.run(main())
        print("done", flush=True)
        time.sleep(300)
        """
    )
    assert other.stdout is not None and other.stdout.readline().strip() == "done"
    try:
        assert (budget.limit, budget.signals) == (4, 1)  # 8 halved, for both ranks
        assert asyncio.run(waits(budget))  # its Retry-After holds every rank back
    finally:
        other.kill()
        other.wait()
        budget.close()


@pytest.mark.slow
def test_a_rank_killed_while_holding_calls_leaves_the_budget_whole() -> None:
    budget = SharedBudget("acct", 2)
    holder = rank(
        """
        budget = SharedBudget("acct", 2)
        async def main():
            held = [await budget.acquire("exec") for _ in range(budget.limit)]
            print(len(held), flush=True)
            await asyncio.sleep(300)
        asyncio.run(main())
        """
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "4"
        assert asyncio.run(waits(budget))  # every token of the shared limit is held
        holder.send_signal(signal.SIGKILL)
        holder.wait()

        async def take_all() -> None:
            held = [await budget.acquire("exec") for _ in range(budget.limit)]
            assert len(held) == 4
            for token in held:
                token.release()
            budget.rate_limited(held[0])  # the dead rank's share leaves the maximum: 2 // 2
            assert budget.limit == 1

        asyncio.run(take_all())
    finally:
        budget.close()


@pytest.mark.slow
def test_a_forked_child_outliving_its_rank_holds_none_of_its_tokens() -> None:
    """A data loader worker forked while its rank held tokens shares their locks; it closes
    its copies, so the rank's death still frees them."""
    budget = SharedBudget("acct", 1)
    holder = rank(
        """
        budget = SharedBudget("acct", 4)
        async def main():
            held = [await budget.acquire("exec") for _ in range(budget.limit)]
            worker = os.fork()
            if worker == 0:
                time.sleep(300)
                os._exit(0)
            print(worker, len(held), flush=True)
            await asyncio.sleep(300)
        asyncio.run(main())
        """
    )
    worker = 0
    try:
        assert holder.stdout is not None
        worker, held = map(int, holder.stdout.readline().split())
        assert held == 5 and asyncio.run(waits(budget))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert Path(f"/proc/{worker}").exists()  # the worker lives on
        token = asyncio.run(budget.acquire("exec"))
        token.release()
        budget.rate_limited(token)  # the dead rank's share (4) left the maximum: 1 // 2
        assert budget.limit == 1
    finally:
        if worker:
            os.kill(worker, signal.SIGKILL)
        budget.close()


def test_a_closed_rank_takes_its_share_of_the_maximum_with_it() -> None:
    first, second = SharedBudget("acct", 3), SharedBudget("acct", 5)
    assert first.limit == 8
    second.close()
    assert first.limit == 3
    other_account = SharedBudget("other", 2)
    assert other_account.limit == 2
    first.close()
    other_account.close()


# -- a damaged state --------------------------------------------------------------------------


def _damage_state(budget: SharedBudget, damage: str) -> None:
    path = budget.directory / "state.json"
    path.unlink()
    if damage == "a directory":
        path.mkdir()
    elif damage != "missing":
        path.write_text(damage)


@pytest.mark.parametrize(
    "damage",
    [
        "missing",
        "a directory",
        "",
        '{"limit": 4, "maxi',
        "null",
        "[]",
        "{}",
        "[" * 100_000,
        '{"maximum": 4, "limit": "x", "epoch": 0, "successes": 0, "signals": 0}',
        '{"maximum": 4, "limit": 0, "epoch": 0, "successes": 0, "signals": 0}',
        '{"maximum": 1e999, "limit": 4, "epoch": 0, "successes": 0, "signals": 0}',
        '{"maximum": 4, "limit": 4, "epoch": 0, "successes": 0, "signals": 0,'
        ' "backoff_until": 1e300}',
    ],
)
def test_a_damaged_state_neither_crashes_nor_stalls_a_rank(damage: str) -> None:
    """The state file is only a hint shared by the ranks: whatever it holds (a truncated
    write, another version's, garbage), a training rank keeps taking tokens, reporting
    results, joining and leaving; it runs at its own maximum until a change rewrites it."""
    budget = SharedBudget("acct", 3)
    _damage_state(budget, damage)

    async def calls(rank: SharedBudget) -> None:
        token = await asyncio.wait_for(rank.acquire("exec"), 10)
        rank.succeeded(token)
        rank.rate_limited(token)
        token.release()

    asyncio.run(calls(budget))
    joined = SharedBudget("acct", 2)
    asyncio.run(calls(joined))
    joined.close()
    assert 1 <= budget.limit <= 3
    budget.close()


def test_damaged_member_files_neither_crash_nor_count() -> None:
    budget = SharedBudget("acct", 3)
    members = budget.directory / "members"
    (members / "a-directory").mkdir()
    (members / "not-a-number").write_text("many")
    (members / "a-link").symlink_to(members / "not-a-number")
    os.mkfifo(members / "a-fifo")
    joined = SharedBudget("acct", 2)
    assert joined.limit == 5
    joined.close()
    assert budget.limit == 3
    budget.close()


def test_a_retry_after_of_years_holds_ranks_back_no_longer_than_the_longest_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The retry policy caps a provider's hint at its longest backoff, since a bogus one must
    not stall a run; the shared back-off must not hold every rank for the whole hint."""
    monkeypatch.setattr(coordination, "MAX_BACKOFF", 0.2)
    budget = SharedBudget("acct", 2)

    async def refused_then_again() -> None:
        token = await budget.acquire("exec")
        budget.rate_limited(token, retry_after=10 * 365 * 86400.0)
        token.release()
        (await asyncio.wait_for(budget.acquire("exec"), 10)).release()

    asyncio.run(refused_then_again())
    budget.close()


# -- turned on by a launcher, and off by a switch -----------------------------------------------


def test_a_launcher_with_several_local_ranks_turns_coordination_on(
    monkeypatch: pytest.MonkeyPatch, local: SandboxClient
) -> None:
    assert coordination_wanted() is False  # one process, no launcher
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert coordination_wanted() is True
    with (
        SandboxPool(local, max_concurrency=3) as a,
        SandboxPool(local, max_concurrency=5) as b,
    ):
        assert a.stats.concurrency_limit == b.stats.concurrency_limit == 8  # one budget
    assert coordination_wanted(False) is False
    monkeypatch.setenv(COORDINATE_VAR, "0")
    assert coordination_wanted() is False
    with SandboxPool(local, max_concurrency=3) as a, SandboxPool(local):
        assert a.stats.concurrency_limit == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv(COORDINATE_VAR, "1")
    assert coordination_wanted() is True
    monkeypatch.setenv(COORDINATE_VAR, "sometimes")
    with pytest.raises(ValueError, match=COORDINATE_VAR):
        coordination_wanted()


def test_every_rank_of_a_launched_run_gets_the_same_run_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert launcher_run_id() is None
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("WORLD_SIZE", "16")
    by_address = launcher_run_id()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default rendezvous id
    assert launcher_run_id() == by_address
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-42")
    by_rendezvous = launcher_run_id()
    assert by_rendezvous not in (None, by_address)
    with Session("subprocess") as one, Session("subprocess") as two:
        assert one.run_id == two.run_id == by_rendezvous
        assert one.session_tag != two.session_tag  # cleanup stays per process


@pytest.mark.slow
def test_reap_finds_every_sandbox_of_a_launched_run_whose_ranks_were_killed(
    local_root: Path,
) -> None:
    launcher = {"TORCHELASTIC_RUN_ID": "killed-run", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}
    code = """
        from sandboxkit import Session
        session = Session("subprocess")
        session.sandbox()
        print(session.run_id, flush=True)
        time.sleep(300)
    """
    ranks = [
        rank(code, env=launcher | {"RANK": str(i), "SANDBOXKIT_LOCAL_ROOT": str(local_root)})
        for i in range(2)
    ]
    try:
        run_ids = {p.stdout.readline().strip() for p in ranks if p.stdout is not None}
    finally:
        for p in ranks:
            p.send_signal(signal.SIGKILL)
            p.wait()
    assert len(run_ids) == 1
    with get_backend("subprocess", root=local_root) as client, Session(client) as reaper:
        reaped = reaper.reap(tags=[f"sandboxkit-run={run_ids.pop()}"])
    assert len(reaped) == 2


# -- the run's cap on live sandboxes ------------------------------------------------------------


@pytest.mark.slow
def test_the_cap_on_live_sandboxes_holds_across_ranks_and_starves_none(
    local_root: Path, tmp_path: Path
) -> None:
    log, ranks, cap = tmp_path / "live.log", 3, 6
    launcher = {"TORCHELASTIC_RUN_ID": "capped", "LOCAL_WORLD_SIZE": str(ranks)}
    code = f"""
        from sandboxkit import SandboxPool

        async def main():
            async with SandboxPool("subprocess", size=4, max_sandboxes={cap}) as pool:
                async def count(sandbox):
                    live = await pool.session.acount()  # every rank's, by the run's tag
                    with open({str(log)!r}, "a") as f:
                        f.write(f"{{live}}\\n")
                await asyncio.gather(*(pool.arun(count) for _ in range(12)))
                print(pool.stats.size, flush=True)
        asyncio.run(main())
    """
    env = launcher | {"SANDBOXKIT_LOCAL_ROOT": str(local_root)}
    outputs = [finish(p) for p in [rank(code, env=env) for _ in range(ranks)]]
    assert [out.split() for out in outputs] == [["2"]] * ranks  # 6 // 3 each: none starves
    counts = [int(n) for n in log.read_text().split()]
    assert len(counts) == 12 * ranks
    assert max(counts) <= cap


def test_without_coordination_max_sandboxes_caps_the_pool(local: SandboxClient) -> None:
    async def main() -> None:
        async with SandboxPool(local, size=4, max_sandboxes=2, coordinate=False) as pool:
            await pool.astart()
            assert pool.stats.size == 2

    asyncio.run(main())


def test_pool_options_are_checked(local: SandboxClient) -> None:
    with pytest.raises(ValueError, match="max_sandboxes"):
        SandboxPool(local, max_sandboxes=0)


# -- a shared temporary directory ---------------------------------------------------------------


@pytest.mark.parametrize("planted", ["world-writable", "someone else's", "a link"])
def test_a_coordination_directory_others_control_is_refused(
    shared_dir: Path, tmp_path: Path, planted: str
) -> None:
    """In a shared /tmp another user can make the directory first, then plant links that the
    budget's writes would follow (as root, anywhere) or a state that throttles every rank."""
    if planted == "a link":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        shared_dir.symlink_to(target)
    else:
        shared_dir.mkdir(mode=0o700)
        if planted == "world-writable":
            shared_dir.chmod(0o777)
        else:
            if os.getuid() != 0:
                pytest.skip("making a directory someone else's needs root")
            os.chown(shared_dir, 65534, 65534)
    with pytest.raises(PermissionError, match=r"the coordination directory .* only uid"):
        SharedBudget("acct", 2)
    if planted == "a link":
        assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing made through it
