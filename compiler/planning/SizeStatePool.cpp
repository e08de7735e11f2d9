//===- SizeStatePool.cpp - size the page pool apart from the window ------===//
//
// max_context is each request's window: a sequence's page-table row holds
// that many tokens. The pool every sequence draws its pages from is sized
// apart from it, once every other arena is known (after kernel selection
// adds the workspace):
//
//   pool-tokens given:   that many tokens' pages, plus a partly filled page
//                        per sequence; at least one window.
//   else, a target with memory (the GPUs): every page that fits in the
//                        target's memory less the host reserve and the other
//                        arenas, up to max_sequences full windows (no request
//                        could use more); a pool that cannot hold one window
//                        is refused, naming the largest window that fits (a
//                        plan too large for any pool is left to plan-verify,
//                        which names every arena's size).
//   else (the CPU):      unchanged: one window plus a page per sequence
//                        (plan-assign-arenas).
//
// The pool is the state arena's tail, so only the pool's page count, the
// paged states' sizes and the state arena's size change.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"

#include <algorithm>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANSIZESTATEPOOLPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

struct SizeStatePoolPass : glm::compiler::impl::PlanSizeStatePoolPassBase<SizeStatePoolPass> {
  using PlanSizeStatePoolPassBase::PlanSizeStatePoolPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto pools = llvm::to_vector(module.getOps<planir::StatePoolOp>());
    auto targets = llvm::to_vector(module.getOps<planir::TargetOp>());
    if (pools.size() != 1 || targets.size() != 1 || !pools.front().getPageCount()) {
      module.emitError() << "plan-size-state-pool: expected one plan.target and one sized "
                            "plan.state_pool (run plan-assign-arenas)";
      return signalPassFailure();
    }
    if (poolTokens < 0 || hostReserve < 0) {
      module.emitError() << "plan-size-state-pool: pool-tokens and host-reserve must be >= 0";
      return signalPassFailure();
    }
    planir::StatePoolOp pool = pools.front();
    const uint64_t pageBytes = static_cast<uint64_t>(pool.getPageBytes().value_or(0));
    const uint64_t memory = static_cast<uint64_t>(targets.front().getMemoryBytes());
    if (pageBytes == 0 || (poolTokens == 0 && memory == 0)) {
      return; // no paged state, or a target without a memory to fill
    }
    const uint64_t pageTokens = static_cast<uint64_t>(pool.getPageTokens());
    const uint64_t seqs = static_cast<uint64_t>(pool.getMaxSequences());
    const uint64_t window = static_cast<uint64_t>(pool.getMaxContext());
    const uint64_t windowPages = (window + pageTokens - 1) / pageTokens;
    // One window, and a partly filled page for each other sequence.
    const uint64_t fewest = windowPages + seqs;
    const uint64_t most = seqs * (windowPages + 1);

    planir::ArenaOp stateArena;
    uint64_t others = 0;
    for (auto arena : module.getOps<planir::ArenaOp>()) {
      if (arena.getKind() == "state") {
        stateArena = arena;
      } else {
        others += static_cast<uint64_t>(arena.getSize());
      }
    }
    const uint64_t poolOffset = static_cast<uint64_t>(pool.getPoolOffset().value_or(0));
    uint64_t pages = 0;
    if (poolTokens > 0) {
      pages = (static_cast<uint64_t>(poolTokens) + pageTokens - 1) / pageTokens + seqs;
      if (pages < fewest) {
        module.emitError() << "--pool-tokens " << static_cast<int64_t>(poolTokens)
                           << " holds less than one "
                           << "--max-context window of " << window << " tokens";
        return signalPassFailure();
      }
    } else {
      const uint64_t fixed = others + poolOffset + static_cast<uint64_t>(hostReserve);
      if (fixed >= memory) {
        return; // no pool could fit: plan-verify refuses the plan with every arena's size
      }
      const uint64_t room = memory - fixed;
      pages = std::min(most, room / pageBytes);
      if (pages < fewest) {
        const uint64_t fits = pages > seqs ? (pages - seqs) * pageTokens : 0;
        module.emitError() << targets.front().getName() << "'s " << gib(memory) << " less a host "
                           << "reserve of " << gib(static_cast<uint64_t>(hostReserve))
                           << " and the plan's other " << gib(others + poolOffset)
                           << " leaves a page pool of " << fits << " tokens, less than one "
                           << "--max-context window of " << window
                           << " tokens (the largest window that fits is " << fits
                           << "; or lower --max-seqs, use --kv fp8, or more ranks)";
        return signalPassFailure();
      }
    }
    OpBuilder b(module.getContext());
    pool.setPageCountAttr(b.getI64IntegerAttr(static_cast<int64_t>(pages)));
    for (auto s : module.getOps<planir::StateOp>()) {
      if (s.getPaged()) {
        s.setSizeAttr(b.getI64IntegerAttr(static_cast<int64_t>(pages * pageBytes)));
      }
    }
    const uint64_t align = static_cast<uint64_t>(stateArena.getAlignment());
    const uint64_t end = (poolOffset + pages * pageBytes + align - 1) / align * align;
    stateArena.setSizeAttr(b.getI64IntegerAttr(static_cast<int64_t>(end)));
  }
};

} // namespace
