"""rcoll as a ``torch.distributed`` process-group backend.

    import rcoll.torch                          # registers "rcoll"
    dist.init_process_group("rcoll")            # or "cpu:rcoll,cuda:rcoll"
    ...
    rcoll.torch.counters()                      # {"recoveries": 1, "bytes_sent": ..., ...}

Every op runs under rcoll's per-op progress deadlines, liveness and in-process
recovery: a closed link or a frozen peer costs a recovery, not the job. The
process group's ``timeout`` bounds hangs and silent ranks, and is how long
creation waits for a late rank; a rank late to an op is waited for up to
RCOLL_STRAGGLER_TIMEOUT_S (30 min unless set). Ops on CUDA tensors run on
their GPU (on NCCL), ordered after the current stream; ``work.wait()`` makes the
current stream wait for rcoll's verdict on the op (RCOLL_BLOCKING_WAIT=1 or
TORCH_NCCL_BLOCKING_WAIT=1: the host waits), as with ProcessGroupNCCL.
"""
from __future__ import annotations

import atexit

import torch
import torch.distributed as dist

from rcoll import _C

__all__ = ["BACKEND", "RcollBackend", "get_backend", "counters", "diagnostics", "abort", "shutdown"]

BACKEND = "rcoll"
RcollBackend = _C.RcollBackend


def _create(store, rank, world_size, timeout):
    return _C.create_backend(store, rank, world_size, timeout)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    # Scripts that never call destroy_process_group() (Lightning does not):
    # every backend closes before the interpreter finalizes, saying goodbye
    # to its peers, with no backend thread left to take the GIL afterwards.
    atexit.register(_C.shutdown_all)


def _unwrap(backend):
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps each backend in a _ProcessGroupWrapper
    # (which checks that every rank calls the same collective); rcoll is inside.
    seen = 0
    while not isinstance(backend, RcollBackend) and seen < 4:
        inner = getattr(backend, "wrapped_pg", None)
        if inner is None:
            break
        backend, seen = inner, seen + 1
    return backend


def get_backend(group=None, device: str = "cpu") -> RcollBackend:
    """The rcoll backend object of ``group`` (default: the world) for ``device``,
    also when PyTorch wraps it (TORCH_DISTRIBUTED_DEBUG=DETAIL)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = _unwrap(pg._get_backend(torch.device(device)))
    if not isinstance(backend, RcollBackend):
        raise TypeError(f"the process group's {device} backend is {type(backend).__name__}, not rcoll")
    return backend


def counters(group=None, device: str = "cpu") -> dict:
    """rcoll's counters for ``group``'s ``device`` backend (PyTorch makes one per
    device type, each with its own communicator: "cuda" for ops on CUDA tensors):
    ops, bytes_sent, bytes_received, recoveries, fallbacks, recovery_seconds,
    faults_injected, delays_injected, epoch, transport, device_transport ("nccl",
    or "staged" through host memory), nccl_ops."""
    return get_backend(group, device).counters()


def diagnostics(group=None, device: str = "cpu") -> str:
    """Identity, epoch, transport, counters and the last ops, for humans."""
    return get_backend(group, device).diagnostics()


def abort(group=None) -> None:
    """Fails every op of ``group`` not yet complete, then closes its communicator."""
    get_backend(group).abort()


def shutdown(group=None) -> None:
    """Waits for the issued ops of ``group``, then closes its communicator."""
    get_backend(group).shutdown()
