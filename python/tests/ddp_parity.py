"""DDP with rcoll gives gloo's parameters, with and without injected faults.

    python ddp_parity.py --ranks N [--steps 50] [--inject SPEC --min-recoveries K --min-delays D]

Runs ddp_train.py under torchrun three times at N ranks: with gloo, with rcoll,
and with rcoll under RCOLL_INJECT (links closed, a rank stalled mid-training).
Asserts: rcoll's parameters equal gloo's within float tolerance; the faulty
run finished every step with exactly the fault-free rcoll run's parameters
(bit for bit); and its counters show the recoveries (and delays) it survived.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def launch(ranks, backend, out, steps, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           os.path.join(HERE, "ddp_train.py"), "--backend", backend, "--out", out, "--steps", str(steps)]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    lines = [l for l in p.stdout.splitlines() if "steps with" in l or "recover" in l or "fault injection" in l
             or "Error" in l or "error" in l]
    print(f"--- {backend} at {ranks} ranks{' with ' + env_extra['RCOLL_INJECT'] if env_extra else ''}: "
          f"exit {p.returncode}, {time.time() - t0:.1f} s", flush=True)
    for l in lines[:40]:
        print("   ", l, flush=True)
    if p.returncode != 0:
        print(p.stdout[-6000:], flush=True)
        raise SystemExit(f"FAIL: {backend} run at {ranks} ranks exited {p.returncode}")
    params = torch.load(out)
    infos = [json.load(open(f"{out}.rank{r}")) for r in range(ranks)]
    return params, infos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--inject", default="")
    ap.add_argument("--min-recoveries", type=int, default=1)
    ap.add_argument("--min-delays", type=int, default=0)
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="rcoll-ddp-") as d:
        gloo, _ = launch(a.ranks, "gloo", os.path.join(d, "gloo.pt"), a.steps)
        rcoll, infos = launch(a.ranks, "rcoll", os.path.join(d, "rcoll.pt"), a.steps)
        worst = max(float((rcoll[k].double() - gloo[k].double()).abs().max()) for k in gloo)
        print(f"rcoll vs gloo after {a.steps} steps at {a.ranks} ranks: max |param diff| {worst:.3g} "
              f"over {len(gloo)} tensors", flush=True)
        for k in gloo:
            if not torch.allclose(rcoll[k].double(), gloo[k].double(), rtol=1e-4, atol=1e-5):
                failures.append(f"rcoll vs gloo: {k} differs (max {float((rcoll[k] - gloo[k]).abs().max()):.3g})")
        recov = [i["counters"]["recoveries"] for i in infos]
        if any(recov):
            failures.append(f"fault-free rcoll run counted recoveries {recov}")
        if a.inject:
            faulty, finfos = launch(a.ranks, "rcoll", os.path.join(d, "faulty.pt"), a.steps, {"RCOLL_INJECT": a.inject})
            same = all(torch.equal(faulty[k], rcoll[k]) for k in rcoll)
            worst_f = max(float((faulty[k].double() - rcoll[k].double()).abs().max()) for k in rcoll)
            recov = [i["counters"]["recoveries"] for i in finfos]
            delays = [i["counters"]["delays_injected"] for i in finfos]
            faults = [i["counters"]["faults_injected"] for i in finfos]
            steps = [i["steps"] for i in finfos]
            print(f"faulty run: steps {steps}, recoveries per rank {recov}, data-plane faults injected {faults}, "
                  f"delays injected {delays}, recovery seconds "
                  f"{[round(i['counters']['recovery_seconds'], 3) for i in finfos]}; params equal the fault-free run "
                  f"bit for bit: {same} (max |diff| {worst_f:.3g})", flush=True)
            if not same:
                failures.append(f"faulty run's parameters differ from the fault-free run (max {worst_f:.3g})")
            if min(recov) < a.min_recoveries:
                failures.append(f"expected at least {a.min_recoveries} recoveries on every rank, counted {recov}")
            if sum(delays) < a.min_delays:
                failures.append(f"expected at least {a.min_delays} injected delays (stalls), counted {delays}")
    for f in failures:
        print("FAIL", f, flush=True)
    checks = 3 + (4 if a.inject else 0)
    print(f"ddp parity at {a.ranks} ranks: {checks - len(failures)} passed, {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
