//===- FuseSparseMla.cpp - group each indexer with its sparse MLA ---------===//
//
// A DSA indexer's selection feeds its layer's sparse MLA and nothing else; the
// pass gives the two ops one `fuse_group` number so that a fused kernel can
// score, select and attend without writing the selection out.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "ir/glm/GlmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace glm::compiler {
#define GEN_PASS_DEF_GLMFUSESPARSEMLAPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
using namespace glm::ir;

namespace {

struct FuseSparseMla : glm::compiler::impl::GlmFuseSparseMlaPassBase<FuseSparseMla> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      int64_t group = 0;
      fn.walk([&](DsaIndexerOp indexer) {
        Value selection = indexer.getResult();
        if (selection.use_empty() || !llvm::all_of(selection.getUsers(), [](Operation *user) {
              return isa<MlaSparseAttentionOp>(user);
            })) {
          return;
        }
        auto id = IntegerAttr::get(IntegerType::get(indexer.getContext(), 64), group++);
        indexer->setAttr("fuse_group", id);
        for (Operation *user : selection.getUsers()) {
          user->setAttr("fuse_group", id);
        }
      });
    }
  }
};

} // namespace
