//===- FuseAllGather.cpp - fold all-gathers into their producing linears ---===//
//
// With the head's vocabulary split over ranks, each rank's lm_head writes a
// column slice that an all-gather then concatenates. When the linear's result
// has no other user, the two can be one step: each rank writes its columns into
// its slice of the gathered buffer, and the collective moves only the others'.
// The pass gives the pair one `fuse_group` number.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "ir/glm/GlmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace glm::compiler {
#define GEN_PASS_DEF_GLMFUSEALLGATHERPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;

namespace {

struct FuseAllGather : glm::compiler::impl::GlmFuseAllGatherPassBase<FuseAllGather> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      int64_t group = 0;
      fn.walk([&](AllGatherOp gather) {
        auto producer = gather.getInput().getDefiningOp<LinearOp>();
        if (!producer || !producer.getResult().hasOneUse()) {
          return;
        }
        auto id = IntegerAttr::get(IntegerType::get(gather.getContext(), 64), group++);
        gather->setAttr("fuse_group", id);
        producer->setAttr("fuse_group", id);
      });
    }
  }
};

} // namespace
