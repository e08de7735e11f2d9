//===- Passes.h - the compiler's passes -------------------------*- C++ -*-===//
#pragma once

#include "ir/glm/GlmDialect.h"
#include "ir/plan/PlanOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace glm::compiler {

#define GEN_PASS_DECL
#include "compiler/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/Passes.h.inc"

} // namespace glm::compiler
