// Types shared by host code and the CUDA kernels NVRTC compiles: fixed-width integers and the
// bf16 storage type. A kernel's argument struct (kernels/<op>/<op>_gpu.h) is built from these, so
// the host and the device agree on its layout byte for byte.
#pragma once

#ifdef __CUDACC_RTC__
// NVRTC has no C library headers.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif

// A function both the host and NVRTC compile (small index arithmetic that kernels and their CPU
// references must agree on).
#ifdef __CUDACC_RTC__
#define GLM_HOST_DEVICE __host__ __device__
#else
#define GLM_HOST_DEVICE
#endif

namespace glm::kernels {

/// A bf16 value as stored: the upper half of an fp32. A distinct type (not uint16_t) so that
/// templates can tell activations apart from integer data.
struct Bf16 {
  uint16_t bits;
};

/// An fp8 e4m3fn value as stored.
struct Fp8E4m3 {
  uint8_t bits;
};

} // namespace glm::kernels
