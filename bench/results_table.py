#!/usr/bin/env python3
"""Markdown tables for bench/RESULTS.md from `rcoll-bench --compare gloo,mpi --json` files.

    bench/results_table.py DIR [--max-steal PCT]
                                    (DIR holds npN-TRANSPORT-RUN.json, e.g. np4-tcp-2.json)

One table per (ranks, transport): every op and size, the median busbw of each library over
the runs, the median of the per-run rcoll/gloo and rcoll/mpi busbw ratios, and median times.
Then the cells that miss the targets of issue #4 (allreduce >= 1.1x Gloo and >= 1.0x MPI from
64 KiB; allgather, reduce_scatter, broadcast >= 1.0x both at every size; 4 KiB allreduce
within 1.5x MPI's time).

--max-steal PCT: a library's row counts only where the host's CPU steal around its timing
(the rows' "steal_pct", written by rcoll-bench and its baselines) was under PCT, and a ratio
only where both rows count; each table then says per cell how many runs counted (rcoll
rows, rcoll/Gloo pairs, rcoll/MPI pairs), and the cells without a pair are listed apart.
Rows without a steal figure (files from before it was recorded) do not count.
"""
import argparse
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


def table(rows_per_run, max_steal=None):
    """Medians per (op, size). With max_steal, a library's columns take its rows timed under
    that much steal, and a ratio (and the 4 KiB times compared) only runs where both rows
    were; "n", "n_gloo", "n_mpi": how many rcoll rows, rcoll/Gloo and rcoll/MPI pairs counted."""
    def counts(row):
        return max_steal is None or 0 <= row.get("steal_pct", -1) < max_steal

    cells = {}  # (op, size) -> lists
    for rows in rows_per_run:
        by = {(r["library"], r["op"], r["size"]): r for r in rows}
        for (lib, op, size), r in by.items():
            if lib != "rcoll" or op not in ORDER:
                continue
            keys = ("rcoll", "gloo", "mpi", "/gloo", "/mpi", "us", "us_pair", "us_mpi")
            c = cells.setdefault((op, size), {k: [] for k in keys})
            if counts(r):
                c["rcoll"].append(r["busbw"])
                c["us"].append(r["time_us"])
            for other in ("gloo", "mpi"):
                o = by.get((other, op, size))
                if o is None or not counts(o):
                    continue
                c[other].append(o["busbw"])
                if not counts(r):
                    continue
                c["/" + other].append(r["busbw"] / o["busbw"] if o["busbw"] > 0 else float("nan"))
                if other == "mpi":
                    c["us_pair"].append(r["time_us"])
                    c["us_mpi"].append(o["time_us"])
    out = {}
    for k, c in cells.items():
        out[k] = {name: med(v) for name, v in c.items()}
        out[k]["n"] = len(c["rcoll"])
        out[k]["n_gloo"] = len(c["/gloo"])
        out[k]["n_mpi"] = len(c["/mpi"])
    return out


def size_label(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def main():
    parser = argparse.ArgumentParser(
        description="Markdown tables for bench/RESULTS.md (see the top of this file).")
    parser.add_argument("dir", nargs="?", default=".", help="holds npN-TRANSPORT-RUN.json")
    parser.add_argument("--max-steal", type=float, metavar="PCT",
                        help="count only rows timed under PCT%% of the host's CPU stolen (0-100]")
    args = parser.parse_args()
    max_steal = args.max_steal
    if max_steal is not None and not 0 < max_steal <= 100:
        parser.error(f"--max-steal {max_steal:g}: a percentage above 0, at most 100")
    runs, timing = load(args.dir)
    misses, unmeasured = [], []
    for (ranks, transport) in sorted(runs):
        t = table(runs[(ranks, transport)], max_steal)
        n = len(runs[(ranks, transport)])
        kept = "" if max_steal is None else f", rows timed under {max_steal:g}% steal"
        print(f"### {ranks} ranks, rcoll on {transport} (median of {n} runs{kept}; --time {timing}; "
              "busbw GB/s; ratio = rcoll/other)")
        runs_col = "" if max_steal is None else " runs rcoll/pairs gloo/pairs mpi |"
        print("| op | size | rcoll | gloo | mpi | /gloo | /mpi | us rcoll | us mpi |" + runs_col)
        print("|---|---|---|---|---|---|---|---|---|" + ("---|" if runs_col else ""))
        for op, size in sorted(t, key=lambda k: (ORDER.index(k[0]) if k[0] in ORDER else 99, k[1])):
            c = t[(op, size)]
            runs_cell = "" if max_steal is None else f" {c['n']}/{c['n_gloo']}/{c['n_mpi']} |"
            print(f"| {op} | {size_label(size)} | {c['rcoll']:.2f} | {c['gloo']:.2f} | {c['mpi']:.2f} | "
                  f"{c['/gloo']:.2f} | {c['/mpi']:.2f} | {c['us']:.1f} | {c['us_mpi']:.1f} |{runs_cell}")
            where = f"{ranks} ranks {transport} {op} {size_label(size)}"
            if max_steal is not None:
                missing = [lib for lib in ("gloo", "mpi") if c["n_" + lib] == 0]
                if missing:
                    unmeasured.append(f"{where}: no rcoll/{' or rcoll/'.join(missing)} pair")
            if op == "allreduce":
                if size == 4096 and c["us_pair"] > 1.5 * c["us_mpi"]:
                    misses.append(f"{where}: {c['us_pair']:.1f} us vs MPI {c['us_mpi']:.1f} us (> 1.5x)")
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
    if unmeasured:
        print()
        print(f"### Cells lacking an rcoll/Gloo or rcoll/MPI pair timed under {max_steal:g}% steal "
              "(no verdict against that library)")
        for m in unmeasured:
            print(f"- {m}")


if __name__ == "__main__":
    main()
