# Multi-process tests: real processes on loopback, started by rcoll-run.
add_executable(rcoll-correctness-worker ${CMAKE_CURRENT_SOURCE_DIR}/worker/correctness_worker.cc)
target_link_libraries(rcoll-correctness-worker PRIVATE rcoll_static)
target_compile_options(rcoll-correctness-worker PRIVATE -O2)

set(RCOLL_RUN $<TARGET_FILE:rcoll-run>)
set(RCOLL_CORRECTNESS $<TARGET_FILE:rcoll-correctness-worker>)

# Every op x dtype x reduce op x size {0, 1, 7, 4 KiB + 3, 1 MiB, 64 MiB} at world
# sizes 1, 2, 3, 4 and 8, checked against an independent reference.
foreach(np 1 2 3 4 8)
  add_test(NAME correctness_np${np}
           COMMAND ${RCOLL_RUN} -n ${np} --timeout 1500 -- ${RCOLL_CORRECTNESS} --sizes 0,1,7,4K+3,1M,64M)
  set_tests_properties(correctness_np${np} PROPERTIES TIMEOUT 1600 LABELS multiprocess)
endforeach()

# The main job's check: rcoll-bench over every op verifies every result.
if(TARGET rcoll-bench)
  add_test(NAME bench_all_ops_check
           COMMAND ${RCOLL_RUN} -n 4 --timeout 300 -- $<TARGET_FILE:rcoll-bench> --op all --check --sizes 8:4M --iters 2 --warmup 1)
  set_tests_properties(bench_all_ops_check PROPERTIES TIMEOUT 320 LABELS multiprocess)
endif()

# The README's C++ example is compiled from the README itself and run at 2 ranks.
file(READ ${PROJECT_SOURCE_DIR}/README.md readme_text)
string(REGEX MATCH "```cpp\n([^`]*)```" readme_block "${readme_text}")
set(readme_code "${CMAKE_MATCH_1}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/readme_example.cc
     "#include <chrono>\n#include <cstdio>\n#include <vector>\n${readme_code}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/README.md)
add_executable(rcoll-readme-example ${CMAKE_CURRENT_BINARY_DIR}/readme_example.cc)
target_link_libraries(rcoll-readme-example PRIVATE rcoll_static)
add_test(NAME readme_example COMMAND ${RCOLL_RUN} -n 2 --timeout 60 -- $<TARGET_FILE:rcoll-readme-example>)

# An installed copy works with find_package(rcoll) and pkg-config.
add_test(NAME install_find_package
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer/check_install.sh ${CMAKE_BINARY_DIR})
set_tests_properties(install_find_package PROPERTIES TIMEOUT 300)

# Failure paths through real processes: each asserts the exit code, the message
# that names the failing rank/peer/op, and a time budget.
set(RCOLL_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/scripts/expect.sh)
set(RCOLL_SMALL_RUN ${RCOLL_CORRECTNESS} --sizes 4K+3 --dtypes float32)
add_test(NAME fault_kill_rank_reported
         COMMAND ${RCOLL_EXPECT} 137 "rank 1 \\(pid [0-9]+\\) was killed by signal 9" 30 --
                 ${RCOLL_RUN} -n 3 --inject kill:rank=1,op=4 -- ${RCOLL_SMALL_RUN})
add_test(NAME fault_malformed_inject_spec
         COMMAND ${RCOLL_EXPECT} 3 "RCOLL_INJECT: fault 'stall:rank=1,op=2': missing key 'ms'" 30 --
                 ${RCOLL_RUN} -n 2 --inject stall:rank=1,op=2 -- ${RCOLL_SMALL_RUN})
set_tests_properties(fault_kill_rank_reported fault_malformed_inject_spec PROPERTIES TIMEOUT 60 LABELS faults)

# Resilience (issue: per-op deadlines, liveness, abort, rebuild and resume).
# Each asserts every result against the independent reference, and the
# recovery counters.
set(RCOLL_FAULT_RUN ${RCOLL_CORRECTNESS} --dtypes float32)
foreach(op allreduce allgather reduce_scatter broadcast sendrecv)
  # A link closed in the middle of a 64 MiB op at 4 ranks.
  add_test(NAME recovery_close_link_${op}
           COMMAND ${RCOLL_RUN} -n 4 --timeout 300 --inject close-link:rank=1,op=1 --
                   ${RCOLL_FAULT_RUN} --sizes 64M --ops ${op} --expect-recoveries 1)
  set_tests_properties(recovery_close_link_${op} PROPERTIES TIMEOUT 320 LABELS "faults;recovery")
endforeach()
# The same for in-place allreduce (op 2 of the worker): inputs come from window backups.
add_test(NAME recovery_close_link_allreduce_in_place
         COMMAND ${RCOLL_RUN} -n 4 --timeout 300 --inject close-link:rank=2,op=2 --
                 ${RCOLL_FAULT_RUN} --sizes 64M --ops allreduce --expect-recoveries 1)
set_tests_properties(recovery_close_link_allreduce_in_place PROPERTIES TIMEOUT 320 LABELS "faults;recovery")
# A straggler (late by 2.5 s, heartbeating) is waited for and logged: no recovery.
add_test(NAME recovery_straggler_no_recovery
         COMMAND ${RCOLL_EXPECT} 0 "rank 2 is late to allreduce seq 2.*no recovery && arrived [0-9.]+ s late" 60 --
                 env RCOLL_LIVENESS_MS=500 ${RCOLL_RUN} -n 4 --inject stall:rank=2,op=2,ms=2500 --
                 ${RCOLL_FAULT_RUN} --sizes 1M --ops allreduce --max-recoveries 0)
# A dropped chunk: the receiver sees the gap (or the deadline fires), the epoch is rebuilt, results are right.
add_test(NAME recovery_drop_chunk
         COMMAND env RCOLL_OP_TIMEOUT_MS=2000 ${RCOLL_RUN} -n 3 --timeout 120 --inject drop-chunk:rank=0,op=3 --
                 ${RCOLL_FAULT_RUN} --sizes 4K+3,1M --expect-recoveries 1)
# Frozen for 3 s in the middle of 64 MiB allreduces, then thawed: the job lives, every result is right.
add_test(NAME recovery_sigstop_3s
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/sigstop.sh 1.5 3 --
                 ${RCOLL_RUN} -n 4 --timeout 300 -- ${RCOLL_FAULT_RUN} --sizes 64M --ops allreduce)
# Frozen past the recovery timeout: the others get a typed error naming it, well within the budget.
add_test(NAME recovery_sigstop_forever_named
         COMMAND ${RCOLL_EXPECT} nonzero "never joined|rank [0-9] .*silent|is silent" 90 --
                 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/sigstop.sh 1.5 forever --
                 env RCOLL_OP_TIMEOUT_MS=2000 RCOLL_RECOVERY_TIMEOUT_MS=4000 ${RCOLL_RUN} -n 4 --linger 15 --grace 1 --
                 ${RCOLL_FAULT_RUN} --sizes 64M --ops allreduce)
# SIGKILL of a rank: the survivors name it within the liveness budget; rcoll-run names it too.
add_test(NAME recovery_sigkill_named
         COMMAND ${RCOLL_EXPECT} 137 "rank 2 \\(pid [0-9]+\\) was killed by signal 9 && \\[[013]\\] rcoll error: \\[rank [013] peer 2 .*peer dead" 30 --
                 ${RCOLL_RUN} -n 4 --linger 10 --inject kill:rank=2,op=3 -- ${RCOLL_FAULT_RUN} --sizes 1M --ops allreduce)
# Shrink mode: rank 2 is killed; the survivors get kPeerDead once, continue as
# 3 ranks, and run the whole suite again with every result right.
add_test(NAME recovery_shrink_after_death
         COMMAND ${RCOLL_EXPECT} 137 "rank 2 \\(pid [0-9]+\\) was killed by signal 9 && now rank [0-2] of 3 && \\[[013]\\] rank 0/3: [0-9]+ checks, 0 failed && \\[[013]\\] rank 1/3: [0-9]+ checks, 0 failed && \\[[013]\\] rank 2/3: [0-9]+ checks, 0 failed" 60 --
                 env RCOLL_SHRINK=1 ${RCOLL_RUN} -n 4 --linger 30 --inject kill:rank=2,op=5 --
                 ${RCOLL_CORRECTNESS} --sizes 7,4K+3,64K --dtypes float32,int32 --survive-shrink 1)
set_tests_properties(recovery_shrink_after_death PROPERTIES TIMEOUT 120 LABELS "faults;recovery")
# The soak: ~2,900 mixed ops at 4 ranks with random link closes and chunk delays;
# every result right and exactly one recovery per injected data-plane fault.
add_test(NAME recovery_soak_random_faults
         COMMAND ${RCOLL_RUN} -n 4 --timeout 600 --inject random:rate=0.02,seed=11,kinds=close-link+delay-chunk --
                 ${RCOLL_CORRECTNESS} --sizes 7,4K+3,64K --repeat 5 --recoveries-equal-faults 1)
set_tests_properties(recovery_straggler_no_recovery recovery_drop_chunk recovery_sigstop_3s
                     recovery_sigstop_forever_named recovery_sigkill_named recovery_soak_random_faults
                     PROPERTIES TIMEOUT 620 LABELS "faults;recovery")

# The multi-process subset that scripts/test.sh runs in its sanitizer builds
# (label "sanitize": AddressSanitizer + UBSan; "tsan": ThreadSanitizer): every
# op and dtype at small sizes, a recovery after a closed link, a dead rank.
add_test(NAME san_correctness_np2
         COMMAND ${RCOLL_RUN} -n 2 --timeout 300 -- ${RCOLL_CORRECTNESS} --sizes 0,1,7,4K+3,64K)
add_test(NAME san_correctness_np3
         COMMAND ${RCOLL_RUN} -n 3 --timeout 300 -- ${RCOLL_CORRECTNESS} --sizes 7,4K+3,64K --dtypes int32,float32,bfloat16)
add_test(NAME san_recovery_close_link
         COMMAND ${RCOLL_RUN} -n 3 --timeout 300 --inject close-link:rank=1,op=3 --
                 ${RCOLL_FAULT_RUN} --sizes 4K+3,1M --expect-recoveries 1)
add_test(NAME san_sigkill_named
         COMMAND ${RCOLL_EXPECT} 137 "rank 1 \\(pid [0-9]+\\) was killed by signal 9 && \\[[02]\\] rcoll error: \\[rank [02] peer 1 .*peer dead" 60 --
                 ${RCOLL_RUN} -n 3 --linger 10 --inject kill:rank=1,op=3 -- ${RCOLL_FAULT_RUN} --sizes 64K --ops allreduce)
set_tests_properties(san_correctness_np2 san_recovery_close_link san_sigkill_named
                     PROPERTIES TIMEOUT 320 LABELS sanitize)
set_tests_properties(san_correctness_np3 PROPERTIES TIMEOUT 320 LABELS "sanitize;tsan")
