#!/usr/bin/env python3
"""Summary of bench/paired_cells.sh: per cell, the median time per op of each
library over the rounds, and the median (range) of the per-round ratios
other/rcoll (above 1: rcoll is faster). A round where a library has no row
counts for neither ratio of that round.

    bench/paired_cells.py OUTDIR ROUNDS CELL...
"""
import json
import statistics
import sys


def time_us(path):
    try:
        with open(path) as f:
            rows = json.load(f)["rows"]
    except (OSError, ValueError, KeyError):
        return None
    return rows[0]["time_us"] if rows else None


def main():
    out, rounds, cells = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    print(f"{'cell':>24} {'rcoll us':>9} {'gloo us':>9} {'mpi us':>9}   "
          f"{'gloo/rcoll':>20} {'mpi/rcoll':>20}   (time per op, median of {rounds} rounds; ratio > 1: rcoll faster)")
    for cell in cells:
        times = {lib: [time_us(f"{out}/{cell}/{lib}-{r}.json") for r in range(1, rounds + 1)]
                 for lib in ("rcoll", "gloo", "mpi")}

        def median_time(lib):
            got = [t for t in times[lib] if t is not None]
            return f"{statistics.median(got):9.1f}" if got else f"{'n/a':>9}"

        def ratio(lib):
            per = [o / r for o, r in zip(times[lib], times["rcoll"]) if o is not None and r]
            if not per:
                return f"{'n/a':>20}"
            return f"{statistics.median(per):6.2f} ({min(per):.2f}-{max(per):.2f})".rjust(20)

        print(f"{cell:>24} {median_time('rcoll')} {median_time('gloo')} {median_time('mpi')}   "
              f"{ratio('gloo')} {ratio('mpi')}")


if __name__ == "__main__":
    main()
