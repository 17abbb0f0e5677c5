# tests/vspace.cmake: the vspace page-table logic and the host path of the
# stream-ordered slow path, on the host backend with a real daemon
# (test_vspace_host). Included from tests/CMakeLists.txt. It reaches inside
# the client: mbclient_internal.
set(MB_VS_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)
add_executable(test_vspace_host ${MB_VS_ROOT}/tests/test_vspace_host.c
  ${MB_VS_ROOT}/tests/harness.c ${MB_VS_ROOT}/tests/json.c)
target_include_directories(test_vspace_host PRIVATE ${MB_VS_ROOT}/tests)
target_link_libraries(test_vspace_host PRIVATE mbclient_internal PkgConfig::CMOCKA Threads::Threads)
target_compile_definitions(test_vspace_host PRIVATE
  MB_DAEMON_BIN="$<TARGET_FILE:moonbrightd>" MB_CTL_BIN="$<TARGET_FILE:mbctl>")
add_test(NAME test_vspace_host COMMAND test_vspace_host)
set_tests_properties(test_vspace_host PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${MB_VS_ROOT}/tests/tsan.supp")
