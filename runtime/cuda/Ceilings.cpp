// Event timing, cuBLAS through dlopen, and the copy and matrix ceilings.
#include "runtime/cuda/Ceilings.h"

#include <algorithm>
#include <dlfcn.h>
#include <vector>

namespace glm::cuda {

Expected<EventTiming> timeOnStream(CudaContext &ctx, const std::function<Status()> &work, int reps,
                                   int warmup, const std::function<Status(CUstream)> &wait) {
  const CudaDriver &d = ctx.driver();
  for (int i = 0; i < warmup; ++i) {
    GLM_RETURN_IF_ERROR(work());
  }
  CUevent start = nullptr, stop = nullptr;
  GLM_CU(&d, cuEventCreate(&start, kEventDefault));
  GLM_CU(&d, cuEventCreate(&stop, kEventDefault));
  std::vector<double> us;
  Status status = Status::success();
  for (int i = 0; i < std::max(reps, 1) && status.ok(); ++i) {
    status = check(d.cuEventRecord(start, ctx.stream()), "cuEventRecord");
    if (status.ok()) {
      status = work();
    }
    if (status.ok()) {
      status = check(d.cuEventRecord(stop, ctx.stream()), "cuEventRecord");
    }
    if (status.ok()) {
      status = wait ? wait(ctx.stream()) : check(d.cuEventSynchronize(stop), "cuEventSynchronize");
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
  return EventTiming{us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10]};
}

Expected<std::unique_ptr<Cublas>> Cublas::open(CUstream stream) {
  void *lib = nullptr;
  for (const char *name :
       {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      break;
    }
  }
  if (lib == nullptr) {
    return Status(StatusCode::Unavailable,
                  strCat("cuBLAS (libcublas.so.13) is not installed: ", dlerror()));
  }
  std::unique_ptr<Cublas> c(new Cublas);
  c->create_ = reinterpret_cast<decltype(c->create_)>(dlsym(lib, "cublasCreate_v2"));
  c->setStream_ = reinterpret_cast<decltype(c->setStream_)>(dlsym(lib, "cublasSetStream_v2"));
  c->gemmEx_ = reinterpret_cast<decltype(c->gemmEx_)>(dlsym(lib, "cublasGemmEx"));
  c->destroy_ = reinterpret_cast<decltype(c->destroy_)>(dlsym(lib, "cublasDestroy_v2"));
  if (c->create_ == nullptr || c->setStream_ == nullptr || c->gemmEx_ == nullptr ||
      c->destroy_ == nullptr) {
    return Status(StatusCode::Unavailable, "libcublas lacks cublasGemmEx or its handle calls");
  }
  if (c->create_(&c->handle_) != 0 || c->setStream_(c->handle_, stream) != 0) {
    return Status(StatusCode::Unavailable, "cuBLAS did not initialise");
  }
  return c;
}

Cublas::~Cublas() {
  if (handle_ != nullptr) {
    destroy_(handle_);
  }
}

Status Cublas::linear(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int64_t rows, int64_t in,
                      int64_t out) {
  // cublasOperation_t, cudaDataType CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT.
  constexpr int kOpN = 0, kOpT = 1, kBf16 = 14, kCompute32F = 68, kGemmDefault = -1;
  const float alpha = 1.0f, beta = 0.0f;
  const int rc = gemmEx_(handle_, kOpT, kOpN, static_cast<int>(out), static_cast<int>(rows),
                         static_cast<int>(in), &alpha, reinterpret_cast<const void *>(w), kBf16,
                         static_cast<int>(in), reinterpret_cast<const void *>(x), kBf16,
                         static_cast<int>(in), &beta, reinterpret_cast<void *>(y), kBf16,
                         static_cast<int>(out), kCompute32F, kGemmDefault);
  return rc == 0 ? Status::success() : internalError("cublasGemmEx failed: ", rc);
}

Expected<double> measureCopyBandwidth(CudaContext &ctx, size_t bytes, int reps) {
  GLM_ASSIGN_OR_RETURN(DeviceMemory a, ctx.allocate(bytes));
  GLM_ASSIGN_OR_RETURN(DeviceMemory b, ctx.allocate(bytes));
  GLM_CU(&ctx.driver(), cuMemsetD8(a.ptr(), 1, bytes));
  GLM_ASSIGN_OR_RETURN(EventTiming t, timeOnStream(
                                          ctx,
                                          [&] {
                                            return check(ctx.driver().cuMemcpyDtoDAsync(
                                                             b.ptr(), a.ptr(), bytes, ctx.stream()),
                                                         "cuMemcpyDtoDAsync");
                                          },
                                          reps));
  return 2.0 * static_cast<double>(bytes) / (t.medianUs * 1e-6);
}

Expected<double> measureMatrixRate(CudaContext &ctx, int n) {
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<Cublas> cublas, Cublas::open(ctx.stream()));
  // Random-looking data: products of zeros run faster than real ones.
  const size_t elements = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<uint16_t> host(elements);
  uint32_t x = 12345;
  for (uint16_t &v : host) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3C00u | ((x >> 16) & 0x7Fu) | ((x >> 8) & 0x8000u)); // ±[1/128, 1)
  }
  GLM_ASSIGN_OR_RETURN(DeviceMemory a, ctx.allocate(elements * 2));
  GLM_ASSIGN_OR_RETURN(DeviceMemory b, ctx.allocate(elements * 2));
  GLM_ASSIGN_OR_RETURN(DeviceMemory c, ctx.allocate(elements * 2));
  GLM_RETURN_IF_ERROR(ctx.upload(a.ptr(), host.data(), elements * 2));
  GLM_RETURN_IF_ERROR(ctx.upload(b.ptr(), host.data(), elements * 2));
  GLM_ASSIGN_OR_RETURN(
      EventTiming t,
      timeOnStream(ctx, [&] { return cublas->linear(a.ptr(), b.ptr(), c.ptr(), n, n, n); }, 10));
  return 2.0 * n * static_cast<double>(n) * n / (t.medianUs * 1e-6);
}

} // namespace glm::cuda
