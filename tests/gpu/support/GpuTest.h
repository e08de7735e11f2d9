// What the GPU tests share: the device (one context per test process), kernels compiled with NVRTC
// for it, host <-> device copies, and comparisons against the CPU reference.
#pragma once

#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/common/Launch.h"
#include "kernels/common/Nvrtc.h"
#include "models/glm53/Config.h"
#include "runtime/cuda/CudaContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace glm::testing {

/// Fails the test (and returns from it) with the status's message unless it is ok.
#define GLM_ASSERT_OK(expr)                                                                        \
  do {                                                                                             \
    const ::glm::Status glmStatus_ = (expr);                                                       \
    ASSERT_TRUE(glmStatus_.ok()) << glmStatus_.toString();                                         \
  } while (0)

#define GLM_ASSERT_OK_AND_ASSIGN(lhs, expr)                                                        \
  GLM_ASSERT_OK_AND_ASSIGN_IMPL(GLM_CONCAT_(glmExpected_, __LINE__), lhs, expr)
#define GLM_CONCAT_(a, b) GLM_CONCAT_IMPL_(a, b)
#define GLM_CONCAT_IMPL_(a, b) a##b
#define GLM_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)                                              \
  auto tmp = (expr);                                                                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status().toString();                                                \
  lhs = std::move(tmp).value()

/// The test process's GPU (device 0), created on first use; null with a message when there is
/// none. GPU tests carry the ctest label `gpu` and fail, not skip, without a GPU.
cuda::CudaContext *gpu(std::string *why = nullptr);

/// Compiles `source` for the test GPU and loads the instantiated `names`.
Expected<std::unique_ptr<cuda::Module>> compileForGpu(const std::string &source,
                                                      const std::vector<std::string> &names);

/// The module of every kernel `launches` names, compiled from `source` once per test process (the
/// same source and names give the same module); null, with a test failure, if it does not compile.
cuda::Module *cachedModule(const std::string &source,
                           const std::vector<kernels::NamedLaunch> &launches);
/// The same for instances by name (function i is names[i]).
cuda::Module *cachedModule(const std::string &source, const std::vector<std::string> &names);

/// A device copy of `values`.
template <typename T> Expected<cuda::DeviceMemory> toDevice(const std::vector<T> &values) {
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, gpu()->allocate(values.size() * sizeof(T)));
  GLM_RETURN_IF_ERROR(gpu()->upload(m.ptr(), values.data(), values.size() * sizeof(T)));
  return m;
}

/// `count` values of type T read back from the device.
template <typename T>
Expected<std::vector<T>> fromDevice(const cuda::DeviceMemory &m, size_t count) {
  std::vector<T> out(count);
  GLM_RETURN_IF_ERROR(gpu()->download(out.data(), m.ptr(), count * sizeof(T)));
  return out;
}

/// Device memory of `bytes` filled with 0xFF (NaN as f32 and bf16, -1 as i32), so that an element
/// the kernel failed to write cannot pass a comparison.
Expected<cuda::DeviceMemory> poisoned(size_t bytes);

/// Launches `fn` with `args` and waits; a launch or execution error comes back named.
template <typename Args>
Status launchAndWait(cuda::CUfunction fn, const kernels::LaunchDims &d, const Args &args) {
  GLM_RETURN_IF_ERROR(gpu()->launch(fn, d.grid, d.block, d.sharedMemory, args));
  return gpu()->synchronize();
}

/// Launches each of `launches` (function i of `module`, as cachedModule compiles them) with `args`,
/// in order, and waits: a multi-kernel op's step.
template <typename Args>
Status launchAllAndWait(const cuda::Module &module,
                        const std::vector<kernels::NamedLaunch> &launches, const Args &args) {
  for (size_t i = 0; i < launches.size(); ++i) {
    const kernels::LaunchDims &d = launches[i].dims;
    GLM_RETURN_IF_ERROR(gpu()->launch(module.function(i), d.grid, d.block, d.sharedMemory, args));
  }
  return gpu()->synchronize();
}

/// ‖a − b‖₂ / ‖b‖₂ in double; NaN anywhere in a gives infinity, so it never passes.
double relativeError(const std::vector<float> &a, const std::vector<float> &b);

/// The configs whose dimensions kernel tests run at: GLM-5.3-Flash's release config and the tiny
/// fixture's, read from the fixtures (GLM_FIXTURES_DIR, overridable by the environment variable
/// of that name) so that no test hard-codes a model's sizes.
const glm53::Glm53Config &flashConfig();
const glm53::Glm53Config &tinyConfig();

/// One MoE step's routing: each token's topK distinct expert ids drawn from [0, globalExperts)
/// and weights in (0.05, 0.6], bf16-representable.
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
Routing randomRouting(SplitMix64 &rng, int64_t tokens, int64_t topK, int64_t globalExperts);

/// Widens bf16 encodings to f32.
std::vector<float> widen(const std::vector<uint16_t> &bf16);
/// Rounds f32 values to bf16 encodings (nearest even).
std::vector<uint16_t> toBf16(const std::vector<float> &values);

/// A device copy of `values`, as bf16 when `bf16`, else f32.
Expected<cuda::DeviceMemory> upload(const std::vector<float> &values, bool bf16);
/// `count` elements of `m`, stored as bf16 when `bf16` (else f32), widened to f32.
Expected<std::vector<float>> download(const cuda::DeviceMemory &m, size_t count, bool bf16);

} // namespace glm::testing
