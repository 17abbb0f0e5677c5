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
    add_test(NAME gpu_torch_transformer COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
             $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
             ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_transformer.py
             $<TARGET_FILE:mbclient>)
    set_tests_properties(gpu_torch_transformer PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)
    add_test(NAME gpu_torch_graphs COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
             $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
             ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_graphs.py
             $<TARGET_FILE:mbclient>)
    set_tests_properties(gpu_torch_graphs PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
    add_test(NAME gpu_torch_record_stream COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
             $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
             ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_record_stream.py
             $<TARGET_FILE:mbclient>)
    set_tests_properties(gpu_torch_record_stream PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
    add_test(NAME gpu_torch_empty_cache COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/with_daemon.sh
             $<TARGET_FILE:moonbrightd> $<TARGET_FILE:mbctl>
             ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_empty_cache.py
             $<TARGET_FILE:mbclient> $<TARGET_FILE:mbctl>)
    set_tests_properties(gpu_torch_empty_cache PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 120)
  endif()
endif()
