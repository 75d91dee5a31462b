"""The PyTorch backend as users start and stop it, under torchrun.

    --mode late       the last rank calls init_process_group --late seconds after
                      the others (timeout=--pg-timeout): every rank trains, and
                      the others' logs name it as late
    --mode straggler  rank 1 computes --late seconds between two steps, longer
                      than the process group's timeout (RCOLL_STRAGGLER_TIMEOUT_S
                      set above it): the step completes on every rank
    --mode hang       RCOLL_INJECT=hang:rank=1,op=N makes op N hang with every
                      rank in it (rank 1 sends nothing in any attempt),
                      RCOLL_STRAGGLER_TIMEOUT_S far above the process group's
                      timeout: every rank's failing step raises within the
                      process group's timeout (plus a little), naming the hang
                      timeout
    --mode exit       a few steps, then exit without destroy_process_group();
                      counters() must work through TORCH_DISTRIBUTED_DEBUG=DETAIL's
                      wrapper when it is set

Every rank checks its results against the sum it must be; exit code 0 = as expected.
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import rcoll.torch

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()


def steps(n, r, p, pause_rank=-1, pause_s=0.0, pause_at=-1, elements=1 << 16):
    for i in range(n):
        if r == pause_rank and i == pause_at:
            print(f"rank {r}: computing for {pause_s:.0f} s before step {i}", flush=True)
            time.sleep(pause_s)
        t = torch.full((elements,), float(r + i))
        dist.all_reduce(t)
        want = float(sum(q + i for q in range(p)))
        if not torch.equal(t, torch.full_like(t, want)):
            print(f"FAIL rank {r}: step {i}: {t[:3]} != {want}", flush=True)
            sys.exit(1)


def hang(r, p, pg_timeout):
    """Small steps (one frame each) until one fails: it must be the hang, ended
    by the process group's timeout, not by the straggler timeout or never."""
    for i in range(20):
        started = time.monotonic()
        try:
            steps(1, r, p, elements=16)
        except Exception as e:  # torch raises DistBackendError (a RuntimeError)
            took = time.monotonic() - started
            text = str(e)
            if "hang timeout" not in text or took > pg_timeout + 5:
                print(f"FAIL rank {r}: step {i} failed after {took:.1f} s, not by the hang timeout "
                      f"within {pg_timeout:.0f} s: {text[:400]}", flush=True)
                sys.exit(1)
            print(f"rank {r}: hang: ok (step {i} failed after {took:.1f} s, process group timeout "
                  f"{pg_timeout:.0f} s: {text[:160]})", flush=True)
            return
    print(f"FAIL rank {r}: 20 steps completed; the injected hang did not happen", flush=True)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["late", "straggler", "hang", "exit"])
    ap.add_argument("--late", type=float, default=0.0)
    ap.add_argument("--pg-timeout", type=float, default=60.0)
    a = ap.parse_args()
    r, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=a.pg_timeout)
    if a.mode == "late" and r == p - 1:
        print(f"rank {r}: starting {a.late:.0f} s late", flush=True)
        time.sleep(a.late)
    dist.init_process_group("rcoll", timeout=timeout)
    if a.mode == "hang":
        hang(r, p, a.pg_timeout)
        return
    if a.mode == "straggler":
        steps(6, r, p, pause_rank=1, pause_s=a.late, pause_at=3)
    else:
        steps(5, r, p)
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL":
        # counters() must find rcoll inside PyTorch's checking wrapper.
        wrapped = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        if type(wrapped).__name__ != "_ProcessGroupWrapper":
            print(f"FAIL rank {r}: DETAIL did not wrap the backend ({type(wrapped).__name__})", flush=True)
            sys.exit(1)
    c = rcoll.torch.counters()
    if c["ops"] < 5 or c["recoveries"] != 0:
        print(f"FAIL rank {r}: counters {c}", flush=True)
        sys.exit(1)
    print(f"rank {r}: {a.mode}: ok ({c['ops']} ops, {c['recoveries']} recoveries, transport {c['transport']})", flush=True)
    if a.mode != "exit":
        dist.destroy_process_group()
    elif os.environ.get("RCOLL_CHECK_WITHOUT_EXIT_HOOK") == "1":
        # To see what the hook prevents: the backend torn down during finalization.
        import atexit
        atexit.unregister(rcoll.torch._C.shutdown_all)
    # --mode exit: no destroy_process_group(); rcoll.torch's exit hook closes the backend.


if __name__ == "__main__":
    main()
