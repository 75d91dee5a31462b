# Read by CTest after the gtest lists of tests/CMakeLists.txt: labels the CUDA
# gtest cases "unit;cuda" (GoogleTest's PROPERTIES cannot pass a list).
foreach(t IN LISTS cuda_kernels_test_TESTS nccl_comm_test_TESTS)
  set_tests_properties("${t}" PROPERTIES LABELS "unit;cuda")
endforeach()
