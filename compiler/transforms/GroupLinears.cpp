//===- GroupLinears.cpp - same-input decode linears in one step ----------===//
//
// A decode step is launch-bound where it runs many small linears: a KDA layer's q, k, v, f_a, b
// and g_a projections all read the attention norm's output, a dense MLP's gate and up the FFN
// norm's. Where the target would run each with the decode-quant kernel
// (kernels::linearJoinsGroup: a decode program, bf16 activations, Q4 or fp8 weights, no bias),
// the pass replaces the linears of one input and one encoding with one linear_group step at the
// first one's place: one launch instead of several, each part computed as its linear would be.
//
// A later linear moves up only over steps that neither write its input nor touch its result, so
// that it reads and writes what it did; a group holds at most kLinearGroupMaxParts parts. Runs
// after glm-to-plan and before plan-assign-arenas (the results' lifetimes start earlier).
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/target/IrOpStep.h"
#include "kernels/linear_group/linear_group_gpu.h"
#include "kernels/linear_group/linear_group_op.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseSet.h"

#include <string>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANGROUPLINEARSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

/// "blk.0.attn.q_proj", "blk.0.attn.k_proj" -> "blk.0.attn.q_proj+k_proj": the first name, then
/// each other's part after the first's prefix up to its last dot.
std::string groupName(ArrayRef<planir::StepOp> steps) {
  planir::StepOp head = steps.front();
  const std::string first = head.getName().str();
  const size_t dot = first.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : first.substr(0, dot + 1);
  std::string name = first;
  for (planir::StepOp s : steps.drop_front()) {
    const std::string other = s.getName().str();
    name += "+" + (other.rfind(prefix, 0) == 0 ? other.substr(prefix.size()) : other);
  }
  return name;
}

struct GroupLinears : glm::compiler::impl::PlanGroupLinearsPassBase<GroupLinears> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const glm::compiler::PlanFacts facts(module);
    for (auto program : module.getOps<planir::ProgramOp>()) {
      SmallVector<planir::StepOp> steps(program.getBody().front().getOps<planir::StepOp>());
      llvm::DenseSet<Operation *> taken;
      for (size_t i = 0; i < steps.size(); ++i) {
        if (taken.contains(steps[i]) || !joins(steps[i], facts)) {
          continue;
        }
        SmallVector<planir::StepOp> group = {steps[i]};
        const Value x = steps[i].getInputs()[0];
        const auto encoding = encodingOf(steps[i], facts);
        // What the steps between the first and a candidate read and write, the group's own
        // members left out (they move with it).
        llvm::DenseSet<Value> read, written;
        for (size_t j = i + 1;
             j < steps.size() && group.size() < glm::kernels::kLinearGroupMaxParts; ++j) {
          planir::StepOp s = steps[j];
          if (taken.contains(s)) {
            continue; // an earlier group's part, gone from here
          }
          if (joins(s, facts) && s.getInputs()[0] == x && encodingOf(s, facts) == encoding &&
              !read.contains(s.getOutputs()[0]) && !written.contains(s.getOutputs()[0])) {
            group.push_back(s);
            continue;
          }
          read.insert(s.getInputs().begin(), s.getInputs().end());
          written.insert(s.getOutputs().begin(), s.getOutputs().end());
          if (written.contains(x)) {
            break; // later linears of x read another value of it
          }
        }
        if (group.size() < 2) {
          continue;
        }
        for (planir::StepOp s : group) {
          taken.insert(s);
        }
        replace(group);
      }
    }
  }

  static bool joins(planir::StepOp step, const glm::compiler::PlanFacts &facts) {
    return step.getOp() == "linear" &&
           glm::kernels::linearJoinsGroup(glm::compiler::IrOpStep(step, facts));
  }
  static glm::kernels::DenseEncoding encodingOf(planir::StepOp step,
                                                const glm::compiler::PlanFacts &facts) {
    return glm::compiler::IrOpStep(step, facts).weight(0).denseEncoding();
  }

  /// One linear_group step in place of `group`'s linears, at the first one's place; each result
  /// keeps its buffer, so the steps that read them are unchanged.
  static void replace(ArrayRef<planir::StepOp> group) {
    planir::StepOp first = group.front();
    OpBuilder b(first);
    SmallVector<Value> outputs;
    SmallVector<Attribute> weights;
    int64_t read = 0, written = 0, flops = 0;
    for (planir::StepOp s : group) {
      // A later part's result buffer may be allocated after the first part: its alloc moves up.
      Operation *alloc = s.getOutputs()[0].getDefiningOp();
      if (alloc != nullptr && alloc->getBlock() == first->getBlock() &&
          first->isBeforeInBlock(alloc)) {
        alloc->moveBefore(first);
      }
      outputs.push_back(s.getOutputs()[0]);
      weights.push_back(s.getWeights()[0]);
      // Their sums: each part reads the activations as its linear did (every block reads them).
      read += s.getBytesRead();
      written += s.getBytesWritten();
      flops += s.getFlops();
    }
    planir::StepOp::create(
        b, first.getLoc(), b.getStringAttr("linear_group"), b.getStringAttr(groupName(group)),
        ValueRange{first.getInputs()[0]}, outputs, b.getArrayAttr(weights), b.getArrayAttr({}),
        b.getDictionaryAttr({}), b.getI64IntegerAttr(read), b.getI64IntegerAttr(written),
        b.getI64IntegerAttr(flops), nullptr, nullptr, nullptr);
    for (planir::StepOp s : group) {
      s.erase();
    }
  }
};

} // namespace
