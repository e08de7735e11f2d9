//===- GroupShortConvs.cpp - a KDA layer's short convs in one step -------===//
//
// A KDA layer convolves its q, k and v projections each with its own short causal conv: three
// launches a layer (102 of a GLM-5.3-Flash decode step), each a few microseconds of latency around
// 160 KB. The short_conv op takes up to kShortConvMaxParts parts over the same rows
// (kernels/short_conv/short_conv_op.cpp), each with its own input, weight, state and result, and
// its kernel runs every part's channels in one grid with each part's own arithmetic: the bits are
// the separate steps'. The pass puts the convs of one step context, one window and one weight
// type into one step at the first one's place, where they can move there without changing what
// any step reads (compiler/transforms/StepGroups.h). Every program and target (the CPU runs the
// parts in turn); after glm-to-plan, before plan-assign-arenas.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/IrOpStep.h"
#include "compiler/transforms/StepGroups.h"
#include "kernels/short_conv/short_conv_gpu.h"

#include "mlir/IR/Builders.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANGROUPSHORTCONVSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// What a conv's kernel instance and launch share with another's: its step context (the operands
/// after x), its window and the type its weight is read as.
struct ConvKey {
  SmallVector<Value> context;
  int64_t window = 0;
  glm::DType weightType{};

  ConvKey(planir::StepOp s, const glm::compiler::PlanFacts &facts) {
    const OperandRange inputs = s.getInputs();
    context.assign(inputs.begin() + 1, inputs.end());
    const glm::compiler::IrOpStep step(s, facts);
    const glm::kernels::WeightInfo w = step.weight(0);
    window = w.shape[w.shape.rank - 1];
    weightType = step.denseWeightType(0);
  }
  bool operator==(const ConvKey &o) const {
    return context == o.context && window == o.window && weightType == o.weightType;
  }
};

struct GroupShortConvs : glm::compiler::impl::PlanGroupShortConvsPassBase<GroupShortConvs> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const glm::compiler::PlanFacts facts(module);
    glm::compiler::groupSteps(
        module, glm::kernels::kShortConvMaxParts, single,
        [&](planir::StepOp head, planir::StepOp s) {
          return single(s) && ConvKey(s, facts) == ConvKey(head, facts);
        },
        replace);
  }

  /// A short_conv of one part (x and the two step-context operands).
  static bool single(planir::StepOp s) {
    return s.getOp() == "short_conv" && s.getOutputs().size() == 1 && s.getInputs().size() == 3;
  }

  /// One short_conv step of the group's parts at the first one's place: operands x_0..x_{P-1}
  /// then the shared step context, weights, states and results in part order.
  static void replace(ArrayRef<planir::StepOp> group) {
    planir::StepOp first = group.front();
    OpBuilder b(first);
    SmallVector<Value> inputs, outputs;
    SmallVector<Attribute> weights, states;
    int64_t read = 0, written = 0, flops = 0;
    for (planir::StepOp s : group) {
      inputs.push_back(s.getInputs()[0]);
      outputs.push_back(s.getOutputs()[0]);
      weights.append(s.getWeights().begin(), s.getWeights().end());
      states.append(s.getStates().begin(), s.getStates().end());
      read += s.getBytesRead();
      written += s.getBytesWritten();
      flops += s.getFlops();
    }
    inputs.append(first.getInputs().begin() + 1, first.getInputs().end());
    glm::compiler::hoistAllocs(first, outputs);
    planir::StepOp::create(b, first.getLoc(), b.getStringAttr("short_conv"),
                           b.getStringAttr(glm::compiler::groupName(group)), inputs, outputs,
                           b.getArrayAttr(weights), b.getArrayAttr(states), first.getParams(),
                           b.getI64IntegerAttr(read), b.getI64IntegerAttr(written),
                           b.getI64IntegerAttr(flops), nullptr, nullptr, nullptr);
    for (planir::StepOp s : group) {
      s.erase();
    }
  }
};

} // namespace
