// The argument structs of a step's kernel launches, built once per program at load: every address
// a step touches is fixed (arenas, io slots, the state pool), so the structs are what the CUDA
// graph captures and replays.
#pragma once

#include "base/Status.h"
#include "kernels/common/StepContext.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "runtime/plan/StepView.h"
#include "runtime/schema/plan_generated.h"
#include "runtime/weights/Exl3Tensors.h"

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

/// How a MoE step with EXL3 experts runs: a bf16 step with all three projections in EXL3 takes the
/// fused kernels of kernels/exl3_moe (decoding in registers, no staging), those for decode when
/// few tokens fit the target's shared memory, else those for prefill; anything else stages.
enum class Exl3MoePath { Staged, FusedDecode, FusedPrefill };

/// The same for a MoE experts step: this rank's experts, their sizes and the kernel path. The
/// fused kernels' fast path is compiled for `exl3Bits` and `exl3Codebook`; matrices of another K or
/// codebook take their generic decoder.
struct MoeShape {
  int64_t experts = 0, inter = 0, hidden = 0, topK = 0;
  kernels::MoeExpertsPath path = kernels::MoeExpertsPath::Decode;
  Exl3MoePath exl3 = Exl3MoePath::Staged;
  int exl3Bits = 0;     // the plan's K (the checkpoint's largest)
  int exl3Codebook = 0; // MCG, the deployed checkpoints': the plan does not know the codebook
};
MoeShape moeShapeOf(const runtime::StepView &moeStep);

/// The element type an op's dense kernels read a weight as: bf16 for an EXL3 binding (its
/// reconstruction, Exl3Staging), the stored type otherwise.
plan::ElementType denseElement(const plan::WeightBinding &weight);

/// A step that reads EXL3 weights runs its dense kernels on bf16 copies of them, reconstructed
/// into the workspace first (kernels/exl3/exl3_gpu.h) bit for bit as the CPU engine multiplies
/// by them, so an EXL3 plan gives its dequantized checkpoint's logits; for a MoE step only the
/// experts the routing selects are reconstructed. The copies follow the op's own scratch.
struct Exl3Staging {
  struct Weight {
    size_t index = 0; // the step's weight
    Exl3ArenaLayout layout;
    uint64_t offset = 0; // workspace offset of its bf16 copy [matrices][out][in]
  };
  std::vector<Weight> weights; // empty: the step reads no EXL3 weight
  bool routed = false;         // a MoE step: the selected experts only, marked in a mask
  uint64_t maskOffset = 0;     // workspace offset of the mask, i32 [experts]
  uint64_t end = 0;            // workspace bytes the op's scratch and the staging need together

  const Weight *find(size_t index) const;
};
Expected<Exl3Staging> exl3StagingOf(const runtime::StepView &step);

/// Scratch the step's kernels need beyond the plan's buffers (router scores, the MoE's per-slot
/// intermediates and expert lists, reconstructed EXL3 weights).
Expected<uint64_t> stepWorkspaceBytes(const runtime::StepView &step);

/// One argument struct's bytes per launch of the step, in the plan's launch order.
Expected<std::vector<std::vector<uint8_t>>> buildStepArgs(const runtime::StepView &step,
                                                          const DeviceLayout &device);

} // namespace glm::cuda
