//===- StepGroups.cpp - which later steps may join a step's launch -------===//

#include "compiler/transforms/StepGroups.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace glm::compiler {
namespace {

/// The buffers and states a set of steps reads and writes.
struct Touched {
  llvm::DenseSet<Value> read, written;
  llvm::DenseSet<Attribute> states;

  void add(planir::StepOp s) {
    read.insert(s.getInputs().begin(), s.getInputs().end());
    written.insert(s.getOutputs().begin(), s.getOutputs().end());
    states.insert(s.getStates().begin(), s.getStates().end());
  }
  /// Whether `s` could run before these steps, or beside them, with the same results.
  bool independentOf(planir::StepOp s) const {
    return llvm::none_of(s.getInputs(), [&](Value v) { return written.contains(v); }) &&
           llvm::none_of(s.getOutputs(),
                         [&](Value v) { return read.contains(v) || written.contains(v); }) &&
           llvm::none_of(s.getStates(), [&](Attribute a) { return states.contains(a); });
  }
};

/// steps[first] and the later steps that may join it (groupSteps' rule).
SmallVector<planir::StepOp> gatherGroup(ArrayRef<planir::StepOp> steps, size_t first,
                                        const llvm::DenseSet<Operation *> &taken, size_t maxParts,
                                        llvm::function_ref<bool(planir::StepOp)> joins) {
  SmallVector<planir::StepOp> group = {steps[first]};
  Touched members, passed; // the group's steps; the steps between that stay where they are
  members.add(steps[first]);
  for (size_t j = first + 1; j < steps.size() && group.size() < maxParts; ++j) {
    planir::StepOp s = steps[j];
    if (taken.contains(s)) {
      continue; // an earlier group's part, gone from here
    }
    if (joins(s) && passed.independentOf(s) && members.independentOf(s)) {
      group.push_back(s);
      members.add(s);
      continue;
    }
    passed.add(s);
  }
  return group;
}

} // namespace

void groupSteps(ModuleOp module, size_t maxParts, llvm::function_ref<bool(planir::StepOp)> starts,
                llvm::function_ref<bool(planir::StepOp, planir::StepOp)> joins,
                llvm::function_ref<void(ArrayRef<planir::StepOp>)> replace) {
  for (auto program : module.getOps<planir::ProgramOp>()) {
    SmallVector<planir::StepOp> steps(program.getBody().front().getOps<planir::StepOp>());
    llvm::DenseSet<Operation *> taken;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (taken.contains(steps[i]) || !starts(steps[i])) {
        continue;
      }
      const planir::StepOp head = steps[i];
      SmallVector<planir::StepOp> group =
          gatherGroup(steps, i, taken, maxParts, [&](planir::StepOp s) { return joins(head, s); });
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

std::string groupName(ArrayRef<planir::StepOp> steps) {
  const std::string first = planir::StepOp(steps.front()).getName().str();
  const size_t dot = first.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : first.substr(0, dot + 1);
  std::string name = first;
  for (planir::StepOp s : steps.drop_front()) {
    const std::string other = s.getName().str();
    name += "+" + (other.rfind(prefix, 0) == 0 ? other.substr(prefix.size()) : other);
  }
  return name;
}

void foldAdjacentSteps(ModuleOp module,
                       llvm::function_ref<bool(planir::StepOp, planir::StepOp)> fold) {
  for (auto program : module.getOps<planir::ProgramOp>()) {
    SmallVector<planir::StepOp> steps(program.getBody().front().getOps<planir::StepOp>());
    for (size_t i = 0; i + 1 < steps.size(); ++i) {
      if (fold(steps[i], steps[i + 1])) {
        ++i;
      }
    }
  }
}

std::string foldedName(planir::StepOp first, planir::StepOp second) {
  const StringRef name = second.getName();
  return (first.getName() + "+" + name.substr(name.rfind('.') + 1)).str();
}

void hoistAllocs(planir::StepOp step, ValueRange buffers) {
  for (Value v : buffers) {
    Operation *alloc = v.getDefiningOp();
    if (alloc != nullptr && alloc->getBlock() == step->getBlock() && step->isBeforeInBlock(alloc)) {
      alloc->moveBefore(step);
    }
  }
}

void replaceWithWiderStep(planir::StepOp first, planir::StepOp second, ValueRange inputs,
                          ValueRange outputs, ArrayRef<Attribute> weights, DictionaryAttr params) {
  hoistAllocs(first, second.getOutputs());
  OpBuilder b(first);
  planir::StepOp::create(
      b, first.getLoc(), first.getOpAttr(), b.getStringAttr(foldedName(first, second)), inputs,
      outputs, b.getArrayAttr(weights), first.getStates(), params,
      b.getI64IntegerAttr(first.getBytesRead() + second.getBytesRead()),
      b.getI64IntegerAttr(first.getBytesWritten() + second.getBytesWritten()),
      b.getI64IntegerAttr(first.getFlops() + second.getFlops()), nullptr, nullptr, nullptr);
  first.erase();
  second.erase();
}

} // namespace glm::compiler
