// Writes a planned module (plan dialect, after plan-verify) as a flatbuffers plan file.
#pragma once

#include "base/Status.h"
#include "runtime/cuda/KernelSelection.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::compiler {

/// The bytes of the plan file; they pass runtime::validatePlan before they are returned, so what
/// the compiler writes is exactly what the runtime accepts. `kernels`, for GPU plans, is the kernel
/// table and the launches of every step (buildPlanKernels over the plan emitted without them).
Expected<std::vector<uint8_t>> emitPlan(mlir::ModuleOp module, const std::string &modelSummary,
                                        const std::string &configHash,
                                        const cuda::PlanKernels *kernels = nullptr);

} // namespace glm::compiler
