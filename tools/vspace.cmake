# tools/vspace.cmake: bench_vspace, the vspace and stream-ordered slow-path
# benchmark (GPU only). Included from tools/CMakeLists.txt.
if(MB_HAVE_CUDA)
  add_executable(bench_vspace ${CMAKE_CURRENT_LIST_DIR}/bench_vspace.c)
  target_link_libraries(bench_vspace PRIVATE mbclient_internal mbkernels_test Threads::Threads m)
endif()
