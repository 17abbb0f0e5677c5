# tools/mbbench.cmake: the mbbench benchmark tool, included from
# tools/CMakeLists.txt. libcuda is loaded with dlopen at run time (the
# cuMemAlloc/cuMemAllocAsync baselines), so the tool builds and runs on
# machines without CUDA and needs no CUDA::cuda_driver link even when
# MB_HAVE_CUDA is ON.
add_executable(mbbench
  ${CMAKE_CURRENT_LIST_DIR}/mbbench.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_cuda.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_latency.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_grant.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_rpc.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_replay.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_tenants.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_threads.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_trims.c
  ${CMAKE_CURRENT_LIST_DIR}/mbbench_fdtable.c)
target_link_libraries(mbbench PRIVATE mbclient_internal ${CMAKE_DL_LIBS} m Threads::Threads)
install(TARGETS mbbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${CMAKE_CURRENT_LIST_DIR}/bench_torch.py ${CMAKE_CURRENT_LIST_DIR}/plot_bench.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/moonbright/bench)
