//===- FuseMhcNorm.cpp - the sub-block's input norm folded into its mixer -===//
//
// Every sub-block of a decoder layer starts with mhc_pre, whose x is the sub-block's input, and at
// once normalises it (attn_norm, ffn_norm: a weighted RMSNorm of the whole row): 90 of a
// GLM-5.3-Flash decode step's launches are such norms, each a few microseconds of latency around
// 8-24 KB. Where an mhc_pre (folded with its mhc_post or not) is followed at once by a weighted
// rms_norm of its x over whole rows, the pass moves the norm into the mixer's step: the norm's
// weight becomes weight 3, its eps parameter input_norm_eps, its result the step's last
// (kernels/mhc_pre/mhc_pre_op.cpp). Decode rows normalise inside the mixer's launch with
// rmsNormKernel's own reduction, so the bits are the two steps'; prefill rows run rmsNormKernel
// after the mixer in the one step. x stays a result: the kernel reads it back for the sum.
//
// Only adjacent pairs fold, so no step in between can read the norm's result before it is
// written; a norm in place (its result x itself) stays apart, since the decode kernel's blocks
// read the whole row of x while others write their share of the result. Runs on every target
// (the CPU runs the two references in turn), after plan-fuse-mhc and before plan-assign-arenas.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/transforms/StepGroups.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFUSEMHCNORMPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// Whether `norm` is a weighted RMSNorm over whole rows of `pre`'s x, written elsewhere.
bool foldable(planir::StepOp pre, planir::StepOp norm) {
  if (pre.getOp() != "mhc_pre" || norm.getOp() != "rms_norm" || pre.getWeights().size() != 3 ||
      norm.getInputs().size() != 1 || norm.getInputs()[0] != pre.getOutputs()[0] ||
      norm.getWeights().size() != 1 || norm.getOutputs()[0] == pre.getOutputs()[0]) {
    return false;
  }
  auto x = cast<planir::BufferType>(pre.getOutputs()[0].getType());
  auto group = norm.getParams().getAs<IntegerAttr>("group");
  return !group || group.getInt() == x.getShape().back();
}

struct FuseMhcNorm : glm::compiler::impl::PlanFuseMhcNormPassBase<FuseMhcNorm> {
  void runOnOperation() override {
    glm::compiler::foldAdjacentSteps(getOperation(), [](planir::StepOp pre, planir::StepOp norm) {
      if (!foldable(pre, norm)) {
        return false;
      }
      fuse(pre, norm);
      return true;
    });
  }

  static void fuse(planir::StepOp pre, planir::StepOp norm) {
    SmallVector<Value> outputs(pre.getOutputs().begin(), pre.getOutputs().end());
    outputs.push_back(norm.getOutputs()[0]);
    SmallVector<Attribute> weights(pre.getWeights().begin(), pre.getWeights().end());
    weights.push_back(norm.getWeights()[0]);
    NamedAttrList params(pre.getParams());
    if (Attribute eps = norm.getParams().get("eps")) {
      params.set("input_norm_eps", eps);
    }
    glm::compiler::replaceWithWiderStep(pre, norm, pre.getInputs(), outputs, weights,
                                        params.getDictionary(pre.getContext()));
  }
};

} // namespace
