# Compares only the first and last letters.
import sys

words = sys.stdin.read().split()[1:]
print("\n".join("Yes" if w[0] == w[-1] else "No" for w in words))
