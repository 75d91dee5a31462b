"""Every collective the rcoll backend implements, checked against gloo.

Run under torchrun (one process per rank). The default process group is rcoll;
a gloo group over the same ranks runs every op on identical copies of the same
random tensors, and the results must agree: exactly for data movement and
integer reductions, within the dtype's tolerance for floating-point sums.
Dtypes, shapes (including zero-sized ones) and non-contiguous tensors vary.
Where gloo lacks an op or a dtype, the reference is computed locally from
every rank's inputs (all ranks draw the same seeded inputs).
Exit code 0 when every check passed; prints "N passed, M failed".

RCOLL_CHECK_DEVICE=cpu|cuda (default cpu) picks where the rcoll side runs. With
cuda every tensor handed to an rcoll op (inputs, outputs, lists, non-contiguous
views) lives on the GPU, while gloo keeps running on CPU copies (gloo sees only
CPU tensors) and results are compared on the CPU. Reading a result with .cpu()
after the op (or after work.wait()) exercises the stream-semantics contract:
the current stream waits for the op. Ranks share one GPU as separate NCCL hosts.

    torchrun --nproc-per-node N collectives_check.py      # a worker (this file under torchrun)
    python collectives_check.py --launch N                # checks CUDA, then runs torchrun itself

--launch exists for the skip: with RCOLL_CHECK_DEVICE=cuda and no CUDA device it
prints "SKIP: ..." and exits 77 without starting torchrun (torchrun reports a
worker's exit 77 as its own exit 1, so the workers' 77 would not reach CTest's
SKIP_RETURN_CODE); otherwise it replaces itself with torchrun (exec), whose exit
code is the test's. A worker started directly without CUDA exits 77 as well.
"""
import argparse
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import rcoll.torch  # noqa: F401  (registers "rcoll")

import installed  # noqa: E402  (this folder: the tests run against the installed package)

installed.check()

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.int8, torch.uint8]
SHAPES = [(0,), (1,), (7,), (3, 5), (2, 3, 4), (1000,)]

passed = 0
failed = []

CHECK_DEVICE = os.environ.get("RCOLL_CHECK_DEVICE", "cpu").strip().lower() or "cpu"
DEV = torch.device("cpu")  # where rcoll's tensors live; main() sets the GPU in cuda mode


def skip_without_cuda():
    """RCOLL_CHECK_DEVICE must be cpu or cuda; cuda without a device: "SKIP" and exit 77."""
    if CHECK_DEVICE not in ("cpu", "cuda"):
        print(f"RCOLL_CHECK_DEVICE={CHECK_DEVICE!r}: expected cpu or cuda", flush=True)
        sys.exit(2)
    if CHECK_DEVICE == "cuda" and not torch.cuda.is_available():
        print("SKIP: RCOLL_CHECK_DEVICE=cuda but torch.cuda.is_available() is false: no CUDA device or driver here",
              flush=True)
        sys.exit(77)


def tol(dtype):
    return {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2), torch.float32: (1e-5, 1e-5),
            torch.float64: (1e-12, 1e-12)}.get(dtype, (0, 0))


def same(a, b, dtype=None, exact=False):
    dtype = dtype or a.dtype
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if exact or not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    rtol, atol = tol(dtype)
    return torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol * max(1.0, float(b.double().abs().max()) if b.numel() else 1.0))


def check(name, got, want, exact=False):
    global passed
    gs = got if isinstance(got, (list, tuple)) else [got]
    ws = want if isinstance(want, (list, tuple)) else [want]
    # Compare on the CPU: .cpu() of a CUDA tensor copies on the current stream and waits for it.
    gs, ws = [g.cpu() for g in gs], [w.cpu() for w in ws]
    ok = len(gs) == len(ws) and all(same(g, w, exact=exact) for g, w in zip(gs, ws))
    if ok:
        passed += 1
    else:
        detail = ""
        for g, w in zip(gs, ws):
            if g.shape == w.shape and g.numel() and not same(g, w, exact=exact):
                detail = f" max |diff| {float((g.double() - w.double()).abs().max()):.3g}"
                break
        failed.append(f"rank {dist.get_rank()}: {name}: mismatch{detail}")
        print(f"FAIL {failed[-1]}", flush=True)


def noncontig(t):
    """A non-contiguous tensor with t's values (a strided view into a bigger buffer)."""
    big = torch.zeros((t.numel() * 2,) if t.dim() <= 1 else (*t.shape[:-1], t.shape[-1] * 2), dtype=t.dtype,
                      device=t.device)
    view = big[..., ::2] if t.dim() >= 1 else big
    if t.numel() > 1:
        assert not view.is_contiguous()
    view.copy_(t)
    return view


def rand(shape, dtype, seed, small=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo, hi = (1, 3) if small else ((0, 50) if dtype == torch.uint8 else (-20, 20))
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def variants(t):
    yield "contiguous", t.clone()
    if t.dim() >= 1 and t.numel() > 1:
        yield "non-contiguous", noncontig(t.clone())


def dup(x):
    """A copy of x with x's layout (clone() would make a strided view contiguous)."""
    return x.clone() if x.is_contiguous() else noncontig(x.contiguous())


def dev(x):
    """x for an rcoll op: x itself in cpu mode; in cuda mode a copy on the GPU
    with x's layout (a non-contiguous x gives a non-contiguous GPU view)."""
    if DEV.type == "cpu" or not isinstance(x, torch.Tensor):
        return x
    if x.is_contiguous():
        return x.to(DEV)
    return noncontig(x.contiguous().to(DEV))


def host_only(*tensors):
    """gloo gets CPU tensors only."""
    for t in tensors:
        if isinstance(t, torch.Tensor):
            assert t.device.type == "cpu", f"a {t.device} tensor headed for gloo"
    return tensors


def run_both(fn, *tensors):
    """fn(group, *copies) on rcoll (default group) and gloo; returns both outputs.
    rcoll gets x's layout (non-contiguous stays so) on DEV; gloo a contiguous CPU copy."""
    a = fn(None, *[dev(dup(x)) if isinstance(x, torch.Tensor) else x for x in tensors])
    b = fn(GLOO, *host_only(*[x.contiguous().clone() if isinstance(x, torch.Tensor) else x for x in tensors]))
    return a, b


def wait_completed(work, seconds=60.0):
    """work.is_completed(); on CUDA it follows once the host saw the op end
    (after wait() and a read of the result), so poll a while there."""
    done = work.is_completed()
    deadline = time.monotonic() + seconds
    while not done and DEV.type == "cuda" and time.monotonic() < deadline:
        time.sleep(0.01)
        done = work.is_completed()
    return done


def main():
    global GLOO, DEV
    skip_without_cuda()
    if CHECK_DEVICE == "cuda":
        # Before anything initialises NCCL: ranks sharing a GPU must look like separate hosts.
        os.environ["NCCL_HOSTID"] = f"rcoll-check-{os.environ.get('RANK', '0')}"
        os.environ.setdefault("NCCL_NET", "Socket")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        DEV = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("rcoll")
    GLOO = dist.new_group(backend="gloo")
    r, p = dist.get_rank(), dist.get_world_size()
    seed = 1000

    # all_reduce: every reduce op and dtype, contiguous and not, plus async + future.
    for dtype in FLOATS + INTS:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]:
            for shape in SHAPES:
                seed += 1
                for kind, x in variants(rand(shape, dtype, seed * 31 + r, small=op == dist.ReduceOp.PRODUCT)):
                    def ar(g, t, op=op):
                        dist.all_reduce(t, op=op, group=g)
                        return t
                    got, want = run_both(ar, x)
                    check(f"all_reduce {op} {dtype} {shape} {kind}", got, want)
                    if kind == "non-contiguous" and got.is_contiguous():
                        failed.append(f"rank {r}: all_reduce {dtype} {shape}: the non-contiguous case ran contiguous")
        if dtype.is_floating_point:
            for shape in SHAPES:
                seed += 1
                x = rand(shape, dtype, seed * 31 + r)
                got = dev(x.clone())
                dist.all_reduce(got, op=dist.ReduceOp.AVG)
                want = x.clone()
                dist.all_reduce(want, group=GLOO)  # gloo has no AVG: sum / p
                check(f"all_reduce AVG {dtype} {shape}", got, (want.double() / p).to(dtype))
    x = dev(torch.arange(6, dtype=torch.float32) + r)
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    work.wait()
    check("all_reduce async result", fut.value()[0], sum(torch.arange(6, dtype=torch.float32) + q for q in range(p)))
    if DEV.type == "cuda":
        # Stream semantics: after wait() the current stream waits for the op, so reading
        # x (.cpu() in check: a copy on the current stream) gives the result.
        check("all_reduce async: wait() then read the tensor", x,
              sum(torch.arange(6, dtype=torch.float32) + q for q in range(p)))
    check("work.is_completed", torch.tensor(wait_completed(work)), torch.tensor(True))
    if DEV.type == "cuda":
        # Ordering after the current stream: the input is written by kernels queued just
        # before the call (behind a spin, so an op that did not wait would read zeros),
        # and the result is read by a kernel queued after wait().
        n = 1 << 20
        x = torch.zeros(n, dtype=torch.float32, device=DEV)
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(50_000_000)
        x.fill_(float(r + 1))
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        y = x * 2
        total = float(sum(q + 1 for q in range(p)))
        check("all_reduce async: input written on the current stream just before", x,
              torch.full((n,), total, dtype=torch.float32), exact=True)
        check("all_reduce async: result read by a kernel queued after wait()", y,
              torch.full((n,), 2 * total, dtype=torch.float32), exact=True)
        check("work.is_completed (input written on the current stream)", torch.tensor(wait_completed(work)),
              torch.tensor(True))

    # Coalesced all_reduce (allreduce_coalesced) and all_gather_into_tensor / reduce_scatter_tensor coalesced.
    for dtype in [torch.float32, torch.int64]:
        seed += 1
        xs = [rand(s, dtype, seed * 7 + i * 131 + r) for i, s in enumerate([(3,), (0,), (2, 5)])]
        got = [dev(x.clone()) for x in xs]
        with dist._coalescing_manager():
            for t in got:
                dist.all_reduce(t)
        want = [x.clone() for x in xs]
        for t in want:
            dist.all_reduce(t, group=GLOO)
        check(f"all_reduce coalesced {dtype}", got, want)
        outs = [torch.empty((p * x.shape[0], *x.shape[1:]), dtype=dtype, device=DEV) for x in xs]
        with dist._coalescing_manager():
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, dev(x))
        wants = [torch.empty_like(o, device="cpu") for o in outs]
        for o, x in zip(wants, xs):
            dist.all_gather_into_tensor(o, x, group=GLOO)
        check(f"all_gather_into_tensor coalesced {dtype}", outs, wants, exact=True)
        ins = [rand((p * 4, 3), dtype, seed * 11 + i + r) for i in range(2)]
        outs = [torch.empty((4, 3), dtype=dtype, device=DEV) for _ in ins]
        with dist._coalescing_manager():
            for o, x in zip(outs, ins):
                dist.reduce_scatter_tensor(o, dev(x))
        wants = [torch.empty_like(o, device="cpu") for o in outs]
        for o, x in zip(wants, ins):
            dist.reduce_scatter_tensor(o, x, group=GLOO)
        check(f"reduce_scatter_tensor coalesced {dtype}", outs, wants)

    # broadcast and reduce from every root; every dtype (bool and complex included for broadcast).
    for dtype in FLOATS + INTS + [torch.bool, torch.complex64, torch.int16]:
        for shape in SHAPES:
            seed += 1
            root = seed % p
            src = torch.view_as_complex(rand((*shape, 2), torch.float32, seed * 13 + r)) if dtype.is_complex else rand(shape, dtype, seed * 13 + r)
            for kind, x in variants(src):
                got = dev(dup(x))  # dup: keeps the non-contiguous layout (clone would not)
                dist.broadcast(got, src=root)
                gsrc = torch.view_as_complex(rand((*shape, 2), torch.float32, seed * 13 + root)) if dtype.is_complex else rand(shape, dtype, seed * 13 + root)
                check(f"broadcast {dtype} {shape} {kind} root {root}", got, gsrc, exact=True)
            if dtype in FLOATS + INTS:
                for kind, x in variants(rand(shape, dtype, seed * 17 + r)):
                    def red(g, t):
                        dist.reduce(t, dst=root, group=g)
                        return t
                    got, want = run_both(red, x)
                    if r == root:
                        check(f"reduce {dtype} {shape} {kind} root {root}", got, want)
                    else:
                        check(f"reduce leaves non-root input {dtype} {shape}", got, x, exact=True)

    # all_gather (list) and all_gather_into_tensor: every dtype, non-contiguous inputs and outputs.
    for dtype in FLOATS + INTS + [torch.bool]:
        for shape in SHAPES:
            seed += 1
            for kind, x in variants(rand(shape, dtype, seed * 19 + r)):
                xd = dev(x)
                outs = [torch.empty(shape, dtype=dtype, device=DEV) if q % 2 == 0
                        else noncontig(torch.empty(shape, dtype=dtype, device=DEV)) for q in range(p)]
                dist.all_gather(outs, xd)
                wants = [torch.empty(shape, dtype=dtype) for _ in range(p)]
                dist.all_gather(wants, x.clone(), group=GLOO)
                check(f"all_gather {dtype} {shape} {kind}", outs, wants, exact=True)
                out = torch.empty((p * shape[0], *shape[1:]), dtype=dtype, device=DEV)
                dist.all_gather_into_tensor(out, xd)
                want = torch.cat(wants)
                check(f"all_gather_into_tensor {dtype} {shape} {kind}", out, want, exact=True)

    # reduce_scatter (list) and reduce_scatter_tensor.
    for dtype in FLOATS + INTS:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX]:
            for shape in [(0,), (5,), (2, 3)]:
                seed += 1
                ins = [rand(shape, dtype, seed * 23 + q * 7 + r) for q in range(p)]
                out = torch.empty(shape, dtype=dtype, device=DEV)
                dist.reduce_scatter(out, [noncontig(dev(t)) if t.numel() > 1 else dev(t) for t in ins], op=op)
                # Reference: all_reduce of the whole, block r (gloo).
                whole = torch.stack(ins) if ins[0].numel() else torch.empty((p, *shape), dtype=dtype)
                dist.all_reduce(whole, op=op, group=GLOO)
                check(f"reduce_scatter {op} {dtype} {shape}", out, whole[r])
                big = torch.cat([t.reshape(1, *shape) for t in ins]).reshape(p * shape[0], *shape[1:])
                out2 = torch.empty(shape, dtype=dtype, device=DEV)
                dist.reduce_scatter_tensor(out2, dev(big), op=op)
                check(f"reduce_scatter_tensor {op} {dtype} {shape}", out2, whole[r])

    # alltoall_base (all_to_all_single) with equal and uneven splits, and all_to_all (lists).
    for dtype in [torch.float32, torch.int64, torch.bfloat16, torch.bool]:
        for rows in [0, 1, 3]:
            seed += 1
            x = rand((p * rows, 3), dtype, seed * 29 + r)
            out = torch.empty_like(x, device=DEV)
            dist.all_to_all_single(out, dev(x))
            want = torch.empty_like(x)
            dist.all_to_all_single(want, x.clone(), group=GLOO)
            check(f"all_to_all_single equal {dtype} rows {rows}", out, want, exact=True)
        # Uneven: rank r sends (r + j) % 3 rows to rank j.
        send = [(r + j) % 3 for j in range(p)]
        recv = [(q + r) % 3 for q in range(p)]
        seed += 1
        x = rand((sum(send), 2), dtype, seed * 37 + r)
        out = torch.empty((sum(recv), 2), dtype=dtype, device=DEV)
        dist.all_to_all_single(out, dev(x), output_split_sizes=recv, input_split_sizes=send)
        want = torch.empty_like(out, device="cpu")
        dist.all_to_all_single(want, x.clone(), output_split_sizes=recv, input_split_sizes=send, group=GLOO)
        check(f"all_to_all_single uneven {dtype}", out, want, exact=True)
        ins = [noncontig(dev(rand((send[j], 2), dtype, seed * 41 + j + 10 * r))) if send[j] > 1
               else dev(rand((send[j], 2), dtype, seed * 41 + j + 10 * r)) for j in range(p)]
        outs = [torch.empty((recv[q], 2), dtype=dtype, device=DEV) for q in range(p)]
        dist.all_to_all(outs, ins)
        # gloo has no all_to_all (lists): every rank's inputs are known from the seeds.
        wants = [rand(((q + r) % 3, 2), dtype, seed * 41 + r + 10 * q) for q in range(p)]
        check(f"all_to_all lists {dtype}", outs, wants, exact=True)

    # gather and scatter.
    for dtype in [torch.float32, torch.int8]:
        for shape in [(0,), (4,), (2, 3)]:
            seed += 1
            root = seed % p
            x = rand(shape, dtype, seed * 43 + r)
            outs = [torch.empty(shape, dtype=dtype, device=DEV) for _ in range(p)] if r == root else None
            dist.gather(dev(x), outs, dst=root)
            wouts = [torch.empty(shape, dtype=dtype) for _ in range(p)] if r == root else None
            dist.gather(x.clone(), wouts, dst=root, group=GLOO)
            if r == root:
                check(f"gather {dtype} {shape}", outs, wouts, exact=True)
            ins = [dev(rand(shape, dtype, seed * 47 + q)) for q in range(p)] if r == root else None
            out = torch.empty(shape, dtype=dtype, device=DEV)
            dist.scatter(out, ins, src=root)
            check(f"scatter {dtype} {shape}", out, rand(shape, dtype, seed * 47 + r), exact=True)

    # Point to point: a ring with batch_isend_irecv (1 MiB: more than a socket holds), then plain isend/irecv.
    if p > 1:
        for dtype in [torch.float32, torch.int32, torch.float16]:
            seed += 1
            to, frm = (r + 1) % p, (r - 1) % p
            x = dev(rand((256 * 1024 + 3,), dtype, seed * 53 + r))
            got = noncontig(torch.empty_like(x))
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, to), dist.P2POp(dist.irecv, got, frm)])
            for q in reqs:
                q.wait()
            check(f"batch_isend_irecv ring {dtype}", got, rand(x.shape, dtype, seed * 53 + frm), exact=True)
        # A halo exchange: two tensors each way with both neighbours, every
        # rank posting its sends first (as NCCL's group allows), 3 MB each.
        seed += 1
        to, frm = (r + 1) % p, (r - 1) % p
        outs = [dev(rand((768 * 1024,), torch.float32, seed * 59 + 4 * r + k)) for k in range(4)]
        ins = [torch.empty_like(outs[0]) for _ in range(4)]
        ops = [dist.P2POp(dist.isend, outs[0], to), dist.P2POp(dist.isend, outs[1], to),
               dist.P2POp(dist.isend, outs[2], frm), dist.P2POp(dist.isend, outs[3], frm),
               dist.P2POp(dist.irecv, ins[0], frm), dist.P2POp(dist.irecv, ins[1], frm),
               dist.P2POp(dist.irecv, ins[2], to), dist.P2POp(dist.irecv, ins[3], to)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        for k, (src, kk) in enumerate([(frm, 0), (frm, 1), (to, 2), (to, 3)]):
            if p == 2:  # both neighbours are the same rank: its sends pair up in order
                src, kk = to, k
            check(f"batch_isend_irecv halo {k}", ins[k], rand((768 * 1024,), torch.float32, seed * 59 + 4 * src + kk), exact=True)
        y = dev(torch.arange(10, dtype=torch.float64) * (r + 1))
        z = torch.empty(10, dtype=torch.float64, device=DEV)
        if r % 2 == 0:
            dist.send(y, (r + 1) % p)
            dist.recv(z, (r - 1) % p)
        else:
            dist.recv(z, (r - 1) % p)
            dist.send(y, (r + 1) % p)
        check("send/recv", z, torch.arange(10, dtype=torch.float64) * ((r - 1) % p + 1), exact=True)

    dist.barrier()

    # Clear, typed errors for what rcoll cannot do.
    def expect_error(name, exc, fn, must_mention):
        global passed
        try:
            fn()
        except exc as e:
            text = str(e)
            if all(m in text for m in must_mention):
                passed += 1
                return
            failed.append(f"rank {r}: {name}: message lacks {must_mention}: {text[:300]}")
        except Exception as e:  # noqa: BLE001
            failed.append(f"rank {r}: {name}: raised {type(e).__name__} instead of {exc.__name__}: {str(e)[:300]}")
        else:
            failed.append(f"rank {r}: {name}: did not raise")
        print(f"FAIL {failed[-1]}", flush=True)

    expect_error("BAND", ValueError, lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32, device=DEV),
                                                                  op=dist.ReduceOp.BAND),
                 ["allreduce", f"rank {r}", "BAND"])
    expect_error("bool sum", TypeError, lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool, device=DEV)),
                 ["allreduce", f"rank {r}", "Bool"])
    expect_error("int AVG", TypeError, lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64, device=DEV),
                                                                     op=dist.ReduceOp.AVG),
                 ["allreduce", f"rank {r}", "AVG"])
    expect_error("recv any source", NotImplementedError, lambda: dist.recv(torch.ones(3)), ["recv", f"rank {r}", "any source"])

    c = rcoll.torch.counters()
    print(f"rank {r}: counters {c}", flush=True)
    total = torch.tensor([passed, len(failed)], dtype=torch.int64)
    dist.all_reduce(total, group=GLOO)
    if r == 0:
        where = "" if DEV.type == "cpu" else " (rcoll on cuda)"
        print(f"collectives vs gloo at {p} ranks{where}: {int(total[0])} passed, {int(total[1])} failed", flush=True)
    dist.destroy_process_group()
    return 0 if not failed else 1


def launch(nprocs):
    """--launch N: skip (77) without CUDA in cuda mode, else become torchrun running this file at N ranks."""
    skip_without_cuda()
    sys.stdout.flush()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}",
           os.path.abspath(__file__)]
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launch", type=int, metavar="N", help="check CUDA (cuda mode), then run torchrun at N ranks")
    args = ap.parse_args()
    if args.launch is not None:
        launch(args.launch)
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
