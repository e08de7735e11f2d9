//===- GlmOps.h - glm dialect operations ------------------------*- C++ -*-===//
#pragma once

#include "ir/glm/GlmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/glm/GlmInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/glm/GlmOps.h.inc"
