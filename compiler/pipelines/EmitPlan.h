// Writes a planned module (plan dialect, after plan-verify) as a flatbuffers plan file.
#pragma once

#include "base/Status.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::compiler {

/// The bytes of the plan file, written once, field by field, from a module after plan-verify (and,
/// for GPU targets, plan-compile-kernels).
Expected<std::vector<uint8_t>> emitPlan(mlir::ModuleOp module, const std::string &modelSummary,
                                        const std::string &configHash);

} // namespace glm::compiler
