// The CUDA kernel sources (kernels/**/*.cuh and the headers they include), embedded in the binary
// at build time so that `glmc compile` can hand them to NVRTC wherever it runs.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace glm::kernels {

struct KernelSource {
  std::string_view path; // as kernels include it: "kernels/rms_norm/rms_norm.cuh"
  std::string_view text;
};

std::span<const KernelSource> kernelSources();

/// FNV-1a 64 (hex) over every embedded source's path and text: what a GPU plan records of the
/// sources it was compiled from (plan.fbs kernel_sources_hash). Beside the NVRTC driver
/// (kernels/common/Nvrtc.cpp), whose cache keys include it.
std::string kernelSourcesHash();

} // namespace glm::kernels
