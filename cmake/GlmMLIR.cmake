# Finds MLIR 22 and pulls in its CMake helpers, without LLVM's global flag handling.
set(MLIR_DIR /usr/lib/llvm-22/lib/cmake/mlir CACHE PATH "MLIRConfig.cmake location")
find_package(MLIR 22.1 REQUIRED CONFIG)
message(STATUS "MLIR ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}")

set(LLVM_RUNTIME_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/bin)
set(LLVM_LIBRARY_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/lib)
set(MLIR_BINARY_DIR ${CMAKE_BINARY_DIR})
list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)
# MLIR's headers reach the compiler's targets only: ir/ and compiler/ add them to their directories
# (tablegen reads a directory's include path), and glm_mlir_headers carries them to what links the
# dialects (the model builder, glm-opt, glmc's compile commands). The runtime and the server never
# see them. No include(HandleLLVMOptions): it would rewrite the flags of every target below it,
# runtime and server included; add_mlir_* targets get -fno-exceptions on their own.
add_library(glm_mlir_headers INTERFACE)
target_include_directories(glm_mlir_headers SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS}
                                                             ${MLIR_INCLUDE_DIRS})
