# Every pair: O(n^2), 2*10^8 steps when no pair exists at n = 2*10^4.
import sys

data = sys.stdin.buffer.read().split()
n, x = int(data[0]), int(data[1])
a = list(map(int, data[2 : 2 + n]))
for i in range(n):
    for j in range(i + 1, n):
        if a[i] + a[j] == x:
            print(i + 1, j + 1)
            sys.exit()
print(-1)
