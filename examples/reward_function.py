"""The main demo: score five model-written programs with a sandbox reward, as an RL trainer would.

    python examples/reward_function.py   # SANDBOXKIT_BACKEND picks the backend (default: local)

Each completion gets 1.0 when it runs to completion, 0.0 otherwise (``exec_reward``). The
script checks every reward against the expected one and that no sandbox tagged with its job id
is left once the reward function is closed; it exits non-zero if either check fails.
"""

from __future__ import annotations

import sys

from _common import RULE, THIN_RULE, count_sandboxes, job_tag, new_job_id

from sandboxkit.rewards import exec_reward

# (name, completion as a model would write it, the reward it should get)
COMPLETIONS: list[tuple[str, str, float]] = [
    ("arithmetic", "x = 6 * 7\nassert x == 42\nprint(x)\n", 1.0),
    (
        "string-ops",
        "```python\nword = 'sandbox'\nassert word[::-1] == 'xobdnas'\nprint(word.upper())\n```",
        1.0,
    ),
    ("syntax-error", "def broken(:\n    return 1\n", 0.0),
    ("runtime-error", "values = [1, 2, 3]\nprint(values[10])\n", 0.0),
    ("list-comp", "squares = [n * n for n in range(5)]\nassert squares == [0, 1, 4, 9, 16]\n", 1.0),
]


def main() -> int:
    job_id = new_job_id()
    tag = job_tag(job_id)
    print(f"RL Training Reward Function Example (job: {job_id})")
    print(RULE)
    print(f"\nEvaluating {len(COMPLETIONS)} completions...\n")
    reward = exec_reward(timeout=10, pool_size=len(COMPLETIONS), tags=[tag])
    try:
        rewards = reward([""] * len(COMPLETIONS), [code for _, code, _ in COMPLETIONS])
    finally:
        reward.close()

    print("\nResults:")
    print(THIN_RULE)
    mismatches = 0
    for i, ((name, _, expected), got) in enumerate(zip(COMPLETIONS, rewards, strict=True)):
        verdict = "PASS" if got == 1.0 else "FAIL"
        check = "OK" if got == expected else "MISMATCH"
        mismatches += got != expected
        print(f"  Problem {i} ({name}): reward={got} [{verdict}] {check}")
    print(THIN_RULE)
    total = sum(r or 0.0 for r in rewards)
    passed = sum(r == 1.0 for r in rewards)
    print(f"Total reward: {total}/{len(rewards)}")
    print(f"Pass rate: {passed}/{len(rewards)} ({passed / len(rewards):.0%})")

    left = count_sandboxes(tag)
    print(f"\nCleaning up {left} sandbox(es)...")
    return 1 if mismatches or left else 0


if __name__ == "__main__":
    sys.exit(main())
