# Sorts again for every query: O(q n log n).
import sys

data = sys.stdin.buffer.read().split()
n = int(data[0])
a = list(map(int, data[1 : 1 + n]))
q = int(data[1 + n])
for k in data[2 + n : 2 + n + q]:
    print(sum(sorted(a)[: int(k)]))
