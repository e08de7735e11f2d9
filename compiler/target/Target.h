// Target descriptions: the facts about a machine that kernel selection and memory planning use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::compiler {

struct TargetDesc {
  std::string name;                 // "cpu", "sm_90a", "sm_121a"
  int64_t smCount = 0;              // 0 for the CPU
  int64_t sharedMemoryPerBlock = 0; // bytes, opt-in maximum
  int64_t memoryBytes = 0;          // per rank; 0 = not checked (the CPU reference)
  double bandwidthBytesPerS = 0;    // peak memory bandwidth, for projections
  /// Memory a plan leaves to the host and the server (kept prompt states, CUDA graphs, NCCL's
  /// buffers, the OS where memory is unified): the page pool fills the rest.
  int64_t hostReserveBytes = 0;
};

/// The targets `glmc compile --target` accepts.
std::optional<TargetDesc> findTarget(std::string_view name);
const std::vector<std::string> &targetNames();

} // namespace glm::compiler
