// Measuring on the device: event timing of work on the stream, cuBLAS's bf16 GEMM (loaded with
// dlopen; absent on a machine without it), and the device's ceilings measured with them rather
// than taken from a datasheet: copy bandwidth (bytes read + written per second) and the bf16
// matrix rate. Benchmarks report every figure against these.
#pragma once

#include "runtime/cuda/CudaContext.h"

#include <functional>
#include <memory>

namespace glm::cuda {

struct EventTiming {
  double medianUs = 0, p10Us = 0, p90Us = 0;
};

/// Times `work` (which enqueues on ctx.stream()) `reps` times, each between a pair of events,
/// after `warmup` untimed runs. Each run is waited for with `wait` (given the stream) when set,
/// else with an event wait: a tensor-parallel rank waits through its DeviceComm, whose NCCL form
/// fails once another rank is gone where an event wait would wait for good.
Expected<EventTiming> timeOnStream(CudaContext &ctx, const std::function<Status()> &work, int reps,
                                   int warmup = 3,
                                   const std::function<Status(CUstream)> &wait = nullptr);

/// cuBLAS's bf16 GEMM through the few entry points it needs, declared here (no CUDA headers at
/// build time) and found with dlopen.
class Cublas {
public:
  /// Unavailable when libcublas cannot be loaded or initialised.
  static Expected<std::unique_ptr<Cublas>> open(CUstream stream);
  ~Cublas();

  /// y[rows, out] = x[rows, in] · w[out, in]ᵀ in bf16 with f32 accumulation, as torch's F.linear
  /// calls it: column-major yᵀ = wᵀᵀ xᵀ.
  Status linear(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int64_t rows, int64_t in, int64_t out);

private:
  Cublas() = default;
  using Handle = void *;
  Handle handle_ = nullptr;
  int (*create_)(Handle *) = nullptr;
  int (*setStream_)(Handle, CUstream) = nullptr;
  int (*gemmEx_)(Handle, int, int, int, int, int, const void *, const void *, int, int,
                 const void *, int, int, const void *, void *, int, int, int, int) = nullptr;
  int (*destroy_)(Handle) = nullptr;
};

/// Median of `reps` device-to-device copies of a `bytes` buffer, counting read and written bytes.
Expected<double> measureCopyBandwidth(CudaContext &ctx, size_t bytes = size_t{1} << 30,
                                      int reps = 10);

/// An n x n x n bf16 product through cuBLAS on random data, median of 10 after warm-up, in
/// FLOP/s; Unavailable when libcublas cannot be loaded.
Expected<double> measureMatrixRate(CudaContext &ctx, int n = 8192);

} // namespace glm::cuda
