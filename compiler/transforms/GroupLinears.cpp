//===- GroupLinears.cpp - independent decode linears in one step ---------===//
//
// A decode step is launch-bound where it runs many small linears: a KDA layer's q, k, v, f_a, b
// and g_a projections all read the attention norm's output, a dense MLP's gate and up the FFN
// norm's, and its f_b and g_b read f_a's and g_a's. Where the target would run each with the
// decode-quant kernel (kernels::linearJoinsGroup: a decode program, bf16 activations, Q4 or fp8
// weights, no bias; on the CPU every dense decode linear, which gives its plans the GPU plan's
// steps), the pass replaces linears of one encoding and one input width with one linear_group
// step at the first one's place: one launch instead of several, each part computed
// as its linear would be. Inputs may differ (each part then reads its own): the width is what the
// kernel's warps split, so it must be one.
//
// A later linear joins only where it can move up without changing what any step reads
// (compiler/transforms/StepGroups.h); a group holds at most kLinearGroupMaxParts parts. Runs after
// glm-to-plan and before plan-assign-arenas (the results' lifetimes start earlier).
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/IrOpStep.h"
#include "compiler/transforms/StepGroups.h"
#include "kernels/linear_group/linear_group_gpu.h"
#include "kernels/linear_group/linear_group_op.h"

#include "mlir/IR/Builders.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANGROUPLINEARSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

struct GroupLinears : glm::compiler::impl::PlanGroupLinearsPassBase<GroupLinears> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const glm::compiler::PlanFacts facts(module);
    glm::compiler::groupSteps(
        module, glm::kernels::kLinearGroupMaxParts,
        [&](planir::StepOp s) { return joins(s, facts); },
        [&](planir::StepOp head, planir::StepOp s) {
          if (!joins(s, facts)) {
            return false;
          }
          const glm::compiler::IrOpStep a(head, facts), b(s, facts);
          return a.weight(0).denseEncoding() == b.weight(0).denseEncoding() &&
                 a.operandDim(0, 1) == b.operandDim(0, 1);
        },
        replace);
  }

  static bool joins(planir::StepOp step, const glm::compiler::PlanFacts &facts) {
    return step.getOp() == "linear" &&
           glm::kernels::linearJoinsGroup(glm::compiler::IrOpStep(step, facts));
  }
  /// One linear_group step in place of `group`'s linears, at the first one's place; each result
  /// keeps its buffer, so the steps that read them are unchanged. One operand where the parts
  /// read the same input, else each part's own.
  static void replace(ArrayRef<planir::StepOp> group) {
    planir::StepOp first = group.front();
    OpBuilder b(first);
    SmallVector<Value> inputs, outputs;
    SmallVector<Attribute> weights;
    int64_t read = 0, written = 0, flops = 0;
    for (planir::StepOp s : group) {
      inputs.push_back(s.getInputs()[0]);
      outputs.push_back(s.getOutputs()[0]);
      weights.push_back(s.getWeights()[0]);
      // Their sums: each part reads the activations as its linear did (every block reads them).
      read += s.getBytesRead();
      written += s.getBytesWritten();
      flops += s.getFlops();
    }
    // A later part's result buffer may be allocated after the first part: its alloc moves up.
    glm::compiler::hoistAllocs(first, outputs);
    if (llvm::all_equal(inputs)) {
      inputs.resize(1);
    }
    planir::StepOp::create(b, first.getLoc(), b.getStringAttr("linear_group"),
                           b.getStringAttr(glm::compiler::groupName(group)), inputs, outputs,
                           b.getArrayAttr(weights), b.getArrayAttr({}), b.getDictionaryAttr({}),
                           b.getI64IntegerAttr(read), b.getI64IntegerAttr(written),
                           b.getI64IntegerAttr(flops), nullptr, nullptr, nullptr);
    for (planir::StepOp s : group) {
      s.erase();
    }
  }
};

} // namespace
