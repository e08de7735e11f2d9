//===- GlmOps.h - glm dialect operations ------------------------*- C++ -*-===//
#pragma once

#include "ir/glm/GlmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/glm/GlmInterfaces.h.inc"

namespace glm::ir {
/// The alternatives glm.sample reports per row besides its token (OpenAI's top_logprobs cap; the
/// kernels' kSampleTopLogprobs, which glm-to-plan checks it against).
inline constexpr int64_t kSampleAlternatives = 20;
} // namespace glm::ir

#define GET_OP_CLASSES
#include "ir/glm/GlmOps.h.inc"
