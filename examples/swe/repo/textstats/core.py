from collections import Counter


def words(text):
    return text.split(" ")


def word_count(text):
    """How many words ``text`` holds."""
    return len(words(text))


def mean_word_length(text):
    """The mean length of the words of ``text`` (0.0 for a text without words)."""
    found = words(text)
    return sum(len(w) for w in found) / len(found)


def top_words(text, n):
    """The ``n`` most common words, lower-cased, most common first."""
    return [w for w, _ in Counter(words(text)).most_common(n)]
