# Sanitizer and libFuzzer builds (docs/fuzzing.md): both off by default, so the default build is
# unchanged.
#
#   GLM_SANITIZE=address,undefined  every target of the project is built and linked with these
#                                   -fsanitize= values (any list clang or gcc accepts)
#   GLM_FUZZ=ON                     clang only: the libraries also get -fsanitize=fuzzer-no-link
#                                   (coverage for libFuzzer) and tests/fuzz builds one libFuzzer
#                                   binary per input format, into <build>/fuzz
#
# scripts/fuzz.sh configures build-fuzz with both (clang, address,undefined).
set(GLM_SANITIZE "" CACHE STRING
    "Comma-separated -fsanitize= list for the whole build, e.g. address,undefined (empty: none)")
option(GLM_FUZZ "Build the libFuzzer targets of tests/fuzz (clang; implies coverage flags)" OFF)

if(GLM_SANITIZE)
  # A report aborts rather than printing and going on, so that tests and fuzzers fail on it;
  # frame pointers keep the fast unwinder's stacks whole.
  add_compile_options(-fsanitize=${GLM_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${GLM_SANITIZE})
  # Bounds checks in libstdc++'s containers (operator[], front(), back()...), cheap beside ASan.
  add_compile_definitions(_GLIBCXX_ASSERTIONS)
endif()

if(GLM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "GLM_FUZZ needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage instrumentation everywhere; only the fuzz binaries link libFuzzer itself
  # (tests/fuzz/CMakeLists.txt adds -fsanitize=fuzzer to them).
  add_compile_options(-fsanitize=fuzzer-no-link)
  # Less instrumentation where the code is not what a target tests (the file says which and why).
  add_compile_options(
    -fsanitize-coverage-ignorelist=${PROJECT_SOURCE_DIR}/tests/fuzz/coverage-ignorelist.txt)
  add_link_options(-fsanitize=fuzzer-no-link)
  # Regression inputs replay as ctest entries (label fuzz) even without GLM_BUILD_TESTS.
  enable_testing()
endif()
