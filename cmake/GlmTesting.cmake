# glm_unit_test(NAME SOURCES src... LIBS lib...): one gtest binary, each test case a ctest entry
# labelled `unit`.
function(glm_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    GLM_FIXTURES_DIR="${GLM_FIXTURES_DIR}"
    GLM_GLMC_PATH="$<TARGET_FILE:glmc>")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/bin)
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS unit)
endfunction()
