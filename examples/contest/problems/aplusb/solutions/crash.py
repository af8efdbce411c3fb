# Off by one: reads a pair past the last line, an IndexError.
import sys

data = sys.stdin.read().split()
t = int(data[0])
for i in range(t + 1):
    print(int(data[1 + 2 * i]) + int(data[2 + 2 * i]))
