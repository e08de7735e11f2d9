// The known targets. GPU numbers are the vendors' published limits; the measured ceilings that
// benchmarks compare against come from `glmc bench`, not from here.
#include "compiler/target/Target.h"

namespace glm::compiler {

std::optional<TargetDesc> findTarget(std::string_view name) {
  if (name == "cpu") {
    return TargetDesc{"cpu", 0, 0, 0, 0};
  }
  if (name == "sm_90a") {
    // H200: 132 SMs, 227 KB opt-in shared memory per block, 141 GB HBM3e at 4.8 TB/s. Its
    // memory is the GPU's alone: 4 GiB stay free for the context, graphs and NCCL.
    return TargetDesc{"sm_90a", 132, 232448, 141'000'000'000, 4.8e12, int64_t{4} << 30};
  }
  if (name == "sm_121a") {
    // GB10 (DGX Spark): 48 SMs, ~99 KB shared memory per block, 128 GB unified LPDDR5x at
    // 273 GB/s shared with the CPU. The OS, the server and its kept states share that memory,
    // and a GB10 that runs out freezes rather than failing an allocation (peers.md: the vLLM
    // overlay hangs near 109.5 GiB of 119.2): 12 GiB stay the host's.
    return TargetDesc{"sm_121a", 48, 101376, 128'000'000'000, 273e9, int64_t{12} << 30};
  }
  return std::nullopt;
}

const std::vector<std::string> &targetNames() {
  static const std::vector<std::string> names = {"cpu", "sm_90a", "sm_121a"};
  return names;
}

} // namespace glm::compiler
