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
