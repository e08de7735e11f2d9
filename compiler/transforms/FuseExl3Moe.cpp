//===- FuseExl3Moe.cpp - mark EXL3 MoE steps for the fused kernel ---------===//
//
// The fused EXL3 MoE kernel runs all selected experts of a layer in one launch
// and needs every expert matrix in EXL3; this pass records which steps qualify
// (`fuse_exl3`), so that kernel selection does not re-derive it from weights.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "ir/glm/GlmOps.h"

#include "mlir/IR/SymbolTable.h"

namespace glm::compiler {
#define GEN_PASS_DEF_GLMFUSEEXL3MOEPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;

namespace {

struct FuseExl3Moe : glm::compiler::impl::GlmFuseExl3MoePassBase<FuseExl3Moe> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](MoeExpertsOp op) {
      auto isExl3 = [&](FlatSymbolRefAttr ref) {
        auto weight = SymbolTable::lookupNearestSymbolFrom<WeightOp>(op, ref);
        return weight && weight.getFormat() == WeightFormat::EXL3;
      };
      if (isExl3(op.getGateAttr()) && isExl3(op.getUpAttr()) && isExl3(op.getDownAttr())) {
        op->setAttr("fuse_exl3", UnitAttr::get(op.getContext()));
      }
    });
  }
};

} // namespace
