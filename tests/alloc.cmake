# tests/alloc.cmake: the client's two user-space allocator tiers (slab, pool),
# each a self-contained module compiled straight into its model-check test.
foreach(tier slab pool)
  add_executable(test_${tier} ${CMAKE_CURRENT_SOURCE_DIR}/test_${tier}.c
                              ${PROJECT_SOURCE_DIR}/client/${tier}.c)
  target_include_directories(test_${tier} PRIVATE
    ${PROJECT_SOURCE_DIR}/client
    ${PROJECT_SOURCE_DIR}/client/include
    ${PROJECT_SOURCE_DIR}/common)
  target_link_libraries(test_${tier} PRIVATE PkgConfig::CMOCKA)
  add_test(NAME test_${tier} COMMAND test_${tier})
  set_tests_properties(test_${tier} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()

# The legacy clock, against a scripted backend.
mb_unit_test(test_lclock ${CMAKE_CURRENT_SOURCE_DIR}/test_lclock.c ${PROJECT_SOURCE_DIR}/client/lclock.c)
target_include_directories(test_lclock PRIVATE ${PROJECT_SOURCE_DIR}/client/include)

# stitch.c's driver calls against a scripted backend: slices on background
# threads, whole ranges on a request's, all or nothing on a failed unmap.
mb_unit_test(test_stitch_slices ${CMAKE_CURRENT_SOURCE_DIR}/test_stitch_slices.c)
target_link_libraries(test_stitch_slices PRIVATE mbclient_internal Threads::Threads)
target_include_directories(test_stitch_slices PRIVATE ${PROJECT_SOURCE_DIR}/client/include)
