"""DDP step time on CPU: one backend, one run, under torchrun.

    torchrun --standalone --nproc-per-node 4 bench/ddp_step_time.py --backend rcoll|gloo --out FILE

A 25M-parameter MLP (3 x 2048x4096 layers and a head), batches of 32, SGD:
each step is forward, backward (DDP all-reduces its gradient buckets while
backward runs) and the optimizer step, so the collectives compete with the
ranks' own compute for the cores. Rank 0 writes the step times (seconds,
after --warmup steps) and the transport rcoll used to FILE as JSON.
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rcoll.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    dist.init_process_group(a.backend)
    r = dist.get_rank()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(), nn.Linear(2048, 4096),
                          nn.ReLU(), nn.Linear(4096, 10))
    params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    torch.manual_seed(100 + r)
    x, y = torch.randn(32, 2048), torch.randint(0, 10, (32,))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    transport = rcoll.torch.counters()["transport"] if a.backend == "rcoll" else "-"
    dist.destroy_process_group()
    if r == 0:
        with open(a.out, "w") as f:
            json.dump({"backend": a.backend, "transport": transport, "params": params, "step_s": times}, f)


if __name__ == "__main__":
    main()
