//===- StepGroups.h - which later steps may join a step's launch ---------===//
//
// The grouping passes (plan-group-linears, plan-group-short-convs) put independent steps of one
// kind in one step at the first one's place, so that a decode step pays one launch for them. What
// may move up there is a question of the plan's buffers and states alone, answered here once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/plan/PlanOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace glm::compiler {

/// `steps[first]` and the later steps of `steps` that `joins` accepts and that can run at its
/// place, together, in program order, at most `maxParts`; steps in `taken` (an earlier group's)
/// are skipped. A step moves up only where that changes nothing it or any other step reads: none
/// of its inputs is written, none of its outputs read or written, and none of its states used by
/// a step it passes or by a step already in the group (the group's steps run at once, so none may
/// read what another writes).
llvm::SmallVector<planir::StepOp> gatherGroup(llvm::ArrayRef<planir::StepOp> steps, size_t first,
                                              const llvm::DenseSet<mlir::Operation *> &taken,
                                              size_t maxParts,
                                              llvm::function_ref<bool(planir::StepOp)> joins);

/// A group's step name: the first step's, then each other's after the first's prefix up to its
/// last dot ("blk.0.attn.q_proj", "blk.0.attn.k_proj" -> "blk.0.attn.q_proj+k_proj").
std::string groupName(llvm::ArrayRef<planir::StepOp> steps);

/// Moves the plan.alloc of each of `buffers` that is defined after `step` (in its block) to just
/// before it: a group's step writes its later parts' results earlier than they did.
void hoistAllocs(planir::StepOp step, mlir::ValueRange buffers);

} // namespace glm::compiler
