// The GPU tests' shared device and helpers.
#include "tests/gpu/support/GpuTest.h"

#include <limits>

namespace glm::testing {

cuda::CudaContext *gpu(std::string *why) {
  static Expected<std::unique_ptr<cuda::CudaContext>> context = cuda::CudaContext::create(0);
  if (!context.ok()) {
    if (why != nullptr) {
      *why = context.status().toString();
    }
    return nullptr;
  }
  return context.value().get();
}

Expected<std::unique_ptr<cuda::Module>> compileForGpu(const std::string &source,
                                                      const std::vector<std::string> &names) {
  std::string why;
  if (gpu(&why) == nullptr) {
    return Status(StatusCode::Unavailable, why);
  }
  GLM_ASSIGN_OR_RETURN(kernels::CompiledModule module,
                       kernels::compileKernels(source, names, gpu()->info().arch));
  return gpu()->load(module.cubin, module.entries);
}

Expected<cuda::DeviceMemory> poisoned(size_t bytes) {
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, gpu()->allocate(bytes));
  GLM_CU(&gpu()->driver(), cuMemsetD8(m.ptr(), 0xFF, bytes));
  return m;
}

double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) {
      return std::numeric_limits<double>::infinity();
    }
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

std::vector<float> widen(const std::vector<uint16_t> &bf16) {
  std::vector<float> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    out[i] = kernels::bf16ToFloat(bf16[i]);
  }
  return out;
}

} // namespace glm::testing
