"""The TRL example with Unsloth: a 4-bit model, LoRA adapters and Unsloth's gradient
checkpointing, rewarded by the same parallel (async) sandbox reward.

    pip install unsloth      # needs an NVIDIA GPU
    python examples/unsloth_integration.py [--model unsloth/Qwen2.5-0.5B-Instruct]

Unsloth runs on CUDA GPUs only. Without one, or without the package, the script says so and
exits with status 3 (``EXIT_UNSUPPORTED``), so scripts can tell "cannot run here" from a failure.
"""

from __future__ import annotations

import argparse
import sys

from _common import (
    DEFAULT_INSTRUCT_MODEL,
    EXIT_UNSUPPORTED,
    add_model_args,
    gpu_unsupported_reason,
    quiet_libraries,
    run_grpo,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One GRPO step with Unsloth and sandbox rewards.")
    add_model_args(parser, DEFAULT_INSTRUCT_MODEL)
    parser.add_argument("--max-seq-length", type=int, default=1024)
    parser.add_argument("--lora-rank", type=int, default=16)
    args = parser.parse_args(argv)
    if args.tiny:
        parser.error("--tiny is not available here: Unsloth loads 4-bit models on a GPU only")
    reason = gpu_unsupported_reason(
        "Unsloth", ["unsloth"], "python examples/trl_grpo_integration.py --tiny"
    )
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return EXIT_UNSUPPORTED

    from unsloth import FastLanguageModel  # before trl and transformers, as Unsloth requires

    quiet_libraries()

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=args.model, max_seq_length=args.max_seq_length, load_in_4bit=True
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=args.lora_rank,
        lora_alpha=args.lora_rank,
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )
    return run_grpo(
        "Unsloth GRPO with sandbox rewards",
        model,
        model_label=f"{args.model} (4-bit, LoRA r={args.lora_rank})",
        tiny=False,
        output_dir=args.output_dir,
        processing_class=tokenizer,
    )


if __name__ == "__main__":
    sys.exit(main())
