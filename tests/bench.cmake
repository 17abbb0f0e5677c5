# tests/bench.cmake: included by tests/CMakeLists.txt. Smoke tests (label
# bench) for every mbbench subcommand: a real moonbrightd on the host backend
# in a temporary directory, each subcommand in --quick mode, its --json
# output parsed and its keys checked (never its timings).
if(TARGET mbbench)
  add_executable(bench_check ${CMAKE_CURRENT_LIST_DIR}/bench_check.c ${CMAKE_CURRENT_LIST_DIR}/json.c)
  # The first 200 requests of the Azure conversation trace, kept in the tree.
  set(MB_BENCH_TRACE ${CMAKE_CURRENT_LIST_DIR}/data/azure_llm_conv_head.csv)
  foreach(sub latency grant rpc replay tenants threads trims fdtable)
    add_test(NAME bench_${sub}
      COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/bench_smoke.sh $<TARGET_FILE:moonbrightd>
              $<TARGET_FILE:mbbench> $<TARGET_FILE:bench_check> ${MB_BENCH_TRACE} ${sub})
    # The replay's glibc row allocates gigabytes, whose shadow memory
    # AddressSanitizer poisons on every call: 90-120 s there, 2 s without it.
    set_tests_properties(bench_${sub} PROPERTIES LABELS bench TIMEOUT 600
      ENVIRONMENT "${MB_TEST_ENV}")
  endforeach()
endif()

# bench_torch.py's bookkeeping (rounds paired with the default allocator's
# run of the same round, the summary, argument checks): no PyTorch needed.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME bench_torch_rounds COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_bench_torch.py)
  set_tests_properties(bench_torch_rounds PROPERTIES LABELS bench TIMEOUT 60)
endif()

# bench_vspace's arguments (built where the CUDA toolkit is): an unknown part
# is a usage error before any daemon is reached, and against a host-backend
# daemon the benchmark skips (77) with its reason.
if(TARGET bench_vspace)
  add_test(NAME bench_vspace_args
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/bench_vspace_args.sh $<TARGET_FILE:bench_vspace>
            $<TARGET_FILE:moonbrightd>)
  set_tests_properties(bench_vspace_args PROPERTIES LABELS bench TIMEOUT 60
    ENVIRONMENT "${MB_TEST_ENV}")
endif()
