# PyTorch backend tests: real processes started by torchrun (python -m
# torch.distributed.run), the rcoll backend checked against gloo. They run
# against the package the README's install put into the venv (the fixture
# torch_readme_install_ddp, at the end), not the build folder: no
# PYTHONPATH, run from outside the build's python/ folder, and each test
# script checks where `rcoll` came from (installed.py).
set(torch_env "PYTHONPATH=" "PYTHONNOUSERSITE=1" "RCOLL_TEST_INSTALLED=1" "OMP_NUM_THREADS=1")
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
# training: every step finishes with the fault-free run's parameters; the
# closed link recovers once on each rank, the frozen rank is waited for with no
# recovery (DDP's stream waits at the stream gate: docs/gpu.md). A 4-stage pipeline of device send/recv (1.4-7.2 MB)
# with a stage late by 12 s (longer than the progress deadline's floor): every
# microbatch right, no recovery (the stages behind wait along the chain).
add_test(NAME torch_ddp_cuda_np2 COMMAND ${RCOLL_TORCH_PYTHON} ${here}/ddp_cuda.py --ranks 2)
add_test(NAME torch_pipeline_cuda_np4 COMMAND ${RCOLL_TORCH_PYTHON} ${here}/pipeline_cuda.py --ranks 4)
set_tests_properties(torch_ddp_cuda_np2 torch_pipeline_cuda_np4 PROPERTIES
                     TIMEOUT 900 ENVIRONMENT "${torch_env}" SKIP_RETURN_CODE 77 LABELS "torch;cuda;recovery")

set(RCOLL_EXPECT ${PROJECT_SOURCE_DIR}/tests/scripts/expect.sh)
# Start-up and exit as users meet them (startup_exit_check.py):
#  - the last of 4 ranks calls init_process_group 12 s late (past the 8 s
#    connect timeout) with timeout=60 s: waited for and named, training right;
#  - rank 1 computes 25 s between two steps with timeout=15 s and
#    RCOLL_STRAGGLER_TIMEOUT_S=120: the straggler is waited for, not capped
#    by the process group's timeout;
#  - rank 1 hangs in an allreduce with every rank in it (RCOLL_INJECT hang:
#    it moves no bytes in any attempt, heartbeating) with timeout=15 s and
#    RCOLL_STRAGGLER_TIMEOUT_S=300: both ranks' step raises within the
#    process group's timeout, naming the hang timeout (not 8 recoveries of
#    a 10 s progress deadline, and not the straggler timeout);
#  - 5 runs of 4 ranks that exit without destroy_process_group() (one with
#    TORCH_DISTRIBUTED_DEBUG=DETAIL, whose wrapper counters() sees through):
#    every run exits 0 and no rank logs an ERROR (rcoll.torch's exit hook
#    closes every backend, saying goodbye, before the interpreter finalizes).
add_test(NAME torch_late_rank_joins_np4
         COMMAND ${RCOLL_EXPECT} 0 "rank\\(s\\) 3 not here yet && rank\\(s\\) 3 joined 1[0-9].[0-9] s after this rank && rank 0: late: ok" 60 --
                 ${torchrun} --nproc-per-node 4 ${here}/startup_exit_check.py --mode late --late 12 --pg-timeout 60)
add_test(NAME torch_straggler_past_pg_timeout_np2
         COMMAND ${RCOLL_EXPECT} 0 "rank 1 arrived 2[0-9].[0-9] s late \\(straggler && rank 0: straggler: ok" 60 --
                 env RCOLL_STRAGGLER_TIMEOUT_S=120 ${torchrun} --nproc-per-node 2 ${here}/startup_exit_check.py --mode straggler
                 --late 25 --pg-timeout 15)
add_test(NAME torch_hang_within_pg_timeout_np2
         COMMAND ${RCOLL_EXPECT} 0 "rank 0: hang: ok && rank 1: hang: ok && hang timeout \\(15.0 s" 60 --
                 env RCOLL_STRAGGLER_TIMEOUT_S=300 RCOLL_INJECT=hang:rank=1,op=4 ${torchrun} --nproc-per-node 2
                 ${here}/startup_exit_check.py --mode hang --pg-timeout 15)
add_test(NAME torch_exit_without_destroy_np4
         COMMAND bash -c "for i in 1 2 3 4 5; do
                            if [ $i = 5 ]; then export TORCH_DISTRIBUTED_DEBUG=DETAIL; fi
                            out=$(\"$@\" 2>&1); rc=$?
                            if [ $rc != 0 ] || echo \"$out\" | grep -E 'ERROR|terminate called|core dumped'; then
                              echo \"$out\" | tail -30; echo \"FAIL: run $i exited $rc\"; exit 1; fi
                          done; echo '5 runs: exit 0, no ERROR'"
                 run ${torchrun} --nproc-per-node 4 ${here}/startup_exit_check.py --mode exit)
set_tests_properties(torch_late_rank_joins_np4 torch_straggler_past_pg_timeout_np2 torch_hang_within_pg_timeout_np2
                     torch_exit_without_destroy_np4
                     PROPERTIES TIMEOUT 200 ENVIRONMENT "${torch_env}" LABELS torch RUN_SERIAL TRUE)

# The README's install (pip install --no-build-isolation ./python, in the venv
# scripts/install-torch.sh makes), then a torchrun DDP job on "rcoll" from the
# installed package: what a user types, run as typed.
# Every other PyTorch test runs after it, against what it installed.
get_property(torch_tests DIRECTORY PROPERTY TESTS)
set(installed_dir ${CMAKE_BINARY_DIR}/readme-install)
file(MAKE_DIRECTORY ${installed_dir})
add_test(NAME torch_readme_install_ddp
         COMMAND ${here}/installed_package_check.sh ${RCOLL_TORCH_PYTHON} ${PROJECT_SOURCE_DIR} ${installed_dir})
set_tests_properties(torch_readme_install_ddp PROPERTIES TIMEOUT 900 LABELS torch FIXTURES_SETUP rcoll_installed)
set_tests_properties(${torch_tests} PROPERTIES FIXTURES_REQUIRED rcoll_installed WORKING_DIRECTORY ${installed_dir})
