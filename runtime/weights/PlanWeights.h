// Binding a checkpoint to a plan: each weight's rank slice copied into the weights arena.
#pragma once

#include "base/Progress.h"
#include "base/Status.h"
#include "runtime/schema/plan_generated.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <span>
#include <vector>

namespace glm {

/// Fills `arena` (the plan's weights arena, as many bytes as the plan says) with rank `rank`'s
/// slice of every weight binding. Each checkpoint tensor must have the binding's global shape
/// (per expert for stacked experts, whose `{e}` names expert ids) and be stored in the binding's
/// element type; errors name the tensor and the file. Tensors are copied on all cores; `progress`
/// (optional) counts bytes.
/// The checkpoint dtype of a plan element type.
Expected<DType> dtypeOfElement(plan::ElementType element);

Status loadPlanWeights(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                       std::span<uint8_t> arena, ProgressReporter *progress = nullptr);

/// The arena layout of an EXL3 binding: its matrices (the local experts of a stacked binding, else
/// one) of the rank shape's [out, in], at the K its slice size implies.
Expected<Exl3ArenaLayout> exl3BindingLayout(const plan::WeightBinding &binding);

/// A range of the weights arena that holds whole bindings.
struct WeightWindow {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// The weights arena cut at binding boundaries into windows of at most `maxBytes` (a binding
/// larger than that gets a window of its own), in arena order: a GPU engine loads its weights a
/// window at a time through a bounded host buffer instead of a copy of the whole arena.
std::vector<WeightWindow> planWeightWindows(const plan::Plan &plan, uint64_t maxBytes);

/// loadPlanWeights for the bindings that lie in arena bytes [windowOffset, windowOffset +
/// window.size()), which `window` holds; bytes between bindings are left as they are.
Status loadPlanWeightsWindow(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                             uint64_t windowOffset, std::span<uint8_t> window,
                             ProgressReporter *progress = nullptr);

} // namespace glm
