// The collective steps of a plan's programs as every backend reads them: what one moves, and how a
// program splits at them into runs of steps that need no other rank (one CUDA graph each).
#pragma once

#include "base/Status.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <vector>

namespace glm::runtime {

/// Whether `step` exchanges data between ranks (an all-reduce or all-gather).
inline bool isCollective(const plan::Step &step) {
  return step.collective() != nullptr || step.op() == plan::OpKind::AllReduce ||
         step.op() == plan::OpKind::AllGather;
}

/// What a collective step moves. Each rank's piece is the step's operand, read as [rows, width]
/// elements (rows: its first dimension, the program's static rows; width: the product of the
/// others). An all-reduce sums the pieces into the result; an all-gather places them along `axis`
/// of the result as Comm::allGather lays them out (axis 1: rank r's columns after rank r-1's).
struct CollectiveShape {
  plan::OpKind op = plan::OpKind::AllReduce;
  int64_t rows = 0;
  int64_t width = 0;
  int axis = 0; // all-gathers only
  plan::ElementType element = plan::ElementType::F32;
};

/// The shape of collective `step` in a plan of `world` ranks, or an error naming what does not fit
/// (operands, element types, the result's shape, the axis).
Expected<CollectiveShape> collectiveShape(const plan::Step &step, int64_t world);

/// A run of a program's steps that needs no other rank, and the collective step that follows it.
struct StepRun {
  uint32_t first = 0;      // its first step
  uint32_t count = 0;      // its steps; 0 where a collective starts the program or follows another
  int64_t collective = -1; // the collective step after it; -1 for the run that ends the program
  bool operator==(const StepRun &) const = default;
};

/// `program`'s steps split at its collective steps: one run before each collective (ending with
/// it) and one after the last, left out when empty. A program without collectives is one run of
/// all its steps.
std::vector<StepRun> splitAtCollectives(const plan::Program &program);

} // namespace glm::runtime
