#!/usr/bin/env python3
"""Median busbw per size of two alternating modes, and their ratio.

    bench/ab_medians.py OUTDIR ROUNDS MODE_A MODE_B

Reads OUTDIR/MODE-ROUND.json (rcoll-bench --json) for ROUND = 1..ROUNDS; used by
bench/resilience_overhead.sh and bench/adaptive_chunking.sh.
"""
import json
import statistics
import sys


def load(out, rounds, mode, timings):
    """Median busbw per size over the rounds; adds each file's "time" (rcoll-bench
    --time; median where the file predates it) to `timings`."""
    per = {}
    for r in range(1, rounds + 1):
        with open(f"{out}/{mode}-{r}.json") as f:
            data = json.load(f)
        timings.add(data.get("time", "median"))
        for row in data["rows"]:
            per.setdefault(row["size"], []).append(row["busbw"])
    return {k: statistics.median(v) for k, v in per.items()}


def main():
    out, rounds, a_name, b_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    timings = set()
    a, b = load(out, rounds, a_name, timings), load(out, rounds, b_name, timings)
    if len(timings) > 1:
        sys.exit(f"ab_medians: the runs were timed different ways (--time {', '.join(sorted(timings))})")
    ratio = f"{a_name}/{b_name}"
    print(f"{'size (B)':>12} {a_name:>10} {b_name:>10} {ratio:>16}   (busbw GB/s, median of {rounds}; "
          f"--time {timings.pop()})")
    for size in sorted(a):
        print(f"{size:>12} {a[size]:>10.3f} {b[size]:>10.3f} {a[size] / b[size]:>16.3f}")


if __name__ == "__main__":
    main()
