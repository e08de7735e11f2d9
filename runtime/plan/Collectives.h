// The collective steps of a plan's programs as every backend reads them: what one moves. (Where a
// program splits at them into CUDA graphs is the plan's segments, which the compiler decides.)
#pragma once

#include "base/Status.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <vector>

namespace glm::runtime {

/// Whether `step` exchanges data between ranks (an all-reduce or all-gather).
inline bool isCollective(const plan::Step &step) { return step.collective() != nullptr; }

/// What a collective step moves. Each rank's piece is the step's operand, read as [rows, width]
/// elements (rows: its first dimension, the program's static rows; width: the product of the
/// others). An all-reduce sums the pieces into the result; an all-gather places them along `axis`
/// of the result as Comm::allGather lays them out (axis 1: rank r's columns after rank r-1's).
struct CollectiveShape {
  plan::CollectiveKind kind = plan::CollectiveKind::AllReduce;
  int64_t rows = 0;
  int64_t width = 0;
  int axis = 0; // all-gathers only
  plan::ElementType element = plan::ElementType::F32;
};

/// The shape of collective `step` in a plan of `world` ranks, or an error naming what does not fit
/// (operands, element types, the result's shape, the axis).
Expected<CollectiveShape> collectiveShape(const plan::Step &step, int64_t world);

} // namespace glm::runtime
