"""The examples, run as a user runs them: scripts in subprocesses, on their offline paths, with
what they print and write checked. The ART loop talks to a real HTTP server speaking the
OpenAI chat-completions API, scripted to fail first and fix its code after feedback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MBPP_SAMPLE = EXAMPLES / "art" / "data" / "mbpp_sample.jsonl"

pytestmark = pytest.mark.slow
NEEDS_EXAMPLES = "needs pip install 'sandboxkit[examples]'"


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_example(
    script: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 540
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=example_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def quiet(stderr: str) -> list[str]:
    """The library warnings an example's user cannot act on that reached its stderr."""
    return [
        line
        for line in stderr.splitlines()
        if "FutureWarning" in line or "Writing model shards" in line or "Loading weights" in line
    ]


# -- the main demo -------------------------------------------------------------------------

REWARD_DEMO = """\
RL Training Reward Function Example (job: JOB)
============================================================

Evaluating 5 completions...


Results:
------------------------------------------------------------
  Problem 0 (arithmetic): reward=1.0 [PASS] OK
  Problem 1 (string-ops): reward=1.0 [PASS] OK
  Problem 2 (syntax-error): reward=0.0 [FAIL] OK
  Problem 3 (runtime-error): reward=0.0 [FAIL] OK
  Problem 4 (list-comp): reward=1.0 [PASS] OK
------------------------------------------------------------
Total reward: 3.0/5
Pass rate: 3/5 (60%)

Cleaning up 0 sandbox(es)...
"""


def check_reward_demo(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    job = re.search(r"\(job: ([0-9a-f]{8})\)", result.stdout)
    assert job is not None, result.stdout
    assert result.stdout == REWARD_DEMO.replace("JOB", job.group(1))


def test_reward_demo_prints_the_expected_rewards(tmp_path: Path) -> None:
    check_reward_demo(run_example("reward_function.py", cwd=tmp_path))


@pytest.mark.parametrize("backend", ["daytona", "aviato", "modal", "e2b"])
def test_reward_demo_gives_the_same_rewards_on_emulated_providers(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    request.getfixturevalue(f"{backend}_env")
    monkeypatch.setenv("SANDBOXKIT_BACKEND", backend)
    monkeypatch.setenv("CWSANDBOX_DISABLE_SIGNAL_HANDLERS", "1")
    check_reward_demo(run_example("reward_function.py", cwd=tmp_path, env=dict(os.environ)))


# -- GRPO runs -----------------------------------------------------------------------------


def test_trl_example_trains_one_step_of_a_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason=NEEDS_EXAMPLES)
    result = run_example("trl_grpo_integration.py", "--tiny", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    assert "Dataset:      5 coding problems" in result.stdout
    assert re.search(r"^Training complete: 1 step, mean reward -?\d\.\d\d$", result.stdout, re.M)
    assert re.search(r"^Sandboxes left under job=[0-9a-f]{8}: 0$", result.stdout, re.M)


def test_daytona_port_writes_metrics_plot_and_model(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason=NEEDS_EXAMPLES)
    pytest.importorskip("matplotlib", reason=NEEDS_EXAMPLES)
    result = run_example(
        "daytona_trl/train_grpo.py", "--tiny", "--output-dir", "results", cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    assert re.search(r"^Training complete: 2 steps, mean reward -?\d\.\d\d$", result.stdout, re.M)
    out = tmp_path / "results"
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert -1.0 <= line["reward"] <= 1.0
        assert line["function_tests_reward/infra_error_rate"] == 0.0
    png = (out / "rewards.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    assert (out / "model" / "config.json").exists()


def test_contest_example_judges_a_tiny_models_cpp_and_python(tmp_path: Path) -> None:
    """The tiny model writes garbage: every program fails, but the step runs end to end, the
    C++ ones as compile errors, and the verdicts' shares reach TRL's log."""
    pytest.importorskip("trl", reason=NEEDS_EXAMPLES)
    result = run_example("contest_grpo.py", "--tiny", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    assert "Languages:    C++17, Python 3\n" in result.stdout
    assert re.search(r"^Training complete: 1 step, mean reward 0\.00$", result.stdout, re.M)
    assert re.search(r"^Sandboxes left under job=[0-9a-f]{8}: 0$", result.stdout, re.M)
    found = re.search(r"^Verdicts at the last step: (.+)$", result.stdout, re.M)
    assert found is not None, result.stdout
    shares = dict(part.split(" ") for part in found.group(1).split(", "))
    assert "compile_error" in shares and "accepted" not in shares, shares
    total = sum(int(share.rstrip("%")) for share in shares.values())
    assert abs(total - 100) <= len(shares), shares  # each share rounded to a percent


def test_tool_use_example_trains_with_a_sandbox_environment(tmp_path: Path) -> None:
    """The tiny model calls no tool and submits nothing, so every reward is 0.0; what runs end
    to end is the environment: its tools offered to the model, its get_reward as TRL's reward
    (logged under the class's name), its sandboxes released when training ends."""
    pytest.importorskip("trl", reason=NEEDS_EXAMPLES)
    result = run_example("tool_use_grpo.py", "--tiny", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    assert "Dataset:      4 MBPP train problems\n" in result.stdout
    assert "Tools:        run_python, submit\n" in result.stdout
    assert "'rewards/MBPPSandbox/mean'" in result.stdout
    assert re.search(r"^Training complete: 2 steps, mean reward 0\.00$", result.stdout, re.M)
    assert re.search(r"^Tool calls per rollout: \d+\.\d\d \(failed: \d+%\)$", result.stdout, re.M)
    assert re.search(r"^Sandboxes left under job=[0-9a-f]{8}: 0$", result.stdout, re.M)


def test_learning_example_raises_the_mean_reward_by_at_least_a_fifth(tmp_path: Path) -> None:
    """GRPO on sandbox rewards alone teaches the pre-fitted tiny model which body each prompt
    asks for. The dataset is not shuffled and the learning rate is constant, so a 40-step run
    is the first 40 steps of the default 60-step one."""
    pytest.importorskip("trl", reason=NEEDS_EXAMPLES)
    pytest.importorskip("matplotlib", reason=NEEDS_EXAMPLES)
    result = run_example("learning_grpo.py", "--steps", "40", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    steps = re.findall(r"^step +(\d+)/40: mean reward (\d\.\d\d) ", result.stdout, re.M)
    assert [int(step) for step, _ in steps] == list(range(1, 41))
    found = re.search(
        r"^Mean reward: first 10 steps (\d\.\d\d), last 10 steps (\d\.\d\d), rise ([-+]\d\.\d\d)$",
        result.stdout,
        re.M,
    )
    assert found is not None, result.stdout
    first, last, rise = (float(x) for x in found.groups())
    assert last - first >= 0.2, result.stdout
    assert abs(rise - (last - first)) <= 0.011
    shown = [float(reward) for _, reward in steps]
    assert abs(sum(shown[:10]) / 10 - first) <= 0.011 and abs(sum(shown[-10:]) / 10 - last) <= 0.011
    out = tmp_path / "out"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 41))
    assert all(m["assert_tests_reward/infra_error_rate"] == 0.0 for m in metrics)
    png = (out / "rewards.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    assert re.search(r"^Sandboxes left under job=[0-9a-f]{8}: 0$", result.stdout, re.M)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("contest_grpo.py", "Training needs an NVIDIA GPU"),
        ("tool_use_grpo.py", "Training needs an NVIDIA GPU"),
        ("unsloth_integration.py", "Unsloth needs an NVIDIA GPU"),
        ("daytona_trl/train_grpo.py", "Training with vLLM needs an NVIDIA GPU"),
    ],
)
def test_gpu_only_paths_exit_3_on_cpu(script: str, message: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=NEEDS_EXAMPLES)
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: these paths would really run")
    result = run_example(script, cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert message in result.stderr
    assert "--tiny" in result.stderr


# -- the ART-style MBPP loop ---------------------------------------------------------------

RIGHT = {
    "reverse_words": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
    "prime_num": "def prime_num(n):\n    return n > 1 and all(n % d for d in range(2, n))\n",
    "is_upper": "def is_upper(s):\n    return s.upper()\n",
}
WRONG = {
    "prime_num": "def prime_num(n):\n    return True\n",
    "move_zero": "def move_zero(xs):\n    return xs\n",
}


class ScriptedChat:
    """Answers for the example's own local OpenAI-compatible server (``chat_server.py``): for
    each problem (found by its function name) the wrong solution, if it has one, until the
    conversation holds feedback."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests: list[list[dict[str, str]]] = []
        self.url = ""

    def answer(self, request: Any) -> str:
        messages = request.messages
        self.requests.append(messages)
        time.sleep(self.delay)
        task = messages[1]["content"]
        name = next(n for n in (*RIGHT, *WRONG) if f"{n}(" in task)
        had_feedback = sum(m["role"] == "assistant" for m in messages) > 0
        code = RIGHT[name] if name in RIGHT and (had_feedback or name not in WRONG) else WRONG[name]
        return f"Here is my solution:\n```python\n{code}```"


def serve(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> Iterator[ScriptedChat]:
    """A scripted chat server for the ART example, whose client is ``openai``."""
    pytest.importorskip("openai", reason=NEEDS_EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES / "art"))
    from chat_server import ChatServer

    scripted = ScriptedChat(delay)
    server = ChatServer(scripted.answer).start()
    scripted.url = server.url
    try:
        yield scripted
    finally:
        server.close()


@pytest.fixture
def chat_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedChat]:
    yield from serve(monkeypatch)


@pytest.fixture
def slow_chat_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedChat]:
    yield from serve(monkeypatch, delay=0.5)


def art_args(server: ScriptedChat, *extra: str) -> list[str]:
    return [
        "--use-openai",
        "--base-url",
        server.url,
        "--model",
        "scripted",
        "--dry-run",
        "--dataset-path",
        str(MBPP_SAMPLE),
        "--rollouts-per-problem",
        "1",
        "--max-attempts",
        "2",
        "--output-dir",
        "art",
        *extra,
    ]


ART_ENV = {"NO_PROXY": "127.0.0.1,localhost", "OPENAI_API_KEY": "test"}


def test_art_dry_run_feeds_errors_back_for_a_second_attempt(
    chat_server: ScriptedChat, tmp_path: Path
) -> None:
    result = run_example(
        "art/train_mbpp.py",
        *art_args(chat_server, "--num-steps", "2", "--batch-size", "2"),
        cwd=tmp_path,
        env=ART_ENV,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    steps = re.findall(r"^Step \d+: .*$", result.stdout, re.M)
    pattern = r"Step {}: reward={}, success={} \({}\), time=\d+\.\ds"
    assert re.fullmatch(pattern.format(0, r"1\.000", r"100\.0%", "2/2"), steps[0]), steps
    assert re.fullmatch(pattern.format(1, r"0\.500", r"50\.0%", "1/2"), steps[1]), steps
    assert len(steps) == 2
    assert "Mode:         dry run (no training update)" in result.stdout
    assert "Sandboxes left: 0" in result.stdout

    records = [
        json.loads(x) for x in (tmp_path / "art/trajectories.jsonl").read_text().split("\n")[:-1]
    ]
    by_task = {r["task_id"]: r for r in records}
    assert set(by_task) == {604, 605, 624, 632}
    fixed = by_task[605]  # prime_num: wrong, then right after seeing the failing test
    assert [a["kind"] for a in fixed["attempts"]] == ["failed", "passed"]
    assert fixed["attempts"][0]["passed"] == 2 and fixed["solved"] and fixed["reward"] == 1.0
    roles = [m["role"] for m in fixed["messages_and_choices"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    feedback = fixed["messages_and_choices"][3]["content"]
    assert "passed 2 of 3 tests" in feedback and "AssertionError" in feedback
    assert [a["kind"] for a in by_task[632]["attempts"]] == ["failed", "failed"]
    assert by_task[632]["reward"] == 0.0 and not by_task[632]["solved"]
    assert len(by_task[604]["attempts"]) == 1
    # Every request after a failure carried the feedback the loop wrote.
    assert sum(len(r) == 4 for r in chat_server.requests) == 2


def test_art_loop_finishes_the_step_on_sigterm_and_cleans_up(
    slow_chat_server: ScriptedChat, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "art/train_mbpp.py"),
            *art_args(slow_chat_server, "--num-steps", "50", "--batch-size", "1"),
        ],
        cwd=tmp_path,
        env=example_env(ART_ENV),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Step 0:"):
                break
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out + err
    assert "SIGTERM: finishing the current step, then stopping" in out
    steps = re.findall(r"^Step (\d+):", out, re.M)
    assert 1 <= len(steps) < 50
    assert f"Stopped early after {len(steps)} step(s) on request" in out
    assert "Sandboxes left: 0" in out


def without_openai_settings() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return {**env, "NO_PROXY": "127.0.0.1,localhost"}


def test_art_tiny_runs_offline_through_a_local_server_and_trains_on_cpu(tmp_path: Path) -> None:
    """No key, no URL, no GPU: the tiny model is sampled over HTTP from the example's own
    server, its code judged in sandboxes, and updated; it writes nonsense, so rewards are 0."""
    pytest.importorskip("openai", reason=NEEDS_EXAMPLES)
    result = run_example(
        "art/train_mbpp.py",
        "--tiny",
        "--output-dir",
        "art",
        cwd=tmp_path,
        env=without_openai_settings(),
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert quiet(result.stderr) == [], result.stderr[-3000:]
    assert re.search(
        r"^Model: +tiny random model built locally, served at http://127\.0\.0\.1:\d+/v1, CPU$",
        result.stdout,
        re.M,
    )
    assert "Mode:         training\n" in result.stdout
    assert "Steps:        2 x 2 problems x 2 rollouts, up to 3 attempts\n" in result.stdout
    steps = re.findall(
        r"^Step (\d): reward=0\.000, success=0\.0% \(0/4\), time=", result.stdout, re.M
    )
    assert steps == ["0", "1"], result.stdout
    assert "Summary: 2 step(s), mean reward 0.000, success 0.0% (0/8)" in result.stdout
    assert "Sandboxes left: 0" in result.stdout
    records = (tmp_path / "art/trajectories.jsonl").read_text().splitlines()
    assert len(records) == 8
    assert all(json.loads(r)["attempts"][0]["kind"] != "infra" for r in records)


def test_art_endpoint_without_a_key_or_url_names_what_to_set(tmp_path: Path) -> None:
    pytest.importorskip("openai", reason=NEEDS_EXAMPLES)
    result = run_example(
        "art/train_mbpp.py",
        "--use-openai",
        "--dry-run",
        cwd=tmp_path,
        env=without_openai_settings(),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "error: --use-openai without --base-url calls api.openai.com, which needs "
        "OPENAI_API_KEY; set it, pass --base-url for another endpoint, or run offline with "
        "--tiny\n"
    ) in result.stderr


def run_art_at(url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A dry run against the endpoint at ``url`` that fails: exit 1, no traceback."""
    args = ["--use-openai", "--base-url", url, "--dry-run", "--dataset-path", str(MBPP_SAMPLE)]
    result = run_example("art/train_mbpp.py", *args, cwd=tmp_path, env=without_openai_settings())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def test_art_unreachable_endpoint_is_named_with_what_to_check(tmp_path: Path) -> None:
    pytest.importorskip("openai", reason=NEEDS_EXAMPLES)
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    result = run_art_at(url, tmp_path)
    assert f"error: cannot reach the OpenAI-compatible endpoint at {url} (Connection error.)" in (
        result.stderr
    )
    assert "Sandboxes left" not in result.stdout


def test_art_endpoint_answering_404_points_at_the_url_and_model(
    chat_server: ScriptedChat, tmp_path: Path
) -> None:
    url = chat_server.url.removesuffix("/v1")  # the common slip: no /v1
    result = run_art_at(url, tmp_path)
    assert f"error: the endpoint at {url} answered 404 (" in result.stderr
    assert "check --base-url (it usually ends in /v1) and --model\n" in result.stderr
    assert chat_server.requests == []


def test_policy_gradient_update_changes_the_tiny_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update VLLMModel trains with, on CPU: a group with different rewards moves the
    weights; a group whose rewards are all equal carries no signal."""
    torch = pytest.importorskip("torch", reason=NEEDS_EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from tiny_model import build_tiny_model

    monkeypatch.syspath_prepend(str(EXAMPLES / "art"))
    from policy import PolicyGradient
    from rollout import Trajectory

    policy = PolicyGradient(build_tiny_model(tmp_path / "tiny"), device="cpu")
    first = [
        {"role": "user", "content": "write f"},
        {"role": "assistant", "content": "def f(): pass"},
    ]
    retried = [*first, {"role": "user", "content": "fix it"}, {"role": "assistant", "content": "x"}]
    ids, written = policy.tokens(retried)
    assert 0 < sum(written) < len(ids)
    before = [p.detach().clone() for p in policy.model.parameters()]
    same = policy.step([[Trajectory(first, 0.5), Trajectory(retried, 0.5)]], 1e-3)
    assert same["trained_trajectories"] == 0.0
    metrics = policy.step([[Trajectory(first, 0.0), Trajectory(retried, 1.0)]], 1e-3)
    assert metrics["trained_trajectories"] == 2.0
    after = list(policy.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.slow
def test_swe_example_judges_patches_by_the_tasks_tests_in_the_tasks_image(tmp_path: Path) -> None:
    """Patches to a repository in an image: a full fix resolves its issue, partial ones earn
    their share of the tests, and a patch that forges test output or edits the tests, one
    that does not apply and prose all get 0.0; nothing is left running."""
    pytest.importorskip("docker", reason="pip install 'sandboxkit[docker]'")
    result = run_example("swe_patch.py", cwd=tmp_path)
    if result.returncode == 3:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rewards = re.findall(
        r"^  ([\w-]+): .*: reward=([\d.]+) \((?:not )?resolved\) OK$", result.stdout, re.M
    )
    assert [float(r) for _, r in rewards] == [1.0, 0.8, 0.8, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert "sandboxes left: 0\n" in result.stdout
