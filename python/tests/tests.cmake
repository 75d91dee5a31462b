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
