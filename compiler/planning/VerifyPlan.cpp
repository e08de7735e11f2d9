//===- VerifyPlan.cpp - check a planned module before it is written -------===//
//
// 1. Every weight, state and buffer has a slice, inside its arena.
// 2. No two activation buffers that are live at once share a byte.
// 3. Segments cover each program's steps in order.
// 4. The arenas fit the target's memory per rank; otherwise the error gives
//    each arena's size so the user can see what to shrink (--max-context,
//    --max-seqs, --kv fp8, more ranks).
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/planning/Liveness.h"

#include "llvm/ADT/StringMap.h"

#include <cstdio>

namespace glm::compiler {
#define GEN_PASS_DEF_PLANVERIFYPASS
#include "compiler/Passes.h.inc"
} // namespace glm::compiler

using namespace mlir;
namespace planir = glm::planir;

namespace {

std::string gigabytes(uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buffer;
}

struct VerifyPlanPass : glm::compiler::impl::PlanVerifyPassBase<VerifyPlanPass> {
  void runOnOperation() override {
    if (failed(verify(getOperation()))) {
      signalPassFailure();
    }
  }

  LogicalResult verify(ModuleOp module) {
    llvm::StringMap<uint64_t> arenas;
    uint64_t total = 0;
    for (auto arena : module.getOps<planir::ArenaOp>()) {
      arenas[arena.getKind()] = static_cast<uint64_t>(arena.getSize());
      total += static_cast<uint64_t>(arena.getSize());
    }
    for (const char *kind : {"weights", "activations", "state", "io"}) {
      if (!arenas.count(kind)) {
        return module.emitError() << "plan-verify: no " << kind
                                  << " arena (run plan-assign-arenas)";
      }
    }
    auto inside = [](Operation *op, std::optional<uint64_t> offset, uint64_t size,
                     uint64_t arenaSize, StringRef arena) -> LogicalResult {
      if (!offset) {
        return op->emitOpError() << "has no slice of the " << arena << " arena";
      }
      if (*offset > arenaSize || size > arenaSize - *offset) {
        return op->emitOpError() << "slice [" << *offset << ", +" << size << ") overruns the "
                                 << arena << " arena of " << arenaSize << " bytes";
      }
      return success();
    };
    for (auto w : module.getOps<planir::WeightOp>()) {
      if (failed(inside(w, w.getOffset(), static_cast<uint64_t>(w.getSize()), arenas["weights"],
                        "weights"))) {
        return failure();
      }
    }
    for (auto s : module.getOps<planir::StateOp>()) {
      if (failed(inside(s, s.getOffset(), static_cast<uint64_t>(s.getSize().value_or(0)),
                        arenas["state"], "state"))) {
        return failure();
      }
    }
    for (auto program : module.getOps<planir::ProgramOp>()) {
      int64_t steps = 0;
      for (Operation &op : program.getBody().front()) {
        if (auto alloc = dyn_cast<planir::AllocOp>(op)) {
          const char *arena = alloc.getIo() ? "io" : "activations";
          if (failed(inside(alloc, alloc.getOffset(), alloc.getBuffer().getType().getByteSize(),
                            arenas[arena], arena))) {
            return failure();
          }
        } else {
          ++steps;
        }
      }
      if (failed(checkOverlaps(program)) || failed(checkSegments(program, steps))) {
        return failure();
      }
    }
    auto targets = llvm::to_vector(module.getOps<planir::TargetOp>());
    if (targets.size() != 1) {
      return module.emitError() << "plan-verify: expected one plan.target";
    }
    const uint64_t memory = static_cast<uint64_t>(targets.front().getMemoryBytes());
    if (memory != 0 && total > memory) {
      return module.emitError()
             << "the plan needs " << gigabytes(total) << " per rank but "
             << targets.front().getName() << " has " << gigabytes(memory) << ": weights "
             << gigabytes(arenas["weights"]) << ", state " << gigabytes(arenas["state"])
             << ", activations " << gigabytes(arenas["activations"]) << ", io "
             << gigabytes(arenas["io"])
             << " (lower --max-context or --max-seqs, use --kv fp8, or more ranks)";
    }
    return success();
  }

  LogicalResult checkOverlaps(planir::ProgramOp program) {
    std::vector<glm::compiler::LiveRange> ranges = glm::compiler::activationRanges(program);
    for (size_t i = 0; i < ranges.size(); ++i) {
      const uint64_t ai = static_cast<uint64_t>(*ranges[i].alloc.getOffset());
      const uint64_t ae = ai + ranges[i].alloc.getBuffer().getType().getByteSize();
      for (size_t j = i + 1; j < ranges.size() && ranges[j].first <= ranges[i].last; ++j) {
        const uint64_t bi = static_cast<uint64_t>(*ranges[j].alloc.getOffset());
        const uint64_t be = bi + ranges[j].alloc.getBuffer().getType().getByteSize();
        if (ai < be && bi < ae) {
          return ranges[j].alloc.emitOpError()
                 << "shares bytes with " << ranges[i].alloc.getName() << " while both are live";
        }
      }
    }
    return success();
  }

  LogicalResult checkSegments(planir::ProgramOp program, int64_t steps) {
    auto segments = program.getSegments();
    if (!segments || segments->size() % 2 != 0) {
      return program.emitOpError() << "has no segments (run plan-form-segments)";
    }
    int64_t next = 0;
    for (size_t i = 0; i < segments->size(); i += 2) {
      if ((*segments)[i] != next || (*segments)[i + 1] <= 0) {
        return program.emitOpError() << "segments do not cover the steps in order";
      }
      next += (*segments)[i + 1];
    }
    if (next != steps) {
      return program.emitOpError() << "segments cover " << next << " of " << steps << " steps";
    }
    return success();
  }
};

} // namespace
