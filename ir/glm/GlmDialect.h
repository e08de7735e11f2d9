//===- GlmDialect.h - the glm dialect ---------------------------*- C++ -*-===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Dialect.h"

#include "ir/glm/GlmDialect.h.inc"
#include "ir/glm/GlmEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/glm/GlmAttrs.h.inc"
