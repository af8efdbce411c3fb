# A table of 10^9 entries: 8 GB of pointers.
import sys

data = sys.stdin.buffer.read().split()
count = [0] * 10**9
for x in data[1 : 1 + int(data[0])]:
    count[int(x)] += 1
print(sum(count))
