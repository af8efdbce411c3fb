import unittest

from textstats import mean_word_length, top_words, word_count


class TestCore(unittest.TestCase):
    def test_word_count(self):
        self.assertEqual(word_count("a\nb\nc"), 3)
        self.assertEqual(word_count("a  b"), 2)
        self.assertEqual(word_count(""), 0)

    def test_mean_word_length(self):
        self.assertEqual(mean_word_length("ab abcd"), 3.0)

    def test_top_words(self):
        self.assertEqual(top_words("The cat the dog", 1), ["the"])
        self.assertEqual(top_words("b a b", 2), ["b", "a"])


if __name__ == "__main__":
    unittest.main()
