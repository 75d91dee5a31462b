"""Trains a ~25M-parameter MLP with DistributedDataParallel on CUDA, timing each step.

    torchrun --nproc-per-node N ddp_cuda_train.py --backend rcoll|nccl --out FILE
             [--steps 50] [--warmup 5] [--sigstop-at STEP --sigstop-ms MS]

Several ranks may share one GPU: each is its own NCCL "host" (NCCL_HOSTID),
talking over sockets on loopback. Every rank starts from the same seeded model
and draws its own seeded batches on the GPU, with deterministic kernels, so two
runs of one backend end with bit-identical parameters, and with 2 ranks (sums
of two values) rcoll's should equal NCCL's too. Rank 0 saves the final
parameters to FILE; every rank writes FILE.rank<r>: steps finished, the median
step time after warmup (torch.cuda.synchronize() around each step), and for
rcoll its counters and its op count after each step (so the driver can aim a
fault at the middle of training). With --sigstop-at, rank 0 freezes rank 1
(SIGSTOP) for MS milliseconds from a side thread while it keeps training.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rcoll.torch  # registers "rcoll"

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()

IN, HIDDEN, CLASSES, BATCH = 2048, 4096, 16, 64
PID_KEY = "rcoll_test/ddp_cuda/pid1"


def share_the_gpu():
    """Before anything initialises NCCL: ranks sharing a GPU must look like
    different hosts to it (else it refuses them as duplicates of one device)."""
    os.environ["NCCL_HOSTID"] = f"rcoll-test-{os.environ['RANK']}"
    os.environ.setdefault("NCCL_NET", "Socket")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


def model():
    # 2048*4096 + 4096*4096 + 4096*16 weights: 25.2M parameters, 101 MB of gradients a step.
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def batch(step, rank, device):
    g = torch.Generator(device=device)
    g.manual_seed(100000 * step + rank)
    x = torch.randn(BATCH, IN, generator=g, device=device)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g, device=device)
    return x, y


def freeze(pid, ms):
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(ms / 1000)
    finally:
        os.kill(pid, signal.SIGCONT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True, choices=["rcoll", "nccl"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sigstop-at", type=int, default=-1)
    ap.add_argument("--sigstop-ms", type=int, default=5000)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device", flush=True)
        sys.exit(77)
    device = share_the_gpu()
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # warn_only: an op with no deterministic kernel should show up in the log, not end the run.
    torch.use_deterministic_algorithms(True, warn_only=True)

    dist.init_process_group(a.backend)
    r = dist.get_rank()
    use_rcoll = a.backend == "rcoll"
    freezer = None
    if a.sigstop_at >= 0:
        # Through the store, not a collective: the op sequence stays that of a run without SIGSTOP.
        store = dist.distributed_c10d._get_default_store()
        if r == 1:
            store.set(PID_KEY, str(os.getpid()))
        victim = int(store.get(PID_KEY)) if r == 0 else None

    net = DDP(model().to(device), device_ids=[device.index])
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    step_s, ops_at_step = [], []
    for step in range(a.steps):
        if step == a.sigstop_at and r == 0:
            freezer = threading.Thread(target=freeze, args=(victim, a.sigstop_ms), name="sigstop")
            freezer.start()
            print(f"rank 0: step {step}: SIGSTOP to rank 1 (pid {victim}) for {a.sigstop_ms} ms", flush=True)
        x, y = batch(step, r, device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        if use_rcoll:
            ops_at_step.append(rcoll.torch.counters(device="cuda")["ops"])
    if freezer is not None:
        freezer.join()
    dist.barrier()
    if r == 0:
        torch.save({k: v.detach().cpu().clone() for k, v in net.module.state_dict().items()}, a.out)
    timed = step_s[a.warmup:] or step_s
    info = {"rank": r, "steps": len(step_s), "median_step_ms": 1000 * statistics.median(timed),
            "loss": float(loss), "step_ms": [round(1000 * s, 3) for s in step_s]}
    if use_rcoll:
        info["counters"] = rcoll.torch.counters(device="cuda")
        info["ops_at_step"] = ops_at_step
    with open(f"{a.out}.rank{r}", "w") as f:
        json.dump(info, f)
    print(f"rank {r}: {len(step_s)} steps with {a.backend}, median step {info['median_step_ms']:.2f} ms, "
          f"final loss {float(loss):.6f}" + (f", counters {info['counters']}" if use_rcoll else ""), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
