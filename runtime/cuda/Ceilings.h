// The device's ceilings, measured rather than taken from a datasheet: device-to-device copy
// bandwidth (bytes read + written per second) and the bf16 matrix rate through cuBLAS (loaded
// with dlopen; absent on a machine without it). Benchmarks report every figure against these.
#pragma once

#include "runtime/cuda/CudaContext.h"

namespace glm::cuda {

/// Median of 10 copies of a `bytes` buffer, counting read and written bytes.
Expected<double> measureCopyBandwidth(CudaContext &ctx, size_t bytes = size_t{1} << 30);

/// bf16 x bf16 -> f32-accumulated bf16 product of m x k by k x n through cuBLAS (cublasGemmEx),
/// median of 10 after warm-up, in FLOP/s; Unavailable when libcublas cannot be loaded.
Expected<double> measureMatrixRate(CudaContext &ctx, int m = 8192, int n = 8192, int k = 8192);

} // namespace glm::cuda
