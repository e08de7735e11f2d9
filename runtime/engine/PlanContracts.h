// The second half of a plan file's validation (the first is runtime/plan/PlanFile.h's, over the
// file's structure): every step against its op's contract, as the op's adapters declare it
// (kernels/common/OpContract.h), and on a GPU plan every launch against what the adapter would
// launch for the step. It reads steps through PlanStep, whose EXL3 geometry comes from
// runtime/weights, hence it lives here, beside the engines that run it before anything else.
#pragma once

#include "base/Status.h"
#include "runtime/plan/PlanFile.h"

namespace glm::runtime {

/// Refuses the first step that breaks its op's contract, names an op this build lacks, or
/// (GPU plans) launches anything but what its op's adapter gives for it: other kernels, other
/// geometry, other argument bytes or addresses. Errors name the program, the step index and its
/// IR name.
Status validatePlanSteps(const PlanFile &plan);

} // namespace glm::runtime
