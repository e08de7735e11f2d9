//===- FormSegments.cpp - where each program's CUDA graphs break ----------===//
//
// Every step reads and writes planned slices and takes what changes per step from io slots the
// host writes before replay, so the host is needed inside a program only where a step runs on
// the host itself: a collective, which it runs through its communicator between graphs (NCCL
// collectives are not captured; a transport whose collectives can be captured would keep them
// inside a segment). So a segment ends after each collective and at the program's end, and says
// why; the CUDA engine captures each segment's kernels as one graph and replays exactly these.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"

#include <string>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANFORMSEGMENTSPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

struct FormSegmentsPass : glm::compiler::impl::PlanFormSegmentsPassBase<FormSegmentsPass> {
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    OpBuilder b(context);
    for (auto program : getOperation().getOps<planir::ProgramOp>()) {
      SmallVector<Attribute> segments;
      int64_t first = 0, index = 0;
      for (auto step : program.getBody().front().getOps<planir::StepOp>()) {
        if (step.isCollective()) {
          const std::string reason = (step.getOp() + " " + step.getName() +
                                      ": the host runs collectives through its communicator, "
                                      "between graphs")
                                         .str();
          segments.push_back(
              planir::SegmentAttr::get(context, first, index + 1 - first, "collective", reason));
          first = index + 1;
        }
        ++index;
      }
      if (first < index) {
        segments.push_back(planir::SegmentAttr::get(context, first, index - first, "program_end",
                                                    "the program's end"));
      }
      program.setSegmentsAttr(b.getArrayAttr(segments));
    }
  }
};

} // namespace
