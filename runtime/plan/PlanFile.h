// Loading a plan file: the flatbuffers verifier first, then a semantic validator, so a corrupt or
// hostile plan is refused with a clear error and never read out of bounds.
#pragma once

#include "base/Status.h"
#include "runtime/schema/PlanVersion.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace glm::runtime {

/// The plan format this runtime reads; the compiler writes the same number.
using plan::kPlanFormatVersion;

/// Bytes per element of a plan element type.
size_t elementSize(plan::ElementType type);

class PlanFile {
public:
  /// Reads and validates a plan file. `source` names it in errors.
  static Expected<std::unique_ptr<PlanFile>> open(const std::filesystem::path &path);
  /// Validates a plan already in memory (copied, so the caller's buffer may go away).
  static Expected<std::unique_ptr<PlanFile>> fromBytes(std::span<const uint8_t> bytes,
                                                       std::string source);

  const plan::Plan &root() const { return *root_; }
  const std::string &source() const { return source_; }
  std::span<const uint8_t> bytes() const { return {data(), size_}; }

  /// Whether every kernel has a cubin for `arch` (always true for CPU plans, which have none).
  Status checkRunnableOn(plan::Arch arch) const;

private:
  PlanFile() = default;
  const uint8_t *data() const { return reinterpret_cast<const uint8_t *>(storage_.data()); }

  // uint64_t storage keeps the buffer 8-byte aligned, as flatbuffers' verifier expects.
  std::vector<uint64_t> storage_;
  size_t size_ = 0;
  std::string source_;
  const plan::Plan *root_ = nullptr;
};

/// The semantic checks behind PlanFile: every slice inside its arena, every tensor inside its
/// slice, every index in range, segments covering the steps in order. Exposed for the compiler's
/// plan-verify pass, which runs the same rules before writing a file.
Status validatePlan(const plan::Plan &plan, const std::string &source);

} // namespace glm::runtime
