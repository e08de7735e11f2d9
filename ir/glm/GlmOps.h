//===- GlmOps.h - glm dialect operations ------------------------*- C++ -*-===//
#pragma once

#include "ir/glm/GlmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "ir/glm/GlmOps.h.inc"
