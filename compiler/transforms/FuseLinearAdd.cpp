//===- FuseLinearAdd.cpp - an add folded into the linear whose output it reads -===//
//
// An MoE layer sums its routed experts and its shared expert (`ffn.sum`) right after the shared
// expert's down projection: 43 of a GLM-5.3-Flash decode step's launches are such adds, each a
// few microseconds of latency around 16-24 KB. Where a linear's very next step is an add of its
// output and another buffer, and nothing else reads that output, the pass gives the linear the
// other buffer as an addend (operand 1) and the add's result as its own: every linear kernel adds
// it to its rounded output with the add kernel's arithmetic (kernels/linear/linear_gpu.h), so the
// bits are the two steps', and the CPU runs the add's reference after the linear's.
//
// Only adjacent pairs fold, so nothing in between can see the sum early or the linear's output
// missing; an add in place (its result one of its operands) stays apart, as does a linear that
// already has an addend or whose output another step reads. Runs on every target, after
// glm-to-plan and before plan-assign-arenas.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/transforms/StepGroups.h"

#include "mlir/IR/Builders.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFUSELINEARADDPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// The add's operand other than the linear's output, where the pair folds.
Value addendOf(planir::StepOp linear, planir::StepOp add) {
  if (linear.getOp() != "linear" || add.getOp() != "add" || linear.getInputs().size() != 1 ||
      add.getInputs().size() != 2) {
    return nullptr;
  }
  const Value y = linear.getOutputs()[0], out = add.getOutputs()[0];
  const Value a = add.getInputs()[0], b = add.getInputs()[1];
  if ((a == y) == (b == y) || out == a || out == b) {
    return nullptr; // y not read, or read twice; or the add is in place
  }
  for (Operation *user : y.getUsers()) {
    if (user != linear && user != add) {
      return nullptr;
    }
  }
  return a == y ? b : a;
}

struct FuseLinearAdd : glm::compiler::impl::PlanFuseLinearAddPassBase<FuseLinearAdd> {
  void runOnOperation() override {
    glm::compiler::foldAdjacentSteps(getOperation(), [](planir::StepOp linear, planir::StepOp add) {
      const Value addend = addendOf(linear, add);
      if (!addend) {
        return false;
      }
      fuse(linear, add, addend);
      return true;
    });
  }

  static void fuse(planir::StepOp linear, planir::StepOp add, Value addend) {
    glm::compiler::hoistAllocs(linear, add.getOutputs());
    OpBuilder b(linear);
    const Value inputs[] = {linear.getInputs()[0], addend};
    // The linear no longer writes its output or the add reads it back.
    planir::StepOp::create(
        b, linear.getLoc(), linear.getOpAttr(),
        b.getStringAttr(glm::compiler::foldedName(linear, add)), inputs, add.getOutputs(),
        linear.getWeights(), linear.getStates(), linear.getParams(),
        b.getI64IntegerAttr(linear.getBytesRead() + add.getBytesRead() - linear.getBytesWritten()),
        b.getI64IntegerAttr(add.getBytesWritten()),
        b.getI64IntegerAttr(linear.getFlops() + add.getFlops()), nullptr, nullptr, nullptr);
    Operation *alloc = linear.getOutputs()[0].getDefiningOp();
    linear.erase();
    add.erase();
    if (alloc != nullptr && alloc->use_empty()) {
      alloc->erase();
    }
  }
};

} // namespace
