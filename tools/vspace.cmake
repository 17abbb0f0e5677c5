# tools/vspace.cmake: bench_vspace, the vspace and stream-ordered slow-path
# benchmark (GPU only). Included from tools/CMakeLists.txt.
if(MB_HAVE_CUDA AND TARGET mbkernels)
  set(MB_VS_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)
  get_target_property(_mb_client_src mbclient SOURCES)
  set(MB_VSPACE_BENCH_SRC)
  if(NOT "vspace.c" IN_LIST _mb_client_src)
    set(MB_VSPACE_BENCH_SRC ${MB_VS_ROOT}/client/vspace.c ${MB_VS_ROOT}/client/async_map.c)
  endif()
  add_executable(bench_vspace ${MB_VS_ROOT}/tools/bench_vspace.c ${MB_VSPACE_BENCH_SRC})
  target_include_directories(bench_vspace PRIVATE ${MB_VS_ROOT}/client)
  target_compile_definitions(bench_vspace PRIVATE MB_HAVE_KERNELS=1)
  target_link_libraries(bench_vspace PRIVATE mbclient mbcommon mbkernels Threads::Threads m)
endif()
