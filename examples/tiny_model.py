"""A tiny random causal LM and tokenizer built locally, for the examples' ``--tiny`` runs and
the tests of the TRL integration (which import it from here).

No hub access: the tokenizer is a byte-level BPE trained on a few kilobytes of Python, the
model a 2-layer Qwen2 with random weights (about a megabyte). It generates nonsense, which
is exactly what a sandbox reward must survive.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CORPUS = [
    "def sort_numbers(xs):\n    return sorted(xs)\n",
    "for i in range(10):\n    print(i * i)\n",
    "def max_subarray(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n"
    "        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n",
    "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n",
    "class Node:\n    def __init__(self, value):\n        self.value = value\n",
    "while True:\n    pass\n",
    "if __name__ == '__main__':\n    main()\n",
]


def build_tiny_model(
    directory: str | Path,
    *,
    extra_text: Iterable[str] = (),
    seed: int = 0,
    tool_calling: bool = False,
) -> Path:
    """Write a tokenizer and a random Qwen2 model into ``directory``; returns it.

    ``from_pretrained(directory)`` then loads both, offline. ``tool_calling`` gives the
    tokenizer Qwen2.5's chat template, which renders tools and whose tool calls TRL parses
    (TRL ships it), instead of a minimal one, and its end of turn as EOS.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([*_CORPUS, *extra_text] * 4, trainer=trainer)
    wrapped: Any = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        # Qwen2.5's turns end with <|im_end|>, its instruct models' EOS: TRL splices tool
        # results in after a turn's EOS, and counts a turn without it as cut off.
        eos_token="<|im_end|>" if tool_calling else "<|endoftext|>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )
    if tool_calling:
        from trl.chat_template_utils import qwen2_5_chat_template

        wrapped.chat_template = qwen2_5_chat_template
    else:
        wrapped.chat_template = (
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        )
    wrapped.save_pretrained(out)
    torch.manual_seed(seed)
    config: Any = Qwen2Config(
        vocab_size=len(wrapped),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,  # rotary: no weights; room for tool schemas
        tie_word_embeddings=True,
        pad_token_id=wrapped.pad_token_id,
        eos_token_id=wrapped.eos_token_id,
        bos_token_id=wrapped.eos_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out
