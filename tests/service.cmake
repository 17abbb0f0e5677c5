# tests/service.cmake: included by tests/CMakeLists.txt. The config parser's
# unit test, systemd-analyze verify over the units, and the start-all helper.

add_executable(test_config test_config.c
  ${PROJECT_SOURCE_DIR}/common/config.c
  ${PROJECT_SOURCE_DIR}/common/size.c
  ${PROJECT_SOURCE_DIR}/common/log.c)
target_include_directories(test_config PRIVATE
  ${PROJECT_SOURCE_DIR}/common ${PROJECT_SOURCE_DIR}/client/include)
target_link_libraries(test_config PRIVATE PkgConfig::CMOCKA)
target_compile_definitions(test_config PRIVATE
  MB_SHIPPED_CONFIG="${PROJECT_SOURCE_DIR}/tools/moonbrightd.conf")
add_test(NAME test_config COMMAND test_config)
set_tests_properties(test_config PROPERTIES LABELS unit TIMEOUT 60)

# The units as configured for the build tree: ExecStart= names the
# moonbrightd and helper just built; Documentation= resolves in tools/man.
if(MB_UNITS_VERIFY_DIR)
  add_test(NAME systemd_verify
    COMMAND sh ${PROJECT_SOURCE_DIR}/systemd/verify-units.sh ${MB_UNITS_VERIFY_DIR}/man
            ${MB_UNITS_VERIFY_DIR}/moonbrightd@.service
            ${MB_UNITS_VERIFY_DIR}/moonbrightd.service)
  set_tests_properties(systemd_verify PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()

if(MB_UNITS_BUILD_DIR)
  add_test(NAME systemd_start_all
    COMMAND sh ${PROJECT_SOURCE_DIR}/systemd/test-start-all.sh
            ${MB_UNITS_BUILD_DIR}/moonbrightd-start-all)
  set_tests_properties(systemd_start_all PROPERTIES LABELS unit TIMEOUT 60)
endif()

# cmake --install into a DESTDIR; a program built with the installed
# mbclient.pc runs against the installed daemon.
add_test(NAME test_install
  COMMAND sh ${PROJECT_SOURCE_DIR}/tests/test_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_C_COMPILER})
set_tests_properties(test_install PROPERTIES LABELS integration TIMEOUT 120)

# moonbrightd started as a user would: detaches from a pipe on stderr, names
# the config file it read, a default budget without warnings.
add_test(NAME test_daemon_start
  COMMAND sh ${PROJECT_SOURCE_DIR}/tests/test_daemon_start.sh $<TARGET_FILE:moonbrightd>)
set_tests_properties(test_daemon_start PROPERTIES LABELS integration TIMEOUT 120
  ENVIRONMENT "${MB_TEST_ENV}")

# A second configure of a build directory rebuilds nothing.
add_test(NAME test_reconfigure
  COMMAND sh ${PROJECT_SOURCE_DIR}/tests/test_reconfigure.sh ${PROJECT_SOURCE_DIR}
          ${CMAKE_C_COMPILER} -G ${CMAKE_GENERATOR} -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
          -DMB_ASAN=${MB_ASAN} -DMB_WERROR=${MB_WERROR})
set_tests_properties(test_reconfigure PROPERTIES LABELS integration TIMEOUT 300)
