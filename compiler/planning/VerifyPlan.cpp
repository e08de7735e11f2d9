//===- VerifyPlan.cpp - check a planned module before it is written -------===//
//
// 1. Every weight, state and buffer has a slice, inside its arena.
// 2. No two activation buffers that are live at once share a byte.
// 3. Segments cover each program's steps in order, and a collective (which
//    the host runs between graphs) only ever ends a segment.
// 4. GPU targets: each launch names a kernel of the module's table; its grid,
//    block and shared memory are within the target's limits; its argument
//    fields lie inside its struct, and its addresses name an operand, result,
//    weight or state the step has, or the workspace. Errors name the step.
// 5. The arenas fit the target's memory per rank; otherwise the error gives
//    each arena's size so the user can see what to shrink (--max-context,
//    --max-seqs, --kv fp8, more ranks).
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "compiler/planning/Liveness.h"
#include "runtime/schema/PlanVersion.h"

#include "mlir/IR/SymbolTable.h"
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
    if (targets.front().getName() != "cpu") {
      SymbolTable symbols(module);
      const bool hasWorkspace = arenas.count("workspace") != 0;
      WalkResult walked = module.walk([&](planir::StepOp step) {
        return failed(checkLaunches(step, symbols, targets.front(), hasWorkspace))
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      });
      if (walked.wasInterrupted()) {
        return failure();
      }
    }
    const uint64_t memory = static_cast<uint64_t>(targets.front().getMemoryBytes());
    if (memory != 0 && total > memory) {
      auto diag = module.emitError()
                  << "the plan needs " << gigabytes(total) << " per rank but "
                  << targets.front().getName() << " has " << gigabytes(memory) << ": weights "
                  << gigabytes(arenas["weights"]) << ", state " << gigabytes(arenas["state"])
                  << ", activations " << gigabytes(arenas["activations"]) << ", io "
                  << gigabytes(arenas["io"]);
      if (arenas.count("workspace")) {
        diag << ", kernel workspace " << gigabytes(arenas["workspace"]);
      }
      diag << " (lower --max-context or --max-seqs, use --kv fp8, or more ranks)";
      return diag;
    }
    return success();
  }

  /// CUDA's limits on a launch (the same on sm_90 and sm_121); the argument struct's is the plan
  /// format's (plan::kMaxLaunchArgsBytes).
  static constexpr int64_t kMaxBlock[3] = {1024, 1024, 64};
  static constexpr int64_t kMaxGrid[3] = {2147483647, 65535, 65535};
  static constexpr int64_t kMaxThreads = 1024;

  LogicalResult checkLaunches(planir::StepOp step, SymbolTable &symbols, planir::TargetOp target,
                              bool hasWorkspace) {
    auto fail = [&]() { return step.emitOpError() << "(" << step.getName() << "): "; };
    auto launches = step.getLaunches();
    if (!launches) {
      return success();
    }
    const int64_t sharedMemory = target.getSharedMemoryPerBlock();
    for (auto launch : launches->getAsRange<planir::LaunchAttr>()) {
      const StringRef kernel = launch.getKernel().getValue();
      if (!symbols.lookup<planir::KernelOp>(kernel)) {
        return fail() << "launches kernel @" << kernel << ", which is not in the kernel table";
      }
      if (launch.getGrid().size() != 3 || launch.getBlock().size() != 3) {
        return fail() << "launch of @" << kernel << " needs 3 grid and 3 block dimensions";
      }
      int64_t threads = 1;
      for (int d = 0; d < 3; ++d) {
        const int64_t g = launch.getGrid()[d], bl = launch.getBlock()[d];
        if (g < 1 || g > kMaxGrid[d] || bl < 1 || bl > kMaxBlock[d]) {
          return fail() << "launch of @" << kernel << " has grid [" << launch.getGrid()
                        << "] and block [" << launch.getBlock()
                        << "], outside CUDA's limits (grid up to [2147483647, 65535, 65535], "
                           "block up to [1024, 1024, 64])";
        }
        threads *= bl;
      }
      if (threads > kMaxThreads) {
        return fail() << "launch of @" << kernel << " has " << threads
                      << " threads a block (at most 1024)";
      }
      if (launch.getSmem() < 0 || launch.getSmem() > sharedMemory) {
        return fail() << "launch of @" << kernel << " needs " << launch.getSmem()
                      << " bytes of shared memory a block; " << target.getName() << " has "
                      << sharedMemory;
      }
      const int64_t size = launch.getArgsSize();
      if (size <= 0 || size > glm::plan::kMaxLaunchArgsBytes) {
        return fail() << "launch of @" << kernel << " has a " << size
                      << "-byte argument struct (1 to " << glm::plan::kMaxLaunchArgsBytes << ")";
      }
      for (Attribute field : launch.getFields()) {
        if (auto c = dyn_cast<planir::ArgFieldAttr>(field)) {
          const int64_t width =
              (cast<TypedAttr>(c.getValue()).getType().getIntOrFloatBitWidth() + 7) / 8;
          if (c.getOffset() < 0 || c.getOffset() + width > size) {
            return fail() << "argument " << c.getName() << " of @" << kernel << " lies outside its "
                          << size << "-byte struct";
          }
        } else if (auto a = dyn_cast<planir::ArgBindAttr>(field)) {
          const int64_t width = a.getSource() == "rank_times" ? 4 : 8;
          if (a.getOffset() < 0 || a.getOffset() + width > size) {
            return fail() << "argument " << a.getName() << " of @" << kernel << " lies outside its "
                          << size << "-byte struct";
          }
          const StringRef source = a.getSource();
          const int64_t count = source == "operand"  ? step.getInputs().size()
                                : source == "result" ? step.getOutputs().size()
                                : source == "weight" ? step.getWeights().size()
                                : source == "state"  ? step.getStates().size()
                                                     : -1;
          if (source == "workspace" ? !hasWorkspace
                                    : source != "rank_times" && (count < 0 || a.getIndex() < 0 ||
                                                                 a.getIndex() >= count)) {
            return fail() << "argument " << a.getName() << " of @" << kernel << " points at "
                          << source << " " << a.getIndex() << ", which the step does not have";
          }
        } else {
          return fail() << "launch of @" << kernel << " has an argument that is neither "
                        << "#plan.field nor #plan.bind";
        }
      }
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
    if (!segments) {
      return program.emitOpError() << "has no segments (run plan-form-segments)";
    }
    SmallVector<planir::StepOp> ordered(program.getBody().front().getOps<planir::StepOp>());
    int64_t next = 0;
    for (auto segment : segments->getAsRange<planir::SegmentAttr>()) {
      if (segment.getFirst() != next || segment.getCount() <= 0 ||
          segment.getFirst() + segment.getCount() > steps) {
        return program.emitOpError() << "segments do not cover the steps in order";
      }
      const int64_t last = segment.getFirst() + segment.getCount() - 1;
      const bool endsInCollective = segment.getEnd() == "collective";
      if (!endsInCollective && segment.getEnd() != "program_end") {
        return program.emitOpError()
               << "segment ends at '" << segment.getEnd() << "' (collective or program_end)";
      }
      if (endsInCollective != ordered[last].isCollective()) {
        return program.emitOpError()
               << "segment [" << segment.getFirst() << ", +" << segment.getCount()
               << ") ends at step " << ordered[last].getName() << " but says it ends "
               << (endsInCollective ? "at a collective" : "without one");
      }
      for (int64_t i = segment.getFirst(); i < last; ++i) {
        if (ordered[i].isCollective()) {
          return program.emitOpError()
                 << "collective " << ordered[i].getName()
                 << " is inside a segment: the host runs collectives between graphs";
        }
      }
      next += segment.getCount();
    }
    if (next != steps) {
      return program.emitOpError() << "segments cover " << next << " of " << steps << " steps";
    }
    return success();
  }
};

} // namespace
