//===- AssignArenas.cpp - give every buffer, weight and state a slice -----===//
//
// 1. Weights: one after another in the weights arena.
// 2. State: per-sequence slots (max_seqs each), then the page pool. A page
//    holds page_tokens tokens of every paged state: each MLA latent layer's
//    rows and each indexer's pooled keys (page_tokens / kpool of them). The
//    pool holds ceil(max_context / page_tokens) pages plus one partly filled
//    page per sequence: one window (plan-size-state-pool sizes it for the
//    target once every other arena is known).
// 3. Activations: per program, first fit by liveness; the arena is sized for
//    the largest program, since programs never run at once. Io buffers are
//    laid out one after another per program, sharing the io arena the same way.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/planning/Liveness.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

#include <map>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANASSIGNARENASPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

uint64_t unitBytes(planir::StateOp s) {
  uint64_t n = 1;
  for (int64_t d : s.getUnitShape()) {
    n *= static_cast<uint64_t>(d);
  }
  return n * ((s.getElement().getIntOrFloatBitWidth() + 7) / 8);
}

struct AssignArenasPass : glm::compiler::impl::PlanAssignArenasPassBase<AssignArenasPass> {
  using PlanAssignArenasPassBase::PlanAssignArenasPassBase;

  uint64_t align(uint64_t x) const {
    const uint64_t a = static_cast<uint64_t>(alignment);
    return (x + a - 1) / a * a;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (alignment < 1 || (alignment & (alignment - 1)) != 0) {
      module.emitError() << "plan-assign-arenas: alignment must be a power of two";
      return signalPassFailure();
    }
    auto pools = llvm::to_vector(module.getOps<planir::StatePoolOp>());
    if (pools.size() != 1) {
      module.emitError() << "plan-assign-arenas: expected one plan.state_pool (run glm-to-plan)";
      return signalPassFailure();
    }
    planir::StatePoolOp pool = pools.front();
    OpBuilder b(module.getContext());

    // 1. Weights.
    uint64_t weightsEnd = 0;
    for (auto w : module.getOps<planir::WeightOp>()) {
      w.setOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(weightsEnd)));
      weightsEnd = align(weightsEnd + static_cast<uint64_t>(w.getSize()));
    }

    // 2. State: slots, then the page pool.
    llvm::StringMap<int64_t> kpoolOf; // indexer state -> tokens per pooled key
    module.walk([&](planir::StepOp step) {
      if (step.getOp() == "dsa_indexer" && !step.getStates().empty()) {
        if (auto kpool = step.getParams().getAs<IntegerAttr>("kpool")) {
          kpoolOf[cast<FlatSymbolRefAttr>(step.getStates()[0]).getValue()] = kpool.getInt();
        }
      }
    });
    const uint64_t maxSeqs = static_cast<uint64_t>(pool.getMaxSequences());
    const uint64_t pageTokens = static_cast<uint64_t>(pool.getPageTokens());
    uint64_t stateEnd = 0;
    uint64_t pageBytes = 0;
    SmallVector<planir::StateOp> paged;
    for (auto s : module.getOps<planir::StateOp>()) {
      if (s.getPaged()) {
        const int64_t kpool = kpoolOf.lookup(s.getSymName());
        const uint64_t rows = kpool > 0 ? pageTokens / static_cast<uint64_t>(kpool) : pageTokens;
        s.setOffsetInPageAttr(b.getI64IntegerAttr(static_cast<int64_t>(pageBytes)));
        pageBytes = align(pageBytes + rows * unitBytes(s));
        paged.push_back(s);
        continue;
      }
      const uint64_t size = maxSeqs * unitBytes(s);
      s.setOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(stateEnd)));
      s.setSizeAttr(b.getI64IntegerAttr(static_cast<int64_t>(size)));
      stateEnd = align(stateEnd + size);
    }
    const uint64_t pageCount =
        paged.empty()
            ? 0
            : (static_cast<uint64_t>(pool.getMaxContext()) + pageTokens - 1) / pageTokens + maxSeqs;
    pool.setPageBytesAttr(b.getI64IntegerAttr(static_cast<int64_t>(pageBytes)));
    pool.setPageCountAttr(b.getI64IntegerAttr(static_cast<int64_t>(pageCount)));
    pool.setPoolOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(stateEnd)));
    for (planir::StateOp s : paged) {
      s.setOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(stateEnd)));
      s.setSizeAttr(b.getI64IntegerAttr(static_cast<int64_t>(pageCount * pageBytes)));
    }
    stateEnd = align(stateEnd + pageCount * pageBytes);

    // 3. Activations by liveness, io one after another; both shared across programs.
    uint64_t activationsEnd = 0, ioEnd = 0;
    for (auto program : module.getOps<planir::ProgramOp>()) {
      activationsEnd = std::max(activationsEnd, packActivations(program, b));
      uint64_t io = 0;
      for (auto alloc : program.getBody().front().getOps<planir::AllocOp>()) {
        if (alloc.getIo()) {
          alloc.setOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(io)));
          io = align(io + alloc.getBuffer().getType().getByteSize());
        }
      }
      ioEnd = std::max(ioEnd, io);
    }

    b.setInsertionPointToStart(module.getBody());
    auto arena = [&](StringRef name, StringRef kind, uint64_t size) {
      planir::ArenaOp::create(b, module.getLoc(), b.getStringAttr(name), b.getStringAttr(kind),
                              b.getI64IntegerAttr(static_cast<int64_t>(size)),
                              b.getI64IntegerAttr(alignment));
    };
    // The emitter numbers arenas in this order.
    arena("weights", "weights", weightsEnd);
    arena("activations", "activations", activationsEnd);
    arena("state", "state", stateEnd);
    arena("io", "io", ioEnd);
  }

  /// First fit: each buffer, in order of first write, takes the lowest offset that no buffer
  /// still live at that step occupies. Returns the program's peak.
  uint64_t packActivations(planir::ProgramOp program, OpBuilder &b) {
    struct Placed {
      uint64_t offset, end;
      int64_t last;
    };
    std::vector<Placed> live;
    uint64_t peak = 0;
    for (glm::compiler::LiveRange &r : glm::compiler::activationRanges(program)) {
      // Free what died before this buffer is first written.
      std::erase_if(live, [&](const Placed &p) { return p.last < r.first; });
      std::sort(live.begin(), live.end(),
                [](const Placed &a, const Placed &c) { return a.offset < c.offset; });
      const uint64_t size = align(r.alloc.getBuffer().getType().getByteSize());
      uint64_t offset = 0;
      for (const Placed &p : live) {
        if (offset + size <= p.offset) {
          break;
        }
        offset = std::max(offset, p.end);
      }
      r.alloc.setOffsetAttr(b.getI64IntegerAttr(static_cast<int64_t>(offset)));
      live.push_back({offset, offset + size, r.last});
      peak = std::max(peak, offset + size);
    }
    return peak;
  }
};

} // namespace
