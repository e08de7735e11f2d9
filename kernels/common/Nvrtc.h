// NVRTC, reached through dlopen: compiles the embedded kernel sources (KernelSources.h) to a cubin
// for one architecture. `glmc compile` uses it to put cubins in GPU plans and the GPU tests to
// build the kernels they check; a machine without the CUDA toolkit builds glmc all the same.
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::kernels {

struct CompiledModule {
  std::vector<uint8_t> cubin;
  /// The mangled symbol of each requested name expression, in the order asked.
  std::vector<std::string> entries;
  /// The content hash the cache keys it by (source, headers, options, NVRTC version).
  std::string hash;
  /// NVRTC's log (warnings; ptxas's resource report with --ptxas-options=-v). Empty from the cache.
  std::string log;
};

/// Compiles `source` (which includes kernel headers by their repository paths) for `arch`
/// ("sm_90a", "sm_121a"), instantiating every template name in `nameExpressions`
/// ("glm::kernels::rmsNormKernel<float, glm::kernels::Bf16>"). Results are cached by content hash
/// under $GLM_KERNEL_CACHE (default ~/.cache/glmc/kernels; "off" disables the cache).
Expected<CompiledModule> compileKernels(std::string_view source,
                                        const std::vector<std::string> &nameExpressions,
                                        std::string_view arch,
                                        const std::vector<std::string> &extraOptions = {});

/// NVRTC's version as "major.minor", or the reason it cannot be loaded.
Expected<std::string> nvrtcVersion();

} // namespace glm::kernels
