// EXL3 staging: how a step that reads EXL3 weights with dense kernels gets them. Its EXL3 weights
// are reconstructed into bf16 copies in the workspace first (kernels/exl3/exl3_gpu.h), bit for
// bit what the CPU engine multiplies by, so an EXL3 plan gives its dequantized checkpoint's
// logits; for a routed-experts step only the experts the routing selects are reconstructed. The
// copies follow the op's own scratch. linear and moe_experts (when it does not take the fused EXL3
// kernels) stage.
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/OpStep.h"
#include "kernels/exl3/exl3_gpu.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::kernels {

struct Exl3Staging {
  struct Weight {
    size_t index = 0; // the step's weight
    Exl3Geometry geometry;
    uint64_t offset = 0; // workspace offset of its bf16 copy [matrices][out][in]
  };
  std::vector<Weight> weights; // empty: the step reads no EXL3 weight
  bool routed = false;         // a MoE step: the selected experts only, marked in a mask
  uint64_t maskOffset = 0;     // workspace offset of the mask, i32 [experts]
  uint64_t end = 0;            // workspace bytes the op's scratch and the staging need together

  const Weight *find(size_t index) const;
};

/// The staging of `step`'s EXL3 weights after `opScratch` bytes of the op's own scratch; `routed`
/// for a routed-experts step (operand 1 its expert ids, weight 0's matrices its experts).
Exl3Staging exl3StagingOf(const OpStep &step, uint64_t opScratch, bool routed);

/// The launches that stage the weights, in order (the mask, then one reconstruction per weight),
/// to run before the op's own.
std::vector<GpuLaunch> exl3StagingLaunches(const OpStep &step, const Exl3Staging &staging);

/// Binds `field` to weight i of the step, or to its staged bf16 copy.
template <typename Args, typename P>
void bindDenseWeight(ArgPack<Args> &p, P &field, const Exl3Staging &staging, size_t i,
                     const char *name) {
  if (const Exl3Staging::Weight *w = staging.find(i)) {
    p.bind(field, ArgSource::Workspace, 0, name, w->offset);
  } else {
    p.bind(field, ArgSource::Weight, i, name);
  }
}

/// Binds an Exl3GpuWeights field to weight i of the step, laid out as `g` says.
template <typename Args>
void packExl3Weights(ArgPack<Args> &p, Exl3GpuWeights &w, const Exl3Geometry &g, size_t i,
                     const std::string &name) {
  p.bind(w.slice, ArgSource::Weight, i, (name + ".slice").c_str());
  p.set(w.matrices, g.matrices, (name + ".matrices").c_str());
  p.set(w.in, g.in, (name + ".in").c_str());
  p.set(w.out, g.out, (name + ".out").c_str());
  p.set(w.k, g.k, (name + ".k").c_str());
  p.set(w.n, g.n, (name + ".n").c_str());
  p.set(w.trellisStride, g.trellisStride, (name + ".trellisStride").c_str());
  p.set(w.suhOffset, g.suhOffset, (name + ".suhOffset").c_str());
  p.set(w.svhOffset, g.svhOffset, (name + ".svhOffset").c_str());
  p.set(w.metaOffset, g.metaOffset, (name + ".metaOffset").c_str());
}

} // namespace glm::kernels
