import sys
from itertools import accumulate

data = sys.stdin.buffer.read().split()
n = int(data[0])
prefix = [0, *accumulate(sorted(map(int, data[1 : 1 + n])))]
q = int(data[1 + n])
sys.stdout.write("\n".join(str(prefix[int(k)]) for k in data[2 + n : 2 + n + q]) + "\n")
