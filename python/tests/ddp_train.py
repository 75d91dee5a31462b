"""Trains a small model with DistributedDataParallel and saves the result.

    torchrun --nproc-per-node N ddp_train.py --backend rcoll|gloo --out FILE [--steps 50]

Every rank starts from the same seeded model and draws its own seeded batches,
so two runs with the same world size must end with the same parameters
whatever the backend: within float tolerance across backends (their sums
round in different orders), exactly across runs of one backend. Rank 0 saves
the final parameters; every rank's rcoll counters go to FILE.rank<r>.
"""
import argparse
import json

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rcoll.torch

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    dist.init_process_group(a.backend)
    r = dist.get_rank()
    torch.set_num_threads(1)
    # Small buckets: several allreduces per step; BatchNorm buffers: a broadcast per step.
    net = DDP(model(), bucket_cap_mb=0.1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(a.steps):
        g = torch.Generator().manual_seed(100000 * step + r)
        x = torch.randn(32, 64, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    dist.barrier()
    if r == 0:
        torch.save({k: v.detach().clone() for k, v in net.module.state_dict().items()}, a.out)
    info = {"rank": r, "steps": a.steps, "loss": float(loss)}
    if a.backend.endswith("rcoll"):
        info["counters"] = rcoll.torch.counters()
    with open(f"{a.out}.rank{r}", "w") as f:
        json.dump(info, f)
    print(f"rank {r}: {a.steps} steps with {a.backend}, final loss {float(loss):.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
