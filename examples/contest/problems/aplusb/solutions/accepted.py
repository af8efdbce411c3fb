import sys

data = sys.stdin.buffer.read().split()
t = int(data[0])
sys.stdout.write("".join(f"{int(data[1 + 2 * i]) + int(data[2 + 2 * i])}\n" for i in range(t)))
