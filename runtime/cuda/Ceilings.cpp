// Copy bandwidth through the driver, matrix rate through cuBLAS via dlopen.
#include "runtime/cuda/Ceilings.h"

#include <algorithm>
#include <dlfcn.h>
#include <functional>
#include <vector>

namespace glm::cuda {
namespace {

/// Median microseconds of `work` over `reps` runs after 3 warm-ups, timed with events.
Expected<double> medianUs(CudaContext &ctx, const std::function<Status()> &work, int reps) {
  const CudaDriver &d = ctx.driver();
  for (int i = 0; i < 3; ++i) {
    GLM_RETURN_IF_ERROR(work());
  }
  CUevent start = nullptr, stop = nullptr;
  GLM_CU(&d, cuEventCreate(&start, kEventDefault));
  GLM_CU(&d, cuEventCreate(&stop, kEventDefault));
  std::vector<double> us;
  Status status = Status::success();
  for (int i = 0; i < reps && status.ok(); ++i) {
    status = check(d.cuEventRecord(start, ctx.stream()), "cuEventRecord");
    if (status.ok()) {
      status = work();
    }
    if (status.ok()) {
      status = check(d.cuEventRecord(stop, ctx.stream()), "cuEventRecord");
    }
    if (status.ok()) {
      status = check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    }
    float ms = 0;
    if (status.ok()) {
      status = check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    }
    us.push_back(ms * 1000.0);
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  GLM_RETURN_IF_ERROR(status);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

} // namespace

Expected<double> measureCopyBandwidth(CudaContext &ctx, size_t bytes) {
  GLM_ASSIGN_OR_RETURN(DeviceMemory a, ctx.allocate(bytes));
  GLM_ASSIGN_OR_RETURN(DeviceMemory b, ctx.allocate(bytes));
  GLM_CU(&ctx.driver(), cuMemsetD8(a.ptr(), 1, bytes));
  GLM_ASSIGN_OR_RETURN(double us, medianUs(
                                      ctx,
                                      [&] {
                                        return check(ctx.driver().cuMemcpyDtoDAsync(
                                                         b.ptr(), a.ptr(), bytes, ctx.stream()),
                                                     "cuMemcpyDtoDAsync");
                                      },
                                      10));
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6);
}

Expected<double> measureMatrixRate(CudaContext &ctx, int m, int n, int k) {
  void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == nullptr) {
    return Status(StatusCode::Unavailable, "cuBLAS (libcublas.so.13) is not installed");
  }
  using Handle = void *;
  auto create = reinterpret_cast<int (*)(Handle *)>(dlsym(lib, "cublasCreate_v2"));
  auto destroy = reinterpret_cast<int (*)(Handle)>(dlsym(lib, "cublasDestroy_v2"));
  auto setStream = reinterpret_cast<int (*)(Handle, CUstream)>(dlsym(lib, "cublasSetStream_v2"));
  auto gemmEx = reinterpret_cast<int (*)(
      Handle, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
      const void *, void *, int, int, int, int)>(dlsym(lib, "cublasGemmEx"));
  if (!create || !destroy || !setStream || !gemmEx) {
    return Status(StatusCode::Unavailable, "libcublas lacks cublasGemmEx");
  }
  Handle handle = nullptr;
  if (create(&handle) != 0) {
    return Status(StatusCode::Unavailable, "cublasCreate failed");
  }
  setStream(handle, ctx.stream());
  // Random-looking data: products of zeros run faster than real ones.
  const size_t elements = static_cast<size_t>(std::max({m, n})) * static_cast<size_t>(k);
  std::vector<uint16_t> host(elements);
  uint32_t x = 12345;
  for (uint16_t &v : host) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3C00u | ((x >> 16) & 0x7Fu) | ((x >> 8) & 0x8000u)); // ±[1/128, 1)
  }
  Expected<double> result = Status(StatusCode::Internal, "not run");
  {
    Expected<DeviceMemory> a = ctx.allocate(elements * 2), b = ctx.allocate(elements * 2),
                           c = ctx.allocate(static_cast<size_t>(m) * n * 2);
    if (!a.ok() || !b.ok() || !c.ok()) {
      destroy(handle);
      return !a.ok() ? a.status() : (!b.ok() ? b.status() : c.status());
    }
    Status up = ctx.upload(a->ptr(), host.data(), elements * 2);
    if (up.ok()) {
      up = ctx.upload(b->ptr(), host.data(), elements * 2);
    }
    if (!up.ok()) {
      destroy(handle);
      return up;
    }
    const float alpha = 1.0f, beta = 0.0f;
    constexpr int kBf16 = 14, kCompute32F = 68, kDefaultAlgo = -1, kOpN = 0;
    result = medianUs(
        ctx,
        [&]() -> Status {
          // Column-major C[m,n] = A[m,k] B[k,n].
          const int rc =
              gemmEx(handle, kOpN, kOpN, m, n, k, &alpha, reinterpret_cast<const void *>(a->ptr()),
                     kBf16, m, reinterpret_cast<const void *>(b->ptr()), kBf16, k, &beta,
                     reinterpret_cast<void *>(c->ptr()), kBf16, m, kCompute32F, kDefaultAlgo);
          return rc == 0 ? Status::success() : internalError("cublasGemmEx failed: ", rc);
        },
        10);
  }
  destroy(handle);
  GLM_ASSIGN_OR_RETURN(double us, std::move(result));
  return 2.0 * m * n * k / (us * 1e-6);
}

} // namespace glm::cuda
