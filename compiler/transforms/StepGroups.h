//===- StepGroups.h - which later steps may join a step's launch ---------===//
//
// The grouping passes (plan-group-linears, plan-group-short-convs) put independent steps of one
// kind in one step at the first one's place, so that a decode step pays one launch for them. What
// may move up there is a question of the plan's buffers and states alone, answered here once.
// The folding passes fold a step into the one right before it; their walk and naming are here
// too.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/plan/PlanOps.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace glm::compiler {

/// Groups the steps of each program of `module`, in program order: each step that `starts`
/// accepts and no earlier group took heads a group of the later steps that `joins(head, step)`
/// accepts and that can run at its place, together, at most `maxParts`; `replace` gets each group
/// of two or more. A step moves up only where that changes nothing it or any other step reads:
/// none of its inputs is written, none of its outputs read or written, and none of its states
/// used by a step it passes or by a step already in the group (the group's steps run at once, so
/// none may read what another writes).
void groupSteps(mlir::ModuleOp module, size_t maxParts,
                llvm::function_ref<bool(planir::StepOp)> starts,
                llvm::function_ref<bool(planir::StepOp head, planir::StepOp step)> joins,
                llvm::function_ref<void(llvm::ArrayRef<planir::StepOp>)> replace);

/// A group's step name: the first step's, then each other's after the first's prefix up to its
/// last dot ("blk.0.attn.q_proj", "blk.0.attn.k_proj" -> "blk.0.attn.q_proj+k_proj").
std::string groupName(llvm::ArrayRef<planir::StepOp> steps);

/// Offers each pair of adjacent steps of each program of `module`, in program order, to `fold`,
/// which returns whether it replaced them (the folding passes: plan-fuse-mhc, plan-fuse-mhc-norm,
/// plan-fuse-linear-add); the step after a folded pair is offered with its own next one, so a step
/// folds at most once a call. Only adjacent steps fold, so no step between can see a buffer written
/// early or missing.
void foldAdjacentSteps(mlir::ModuleOp module,
                       llvm::function_ref<bool(planir::StepOp first, planir::StepOp second)> fold);

/// A folded step's name: the first step's, then the second's last dotted part
/// ("blk.0.attn_hc", "blk.0.attn_norm" -> "blk.0.attn_hc+attn_norm").
std::string foldedName(planir::StepOp first, planir::StepOp second);

/// Replaces `first` and the step after it, `second`, by one step of first's op at first's place
/// with `inputs`, `outputs`, `weights` and `params`, first's states, foldedName's name and the two
/// steps' bytes and FLOPs summed; second's results' allocs move up before it (hoistAllocs). For a
/// fold that widens the first step by the second's operands and results (plan-fuse-mhc-norm,
/// plan-fuse-kda-norm); folds that also drop traffic between the two count their own bytes.
void replaceWithWiderStep(planir::StepOp first, planir::StepOp second, mlir::ValueRange inputs,
                          mlir::ValueRange outputs, llvm::ArrayRef<mlir::Attribute> weights,
                          mlir::DictionaryAttr params);

/// Moves the plan.alloc of each of `buffers` that is defined after `step` (in its block) to just
/// before it: a group's step, or a step another folds into (plan-fuse-mhc-norm), writes the later
/// steps' results earlier than they did.
void hoistAllocs(planir::StepOp step, mlir::ValueRange buffers);

} // namespace glm::compiler
