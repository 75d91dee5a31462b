"""Backend strings, counters, diagnostics, shutdown and abort through torch.distributed.

Run under torchrun at 2+ ranks. "cpu:rcoll,cuda:rcoll" initialises; the
backend reports itself; counters count; an op after shutdown() raises a clear
error; an aborted group fails its pending work instead of hanging.
Prints "N passed, M failed".
"""
import sys

import torch
import torch.distributed as dist

import rcoll.torch

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()

passed, failed = 0, []


def expect(name, cond, detail=""):
    global passed
    if cond:
        passed += 1
    else:
        failed.append(f"{name} {detail}")
        print(f"FAIL rank {dist.get_rank()}: {name} {detail}", flush=True)


def main():
    dist.init_process_group("cpu:rcoll,cuda:rcoll")
    r, p = dist.get_rank(), dist.get_world_size()
    expect("backend name", dist.get_backend() == "cpu:rcoll,cuda:rcoll" or "rcoll" in str(dist.get_backend()),
           str(dist.get_backend()))
    t = torch.full((4,), float(r))
    dist.all_reduce(t)
    expect("allreduce", torch.equal(t, torch.full((4,), float(sum(range(p))))), str(t))
    c = rcoll.torch.counters()
    expect("counters", c["ops"] >= 1 and c["bytes_sent"] > 0 and c["transport"] in ("ucx", "tcp") and c["recoveries"] == 0, str(c))
    d = rcoll.torch.diagnostics()
    expect("diagnostics", f"rank {r} of {p}" in d, d[:200])

    # CUDA tensors are staged through host memory (needs a GPU per rank; skipped without).
    if torch.cuda.is_available() and torch.cuda.device_count() >= p:
        torch.cuda.set_device(r)
        g = torch.full((1000,), float(r + 1), device="cuda")
        dist.all_reduce(g)
        expect("cuda allreduce", torch.equal(g.cpu(), torch.full((1000,), float(sum(range(1, p + 1))))), str(g[:3]))
        h = torch.empty(1000, device="cuda")
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, g, (r + 1) % p), dist.P2POp(dist.irecv, h, (r - 1) % p)])
        for q in reqs:
            q.wait()
        expect("cuda batch_isend_irecv", torch.equal(h.cpu(), g.cpu()), str(h[:3]))
    else:
        print(f"rank {r}: CUDA checks skipped: no GPU for every rank", flush=True)

    # A second rcoll group beside the world: its own communicator and counters.
    sub = dist.new_group(backend="rcoll")
    u = torch.ones(3)
    dist.all_reduce(u, group=sub)
    expect("second group", torch.equal(u, torch.full((3,), float(p))) and rcoll.torch.counters(sub)["ops"] == 1,
           str(rcoll.torch.counters(sub)))

    # Shutdown: later ops raise an error naming the op and the rank.
    rcoll.torch.shutdown(sub)
    try:
        dist.all_reduce(u, group=sub)
        expect("op after shutdown raises", False)
    except RuntimeError as e:
        expect("op after shutdown raises", "allreduce" in str(e) and f"rank {r}" in str(e) and "shut down" in str(e), str(e)[:300])

    # Abort: rank 0 waits for a receive no one sends; abort fails it at once.
    if r == 0:
        box = torch.empty(2)
        work = dist.irecv(box, src=1)
        rcoll.torch.get_backend().abort()
        try:
            work.wait()
            expect("abort fails pending work", False)
        except Exception as e:  # noqa: BLE001
            expect("abort fails pending work", "aborted" in str(e), str(e)[:300])
    print(f"lifecycle at {p} ranks, rank {r}: {passed} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
