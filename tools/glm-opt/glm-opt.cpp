//===- glm-opt.cpp - parse, verify and transform glm IR -------------------===//
//
// The mlir-opt of this project: loads only the dialects glm IR uses, so lit
// tests exercise exactly what glmc links.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "ir/glm/GlmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<glm::ir::GlmDialect, glm::planir::PlanDialect, mlir::func::FuncDialect>();
  glm::compiler::registerGlmPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "glm optimizer driver\n", registry));
}
