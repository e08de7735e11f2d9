// Binding a checkpoint to a plan: each weight's rank slice copied into the weights arena.
#pragma once

#include "runtime/common/Progress.h"
#include "runtime/common/Status.h"
#include "runtime/schema/plan_generated.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <span>

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

} // namespace glm
