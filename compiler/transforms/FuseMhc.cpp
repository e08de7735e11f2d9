//===- FuseMhc.cpp - each mhc_post folded into the mhc_pre that reads it ---===//
//
// Every decoder layer ends a sub-block with mhc_post (the residual update that writes the hc
// streams) and starts the next with mhc_pre (the mixer that reads them): 89 of a GLM-5.3-Flash
// decode step's launches are such pairs, each a few microseconds of latency around 48 KB a token.
// Where an mhc_post's very next step is the mhc_pre of its result, the pass replaces the two with
// one mhc_pre step that holds mhc_post's operands and writes its result as a fourth
// (kernels/mhc_pre/mhc_pre_op.cpp): decode rows compute the streams inside the mixer's own launch,
// with mhc_post's arithmetic, so the bits are the pair's; prefill rows run the two kernels in one
// step. The streams stay a result, since the next mhc_post reads them as its residual.
//
// Only adjacent pairs fold: the fused step sits at mhc_pre's place, so no step in between may read
// the streams before they are written. The decode kernel's threads read every old stream of a
// chunk while others write new ones, so an mhc_post that updates its residual in place stays
// apart; otherwise they are other buffers, and a step's inputs and outputs never share bytes
// (plan-assign-arenas). Runs on every target (the CPU runs the two references in turn), after
// glm-to-plan and before plan-assign-arenas.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/IrOpStep.h"
#include "compiler/transforms/StepGroups.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFUSEMHCPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// "blk.0.attn_hc.post", "blk.0.ffn_hc" -> "blk.0.attn_hc.post+ffn_hc": the second name after the
/// dotted prefix the two share.
std::string fusedName(planir::StepOp post, planir::StepOp pre) {
  const std::string a = post.getName().str(), b = pre.getName().str();
  size_t shared = 0;
  for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i) {
    if (a[i] == '.') {
      shared = i + 1;
    }
  }
  return a + "+" + b.substr(shared);
}

struct FuseMhc : glm::compiler::impl::PlanFuseMhcPassBase<FuseMhc> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const glm::compiler::PlanFacts facts(module);
    glm::compiler::foldAdjacentSteps(module, [&](planir::StepOp post, planir::StepOp pre) {
      if (post.getOp() != "mhc_post" || pre.getOp() != "mhc_pre" || pre.getInputs().size() != 1 ||
          pre.getInputs()[0] != post.getOutputs()[0] ||
          llvm::is_contained(post.getInputs(), post.getOutputs()[0])) {
        return false;
      }
      fuse(post, pre, facts);
      return true;
    });
  }

  static void fuse(planir::StepOp post, planir::StepOp pre, const glm::compiler::PlanFacts &facts) {
    OpBuilder b(pre);
    SmallVector<Value> outputs(pre.getOutputs().begin(), pre.getOutputs().end());
    outputs.push_back(post.getOutputs()[0]);
    // The decode kernel never reads the streams back from memory (each block mixes the chunks it
    // has just computed); the prefill rows' mixer does.
    const bool decodeKernel =
        !glm::kernels::mhcPreUsesPrefill(glm::compiler::IrOpStep(pre, facts).choiceRows());
    const int64_t read =
        post.getBytesRead() + pre.getBytesRead() - (decodeKernel ? post.getBytesWritten() : 0);
    planir::StepOp::create(
        b, pre.getLoc(), b.getStringAttr("mhc_pre"), b.getStringAttr(fusedName(post, pre)),
        post.getInputs(), outputs, pre.getWeights(), pre.getStates(), pre.getParams(),
        b.getI64IntegerAttr(read),
        b.getI64IntegerAttr(post.getBytesWritten() + pre.getBytesWritten()),
        b.getI64IntegerAttr(post.getFlops() + pre.getFlops()), nullptr, nullptr, nullptr);
    pre.erase();
    post.erase();
  }
};

} // namespace
