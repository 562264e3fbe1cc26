#!/usr/bin/env python3
"""How long a lit suite takes on 2 workers in two orders, from its tests' seconds.

Usage: scripts/lit-schedule.py TIMES [E2E_SLOTS]

TIMES is lit's record of a run (`.lit_test_times.txt`: seconds and path a line). The model is
lit's: each free worker takes the next test in order and waits, holding it, while its
parallelism group (test/lit.cfg.py: e2e one at a time, or E2E_SLOTS as in the sanitizer suite;
conformance two) is full. Prints the suite's time in the order of the tests' names (a build
with no record of its own) and slowest first (lit's order with a record: docs/testing.md).
"""
import sys

WORKERS = 2


def group(path, limits):
    top = path.split("/", 1)[0]
    return top if top in limits else None


def makespan(order, seconds, limits):
    free = [0.0] * WORKERS
    slots = {name: [0.0] * count for name, count in limits.items()}
    for path in order:
        worker = min(range(WORKERS), key=lambda i: free[i])
        start = free[worker]
        name = group(path, limits)
        if name:
            slot = min(range(len(slots[name])), key=lambda i: slots[name][i])
            start = max(start, slots[name][slot])
            slots[name][slot] = start + seconds[path]
        free[worker] = start + seconds[path]
    return max(free)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    seconds = {}
    with open(sys.argv[1]) as record:
        for number, line in enumerate(record, 1):
            fields = line.split(maxsplit=1)
            try:
                seconds[fields[1].strip()] = abs(float(fields[0]))
            except (IndexError, ValueError):
                sys.exit(f"{sys.argv[1]}:{number}: not 'SECONDS PATH'")
    limits = {"e2e": int(sys.argv[2]) if len(sys.argv) == 3 else 1, "conformance": 2}
    names = sorted(seconds)
    slowest = sorted(seconds, key=lambda path: (-seconds[path], path))
    print(f"{len(seconds)} tests, {sum(seconds.values()):.0f} s in all")
    print(f"by name:       {makespan(names, seconds, limits):.0f} s")
    print(f"slowest first: {makespan(slowest, seconds, limits):.0f} s")


if __name__ == "__main__":
    main()
