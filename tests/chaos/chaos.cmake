# Chaos tests (tests/chaos/chaos.sh): real network faults between ranks in
# their own network namespaces, and real process faults (SIGSTOP, SIGKILL, a
# frozen store host). Each skips (exit 77) where namespaces cannot be created.
# Label "chaos"; scripts/test.sh runs them in a stage of their own, one at a
# time (RUN_SERIAL: their timings are part of what they assert).
set(RCOLL_CHAOS ${CMAKE_CURRENT_SOURCE_DIR}/chaos/chaos.sh)
set(rcoll_chaos_scenarios
    link-flap partition-heal partition-forever latency-jitter loss reorder slow-link
    two-ifaces two-ifaces-forced store-stall store-stall-forever sigstop sigstop-forever sigkill)
foreach(scenario ${rcoll_chaos_scenarios})
  add_test(NAME chaos_${scenario} COMMAND ${RCOLL_CHAOS} ${scenario} ${CMAKE_BINARY_DIR})
  set_tests_properties(chaos_${scenario} PROPERTIES TIMEOUT 180 LABELS chaos SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endforeach()
