import sys

data = sys.stdin.buffer.read().split()
n, x = int(data[0]), int(data[1])
seen: dict[int, int] = {}
for i, a in enumerate(map(int, data[2 : 2 + n]), start=1):
    if x - a in seen:
        print(seen[x - a], i)
        break
    seen[a] = i
else:
    print(-1)
