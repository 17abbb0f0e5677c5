# tests/vspace.cmake: the vspace page-table logic and the host path of the
# stream-ordered slow path, on the host backend with a real daemon
# (test_vspace_host). Included from tests/CMakeLists.txt.
set(MB_VS_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)
# Until client/CMakeLists.txt lists vspace.c and async_map.c in mbclient,
# the test compiles them itself (the client's internal symbols are visible).
get_target_property(_mb_client_src mbclient SOURCES)
set(MB_VSPACE_TEST_SRC)
if(NOT "vspace.c" IN_LIST _mb_client_src)
  set(MB_VSPACE_TEST_SRC ${MB_VS_ROOT}/client/vspace.c ${MB_VS_ROOT}/client/async_map.c)
endif()
add_executable(test_vspace_host ${MB_VS_ROOT}/tests/test_vspace_host.c
  ${MB_VS_ROOT}/tests/harness.c ${MB_VS_ROOT}/tests/json.c ${MB_VSPACE_TEST_SRC})
target_include_directories(test_vspace_host PRIVATE ${MB_VS_ROOT}/client ${MB_VS_ROOT}/tests)
target_link_libraries(test_vspace_host PRIVATE mbclient mbcommon PkgConfig::CMOCKA Threads::Threads)
target_compile_definitions(test_vspace_host PRIVATE
  MB_DAEMON_BIN="$<TARGET_FILE:moonbrightd>" MB_CTL_BIN="$<TARGET_FILE:mbctl>")
add_test(NAME test_vspace_host COMMAND test_vspace_host)
set_tests_properties(test_vspace_host PROPERTIES LABELS unit TIMEOUT 300)
