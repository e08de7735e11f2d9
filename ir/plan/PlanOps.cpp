//===- PlanOps.cpp - the plan dialect -------------------------------------===//
#include "ir/plan/PlanOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace glm::planir;

#include "ir/plan/PlanDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "ir/plan/PlanTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/plan/PlanAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "ir/plan/PlanOps.cpp.inc"

void PlanDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/plan/PlanTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/plan/PlanAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "ir/plan/PlanOps.cpp.inc"
      >();
}

uint64_t BufferType::getByteSize() const {
  uint64_t n = 1;
  for (int64_t d : getShape()) {
    n *= static_cast<uint64_t>(d);
  }
  const unsigned bits = getElementType().getIntOrFloatBitWidth();
  return n * ((bits + 7) / 8);
}
