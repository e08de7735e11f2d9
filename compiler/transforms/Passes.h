//===- Passes.h - glm dialect transformations -------------------*- C++ -*-===//
#pragma once

#include "ir/glm/GlmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace glm::compiler {

#define GEN_PASS_DECL
#include "compiler/transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/transforms/Passes.h.inc"

} // namespace glm::compiler
