"""One stage of a pipeline of CUDA send/recv over rcoll, with a live straggler.

    torchrun --nproc-per-node 4 pipeline_cuda_stage.py --out PREFIX [--microbatches 40]
             [--mode blocking|isend|batch]
             [--stall-stage 1] [--stall-s 12] [--stall-at 15]

Rank k is stage k. For each microbatch m (float32 CUDA tensors of 1.4 to
7.2 MB, the size cycling with m): stage 0 makes x(m) and sends it to stage 1;
a middle stage k receives into a preallocated buffer, computes y = x * 2 + k on
the GPU and sends y on; the last stage receives and compares, exactly and on
the GPU, with the closed form of what the middle stages made of x(m).
--mode blocking: send/recv; isend: isend/irecv + wait() (sends stay in flight
while the next microbatch is received); batch: as Megatron-style pipelines
write it, each step one batch_isend_irecv (one NCCL group) of the send of
microbatch m and the receive of microbatch m+1. Stage --stall-stage
sleeps --stall-s seconds before sending microbatch --stall-at: a straggler that
is alive (heartbeating) but late, longer than rcoll's 10 s progress-deadline
floor, which rcoll must wait for rather than recover from.
Every rank prints its counters and writes PREFIX.rank<r> (JSON): microbatches
done, wrong elements (last stage), wall time, the longest gap between two
microbatches on the GPU's timeline, rcoll's counters.
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

import rcoll.torch  # registers "rcoll"

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()
from ddp_cuda_train import share_the_gpu

SIZES_MB = (1.4, 2.6, 3.8, 5.0, 6.2, 7.2)
IN_FLIGHT = 2  # isend: sends a stage may have outstanding before it waits for the oldest


def numel(m):
    return int(SIZES_MB[m % len(SIZES_MB)] * 1e6) // 4


def source(m, device):
    # Small integers, so every value the stages make stays exact in float32.
    return (torch.arange(numel(m), device=device) % 1021).float() + m


def expected(m, middle_stages, device):
    # y_k = 2 y_(k-1) + k from y_0 = x gives y_n = 2^n x + 2^(n+1) - n - 2.
    n = middle_stages
    return source(m, device) * 2 ** n + (2 ** (n + 1) - n - 2)


def batch(ops):
    """One batch_isend_irecv, waited for (on the current stream)."""
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--microbatches", type=int, default=40)
    ap.add_argument("--mode", choices=("blocking", "isend", "batch"), default="blocking")
    ap.add_argument("--stall-stage", type=int, default=1)
    ap.add_argument("--stall-s", type=float, default=12)
    ap.add_argument("--stall-at", type=int, default=15)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device", flush=True)
        sys.exit(77)
    device = share_the_gpu()
    dist.init_process_group("rcoll")
    k, p = dist.get_rank(), dist.get_world_size()
    first, last = k == 0, k == p - 1
    bufs = {n: torch.empty(n, device=device) for n in {numel(m) for m in range(len(SIZES_MB))}}
    wrong = torch.zeros((), dtype=torch.int64, device=device)
    in_flight, done_events = [], []
    dist.barrier()
    t0 = time.perf_counter()
    nxt = None
    if a.mode == "batch" and not first:
        nxt = bufs[numel(0)]
        batch([dist.P2POp(dist.irecv, nxt, k - 1)])
    for m in range(a.microbatches):
        if first:
            y = source(m, device)
        else:
            x = bufs[numel(m)]
            if a.mode == "batch":
                x = nxt  # received in the step before
            elif a.mode == "isend":
                dist.irecv(x, src=k - 1).wait()
            else:
                dist.recv(x, src=k - 1)
            y = x if last else x * 2 + k
        if last:
            wrong += (y != expected(m, p - 2, device)).sum()
        if not last and k == a.stall_stage and m == a.stall_at and a.stall_s > 0:
            print(f"stage {k}: stalling {a.stall_s} s before sending microbatch {m}", flush=True)
            time.sleep(a.stall_s)
        if a.mode == "batch":
            # This microbatch's send and the next one's receive, one group
            # (consecutive microbatches differ in size: other buffers).
            ops = [] if last else [dist.P2POp(dist.isend, y, k + 1)]
            if not first and m + 1 < a.microbatches:
                nxt = bufs[numel(m + 1)]
                ops.append(dist.P2POp(dist.irecv, nxt, k - 1))
            if ops:
                batch(ops)
        elif not last:
            if a.mode == "isend":
                # The tensor stays referenced until its send is waited for.
                in_flight.append((dist.isend(y, dst=k + 1), y))
                while len(in_flight) > IN_FLIGHT:
                    in_flight.pop(0)[0].wait()
            else:
                dist.send(y, dst=k + 1)
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        done_events.append(ev)
    for w, _ in in_flight:
        w.wait()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    gaps = [e0.elapsed_time(e1) for e0, e1 in zip(done_events, done_events[1:])]
    info = {"rank": k, "microbatches": len(done_events), "wall_s": wall,
            "max_gap_ms": max(gaps, default=0.0), "max_gap_before_mb": gaps.index(max(gaps)) + 1 if gaps else None,
            "wrong": int(wrong) if last else None, "counters": rcoll.torch.counters(device="cuda")}
    with open(f"{a.out}.rank{k}", "w") as f:
        json.dump(info, f)
    print(f"stage {k}: {info['microbatches']} microbatches ({a.mode}) in "
          f"{wall:.2f} s, longest gap {info['max_gap_ms']:.0f} ms before microbatch {info['max_gap_before_mb']}"
          + (f", {info['wrong']} wrong elements" if last else "") + f", counters {info['counters']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
