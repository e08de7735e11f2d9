// The content hash a plan file carries (Plan.content_hash): written last by the compiler, checked
// first by the runtime after the flatbuffers verifier, so that a file damaged in a copy is
// refused as damaged rather than validated field by field into a misleading error, or run.
// FNV-1a is not a MAC: a plan is trusted as the user's own file, and the semantic validator
// (runtime/plan/PlanFile.h) is what keeps a hostile one from crashing glmc.
#pragma once

#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <cstring>
#include <span>

namespace glm::plan {

/// FNV-1a 64 over `buffer`, its content_hash field's bytes read as zeros. `buffer` must have
/// passed the flatbuffers verifier.
inline uint64_t planContentHash(std::span<const uint8_t> buffer) {
  // The field's place in the buffer, through the root as a plain table (Plan hides the Table
  // it derives from); an absent field hashes nothing out.
  const uint8_t *field =
      flatbuffers::GetRoot<flatbuffers::Table>(buffer.data())->GetAddressOf(Plan::VT_CONTENT_HASH);
  const size_t skip = field != nullptr ? static_cast<size_t>(field - buffer.data()) : SIZE_MAX;
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < buffer.size(); ++i) {
    const uint8_t byte = i - skip < sizeof(uint64_t) ? 0 : buffer[i];
    h = (h ^ byte) * 0x100000001B3ull;
  }
  return h;
}

/// Writes the content hash into a finished plan buffer whose content_hash field is present
/// (the compiler writes it non-zero first, since flatbuffers leaves out fields at their
/// default). False when the field is absent.
inline bool sealPlanBuffer(std::span<uint8_t> buffer) {
  return GetMutablePlan(buffer.data())->mutate_content_hash(planContentHash(buffer));
}

} // namespace glm::plan
