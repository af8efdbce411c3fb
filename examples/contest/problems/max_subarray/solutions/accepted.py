import sys

data = sys.stdin.buffer.read().split()
n = int(data[0])
best = current = int(data[1])
for x in map(int, data[2 : 1 + n]):
    current = max(x, current + x)
    best = max(best, current)
print(best)
