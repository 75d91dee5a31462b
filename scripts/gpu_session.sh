#!/usr/bin/env bash
# The GPU checks of device ops on NCCL (the PyTorch backend on CUDA tensors,
# stream-ordered waits, device send/recv, NCCL-level overhead) as one script,
# for a GPU machine that has CUDA, NCCL, PyTorch and CMake but none of rcoll's
# other dependencies. Ranks share its one GPU as separate NCCL hosts, under MPS.
#
# Made here first:
#   scripts/build.sh && scripts/gpu_bundle.sh       build-gpu: the C++ tests, rcoll-run, the benches
#   scripts/gpu_torch_ext.sh                        build-torch-gpu: the extension for that machine's Python
# Then there, from the repository root, with both folders carried:
#   scripts/gpu_session.sh [STEP...]                default: every step, in the order below
# Steps: env torch ctest ctest_nonblocking ddp pipeline bench (the default, in
# this order; ctest_nonblocking runs the NCCL tests with non-blocking calls, the
# recoveries' other revoke path); ctest_blocking, recovery (the NCCL
# recoveries alone, which ctest runs too), hang (the DDP SIGSTOP run alone,
# with stacks should it hang) and close_link (the DDP close-link run, again
# and again) on request. Every step has a time limit and
# a log; $OUT/gpu-logs.tgz holds them all (remade after each step, so a run
# cut short still brings back what it did), $OUT/summary.txt one line per step.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/rcoll-gpu-out}
logs=/tmp/rcoll-gpu-logs
mkdir -p "$out" "$logs"
bundle=$root/build-gpu
ext=$root/build-torch-gpu/python
steps=("$@")
((${#steps[@]})) || steps=(env torch ctest ctest_nonblocking ddp pipeline bench)

# NCCL: the system's, else the one PyTorch's wheels bring (what torch loads too).
nccl_dir=$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}' | xargs -r dirname)
if [[ -z $nccl_dir ]]; then
  nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null)
  [[ -d $nccl_lib ]] && nccl_dir=$nccl_lib
fi
export LD_LIBRARY_PATH=$bundle/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -d $bundle/lib/ucx ]] && export UCX_MODULE_DIR=$bundle/lib/ucx
export PYTHONPATH=$ext${PYTHONPATH:+:$PYTHONPATH}
export RCOLL_TORCH_PYTHON=$(command -v python3)
export OMP_NUM_THREADS=2 PYTHONUNBUFFERED=1

pack() { tar czf "$out/gpu-logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null; }
mps_start() {
  if nvidia-cuda-mps-control -d 2>/dev/null; then mps="MPS on ($CUDA_MPS_PIPE_DIRECTORY)"; else mps="MPS did not start: ranks time-slice the GPU"; fi
  echo "$mps" | tee -a "$out/summary.txt"
}
# step NAME SECONDS COMMAND...: runs it with a limit, logs it, notes the
# outcome. Each step is a process group of its own: whatever of it is left
# once it ends (ranks of a run that timed out, stuck in CUDA) is killed, and
# after a step that failed, MPS starts afresh. In stop 56 a hung DDP run left
# the GPU unusable for every later step of the call (no device memory).
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $(date +%T) $name (limit ${limit} s): $*"
  local t0=$SECONDS
  setsid timeout -k 15 "$limit" "$@" >"$logs/$name.log" 2>&1 &
  local group=$!
  wait "$group"
  local rc=$?
  kill -KILL -- "-$group" 2>/dev/null && echo "$name: killed what was left of its process group" | tee -a "$out/summary.txt"
  local line="$name: exit $rc in $((SECONDS - t0)) s"
  echo "$line" | tee -a "$out/summary.txt"
  tail -n "${RCOLL_GPU_TAIL:-12}" "$logs/$name.log"
  if ((rc != 0)); then
    echo quit | nvidia-cuda-mps-control 2>/dev/null
    sleep 2
    mps_start
  fi
  pack
  return 0
}

# MPS, so the ranks share the GPU rather than take turns in time slices. The
# pipe directory must be in every rank's environment (exported here, not in
# a subshell: stop 34's first two runs lost it that way and time-sliced).
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
mps_start
trap 'echo quit | nvidia-cuda-mps-control 2>/dev/null; pack' EXIT

for s in "${steps[@]}"; do
  case $s in
    env)
      step env 30 bash -c "nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
        echo nproc \$(nproc); echo NCCL: $nccl_dir; ls $nccl_dir; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())';
        scripts/gpu_tests.sh env"
      ;;
    torch)
      # The extension loads beside that machine's torch, and every collective
      # on CUDA tensors agrees with gloo on CPU copies of them.
      step torch_import 30 python3 -c 'import torch, rcoll.torch, rcoll._C as c; print(c.version(), torch.__version__)'
      step torch_collectives_cuda ${RCOLL_GPU_LIMIT_COLLECTIVES:-150} env RCOLL_CHECK_DEVICE=cuda python3 python/tests/collectives_check.py --launch 2
      ;;
    ctest|ctest_blocking|ctest_nonblocking)
      # The CUDA-labelled tests but the PyTorch ones (the ddp, pipeline and
      # torch steps run those; RCOLL_GPU_CTEST: a ctest -R pattern instead):
      # kernels, NCCL communicators, device ops on every transport, stream
      # waits (under faults too), send/recv on NCCL, blocking calls, the NCCL
      # recoveries, replays and fallbacks. RCOLL_GPU_CTEST_ARGS: more ctest
      # arguments (--repeat until-fail:10, say). ctest_blocking and
      # ctest_nonblocking: the same with every communicator's NCCL calls
      # blocking or not (RCOLL_NCCL_BLOCKING=1 or 0; the default is 1).
      mode=()
      [[ $s == ctest_blocking ]] && mode=(RCOLL_NCCL_BLOCKING=1)
      [[ $s == ctest_nonblocking ]] && mode=(RCOLL_NCCL_BLOCKING=0)
      step "$s" ${RCOLL_GPU_LIMIT_CTEST:-300} env "${mode[@]}" RCOLL_GPU_TEST_TIMEOUT=${RCOLL_GPU_TEST_TIMEOUT:-240} \
        scripts/gpu_tests.sh ctest -j ${RCOLL_GPU_CTEST_JOBS:-4} -LE torch -R "${RCOLL_GPU_CTEST:-.}" ${RCOLL_GPU_CTEST_ARGS:-}
      ;;
    ddp)
      step ddp_cuda ${RCOLL_GPU_LIMIT_DDP:-420} python3 python/tests/ddp_cuda.py --ranks 2 --steps ${RCOLL_DDP_STEPS:-50} \
        --timeout ${RCOLL_GPU_RUN_TIMEOUT:-120} ${RCOLL_DDP_ARGS:-}
      ;;
    close_link)
      # The DDP close-link run again and again (RCOLL_CLOSE_LINK_RUNS, default
      # 10), after one fault-free run, stopping at the first that fails; a
      # hang leaves every rank's stacks in stacks/. The recovery under the
      # stream gate that hung in 2 of 8 such runs in stop 52.
      step ddp_close_link ${RCOLL_GPU_LIMIT_CLOSE_LINK:-300} env RCOLL_HANG_STACKS_DIR=$logs/stacks \
        python3 python/tests/ddp_cuda.py --ranks 2 --steps ${RCOLL_DDP_STEPS:-50} --timeout ${RCOLL_GPU_RUN_TIMEOUT:-35} \
        --skip-nccl --sigstop-at 1000 --close-link-runs ${RCOLL_CLOSE_LINK_RUNS:-10}
      ;;
    hang)
      # The DDP run with rank 1 frozen (SIGSTOP) for 5 s, alone and logging at
      # INFO; should it hang, every rank's stacks (cuda-gdb) land in stacks/.
      step ddp_sigstop ${RCOLL_GPU_LIMIT_HANG:-240} env RCOLL_HANG_STACKS_DIR=$logs/stacks RCOLL_DEBUG=INFO \
        NCCL_DEBUG=${NCCL_DEBUG:-WARN} python3 -c '
import sys; sys.path.insert(0, "python/tests"); import ddp_cuda as d
rc, out, secs = d.torchrun(2, "ddp_cuda_train.py", ["--backend", "rcoll", "--out", "/tmp/sigstop.pt", "--steps", "40",
                           "--warmup", "5", "--sigstop-at", "20", "--sigstop-ms", "5000"], {}, int(sys.argv[1]))
print(out); print("exit", rc, "in", round(secs, 1), "s"); sys.exit(rc)' ${RCOLL_GPU_RUN_TIMEOUT:-60}
      ;;
    pipeline)
      step pipeline_cuda ${RCOLL_GPU_LIMIT_PIPELINE:-300} python3 python/tests/pipeline_cuda.py --ranks 4 \
        --microbatches ${RCOLL_PIPELINE_MICROBATCHES:-40} --timeout ${RCOLL_GPU_RUN_TIMEOUT:-120}
      ;;
    bench)
      # rcoll against raw NCCL, same ranks, same run (RCOLL_GPU_BENCH: rank
      # counts, "b" after one for blocking NCCL calls, "n" for non-blocking
      # (neither: the default, blocking), "c" for every
      # op confirmed on its own (RCOLL_NCCL_CONFIRM_EVERY=1, as before stop
      # 49), "r" for recovery off, which drops every confirmation, "k" for the
      # kept input copied before the op's group (RCOLL_NCCL_KEEP_IN_GROUP=0),
      # "e" and a number for every that-many-th collective confirmed
      # (RCOLL_NCCL_CONFIRM_EVERY; 2e64, say); default 1 2 2n).
      run="$bundle/tools/rcoll-run"
      sizes=${RCOLL_GPU_BENCH_SIZES:-8,4K,1M,64M,256M}
      declare -A seen=()
      for cell in ${RCOLL_GPU_BENCH:-1 2 2n}; do
        # A cell named again keeps its own logs (bench_np2_2, ...).
        seen[$cell]=$((${seen[$cell]:-0} + 1))
        tag=np$cell
        ((seen[$cell] > 1)) && tag+=_${seen[$cell]}
        np=${cell%%[bncrke]*}
        mode=() recovery=1 every=16 in_group=1
        [[ $cell == *b* ]] && mode=(RCOLL_NCCL_BLOCKING=1)
        [[ $cell == *n* ]] && mode=(RCOLL_NCCL_BLOCKING=0)
        [[ $cell == *c* ]] && every=1
        [[ $cell == *r* ]] && recovery=0
        [[ $cell == *k* ]] && in_group=0
        [[ $cell =~ e([0-9]+) ]] && every=${BASH_REMATCH[1]}
        # RCOLL_GPU_PHASES=1: each rank logs where its device ops' host time
        # went (RCOLL_NCCL_PHASES, about eight clock reads an op).
        phases=${RCOLL_GPU_PHASES:-0}
        step "bench_${tag}$([[ $phases == 1 ]] && echo _phases)" ${RCOLL_GPU_LIMIT_BENCH:-120} env "${mode[@]}" RCOLL_TRANSPORTS=nccl,tcp RCOLL_RECOVERY=$recovery \
          RCOLL_NCCL_CONFIRM_EVERY=$every RCOLL_NCCL_KEEP_IN_GROUP=$in_group \
          RCOLL_NCCL_PHASES=$phases RCOLL_DEBUG=$([[ $phases == 1 ]] && echo INFO || echo WARN) \
          $run -n $np -- $bundle/bench/rcoll-bench --memory cuda --op allreduce --sizes $sizes \
          --iters ${RCOLL_GPU_BENCH_ITERS:-30} --warmup 5 --compare nccl --json $logs/bench_${tag}.json \
          --compare-dir $logs/bench_${tag}
      done
      ;;
    recovery)
      # The NCCL recoveries (RCOLL_GPU_RECOVERY: a ctest -R pattern), under
      # stream waits too.
      step recovery ${RCOLL_GPU_LIMIT_RECOVERY:-400} env RCOLL_GPU_TEST_TIMEOUT=${RCOLL_GPU_TEST_TIMEOUT:-240} \
        scripts/gpu_tests.sh ctest -j 2 -R "${RCOLL_GPU_RECOVERY:-recovery_cuda_nccl|fallback_cuda_nccl}"
      ;;
    *) echo "gpu_session: unknown step '$s' (env torch ctest ctest_blocking ctest_nonblocking ddp pipeline bench recovery hang close_link)" >&2 ;;
  esac
done
echo "=== $(date +%T) done"
