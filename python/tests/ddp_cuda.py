"""DDP on CUDA with rcoll gives NCCL's parameters at about NCCL's step time, and survives faults.

    python ddp_cuda.py [--ranks 2] [--steps 50] [--warmup 5] [--skip-faults] [--timeout 240]
                       [--inject auto|SPEC] [--sigstop-at 20] [--sigstop-s 5]
                       [--close-link-runs 1] [--skip-nccl] [--variant NAME:VAR=VALUE,...]

Runs ddp_cuda_train.py (a 25M-parameter MLP, ranks sharing one GPU as separate
NCCL hosts) under torchrun: with nccl, with rcoll, with rcoll under RCOLL_INJECT
(a link closed mid-training: "auto" closes rank 1's link at the first op of
step 2*steps/5, found from the fault-free run's op counts), and with rcoll
while rank 1 is frozen (SIGSTOP) from --sigstop-at for --sigstop-s seconds
(5: a frozen rank stops heartbeating; DDP's stream waits at rcoll's stream
gate, where a recovery would have to stop NCCL, which waits for that
stream: the silent rank is waited for on the same communicator instead).
Asserts: every run finished every step on every rank; rcoll's parameters equal
NCCL's within float tolerance (with 2 ranks usually bit for bit: both add two
values); the fault-free rcoll run counted no recoveries; each faulty run ended
with exactly the fault-free rcoll run's parameters; the closed link counted at
least one recovery on every rank, the frozen rank none (a rank said it waits
for it under the stream gate); counters["device_transport"] is "nccl" where reported.
Prints one line per run and `DDP_CUDA_SUMMARY {json}` (median step ms of nccl
and rcoll, their ratio against the 1.10x target, which is reported, not
asserted). Exit 0: all passed; 1: a check failed; 77: no CUDA device (skip).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_RATIO = 1.10
SILENT_UNDER_GATE = "on the same NCCL communicator, no recovery"
LOG_MARKERS = ("steps with", "SIGSTOP", "recover", "fault injection", "silent", "Error", "error")


def skip_without_cuda():
    if not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is false: no CUDA device or driver here", flush=True)
        sys.exit(77)


def torchrun(ranks, script, args, env_extra, timeout):
    """Runs script at `ranks` ranks under torchrun: (exit code, output, seconds); 124 if it timed out."""
    env = dict(os.environ, **env_extra)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           os.path.join(HERE, script), *args]
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        dump_stacks(p.pid)
        # SIGTERM, not SIGKILL: torchrun then stops its workers, which run in sessions of their own.
        p.terminate()
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        out, rc = out + f"\n(timed out after {timeout} s)\n", 124
    return rc, out, time.time() - t0


def dump_stacks(pid):
    """Where a hung run's processes are: every thread's stack of each process under
    torchrun, by cuda-gdb (or gdb), into RCOLL_HANG_STACKS_DIR/stacks.<pid>.txt.
    Nothing where that is unset, or no debugger or psutil is at hand."""
    where = os.environ.get("RCOLL_HANG_STACKS_DIR")
    gdb = shutil.which("cuda-gdb") or shutil.which("gdb")
    if not where or not gdb:
        return
    try:
        import psutil
        children = psutil.Process(pid).children(recursive=True)
    except Exception as e:  # no psutil, or torchrun already gone
        print(f"(no stacks: {e})", flush=True)
        return
    os.makedirs(where, exist_ok=True)
    # All at once, each bounded: the caller's own time limit keeps running.
    dumps = []
    for child in children:
        path = os.path.join(where, f"stacks.{child.pid}.txt")
        try:
            f = open(path, "w")
            f.write(" ".join(child.cmdline()) + "\n")
            f.flush()
            dumps.append((child.pid, path, f, subprocess.Popen(
                [gdb, "-p", str(child.pid), "-batch", "-ex", "info threads", "-ex", "thread apply all bt 40"],
                stdout=f, stderr=subprocess.STDOUT)))
        except Exception as e:
            print(f"(no stacks of pid {child.pid}: {e})", flush=True)
    for pid, path, f, p in dumps:
        try:
            p.wait(timeout=40)
            print(f"(stacks of pid {pid} in {path})", flush=True)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            print(f"(stacks of pid {pid}: the debugger took over 40 s; what it wrote is in {path})", flush=True)
        f.close()


def rank_infos(out, ranks):
    """What each rank wrote to OUT.rank<r> (JSON), None where it wrote nothing readable."""
    infos = []
    for r in range(ranks):
        try:
            with open(f"{out}.rank{r}") as f:
                infos.append(json.load(f))
        except (OSError, ValueError):
            infos.append(None)
    return infos


def train(a, d, name, backend, args=(), env=None):
    """One torchrun of ddp_cuda_train.py: {"rc", "params" (or None), "infos" (per rank, None if missing)}."""
    out = os.path.join(d, f"{name}.pt")
    rc, log, secs = torchrun(a.ranks, "ddp_cuda_train.py",
                             ["--backend", backend, "--out", out, "--steps", str(a.steps), "--warmup", str(a.warmup),
                              *args],
                             dict(CUBLAS_WORKSPACE_CONFIG=":4096:8", **(env or {})), a.timeout)
    infos = rank_infos(out, a.ranks)
    params = torch.load(out) if rc == 0 and os.path.exists(out) else None
    run = {"name": name, "rc": rc, "params": params, "infos": infos, "log": log}
    counters = [i["counters"] if i and "counters" in i else {} for i in infos]
    print(f"--- {name}: exit {rc}, {secs:.1f} s, steps {[i and i['steps'] for i in infos]}, "
          f"median step ms {[i and round(i['median_step_ms'], 2) for i in infos]}"
          + (f", recoveries {[c.get('recoveries') for c in counters]}, faults injected "
             f"{[c.get('faults_injected') for c in counters]}, device transport "
             f"{[c.get('device_transport') for c in counters]}, nccl ops {[c.get('nccl_ops') for c in counters]}, NCCL stops put off {[c.get('nccl_stops_put_off') for c in counters]}"
             if backend == "rcoll" else ""), flush=True)
    if infos and infos[0] and "step_ms" in infos[0]:
        print(f"    rank 0 step ms: {infos[0]['step_ms']}", flush=True)
    for line in [l for l in log.splitlines() if any(m in l for m in LOG_MARKERS)][:30]:
        print("   ", line, flush=True)
    if rc != 0:
        print(log[-6000:], flush=True)
    return run


def median_ms(run):
    """The slowest rank's median step: the ranks wait for each other, so that is the job's step."""
    meds = [i["median_step_ms"] for i in run["infos"] if i]
    return round(max(meds), 3) if meds else None


def max_diff(p, q):
    return max(float((p[k].double() - q[k].double()).abs().max()) for k in q)


def identical(p, q):
    return p.keys() == q.keys() and all(torch.equal(p[k], q[k]) for k in q)


def inject_spec(a, reference):
    """close-link on rank 1 at the first op of step 2/5 into training, from the fault-free run's op counts."""
    if a.inject != "auto":
        return a.inject
    info, step = reference["infos"][1], a.steps * 2 // 5
    ops = info.get("ops_at_step") if info else None
    return f"close-link:rank=1,op={ops[step - 1] + 1 if ops and step >= 1 else 40}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip-faults", action="store_true")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per torchrun")
    ap.add_argument("--inject", default="auto", help='RCOLL_INJECT for the fault run, or "auto"')
    ap.add_argument("--sigstop-at", type=int, default=20)
    ap.add_argument("--sigstop-s", type=float, default=5)
    ap.add_argument("--close-link-runs", type=int, default=1,
                    help="close-link runs, one after another, stopping at the first that fails (a hang's stacks: "
                         "RCOLL_HANG_STACKS_DIR)")
    ap.add_argument("--skip-nccl", action="store_true", help="no nccl run (no step-time ratio, no check against it)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE[,VAR=VALUE]: one more fault-free rcoll run with that environment, timed only")
    a = ap.parse_args()
    skip_without_cuda()
    if a.ranks < 2:
        ap.error("--ranks must be at least 2 (rank 1 is the one faulted)")

    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL", what, flush=True)

    def finished(run):
        ok = run["rc"] == 0 and all(i and i["steps"] == a.steps for i in run["infos"])
        check(ok, f"{run['name']}: not every rank finished {a.steps} steps (exit {run['rc']})")
        c = [i.get("counters", {}) for i in run["infos"] if i]
        check(all(x.get("device_transport", "nccl") == "nccl" for x in c),
              f"{run['name']}: device_transport {[x.get('device_transport') for x in c]}, expected nccl")
        return ok and run["params"] is not None

    def recoveries(run):
        return [i["counters"]["recoveries"] if i else None for i in run["infos"]]

    summary = {"ranks": a.ranks, "steps": a.steps, "target_ratio": TARGET_RATIO, "recoveries": {}}
    with tempfile.TemporaryDirectory(prefix="rcoll-ddp-cuda-") as d:
        nccl = None if a.skip_nccl else train(a, d, "nccl", "nccl")
        rcoll = train(a, d, "rcoll", "rcoll")
        nccl_ok, rcoll_ok = nccl is not None and finished(nccl), finished(rcoll)
        if nccl_ok and rcoll_ok:
            diff = max_diff(rcoll["params"], nccl["params"])
            same = identical(rcoll["params"], nccl["params"])
            print(f"rcoll vs nccl after {a.steps} steps at {a.ranks} ranks: max |param diff| {diff:.3g}, "
                  f"bit for bit: {same}", flush=True)
            summary.update(max_abs_diff_vs_nccl=diff, bit_identical_to_nccl=same)
            check(all(torch.allclose(rcoll["params"][k].double(), p.double(), rtol=1e-4, atol=1e-5)
                      for k, p in nccl["params"].items()), f"rcoll's parameters differ from nccl's (max {diff:.3g})")
        if rcoll_ok:
            check(not any(recoveries(rcoll)), f"fault-free rcoll run counted recoveries {recoveries(rcoll)}")
        for v in a.variant:
            name, _, assigns = v.partition(":")
            env = dict(kv.split("=", 1) for kv in assigns.split(",") if kv)
            run = train(a, d, f"rcoll+{name}", "rcoll", env=env)
            summary.setdefault("variants", {})[name] = {"env": env, "median_step_ms": median_ms(run), "exit": run["rc"]}
        faulty = []
        if not a.skip_faults and rcoll_ok:
            spec = inject_spec(a, rcoll)
            summary["inject"] = spec
            for i in range(a.close_link_runs):
                name = "rcoll+close-link" + (f"#{i + 1}" if a.close_link_runs > 1 else "")
                faulty.append(("close_link", train(a, d, name, "rcoll", env={"RCOLL_INJECT": spec})))
                if faulty[-1][1]["rc"] != 0:
                    break
            if a.sigstop_at < a.steps:
                faulty.append(("sigstop", train(a, d, f"rcoll+sigstop-{a.sigstop_s:g}s", "rcoll",
                                                ["--sigstop-at", str(a.sigstop_at),
                                                 "--sigstop-ms", str(int(a.sigstop_s * 1000))])))
        elif not a.skip_faults:
            check(False, "fault runs not started: the fault-free rcoll run failed")
        for key, run in faulty:
            if not finished(run):
                continue
            rec = recoveries(run)
            if key == "close_link" and a.close_link_runs > 1:
                summary["recoveries"].setdefault(key, []).append(rec)
            else:
                summary["recoveries"][key] = rec
            diff = max_diff(run["params"], rcoll["params"])
            print(f"{run['name']}: recoveries per rank {rec}, params equal the fault-free run bit for bit: "
                  f"{identical(run['params'], rcoll['params'])} (max |diff| {diff:.3g}); counters rank 0: "
                  f"{run['infos'][0]['counters']}", flush=True)
            check(identical(run["params"], rcoll["params"]),
                  f"{run['name']}: parameters differ from the fault-free rcoll run (max {diff:.3g})")
            if key == "sigstop":
                # DDP waits on its stream (Work::stream_wait): stopping NCCL for a
                # recovery would wait for that stream, so the frozen rank is waited
                # for on the same communicator, and the op completes once it is back.
                check(max(rec) == 0, f"{run['name']}: expected no recovery (a stream waits at the gate), counted {rec}")
                check(SILENT_UNDER_GATE in run["log"],
                      f"{run['name']}: no rank said it waits for the silent rank under the stream gate")
            else:
                check(min(rec) >= 1, f"{run['name']}: expected a recovery on every rank, counted {rec}")
                # DDP's stream waits at the gate: the old communicator's stop is put
                # off to the op's end (docs/gpu.md).
                put_off = [i["counters"].get("nccl_stops_put_off", 0) if i else 0 for i in run["infos"]]
                check(max(put_off) >= 1, f"{run['name']}: expected an NCCL stop put off under the stream gate, "
                                         f"counted {put_off}")

    t_nccl, t_rcoll = (median_ms(nccl) if nccl else None), median_ms(rcoll)
    ratio = t_rcoll / t_nccl if t_nccl and t_rcoll else None
    print(f"median step: nccl {t_nccl} ms, rcoll {t_rcoll} ms, ratio "
          f"{'n/a' if ratio is None else f'{ratio:.3f}'} (target <= {TARGET_RATIO}, reported only)", flush=True)
    summary.update(nccl_median_step_ms=t_nccl, rcoll_median_step_ms=t_rcoll, ratio=ratio, failures=failures)
    summary["pass"] = not failures
    print("DDP_CUDA_SUMMARY " + json.dumps(summary), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
