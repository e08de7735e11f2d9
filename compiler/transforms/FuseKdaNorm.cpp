//===- FuseKdaNorm.cpp - KDA's gated output norm folded into its launch ----===//
//
// A KDA layer's recurrence is followed at once by the gated RMSNorm of each head of its output
// (o_norm): 34 of a GLM-5.3-Flash decode step's launches, each a few microseconds of latency
// around 16 KB a row. Where a kda step is followed at once by a weighted gated_norm of its result
// in groups of its head_dim, written to a buffer that is neither that result nor the gate, the
// pass moves the norm into the kda step: the gate as operand 7, the norm's weight as weight 2,
// its eps as parameter norm_eps, its result as result 1 (kernels/kda/kda_op.cpp). Decode rows
// normalise inside the recurrence's launch, each cluster of blocks one head, with
// gatedRmsNormKernel's own row routine, so the bits are the two steps'; prefill rows run
// gatedRmsNormKernel after the recurrence in the one step. kda's result stays a result: the
// kernel reads each head back whole for its sum.
//
// Only adjacent pairs fold, so no step in between can read the norm's result before it is
// written; the gate was written before the norm, so before the kda step too. A norm in place
// stays apart, since the decode kernel's blocks read the whole head while others write their
// share of the result. Runs on every target (the CPU runs the two references in turn), after
// glm-to-plan and before plan-assign-arenas.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/transforms/StepGroups.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFUSEKDANORMPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// Whether `norm` is a weighted gated norm of each head of `kda`'s result, written elsewhere.
bool foldable(planir::StepOp kda, planir::StepOp norm) {
  if (kda.getOp() != "kda" || norm.getOp() != "gated_norm" || kda.getWeights().size() != 2 ||
      kda.getOutputs().size() != 1 || norm.getInputs().size() != 2 ||
      norm.getInputs()[0] != kda.getOutputs()[0] || norm.getWeights().size() != 1) {
    return false;
  }
  Value out = norm.getOutputs()[0];
  if (out == kda.getOutputs()[0] || out == norm.getInputs()[1] ||
      norm.getInputs()[1] == kda.getOutputs()[0]) {
    return false;
  }
  auto group = norm.getParams().getAs<IntegerAttr>("group");
  auto headDim = kda.getParams().getAs<IntegerAttr>("head_dim");
  return group && headDim && group.getInt() == headDim.getInt();
}

struct FuseKdaNorm : glm::compiler::impl::PlanFuseKdaNormPassBase<FuseKdaNorm> {
  void runOnOperation() override {
    glm::compiler::foldAdjacentSteps(getOperation(), [](planir::StepOp kda, planir::StepOp norm) {
      if (!foldable(kda, norm)) {
        return false;
      }
      fuse(kda, norm);
      return true;
    });
  }

  static void fuse(planir::StepOp kda, planir::StepOp norm) {
    SmallVector<Value> inputs(kda.getInputs().begin(), kda.getInputs().end());
    inputs.push_back(norm.getInputs()[1]);
    const Value outputs[] = {kda.getOutputs()[0], norm.getOutputs()[0]};
    SmallVector<Attribute> weights(kda.getWeights().begin(), kda.getWeights().end());
    weights.push_back(norm.getWeights()[0]);
    NamedAttrList params(kda.getParams());
    if (Attribute eps = norm.getParams().get("eps")) {
      params.set("norm_eps", eps);
    }
    glm::compiler::replaceWithWiderStep(kda, norm, inputs, outputs, weights,
                                        params.getDictionary(kda.getContext()));
  }
};

} // namespace
