//===- PlanOps.h - the plan dialect -----------------------------*- C++ -*-===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "ir/plan/PlanDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/plan/PlanTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/plan/PlanAttrs.h.inc"

#define GET_OP_CLASSES
#include "ir/plan/PlanOps.h.inc"
