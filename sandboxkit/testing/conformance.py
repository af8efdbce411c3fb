"""The backend contract as tests, run unchanged against every backend.

Subclass :class:`BackendConformance` in a pytest module and provide a ``backend_client``
fixture yielding a :class:`~sandboxkit.client.SandboxClient` (the fsspec abstract-test shape)::

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        def backend_client(self):
            with get_backend("mine", endpoint=...) as client:
                yield client

Every sandbox a test creates is tagged with a per-test tag and stopped at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from ..client import Sandbox, SandboxClient
from ..errors import SandboxNotFoundError
from ..protocol import SandboxStatus

PY = "python3"
HOST_SECRET_VAR = "SANDBOXKIT_CONFORMANCE_HOST_SECRET"


class BackendConformance:
    """What every backend must do. Needs a ``backend_client`` fixture."""

    @pytest.fixture
    def run_tag(self, backend_client: SandboxClient) -> Iterator[str]:
        tag = f"conformance-{uuid.uuid4().hex[:10]}"
        yield tag
        for info in backend_client.list(tags=[tag]):
            backend_client.stop(info.id)

    @pytest.fixture
    def sb(self, backend_client: SandboxClient, run_tag: str) -> Iterator[Sandbox]:
        with backend_client.sandbox(tags=[run_tag], env={"SBX_SPEC_VAR": "from-spec"}) as sb:
            yield sb

    # -- exec ------------------------------------------------------------------------------

    def test_exec_returns_stdout_stderr_and_status(self, sb: Sandbox) -> None:
        code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
        result = sb.exec([PY, "-c", code], timeout=60)
        assert result.returncode == 3
        assert result.stdout == "out\n"
        assert result.stderr == "err\n"
        assert not result.timed_out and not result.truncated and not result.ok
        assert result.duration > 0

    def test_exec_success_is_ok(self, sb: Sandbox) -> None:
        result = sb.exec([PY, "-c", "print(6 * 7)"], timeout=60)
        assert result.ok and result.stdout.strip() == "42"

    def test_exec_passes_argv_verbatim(self, sb: Sandbox) -> None:
        args = ["a b", "$HOME", "'quoted'", "semi;colon", "ünïcödé"]
        result = sb.exec([PY, "-c", "import sys; print(sys.argv[1:])", *args], timeout=60)
        assert result.stdout.strip() == repr(args)

    def test_exec_feeds_stdin(self, sb: Sandbox) -> None:
        code = "import sys; data = sys.stdin.read(); print(len(data), data[::-1])"
        result = sb.exec([PY, "-c", code], stdin="hello\nworld", timeout=60)
        assert result.stdout.strip() == "11 dlrow\nolleh"

    def test_exec_without_stdin_sees_eof(self, sb: Sandbox) -> None:
        result = sb.exec([PY, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=60)
        assert result.stdout.strip() == "''"

    def test_exec_timeout_is_a_result(self, sb: Sandbox) -> None:
        result = sb.exec([PY, "-c", "import time; time.sleep(60)"], timeout=2)
        assert result.timed_out
        assert result.returncode != 0 and not result.ok
        assert result.duration < 30

    def test_exec_returns_output_printed_before_a_crash(self, sb: Sandbox) -> None:
        result = sb.exec([PY, "-c", "print('before', flush=True); 1/0"], timeout=60)
        assert result.returncode == 1
        assert result.stdout == "before\n"
        assert "ZeroDivisionError" in result.stderr

    def test_unicode_and_binary_output(self, sb: Sandbox) -> None:
        code = "import sys; sys.stdout.buffer.write('héllo ✓\\n'.encode() + bytes([0, 255]))"
        result = sb.exec([PY, "-c", code], timeout=60)
        assert result.stdout_bytes == "héllo ✓\n".encode() + bytes([0, 255])

    def test_env_from_spec_and_exec_and_none_from_host(
        self, sb: Sandbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(HOST_SECRET_VAR, "must-not-leak")
        code = (
            "import os; print(os.environ.get('SBX_SPEC_VAR'), os.environ.get('SBX_EXEC_VAR'),"
            f" os.environ.get({HOST_SECRET_VAR!r}))"
        )
        result = sb.exec([PY, "-c", code], env={"SBX_EXEC_VAR": "from-exec"}, timeout=60)
        assert result.stdout.split() == ["from-spec", "from-exec", "None"]

    def test_exec_env_overrides_spec_env(self, sb: Sandbox) -> None:
        code = "import os; print(os.environ['SBX_SPEC_VAR'])"
        result = sb.exec([PY, "-c", code], env={"SBX_SPEC_VAR": "override"}, timeout=60)
        assert result.stdout.strip() == "override"

    @pytest.mark.parametrize("env", [{"A=B": "1"}, {"": "1"}, {"A": "nul\0byte"}])
    def test_an_environment_no_process_can_hold_is_refused(
        self, backend_client: SandboxClient, sb: Sandbox, env: dict[str, str]
    ) -> None:
        with pytest.raises(ValueError, match="environment variable"):
            sb.exec([PY, "-c", "pass"], env=env, timeout=60)
        with pytest.raises(ValueError, match="environment variable"):
            backend_client.sandbox(env=env)
        assert sb.exec([PY, "-c", "print('still fine')"], timeout=60).stdout == "still fine\n"

    def test_argv_must_be_a_list(self, sb: Sandbox) -> None:
        with pytest.raises(TypeError):
            sb.exec("echo hi")

    # -- files -----------------------------------------------------------------------------

    def test_write_then_exec_and_read_back(self, sb: Sandbox) -> None:
        sb.write_file("main.py", "print('from file')")
        assert sb.exec([PY, "main.py"], timeout=60).stdout == "from file\n"
        assert sb.read_file("main.py") == b"print('from file')"

    def test_bytes_round_trip(self, sb: Sandbox) -> None:
        data = bytes(range(256)) * 64
        sb.write_file("/workspace/blob.bin", data)
        assert sb.read_file("/workspace/blob.bin") == data
        check = "print(len(open('blob.bin', 'rb').read()))"
        assert sb.exec([PY, "-c", check], timeout=60).stdout.strip() == str(len(data))

    def test_files_written_by_code_are_readable(self, sb: Sandbox) -> None:
        code = "import os; os.makedirs('out', exist_ok=True); open('out/r.txt', 'w').write('made')"
        assert sb.exec([PY, "-c", code], timeout=60).ok
        assert sb.read_file("out/r.txt") == b"made"
        assert sb.read_file("/workspace/out/r.txt") == b"made"

    def test_write_creates_parent_directories_and_cwd_applies(self, sb: Sandbox) -> None:
        sb.write_file("pkg/sub/data.txt", "nested")
        result = sb.exec([PY, "-c", "print(open('data.txt').read())"], cwd="pkg/sub", timeout=60)
        assert result.stdout.strip() == "nested"

    def test_tmp_persists_within_a_sandbox(self, sb: Sandbox) -> None:
        sb.write_file("/tmp/note.txt", "kept")
        result = sb.exec([PY, "-c", "print(open('/tmp/note.txt').read())"], timeout=60)
        assert result.stdout.strip() == "kept"

    def test_read_missing_file_raises_file_not_found(self, sb: Sandbox) -> None:
        with pytest.raises(FileNotFoundError):
            sb.read_file("does/not/exist.txt")

    # -- lifecycle -------------------------------------------------------------------------

    def test_info_and_get(self, backend_client: SandboxClient, sb: Sandbox, run_tag: str) -> None:
        info = sb.info()
        assert info.id == sb.id
        assert info.status is SandboxStatus.RUNNING
        assert run_tag in info.tags
        assert info.started_at is not None
        assert backend_client.get(sb.id).id == sb.id

    def test_list_by_tags_matches_all_tags(
        self, backend_client: SandboxClient, run_tag: str
    ) -> None:
        a = backend_client.sandbox(tags=[run_tag, "role-a"])
        b = backend_client.sandbox(tags=[run_tag, "role-b"])
        try:
            assert {i.id for i in backend_client.list(tags=[run_tag])} == {a.id, b.id}
            assert [i.id for i in backend_client.list(tags=[run_tag, "role-a"])] == [a.id]
            running = backend_client.list(tags=[run_tag], status="running")
            assert {i.id for i in running} == {a.id, b.id}
            a.stop()
            assert [i.id for i in backend_client.list(tags=[run_tag], status="running")] == [b.id]
        finally:
            a.stop()
            b.stop()
        assert backend_client.list(tags=[run_tag], status="running") == []

    def test_stop_twice_and_missing(self, backend_client: SandboxClient, run_tag: str) -> None:
        sb = backend_client.sandbox(tags=[run_tag])
        sb.stop()
        sb.stop()
        with pytest.raises(SandboxNotFoundError):
            sb.stop(missing_ok=False)
        with pytest.raises(SandboxNotFoundError):
            sb.exec([PY, "-c", "pass"], timeout=60)
        with pytest.raises(SandboxNotFoundError):
            backend_client.get(sb.id)

    def test_unknown_id_is_not_found(self, backend_client: SandboxClient) -> None:
        with pytest.raises(SandboxNotFoundError):
            backend_client.get(f"no-such-sandbox-{uuid.uuid4().hex[:8]}")

    def test_context_manager_stops(self, backend_client: SandboxClient, run_tag: str) -> None:
        with backend_client.sandbox(tags=[run_tag]) as sb:
            assert sb.exec([PY, "-c", "pass"], timeout=60).ok
        with pytest.raises(SandboxNotFoundError):
            backend_client.get(sb.id)

    # -- async core and sync facade ----------------------------------------------------------

    def test_async_twins_and_concurrent_execs(
        self, backend_client: SandboxClient, run_tag: str
    ) -> None:
        async def main() -> list[str]:
            async with await backend_client.asandbox(tags=[run_tag]) as sb:
                await sb.awrite_file("n.txt", b"7")
                code = "import sys; print(int(open('n.txt').read()) * int(sys.argv[1]))"
                results = await asyncio.gather(
                    *(sb.aexec([PY, "-c", code, str(i)], timeout=60) for i in range(4))
                )
                assert (await sb.aread_file("n.txt")) == b"7"
                return [r.stdout.strip() for r in results]

        assert asyncio.run(main()) == ["0", "7", "14", "21"]

    def test_sync_methods_work_inside_a_running_loop(self, sb: Sandbox) -> None:
        async def notebook_cell() -> str:
            return sb.exec([PY, "-c", "print('from a cell')"], timeout=60).stdout

        assert asyncio.run(notebook_cell()) == "from a cell\n"

    def test_sync_methods_work_from_threads(self, sb: Sandbox) -> None:
        from concurrent.futures import ThreadPoolExecutor

        def work(i: int) -> str:
            return sb.exec([PY, "-c", f"print({i} ** 2)"], timeout=60).stdout.strip()

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(work, range(4))) == ["0", "1", "4", "9"]
