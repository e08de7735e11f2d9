// The argument structs of a step's kernel launches, built once per program at load: every address
// a step touches is fixed (arenas, io slots, the state pool), so the structs are what the CUDA
// graph captures and replays.
#pragma once

#include "kernels/common/StepContext.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "runtime/common/Status.h"
#include "runtime/plan/StepView.h"
#include "runtime/schema/plan_generated.h"

#include <cstdint>
#include <vector>

namespace glm::cuda {

/// Where things are on the device for one program.
struct DeviceLayout {
  std::vector<uint64_t> arenas; // base address per arena
  kernels::StepContext context; // the program's io slots (null where the program has none)
  /// Scratch shared by all steps (they run one after another on one stream), at least
  /// stepWorkspaceBytes of every step.
  void *workspace = nullptr;
  int rank = 0; // this tensor-parallel rank
  uint64_t address(const plan::Slice &slice) const {
    return arenas[slice.arena()] + slice.offset();
  }
  const void *ptr(const plan::TensorRef &t) const {
    return reinterpret_cast<const void *>(address(*t.slice()));
  }
  void *mutablePtr(const plan::TensorRef &t) const {
    return reinterpret_cast<void *>(address(*t.slice()));
  }
};

/// Pooled keys a sequence can hold: the program's page-table width times the pools per page.
int64_t maxPoolsOf(const runtime::StepView &indexerStep);

/// The decode/prefill shape decisions of a sparse-MLA step, shared by kernel selection, workspace
/// sizing and argument building so that the three agree.
struct MlaShape {
  int64_t heads = 0, rank = 0, width = 0;
  int32_t chunks = 1;
  bool mma = false;
};
MlaShape mlaShapeOf(const runtime::StepView &mlaStep);

/// The same for a MoE experts step: this rank's experts, their sizes and the kernel path.
struct MoeShape {
  int64_t experts = 0, inter = 0, hidden = 0, topK = 0;
  kernels::MoeExpertsPath path = kernels::MoeExpertsPath::Decode;
};
MoeShape moeShapeOf(const runtime::StepView &moeStep);

/// Scratch the step's kernels need beyond the plan's buffers (router scores, the MoE's per-slot
/// intermediates and expert lists).
uint64_t stepWorkspaceBytes(const runtime::StepView &step);

/// One argument struct's bytes per launch of the step, in the plan's launch order.
Expected<std::vector<std::vector<uint8_t>>> buildStepArgs(const runtime::StepView &step,
                                                          const DeviceLayout &device);

} // namespace glm::cuda
