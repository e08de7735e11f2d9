// moe_experts on the GPU: the argument struct its kernels take by value, the host rule that picks
// the kernels for a shape, their grid rules and the scratch they share.
//
//   x              T [tokens, hidden]
//   expertIds      i32 [tokens, topK]          global expert ids (from moe_router)
//   expertWeights  T [tokens, topK]            (from moe_router)
//   gate, up       W [experts, inter, hidden]  this rank's experts, stacked
//   down           W [experts, hidden, inter]
//   out            T [tokens, hidden]          must not alias x
//   act, contrib, counts, lists                scratch (moeExpertsScratch, moeExpertsBindScratch)
//
// With experts split over ranks (expert_shards > 1) this rank holds global ids [firstExpert,
// firstExpert + experts); selections of other ranks' experts contribute nothing (their sum is the
// all-reduce's job). A slot is one (token, k) pair, slot = token * topK + k.
//
//   h_slot   = act(x[t] Wg[e]ᵀ, x[t] Wu[e]ᵀ)   act: a = min(g, limit), b = clamp(u, ±limit),
//                                              silu(a) · b (clamped SwiGLU of swiglu.h)
//   out[t]   = Σ_k w[t][k] · h_slot Wd[e]ᵀ     summed over the token's own experts in increasing id
//
// With T = Bf16 the kernels round where HF's bf16 eager forward does: the gate and up projections,
// silu(a), the product, the down projection, each w · y, and the running sum after every expert
// (HF index_adds bf16(w · y) into a bf16 buffer, experts in increasing id). Accumulation is f32.
//
// Decode (tokens <= kMoeDecodeMaxTokens, and every decode program, whose adapter chooses for one
// row: OpStep::choiceRows), three launches. Blocks are per (row tile, slot); the block of an
// expert's first slot serves every slot of that expert (later ones return at once), so each
// selected expert's weights are read once per step however many tokens share it. Each thread
// issues 16 loads of 16 bytes before converting any.
//   moeExpertsGateUpKernel<T, W>  grid (ceil(inter / 16), tokens * topK), 256 threads: a block
//       owns 16 rows of one expert's gate and up (2 of each per warp), streams them against 2 of
//       the expert's tokens at a time (more re-read the rows, mostly from L2) and writes h (T) to
//       `act`.
//   moeExpertsDownKernel<T, W>    grid (ceil(hidden / 32), tokens * topK), 256 threads: a block
//       owns 32 rows of one expert's down (4 per warp) and writes each slot's w · y to contrib.
//   moeExpertsCombineKernel<T>    as below.
// Prefill (more tokens), grouped per expert, four launches:
//   moeExpertsRouteKernel         grid experts, 256 threads: each expert's slots, in slot order,
//                                 into lists[e][0, counts[e]) (a token selects an expert once).
//   gate/up                       per (expert, 64 of its slots, tile of inter) block, writes act.
//   down                          per (expert, 64 of its slots, tile of hidden) block, writes each
//                                 slot's w · y to contrib.
//   moeExpertsCombineKernel<T>    grid (tokens, ceil(hidden / 256)), 256 threads: out[t] = Σ
//                                 contrib over the token's own slots in increasing expert id.
//   The gate/up and down launches are mma.sync tensor-core kernels for T = W = Bf16 (hidden and
//   inter multiples of 32), f32 FMA tiled kernels otherwise (any shape, exact to f32
//   accumulation). Blocks past an expert's slot count return at once. Every path is correct for
//   any token count (the tests run each on every shape); the picker only chooses the fast one.
// Limits: topK <= kMoeMaxTopK; experts <= 65535 (grid z).
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <string>
#include <vector>
#endif

namespace glm::kernels {

struct MoeExpertsGpuArgs {
  const void *x;
  const int32_t *expertIds;
  const void *expertWeights;
  const void *gate;
  const void *up;
  const void *down;
  void *out;
  void *act;       // scratch: T [tokens * topK, inter]
  void *contrib;   // scratch: T [tokens * topK, hidden]
  int32_t *counts; // scratch, prefill only: [experts]
  int32_t *lists;  // scratch, prefill only: [experts, tokens]
  int64_t tokens;
  int64_t hidden;
  int64_t inter;
  int64_t experts; // this rank's
  int64_t topK;
  int32_t firstExpert; // global id of this rank's expert 0
  float limit;         // swiglu_limit; +inf = no clamp
};

constexpr int kMoeDecodeMaxTokens = 8; // tokens up to which the decode kernels run
constexpr int kMoeDecodeGroup = 2;     // decode: slots of one expert per pass over its weights
constexpr int kMoeGateUpRows = 16;     // decode gate/up: inter rows per block
constexpr int kMoeDownRows = 32;       // decode down: hidden rows per block (4 per warp)
constexpr int kMoeTileM = 64;          // prefill: slots per block
constexpr int kMoeSimtTileN = 32;      // prefill f32 gate/up: inter rows per block
constexpr int kMoeSimtDownTileN = 64;  // prefill f32 down: hidden rows per block
constexpr int kMoeMmaTileN = 128;      // prefill mma: inter (gate/up) or hidden (down) per block
constexpr int kMoeMmaTileK = 32;
constexpr int kMoeMmaStages = 3;
constexpr int kMoeMmaRowBytes = 80; // a 32-element bf16 row padded to 80 bytes: ldmatrix is free
                                    // of bank conflicts
constexpr int kMoeMaxTopK = 64;     // combine kernel: a token's slots held in shared memory

#ifndef __CUDACC_RTC__
enum class MoeExpertsPath { Decode, PrefillMma, PrefillSimt };

/// Decode kernels for few tokens; for more, the grouped kernels, on tensor cores when activations
/// and weights are both bf16 and the dimensions tile.
inline MoeExpertsPath moeExpertsPathFor(bool bf16Mma, int64_t tokens, int64_t hidden,
                                        int64_t inter) {
  if (tokens <= kMoeDecodeMaxTokens) {
    return MoeExpertsPath::Decode;
  }
  return bf16Mma && hidden % 32 == 0 && inter % 32 == 0 ? MoeExpertsPath::PrefillMma
                                                        : MoeExpertsPath::PrefillSimt;
}

/// The launches of one step, in order, for activations `t` and weights `w` spelled as the engine
/// spells types ("float", "glm::kernels::Bf16"). PrefillMma needs t = w = Bf16.
inline std::vector<NamedLaunch> moeExpertsLaunches(MoeExpertsPath path, const std::string &t,
                                                   const std::string &w, int64_t tokens,
                                                   int64_t hidden, int64_t inter, int64_t experts,
                                                   int64_t topK) {
  const std::string tw = "<" + t + ", " + w + ">";
  std::vector<NamedLaunch> out;
  LaunchDims combine;
  combine.grid[0] = static_cast<unsigned>(tokens);
  combine.grid[1] = ceilDiv(hidden, 256);
  combine.block[0] = 256;
  if (path == MoeExpertsPath::Decode) {
    LaunchDims gateUp, down;
    gateUp.grid[0] = ceilDiv(inter, kMoeGateUpRows);
    gateUp.grid[1] = static_cast<unsigned>(tokens * topK);
    gateUp.block[0] = 256;
    down.grid[0] = ceilDiv(hidden, kMoeDownRows);
    down.grid[1] = static_cast<unsigned>(tokens * topK);
    down.block[0] = 256;
    out.push_back({"glm::kernels::moeExpertsGateUpKernel" + tw, gateUp});
    out.push_back({"glm::kernels::moeExpertsDownKernel" + tw, down});
    out.push_back({"glm::kernels::moeExpertsCombineKernel<" + t + ">", combine});
    return out;
  }
  LaunchDims route, gateUp, down;
  route.grid[0] = static_cast<unsigned>(experts);
  route.block[0] = 256;
  const unsigned mTiles = ceilDiv(tokens, kMoeTileM);
  if (path == MoeExpertsPath::PrefillMma) {
    gateUp.grid[0] = ceilDiv(inter, kMoeMmaTileN);
    gateUp.block[0] = 256;
    gateUp.sharedMemory = kMoeMmaStages * (kMoeTileM + 2 * kMoeMmaTileN) * kMoeMmaRowBytes;
    down.grid[0] = ceilDiv(hidden, kMoeMmaTileN);
    down.block[0] = 128;
    down.sharedMemory = kMoeMmaStages * (kMoeTileM + kMoeMmaTileN) * kMoeMmaRowBytes;
  } else {
    gateUp.grid[0] = ceilDiv(inter, kMoeSimtTileN);
    gateUp.block[0] = 256;
    down.grid[0] = ceilDiv(hidden, kMoeSimtDownTileN);
    down.block[0] = 256;
  }
  gateUp.grid[1] = down.grid[1] = mTiles;
  gateUp.grid[2] = down.grid[2] = static_cast<unsigned>(experts);
  out.push_back({"glm::kernels::moeExpertsRouteKernel", route});
  if (path == MoeExpertsPath::PrefillMma) {
    out.push_back({"glm::kernels::moeExpertsMmaGateUpKernel", gateUp});
    out.push_back({"glm::kernels::moeExpertsMmaDownKernel", down});
  } else {
    out.push_back({"glm::kernels::moeExpertsGroupedGateUpKernel" + tw, gateUp});
    out.push_back({"glm::kernels::moeExpertsGroupedDownKernel" + tw, down});
  }
  out.push_back({"glm::kernels::moeExpertsCombineKernel<" + t + ">", combine});
  return out;
}

/// Scratch layout: act, contrib, then (prefill paths only) counts and lists, each 256-byte
/// aligned. Decode needs tokens · topK · (inter + hidden) activations (192 KB for Flash at batch 1
/// in bf16).
struct MoeExpertsScratch {
  int64_t act = 0, contrib = 0, counts = 0, lists = 0, bytes = 0;
};

inline MoeExpertsScratch moeExpertsScratch(MoeExpertsPath path, int64_t tokens, int64_t topK,
                                           int64_t experts, int64_t hidden, int64_t inter,
                                           int64_t activationBytes) {
  auto align = [](int64_t v) { return (v + 255) / 256 * 256; };
  const bool prefill = path != MoeExpertsPath::Decode;
  const int64_t slots = tokens * topK;
  MoeExpertsScratch s;
  s.act = 0;
  s.contrib = align(s.act + slots * inter * activationBytes);
  s.counts = align(s.contrib + slots * hidden * activationBytes);
  s.lists = align(s.counts + (prefill ? experts * 4 : 0));
  s.bytes = align(s.lists + (prefill ? experts * tokens * 4 : 0));
  return s;
}

/// Points args' scratch fields into `base` (device memory of moeExpertsScratch(path, ...).bytes);
/// the fields a decode path does not use are null.
inline void moeExpertsBindScratch(MoeExpertsGpuArgs &a, MoeExpertsPath path, void *base,
                                  int64_t activationBytes) {
  const MoeExpertsScratch s =
      moeExpertsScratch(path, a.tokens, a.topK, a.experts, a.hidden, a.inter, activationBytes);
  auto *b = static_cast<uint8_t *>(base);
  const bool prefill = path != MoeExpertsPath::Decode;
  a.act = b + s.act;
  a.contrib = b + s.contrib;
  a.counts = prefill ? reinterpret_cast<int32_t *>(b + s.counts) : nullptr;
  a.lists = prefill ? reinterpret_cast<int32_t *>(b + s.lists) : nullptr;
}
#endif

} // namespace glm::kernels
