"""A 4-stage pipeline of CUDA send/recv over rcoll waits for a live straggler instead of recovering.

    python pipeline_cuda.py [--ranks 4] [--microbatches 40] [--modes blocking,isend,batch]
                            [--stall-stage 1] [--stall-s 12] [--stall-at 15] [--timeout 240]

Runs pipeline_cuda_stage.py under torchrun (ranks sharing one GPU as separate
NCCL hosts), once per mode: blocking send/recv, isend/irecv + wait(), and
batch_isend_irecv of each microbatch's send with the next one's receive. One
stage sleeps past rcoll's 10 s progress-deadline floor before one send, alive
and heartbeating, while the stages around it wait on it.
Asserts, per mode: every stage finished every microbatch; the last stage found
zero wrong elements; counters["recoveries"] == 0 on every rank (a straggler is
waited for, not recovered from). Reports each rank's wall time (and their spread)
and its longest gap between microbatches on the GPU timeline, then `PIPELINE_CUDA_SUMMARY {json}`.
Exit 0: all passed; 1: a check failed; 77: no CUDA device (skip).
"""
import argparse
import json
import os
import sys
import tempfile

from ddp_cuda import rank_infos, skip_without_cuda, torchrun

LOG_MARKERS = ("stage ", "recover", "late to", "silent", "straggler", "Error", "error")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=40)
    ap.add_argument("--modes", default="blocking,isend,batch", help="comma list of blocking, isend, batch")
    ap.add_argument("--stall-stage", type=int, default=1)
    ap.add_argument("--stall-s", type=float, default=12)
    ap.add_argument("--stall-at", type=int, default=15)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per torchrun")
    a = ap.parse_args()
    skip_without_cuda()
    if a.ranks < 2 or not 0 <= a.stall_stage < a.ranks - 1:
        ap.error("need --ranks >= 2 and a --stall-stage that sends (0 .. ranks-2)")

    failures, runs = [], {}

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL", what, flush=True)

    with tempfile.TemporaryDirectory(prefix="rcoll-pipeline-cuda-") as d:
        for mode in a.modes.split(","):
            out = os.path.join(d, mode)
            args = ["--out", out, "--microbatches", str(a.microbatches), "--stall-stage", str(a.stall_stage),
                    "--stall-s", str(a.stall_s), "--stall-at", str(a.stall_at), "--mode", mode]
            rc, log, secs = torchrun(a.ranks, "pipeline_cuda_stage.py", args, {}, a.timeout)
            infos = rank_infos(out, a.ranks)
            print(f"--- {mode}: exit {rc}, {secs:.1f} s", flush=True)
            for line in [l for l in log.splitlines() if any(m in l for m in LOG_MARKERS)][:40]:
                print("   ", line, flush=True)
            if rc != 0:
                print(log[-6000:], flush=True)
            done = [i and i["microbatches"] for i in infos]
            recov = [i and i["counters"]["recoveries"] for i in infos]
            wrong = infos[-1]["wrong"] if infos[-1] else None
            walls = [i and round(i["wall_s"], 3) for i in infos]
            runs[mode] = {"exit": rc, "microbatches": done, "wrong": wrong, "recoveries": recov, "wall_s": walls,
                          "wall_spread_s": round(max(walls) - min(walls), 3) if all(walls) else None,
                          "max_gap_ms": [i and round(i["max_gap_ms"], 1) for i in infos],
                          "device_transport": [i and i["counters"].get("device_transport") for i in infos]}
            print(f"{mode}: microbatches per stage {done}, wrong elements {wrong}, recoveries {recov}, wall s "
                  f"{runs[mode]['wall_s']}, longest gap ms {runs[mode]['max_gap_ms']}", flush=True)
            check(rc == 0 and done == [a.microbatches] * a.ranks,
                  f"{mode}: not every stage finished {a.microbatches} microbatches: {done} (exit {rc})")
            check(wrong == 0, f"{mode}: the last stage found {wrong} wrong elements")
            check(recov == [0] * a.ranks, f"{mode}: a live straggler was recovered from: recoveries {recov}")
    print("PIPELINE_CUDA_SUMMARY " + json.dumps({"ranks": a.ranks, "microbatches": a.microbatches,
                                                  "stall": {"stage": a.stall_stage, "s": a.stall_s, "at": a.stall_at},
                                                  "runs": runs, "failures": failures, "pass": not failures}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
