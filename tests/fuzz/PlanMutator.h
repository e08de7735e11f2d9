// The structure-aware mutator of the plan fuzz targets: a plan file's fields changed through its
// schema (runtime/schema/plan.fbs) and re-serialized, so that mutants pass the flatbuffers
// verifier and reach the semantic validator, the way a hostile or damaged plan would.
#pragma once

#include <cstddef>
#include <cstdint>

namespace glm::fuzz {

/// LLVMFuzzerCustomMutator for plan files. Most calls parse `data` as a plan, make one to four
/// schema-level changes (a step's op, an operand or result dropped, duplicated or rewired, a slice
/// offset or size moved by 1 or k bytes, a shape dimension, steps swapped, deleted or duplicated,
/// an attribute value, a weight/state/kernel/segment index, an element type, a name made
/// non-UTF-8, an arena, the state pool, io slots, tp) and re-serializes it; the rest, and inputs
/// that are not plans, get libFuzzer's byte-level mutation (LLVMFuzzerMutate).
size_t mutatePlan(uint8_t *data, size_t size, size_t maxSize, unsigned seed);

} // namespace glm::fuzz
