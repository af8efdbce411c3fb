"""A row may name its image: one run judges tasks in different environments. Shown on the
Daytona, Aviato, Modal and E2B emulators through their real SDKs (an emulated sandbox names the
image it was made from in ``SANDBOXKIT_EMULATED_IMAGE``, as a real image would show by its
contents):
each row judged in its own image, pools and lenders reusing sandboxes per image within one
size bound, a row whose image is no text ``invalid_row``, and the local backend, which has no
images, refusing one rather than judge on this machine's ``/usr``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sandboxkit import Sandbox, SandboxClient, SandboxPool, get_backend
from sandboxkit.emulators.host import IMAGE_VARIABLE
from sandboxkit.errors import BackendMisconfiguredError
from sandboxkit.harness import FunctionTask
from sandboxkit.integrations.environment import sandbox_environment
from sandboxkit.portal import run_sync
from sandboxkit.rewards import (
    assert_tests_reward,
    exec_reward,
    function_tests_reward,
    input_tests_reward,
    row_image,
    stdio_tests_reward,
)
from sandboxkit.testing.remote import Emulator, client_for

HONOURING = ["daytona", "aviato", "modal", "e2b"]
"""The emulators that show a sandbox its image (``IMAGE_VARIABLE``)."""
IMAGE_OF = f"import os\n\ndef image():\n    return os.environ.get({IMAGE_VARIABLE!r}, '')\n"
"""A completion that says which image it runs in."""
TESTS = ["assert image() == 'img-a'", "assert image().startswith('img-')"]
"""Every row's tests: 1.0 in image ``img-a``, 0.5 in another ``img-`` image, 0.0 elsewhere."""


@pytest.fixture
def client(remote_provider: str, remote_emulator: Emulator) -> Iterator[SandboxClient]:
    with client_for(remote_provider, remote_emulator.url) as c:
        yield c
    assert remote_emulator.live_sandboxes() == 0


@pytest.mark.slow
@pytest.mark.parametrize("remote_provider", HONOURING, indirect=True)
def test_a_batch_mixing_images_is_judged_each_row_in_its_own(client: SandboxClient) -> None:
    """Rows of two images, rows naming none (the pool's default image), and rows whose image
    is not text (invalid: no reward, before any completion runs), in one batch."""
    every_factory = [
        exec_reward(client, image_column="image"),
        assert_tests_reward(client, image_column="image"),
        stdio_tests_reward(client, image_column="image"),
        input_tests_reward(client, image_column="image"),
        function_tests_reward(
            [FunctionTask("def f():\n", "f", ["1"], int)], backend=client, image_column="image"
        ),
    ]
    assert [made.image_column for made in every_factory] == ["image"] * 5
    images = ["img-a", "img-b", 7, None, "", "img-b", ["img-a"]]
    reward = assert_tests_reward(client, image_column="image", pool_size=3, timeout=10)
    try:
        n = len(images)
        scores = reward(["p"] * n, [IMAGE_OF] * n, test_list=[TESTS] * n, image=images)
        assert scores == [1.0, 0.5, None, 0.0, 0.0, 0.5, None]
        assert reward.last_batch is not None
        assert reward.last_batch.outcomes["invalid_row"] == 2
        # The first row's image filled the pool: b and the default each made room for theirs.
        evicted = reward.metrics(reward.last_batch)["assert_tests_reward/sandboxes_evicted"]
        assert reward.pool.stats.size <= 3 and evicted == reward.pool.stats.evicted >= 2
    finally:
        reward.close()


@pytest.mark.slow
@pytest.mark.parametrize("remote_provider", HONOURING, indirect=True)
def test_a_pool_reuses_sandboxes_per_image_within_its_size(client: SandboxClient) -> None:
    """A full pool stops its least recently used idle sandbox of another image to make room,
    and reuses each image's own sandboxes (here wiped between leases: without ``reuse`` a
    remote sandbox serves one lease); the pool's ``image`` is what a lease naming none gets."""

    async def seen(sandbox: Sandbox) -> tuple[str, str]:
        result = await sandbox.aexec(["sh", "-c", f"printf %s ${IMAGE_VARIABLE}"])
        return sandbox.id, result.stdout

    with SandboxPool(client, size=2, image="img-a", reuse=True) as pool:
        first_a = pool.run(seen)
        again_a = pool.run(seen, image="img-a")
        first_b = pool.run(seen, image="img-b")
        again_b = pool.run(seen, image="img-b")
        last_a = pool.run(seen)
        stats = pool.stats
    assert [image for _, image in (first_a, again_a, first_b, again_b, last_a)] == [
        "img-a",
        "img-a",
        "img-b",
        "img-b",
        "img-a",
    ]
    assert again_b[0] == first_b[0] and first_b[0] not in {first_a[0], last_a[0]}
    assert (stats.created, stats.evicted, stats.leases) == (3, 1, 5)


@pytest.mark.slow
@pytest.mark.parametrize("remote_provider", ["aviato"], indirect=True)
def test_leases_of_many_images_at_once_each_get_their_own(client: SandboxClient) -> None:
    """Concurrent leases of three images on a pool of two, reused (wiped) between leases: each
    runs in its own image, none waits forever, and the pool never keeps more than its size in
    service."""
    images = [f"img-{i % 3}" for i in range(18)]

    async def shown(sandbox: Sandbox) -> str:
        result = await sandbox.aexec(["sh", "-c", f"printf %s ${IMAGE_VARIABLE}"])
        return result.stdout

    async def batch(pool: SandboxPool) -> list[str]:
        sizes: list[int] = []

        async def one(image: str) -> str:
            seen = await pool.arun(shown, image=image)
            sizes.append(pool.stats.size)
            return seen

        seen = await asyncio.wait_for(asyncio.gather(*map(one, images)), timeout=300)
        assert max(sizes) == 2
        return seen

    with SandboxPool(client, size=2, reuse=True) as pool:
        assert run_sync(batch(pool)) == images
        assert pool.stats.size <= 2 and pool.stats.evicted >= 2


@pytest.mark.slow
@pytest.mark.parametrize("remote_provider", ["aviato"], indirect=True)  # the batch shows both
def test_the_environment_resets_into_the_rows_image(client: SandboxClient) -> None:
    """A rollout's tools run in its row's image and its submission is judged in it; the
    lender reuses a sandbox only for the same image (stopping an idle one of another to make
    room); a row whose image is not text gets an error from every tool and no reward. A judge
    reading another column than the rollouts is refused: it would judge in another image."""
    judge = assert_tests_reward(client, image_column="task_image")
    with pytest.raises(ValueError, match=r"reads images from 'task_image', the rollouts from None"):
        sandbox_environment(client, reward=judge)
    environment = sandbox_environment(client, timeout=20, reuse=True, image_column="image")
    row = {"prompt": "p", "test_list": TESTS, "test_setup_code": ""}
    lender = environment.lender()

    def rollout(image: object, program: str) -> tuple[str, float | None]:
        env.reset(**row, image=image)
        said = env.run_python(program)
        env.submit(IMAGE_OF)
        reward = asyncio.run(env.get_reward())
        env.reset()  # its sandbox goes back: wiped, idle for the next rollout of its image
        run_sync(lender.asettle())
        return said, reward

    try:
        env = environment()
        shown = f"import os; os.environ[{IMAGE_VARIABLE!r}]"
        assert rollout("img-a", shown) == ("'img-a'", 1.0)
        assert rollout("img-a", shown) == ("'img-a'", 1.0)
        assert rollout("img-b", shown) == ("'img-b'", 0.5)
        error = "error: this task cannot be run: its image ('image') must be text, not int"
        assert rollout(3, shown) == (error, None)
        stats = lender.stats
        assert (stats.leases, stats.created, stats.reused, stats.evicted) == (3, 2, 1, 1)
    finally:
        environment.close_all()


def test_the_local_backend_refuses_an_image_rather_than_ignore_it(
    local: SandboxClient,
) -> None:
    """Its sandboxes run on this machine's ``/usr``: a row judged there would be judged in
    an environment nobody named."""
    refused = "cannot make one from an image"
    with pytest.raises(BackendMisconfiguredError, match=rf"image_column='image'\): .*{refused}"):
        assert_tests_reward(local, image_column="image")
    with pytest.raises(BackendMisconfiguredError, match=rf"image='img-a'\): .*{refused}"):
        exec_reward("subprocess", image="img-a")
    with pytest.raises(BackendMisconfiguredError, match=refused):
        sandbox_environment(local, image_column="image")
    with (
        SandboxPool(local, size=1, retries=0) as pool,
        pytest.raises(BackendMisconfiguredError, match=rf"image 'img-a': .*{refused}"),
    ):
        pool.run(lambda sandbox: sandbox.aexec(["true"]), image="img-a")
    with get_backend("subprocess", root=local.backend.root) as same:  # type: ignore[attr-defined]
        assert exec_reward(same).image_column is None  # no image: the host's, as ever
        before = same.list()
        bare = rf"^image 'img-a': the subprocess backend .*{refused}"
        with pytest.raises(BackendMisconfiguredError, match=bare):
            same.sandbox(image="img-a")  # a bare client, no session
        with pytest.raises(BackendMisconfiguredError, match=bare):
            SandboxClient(same.backend).sandbox(image="img-a", tags=["x"])
        assert same.list() == before  # refused before anything was made


def test_a_rows_image_is_its_text_or_none() -> None:
    assert [row_image("image", v) for v in ("img-a", " img-b ", "", "  ", None)] == [
        "img-a",
        "img-b",
        None,
        None,
        None,
    ]
    for value in (7, ["img-a"], b"img-a", {"name": "img-a"}):
        with pytest.raises(TypeError, match=r"its image \('image'\) must be text"):
            row_image("image", value)
