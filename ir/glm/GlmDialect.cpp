//===- GlmDialect.cpp - the glm dialect -----------------------------------===//
#include "ir/glm/GlmDialect.h"
#include "ir/glm/GlmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace glm::ir;

#include "ir/glm/GlmDialect.cpp.inc"
#include "ir/glm/GlmEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/glm/GlmAttrs.cpp.inc"

void GlmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/glm/GlmOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/glm/GlmAttrs.cpp.inc"
      >();
}
