"""One GRPO step with TRL's GRPOTrainer, rewarded by running the model's code in sandboxes.

    python examples/trl_grpo_integration.py            # Qwen/Qwen2.5-0.5B-Instruct from the hub
    python examples/trl_grpo_integration.py --tiny     # a tiny random model built locally, CPU

The reward (``_common.sandbox_reward``) is the share of a problem's asserts the completion
passes; its async face lets TRL score the batch concurrently on the configured backend.
"""

from __future__ import annotations

import argparse
import sys

from _common import (
    DEFAULT_INSTRUCT_MODEL,
    add_model_args,
    quiet_libraries,
    run_grpo,
    tiny_model_dir,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One GRPO step with sandbox rewards.")
    add_model_args(parser, DEFAULT_INSTRUCT_MODEL)
    args = parser.parse_args(argv)
    quiet_libraries()
    model = str(tiny_model_dir()) if args.tiny else args.model
    return run_grpo(
        "TRL GRPO with sandbox rewards",
        model,
        model_label="tiny random model (local, CPU)" if args.tiny else model,
        tiny=args.tiny,
        output_dir=args.output_dir,
    )


if __name__ == "__main__":
    sys.exit(main())
