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
           COMMAND ${RCOLL_RUN} -n ${np} --timeout 900 -- ${RCOLL_CORRECTNESS} --sizes 0,1,7,4K+3,1M,64M)
  set_tests_properties(correctness_np${np} PROPERTIES TIMEOUT 1000 LABELS multiprocess)
endforeach()

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
add_test(NAME fault_close_link_is_typed_error
         COMMAND ${RCOLL_EXPECT} nonzero "\\[rank 1 peer 2 op 5 epoch 0 tcp\\].*closed by fault injection" 30 --
                 ${RCOLL_RUN} -n 3 --inject close-link:rank=1,peer=2,op=5 -- ${RCOLL_SMALL_RUN})
# A dropped chunk is caught by the op deadline, which names the awaited peer.
add_test(NAME fault_drop_chunk_hits_deadline
         COMMAND ${RCOLL_EXPECT} nonzero "rank 1 peer 0 op 3 epoch 0 tcp.*frames lost: rank 1 still waits for reduce_scatter seq 3" 30 --
                 env RCOLL_OP_TIMEOUT_MS=1500 ${RCOLL_RUN} -n 2 --inject drop-chunk:rank=0,op=3 -- ${RCOLL_SMALL_RUN})
set_tests_properties(fault_kill_rank_reported fault_malformed_inject_spec fault_close_link_is_typed_error
                     fault_drop_chunk_hits_deadline PROPERTIES TIMEOUT 60 LABELS faults)
