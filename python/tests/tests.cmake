# PyTorch backend tests: real processes started by torchrun (python -m
# torch.distributed.run), the rcoll backend checked against gloo.
set(torch_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "OMP_NUM_THREADS=1")
set(torchrun ${RCOLL_TORCH_PYTHON} -m torch.distributed.run --standalone)
set(here ${CMAKE_CURRENT_SOURCE_DIR}/tests)

# Every implemented collective vs gloo: dtypes, shapes, zero-sized and non-contiguous tensors.
foreach(np 2 4)
  add_test(NAME torch_collectives_vs_gloo_np${np}
           COMMAND ${torchrun} --nproc-per-node ${np} ${here}/collectives_check.py)
  set_tests_properties(torch_collectives_vs_gloo_np${np} PROPERTIES TIMEOUT 300 ENVIRONMENT "${torch_env}"
                       LABELS "torch;multiprocess")
endforeach()

# The same checks with rcoll's tensors on the GPU (NCCL, stream semantics; gloo
# stays on CPU copies). --launch checks for CUDA first (no device: "SKIP", exit
# 77, as torchrun would report the workers' 77 as 1), then execs torchrun.
add_test(NAME torch_collectives_cuda_np2 COMMAND ${RCOLL_TORCH_PYTHON} ${here}/collectives_check.py --launch 2)
set_tests_properties(torch_collectives_cuda_np2 PROPERTIES TIMEOUT 300 ENVIRONMENT "${torch_env};RCOLL_CHECK_DEVICE=cuda"
                     SKIP_RETURN_CODE 77 LABELS "torch;cuda;multiprocess")

# Backend strings, counters, a second group, shutdown and abort.
add_test(NAME torch_lifecycle COMMAND ${torchrun} --nproc-per-node 2 ${here}/lifecycle_check.py)
set_tests_properties(torch_lifecycle PROPERTIES TIMEOUT 120 ENVIRONMENT "${torch_env}" LABELS torch)

# DDP for 50 steps: rcoll's parameters equal gloo's; with links closed and a
# rank stalled mid-training (RCOLL_INJECT) every step finishes with the
# fault-free run's parameters, and the counters show the recoveries.
add_test(NAME torch_ddp_parity_faults_np2
         COMMAND ${RCOLL_TORCH_PYTHON} ${here}/ddp_parity.py --ranks 2 --min-recoveries 2 --min-delays 1
                 --inject "close-link:rank=1,op=40;stall:rank=0,op=90,ms=2000;close-link:rank=0,op=150")
add_test(NAME torch_ddp_parity_faults_np4
         COMMAND ${RCOLL_TORCH_PYTHON} ${here}/ddp_parity.py --ranks 4 --min-recoveries 2 --min-delays 1
                 --inject "close-link:rank=1,op=40;stall:rank=3,op=90,ms=2000;close-link:rank=2,op=150")
set_tests_properties(torch_ddp_parity_faults_np2 torch_ddp_parity_faults_np4 PROPERTIES
                     TIMEOUT 600 ENVIRONMENT "${torch_env}" LABELS "torch;faults;recovery")

# CUDA tensors on NCCL (skipped without a GPU: exit 77). DDP at 2 ranks on
# backend rcoll against nccl: the same parameters after 50 steps, both step
# times reported; then a closed link and a rank frozen (SIGSTOP) for 5 s mid-
# training: every step finishes with the fault-free run's parameters, and the
# recoveries are counted. A 4-stage pipeline of device send/recv (1.4-7.2 MB)
# with a stage late by 12 s (longer than the progress deadline's floor): every
# microbatch right, no recovery (the stages behind wait along the chain).
add_test(NAME torch_ddp_cuda_np2 COMMAND ${RCOLL_TORCH_PYTHON} ${here}/ddp_cuda.py --ranks 2)
add_test(NAME torch_pipeline_cuda_np4 COMMAND ${RCOLL_TORCH_PYTHON} ${here}/pipeline_cuda.py --ranks 4)
set_tests_properties(torch_ddp_cuda_np2 torch_pipeline_cuda_np4 PROPERTIES
                     TIMEOUT 900 ENVIRONMENT "${torch_env}" SKIP_RETURN_CODE 77 LABELS "torch;cuda;recovery")
