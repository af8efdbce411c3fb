# The contest idiom for deep recursion: a high limit, and a thread with a large stack.
import sys
import threading


def main() -> None:
    data = sys.stdin.buffer.read().split()
    n = int(data[0])
    children: list[list[int]] = [[] for _ in range(n + 1)]
    for i in range(1, n + 1):
        children[int(data[i])].append(i)
    best = 0

    def height(v: int) -> int:
        nonlocal best
        top = second = 0
        for c in children[v]:
            h = height(c) + 1
            if h > top:
                top, second = h, top
            elif h > second:
                second = h
        best = max(best, top + second)
        return top

    height(children[0][0])
    print(best)


sys.setrecursionlimit(1 << 20)
threading.stack_size(1 << 27)
thread = threading.Thread(target=main)
thread.start()
thread.join()
