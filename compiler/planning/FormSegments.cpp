//===- FormSegments.cpp - one CUDA graph per program ----------------------===//
//
// Every step reads and writes planned slices and takes what changes per step
// from io slots the host writes before replay, so no step needs the host in
// the middle of a program: each program is a single segment, captured once.
// A future step that must return to the host (a data-dependent shape, say)
// would end a segment here.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFORMSEGMENTSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

struct FormSegmentsPass : glm::compiler::impl::PlanFormSegmentsPassBase<FormSegmentsPass> {
  void runOnOperation() override {
    OpBuilder b(&getContext());
    for (auto program : getOperation().getOps<planir::ProgramOp>()) {
      const auto steps = std::distance(program.getBody().front().getOps<planir::StepOp>().begin(),
                                       program.getBody().front().getOps<planir::StepOp>().end());
      // Segments as flattened (first step, step count) pairs; an empty program has none.
      SmallVector<int64_t> segments;
      if (steps > 0) {
        segments = {0, static_cast<int64_t>(steps)};
      }
      program.setSegmentsAttr(b.getDenseI64ArrayAttr(segments));
    }
  }
};

} // namespace
