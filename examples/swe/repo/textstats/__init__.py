"""Word statistics of a text (the example task's repository, with its bugs)."""

from .core import mean_word_length, top_words, word_count

__all__ = ["mean_word_length", "top_words", "word_count"]
