//===- Liveness.h - live ranges of plan buffers -----------------*- C++ -*-===//
//
// Shared by plan-assign-arenas (which packs buffers by it) and plan-verify
// (which checks that no two live buffers overlap).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ir/plan/PlanOps.h"

#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace glm::compiler {

/// A buffer is live from the step that first writes it to the last step that touches it. A step
/// reads its inputs while it writes its outputs, so buffers of one step never share bytes.
struct LiveRange {
  planir::AllocOp alloc;
  int64_t first = 0;
  int64_t last = 0;
};

/// The live ranges of a program's activation buffers (io buffers excluded), in order of first
/// write. Buffers no step touches are live at step 0.
inline std::vector<LiveRange> activationRanges(planir::ProgramOp program) {
  llvm::DenseMap<mlir::Value, size_t> index;
  std::vector<LiveRange> ranges;
  int64_t step = 0;
  for (mlir::Operation &op : program.getBody().front()) {
    if (auto alloc = llvm::dyn_cast<planir::AllocOp>(op)) {
      if (!alloc.getIo()) {
        index[alloc.getBuffer()] = ranges.size();
        ranges.push_back({alloc, -1, -1});
      }
      continue;
    }
    for (mlir::Value v : op.getOperands()) {
      auto it = index.find(v);
      if (it == index.end()) {
        continue;
      }
      LiveRange &r = ranges[it->second];
      if (r.first < 0) {
        r.first = step;
      }
      r.last = step;
    }
    ++step;
  }
  for (LiveRange &r : ranges) {
    if (r.first < 0) {
      r.first = r.last = 0;
    }
  }
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const LiveRange &a, const LiveRange &b) { return a.first < b.first; });
  return ranges;
}

} // namespace glm::compiler
