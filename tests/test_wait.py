"""Waiting for the first N of many calls; cancelled execs must really stop their processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Iterator

import pytest

from sandboxkit import Sandbox, SandboxClient, await_first, spawn, wait, wait_async
from sandboxkit.testing.remote import processes_with, sleeper_argv, wait_until


@pytest.fixture
def sb(local: SandboxClient) -> Iterator[Sandbox]:
    with local.sandbox() as sandbox:
        yield sandbox


def sleeper(sandbox: Sandbox, marker: str) -> asyncio.Future[object]:
    return asyncio.ensure_future(sandbox.aexec(sleeper_argv(marker, 60), timeout=120))


async def after(seconds: float, value: str) -> str:
    await asyncio.sleep(seconds)
    return value


def test_wait_num_returns_and_cancel_pending() -> None:
    futures = [spawn(after(0, "a")), spawn(after(60, "slow")), spawn(after(0, "b"))]

    done, pending = wait(futures, num_returns=2, timeout=60, cancel_pending=True)

    assert [f.result() for f in done] == ["a", "b"]
    assert pending == [futures[1]] and futures[1].cancelled()


def test_wait_timeout_returns_what_is_done() -> None:
    futures = [spawn(after(60, "slow")), spawn(after(0, "quick"))]
    done, pending = wait(futures, timeout=0.5)
    assert (done, pending) == ([futures[1]], [futures[0]])
    assert not futures[0].done()
    futures[0].cancel()


def test_wait_checks_num_returns() -> None:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    with pytest.raises(ValueError):
        wait([future], num_returns=2)


def test_cancelled_exec_leaves_no_process(sb: Sandbox) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"
    slow = spawn(sb.aexec(sleeper_argv(marker, 60), timeout=120))
    quick = spawn(sb.aexec(["python3", "-c", "print('hi')"], timeout=120))
    assert wait_until(lambda: processes_with(marker))

    done, pending = wait([slow, quick], num_returns=1, timeout=60, cancel_pending=True)

    assert done == [quick] and quick.result().stdout == "hi\n"
    assert pending == [slow] and slow.cancelled()
    assert wait_until(lambda: not processes_with(marker))


def test_await_first_cancels_the_rest_before_returning(sb: Sandbox) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"

    async def main() -> list[str]:
        slow = sleeper(sb, marker)
        while not processes_with(marker):
            await asyncio.sleep(0.05)
        return await await_first([slow, after(0, "first")])

    assert asyncio.run(main()) == ["first"]
    assert wait_until(lambda: not processes_with(marker), timeout=10)


def test_await_first_raises_a_finished_failure() -> None:
    async def fail() -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(await_first([fail(), after(60, "slow")]))


def test_wait_async_keeps_pending_unless_asked(sb: Sandbox) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"

    async def main() -> None:
        slow = sleeper(sb, marker)
        done, pending = await wait_async([slow, after(0, "x")], num_returns=1)
        assert [t.result() for t in done] == ["x"] and pending == [slow]
        assert not slow.done()
        done, pending = await wait_async([slow], timeout=0.2, cancel_pending=True)
        assert (done, pending) == ([], [slow]) and slow.cancelled()

    asyncio.run(main())
    assert wait_until(lambda: not processes_with(marker))


def test_cancelling_wait_async_cancels_the_coroutines_it_started(sb: Sandbox) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"

    async def main() -> None:
        waiting = asyncio.ensure_future(wait_async([sb.aexec(sleeper_argv(marker, 60))]))
        while not processes_with(marker):
            await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    assert wait_until(lambda: not processes_with(marker))
