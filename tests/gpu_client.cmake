# GPU tests of the client through a real daemon on the cuda backend (label
# gpu): stream-ordered reuse, stitched ranges written by kernels, and
# PyTorch with the MoonBright allocator. They skip (exit 77) without a GPU.
if(MB_HAVE_CUDA)
  add_executable(test_streams gpu/test_streams.cu)
  set_target_properties(test_streams PROPERTIES CUDA_ARCHITECTURES "90-real;90-virtual")
  target_link_libraries(test_streams PRIVATE mbclient CUDA::cudart_static)
  add_test(NAME gpu_streams COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
           $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl> $<TARGET_FILE:test_streams>)
  set_tests_properties(gpu_streams PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)

  add_test(NAME gpu_sigkill_reclaim COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
           $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
           ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_reclaim.sh $<TARGET_FILE:mbtest_client> $<TARGET_FILE:mbctl>)
  set_tests_properties(gpu_sigkill_reclaim PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)

  add_test(NAME gpu_devices COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
           $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
           ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_devices.sh $<TARGET_FILE:mbtest_client>)
  set_tests_properties(gpu_devices PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)

  add_test(NAME gpu_daemon_restart COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_restart.sh
           $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl> $<TARGET_FILE:mbtest_client>)
  set_tests_properties(gpu_daemon_restart PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)

  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND)
    # PyTorch through the hook: tests/gpu/NAME.py LIBMBCLIENT [ARGS...] under a
    # fresh daemon (they skip without torch).
    function(mb_gpu_torch_test name timeout)
      add_test(NAME gpu_${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
               $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
               ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/${name}.py
               $<TARGET_FILE:mbclient> ${ARGN})
      set_tests_properties(gpu_${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT ${timeout})
    endfunction()
    mb_gpu_torch_test(torch_transformer 600)
    mb_gpu_torch_test(torch_graphs 300)
    mb_gpu_torch_test(torch_compile 480)
    mb_gpu_torch_test(torch_record_stream 300)
    mb_gpu_torch_test(torch_empty_cache 120 $<TARGET_FILE:mbctl>)
  endif()
endif()
