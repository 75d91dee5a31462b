#!/usr/bin/env python3
"""Markdown tables for bench/RESULTS.md from `rcoll-bench --compare gloo,mpi --json` files.

    bench/results_table.py DIR      (DIR holds npN-TRANSPORT-RUN.json, e.g. np4-tcp-2.json)

One table per (ranks, transport): every op and size, the median busbw of each library over
the runs, the median of the per-run rcoll/gloo and rcoll/mpi busbw ratios, and median times.
Then the cells that miss the targets of issue #4 (allreduce >= 1.1x Gloo and >= 1.0x MPI from
64 KiB; allgather, reduce_scatter, broadcast >= 1.0x both at every size; 4 KiB allreduce
within 1.5x MPI's time).
"""
import glob
import json
import os
import re
import statistics
import sys


def load(directory):
    """Rows per (ranks, transport), and how each file's times were taken ("time", by
    rcoll-bench --time; files written before it have none and were timed by the median)."""
    runs = {}  # (ranks, transport) -> [rows of one run]
    timings = {}  # --time -> files
    for path in sorted(glob.glob(os.path.join(directory, "np*-*-*.json"))):
        m = re.match(r"np(\d+)-(\w+)-(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        try:
            with open(path) as f:
                data = json.load(f)
            rows = data["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(f"results_table: skipping {path}: {e}", file=sys.stderr)
            continue
        runs.setdefault((int(m.group(1)), m.group(2)), []).append(rows)
        timings.setdefault(data.get("time", "median"), []).append(os.path.basename(path))
    if len(timings) > 1:
        # Medians over runs timed different ways would mean nothing.
        ways = "; ".join(f"--time {t}: {', '.join(files)}" for t, files in sorted(timings.items()))
        sys.exit(f"results_table: the files were timed different ways ({ways})")
    return runs, next(iter(timings), "median")


ORDER = ["allreduce", "allgather", "reduce_scatter", "broadcast"]


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def table(rows_per_run):
    cells = {}  # (op, size) -> lists
    for rows in rows_per_run:
        by = {(r["library"], r["op"], r["size"]): r for r in rows}
        for (lib, op, size), r in by.items():
            if lib != "rcoll" or op not in ORDER:
                continue
            c = cells.setdefault((op, size), {k: [] for k in ("rcoll", "gloo", "mpi", "/gloo", "/mpi", "us", "us_mpi")})
            c["rcoll"].append(r["busbw"])
            c["us"].append(r["time_us"])
            for other in ("gloo", "mpi"):
                o = by.get((other, op, size))
                if o is None:
                    continue
                c[other].append(o["busbw"])
                c["/" + other].append(r["busbw"] / o["busbw"] if o["busbw"] > 0 else float("nan"))
                if other == "mpi":
                    c["us_mpi"].append(o["time_us"])
    return {k: {name: med(v) for name, v in c.items()} for k, c in cells.items()}



def size_label(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def main():
    runs, timing = load(sys.argv[1] if len(sys.argv) > 1 else ".")
    misses = []
    for (ranks, transport) in sorted(runs):
        t = table(runs[(ranks, transport)])
        n = len(runs[(ranks, transport)])
        print(f"### {ranks} ranks, rcoll on {transport} (median of {n} runs; --time {timing}; busbw GB/s; "
              "ratio = rcoll/other)")
        print("| op | size | rcoll | gloo | mpi | /gloo | /mpi | us rcoll | us mpi |")
        print("|---|---|---|---|---|---|---|---|---|")
        for op, size in sorted(t, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1])):
            c = t[(op, size)]
            print(f"| {op} | {size_label(size)} | {c['rcoll']:.2f} | {c['gloo']:.2f} | {c['mpi']:.2f} | "
                  f"{c['/gloo']:.2f} | {c['/mpi']:.2f} | {c['us']:.1f} | {c['us_mpi']:.1f} |")
            where = f"{ranks} ranks {transport} {op} {size_label(size)}"
            if op == "allreduce":
                if size == 4096 and c["us"] > 1.5 * c["us_mpi"]:
                    misses.append(f"{where}: {c['us']:.1f} us vs MPI {c['us_mpi']:.1f} us (> 1.5x)")
                if size >= 65536 and c["/gloo"] < 1.1:
                    misses.append(f"{where}: {c['/gloo']:.2f}x Gloo (< 1.1)")
                if size >= 65536 and c["/mpi"] < 1.0:
                    misses.append(f"{where}: {c['/mpi']:.2f}x MPI")
            elif op in ("allgather", "reduce_scatter", "broadcast"):
                for other in ("gloo", "mpi"):
                    if c["/" + other] < 1.0:
                        misses.append(f"{where}: {c['/' + other]:.2f}x {other}")
        print()
    print("### Cells below the targets of issue #4")
    for m in misses or ["none"]:
        print(f"- {m}")


if __name__ == "__main__":
    main()
