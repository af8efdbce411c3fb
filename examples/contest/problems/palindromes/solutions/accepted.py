import sys

words = sys.stdin.read().split()[1:]
print("\n".join("Yes" if w == w[::-1] else "No" for w in words))
