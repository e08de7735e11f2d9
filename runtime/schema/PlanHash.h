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
  constexpr uint64_t kPrime = 0x100000001B3ull;
  // Bytes [begin, end), eight a turn: the same value as one a turn, in a fraction of the loop
  // tests (which a coverage-instrumented build, the plan fuzzers', pays for one by one).
  auto mix = [](uint64_t h, const uint8_t *begin, const uint8_t *end) {
    for (; end - begin >= 8; begin += 8) {
      for (int k = 0; k < 8; ++k) {
        h = (h ^ begin[k]) * kPrime;
      }
    }
    for (; begin != end; ++begin) {
      h = (h ^ *begin) * kPrime;
    }
    return h;
  };
  // The field's place in the buffer, through the root as a plain table (Plan hides the Table
  // it derives from); an absent field hashes nothing out.
  const uint8_t *data = buffer.data(), *end = data + buffer.size();
  const uint8_t *field =
      flatbuffers::GetRoot<flatbuffers::Table>(data)->GetAddressOf(Plan::VT_CONTENT_HASH);
  if (field == nullptr || field < data || field >= end) {
    return mix(0xCBF29CE484222325ull, data, end);
  }
  const uint8_t *after = end - field > 8 ? field + 8 : end;
  uint64_t h = mix(0xCBF29CE484222325ull, data, field);
  for (const uint8_t *zero = field; zero != after; ++zero) {
    h *= kPrime; // (h ^ 0) * kPrime
  }
  return mix(h, after, end);
}

/// Writes the content hash into a finished plan buffer whose content_hash field is present
/// (the compiler writes it non-zero first, since flatbuffers leaves out fields at their
/// default). False when the field is absent.
inline bool sealPlanBuffer(std::span<uint8_t> buffer) {
  return GetMutablePlan(buffer.data())->mutate_content_hash(planContentHash(buffer));
}

} // namespace glm::plan
