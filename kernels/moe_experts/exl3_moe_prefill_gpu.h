// exl3_moe prefill on the GPU: the routed experts of one MoE layer with EXL3 weights (reference/
// exl3_format.md) for steps of many tokens (prefill chunks), the trellis decoded in registers into
// tensor-core B fragments; no weight is ever materialised. The argument struct every launch takes,
// the launches of a shape and the scratch they share. Same tensors and semantics as
// exl3_moe_gpu.h (the decode kernel): x, expertIds, expertWeights, gate/up/down bindings, out
// (bf16, must not alias x); this rank holds global experts [firstExpert, firstExpert + experts) and
// other ranks' selections contribute nothing; K (1..8) and the codebook are read per matrix.
//
// Math, per slot s = (t, k) whose expert e is local, lin(v) = ((((v ∘ suh) · Hk) · Ŵ) · Hn) ∘ svh
// (§4.2, H the normalised 128-point Hadamard on each 128-block):
//
//   g = lin_gate[e](x[t]),  u = lin_up[e](x[t]),  h = silu(min(g, limit)) · clamp(u, ±limit)
//   out[t] = Σ over the token's local slots in increasing expert id of w[s] · lin_down[e](h)
//
// Data flow. The rotations act on activations, never on weights: the input side (∘ suh, Hk) is
// applied once per slot and matrix in its own pass, so that each of the many blocks that multiply
// a slot's row reads it ready-made; the output side (Hn, ∘ svh) is a 128-block of a GEMM block's
// own columns, so it is the GEMM's epilogue.
//   1. moeExpertsRouteKernel (moe_experts): lists[e] = expert e's slots in slot order, counts[e].
//   2. exl3MoePrefillRotateKernel: act[s][m] = fp16(H(x[t] ∘ suh_m[e])) for m = gate, up.
//   3. exl3MoePrefillGemmKernel<K, CB, false>: per (128-column pair block, 64-slot tile of one
//      expert's list, matrix gate or up) block: C[64 slots][256 columns] = act · Ŵ over all of
//      k, then H + svh per 128 columns, f32 to z[s][m].
//   4. exl3MoePrefillSwigluKernel: act[s][0] = fp16(H(swiglu(z[s][gate], z[s][up]) ∘ suh_down)),
//      h = 0 past inter.
//   5. exl3MoePrefillGemmKernel<K, CB, true>: the same GEMM on down (k = inter); epilogue H +
//      svh_down, then contrib[s] = bf16(w[s] · bf16(y)) as moe_experts' bf16 down kernels round.
//   6. moeExpertsCombineKernel<Bf16>: out[t] = the running bf16 sum of the token's contributions in
//      increasing expert id (HF's bf16 index_add order).
// No atomics and no data-dependent order: graph replays and eager launches give the same bits.
//
// The GEMM block: 8 warps, warp w owns tile columns 2w, 2w + 1 of the block's 16 (256 columns),
// all 64 slot rows (4 mma groups of 16): each decoded weight feeds 4 mma per 8 columns. Per
// 128-chunk of k, three cp.async stages in flight: the A rows (64 × 128 fp16, XOR-swizzled for
// ldmatrix, gathered by slot through the expert's list) and each warp's ring slot of its 16 trellis
// tiles (the decode kernel's copyTiles); one block barrier per chunk. A lane decodes its 8 stream
// positions of a tile with the decode kernel's FastTiles<K, CB> (generic matrices: decodeAny) and
// packs them into the two B fragments of a standard m16n8k16: the weight pairs (w0, w1), (w2, w3)
// are k-rows (2t, 2t+1), (2t+8, 2t+9) of column lane/4 (§5.1). For MCG and 3INST one add.f16x2
// forms two weights' lo + hi, the same single fp16 rounding as §3.1, so the weights are the
// specification's fp16 values exactly (MUL1 and the generic path: their exact fp16 value plus 0).
// A block's (expert, tile) comes from the route's counts: block y is the y-th 64-slot tile in
// increasing expert id (blocks past the step's tiles return at once), x the column block (fastest,
// so that the blocks sharing a tile's A rows run together and find them in L2).
//
// Roundings: act (x ∘ suh · H and h ∘ suh_down · H) to fp16; the weights are exact; the mma
// accumulation, the output rotations, SwiGLU and z in f32; then y, w · y and the running sum to
// bf16 (moe_experts' bf16 path).
//
// Launches, in order (every one takes Exl3MoePrefillGpuArgs by value; route and combine read its
// leading MoeExpertsGpuArgs, the struct's first member):
//   moeExpertsRouteKernel                     grid experts, 256 threads.
//   exl3MoePrefillRotateKernel                grid tokens · topK, 256 threads.
//   exl3MoePrefillGemmKernel<K, CB, false>    grid (pad128(inter) / 256 rounded up, tile bound,
//                                             2), 256 threads, exl3MoePrefillSharedBytes(K).
//   exl3MoePrefillSwigluKernel                grid tokens · topK, 256 threads.
//   exl3MoePrefillGemmKernel<K, CB, true>     grid (pad128(hidden) / 256 rounded up, tile bound,
//                                             1), 256 threads, exl3MoePrefillSharedBytes(K).
//   moeExpertsCombineKernel<glm::kernels::Bf16>  grid (tokens, ceil(hidden / 256)), 256 threads.
// The tile bound: min(experts · ceil(tokens / 64), floor(tokens · topK / 64) + experts), the most
// 64-slot tiles the experts' lists can need.
// Shared memory per GEMM block: 3 A stages of 16 KB and 8 warps' rings of 3 × 2 KB per bit of K:
// 96 KB at K = 4 (two blocks per H200 SM; fits GB10's 99 KB per block up to K = 4).
// Limits: topK <= kMoeMaxTopK (combine), the tile bound <= 65535 (grid y), experts <= 65535.
//
// Measured (glm-kernel-bench, H200, Flash, K = 4 MCG, 2048 tokens × top 8): 5.36 ms per layer at
// TP 1 (154 TFLOP/s; the gate/up GEMM 3.08 ms, down 1.70 ms, the four small launches 0.60 ms),
// 2.75 ms at TP 2; the staging path took 19.5 ms at TP 1. The GEMMs issue ~100 instructions per
// warp and k-tile (2 tile decodes of ~40 with the packing, 16 mma, 4 ldmatrix) against 16 mma of
// tensor time: both the issue slots and the mma.sync pipe are near their limits, so more needs
// fewer decode instructions per mma (a larger M, which the ~57 slots per expert at TP 1 do not
// fill) or wgmma with decoded B tiles in shared memory.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/exl3/exl3_gpu.h"
#include "kernels/moe_experts/exl3_moe_gpu.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>
#endif

namespace glm::kernels {

struct Exl3MoePrefillGpuArgs {
  // First member: moeExpertsRouteKernel and moeExpertsCombineKernel take it (launched with this
  // struct, they read its leading bytes). x, expertIds, expertWeights, out, contrib, counts, lists
  // and the shape; its gate, up, down and act are unused.
  MoeExpertsGpuArgs moe;
  Exl3GpuWeights gate; // [experts] of [inter, hidden]
  Exl3GpuWeights up;
  Exl3GpuWeights down; // [experts] of [hidden, inter]
  uint16_t *act;       // scratch: fp16 [slots][2][pad128(hidden)]; later [slots][pad128(inter)]
  float *z;            // scratch: f32 [slots][2][pad128(inter)] (aliases moe.contrib)
};

constexpr int kExl3PrefillTileM = 64;    // slots per GEMM block (4 mma groups)
constexpr int kExl3PrefillColumns = 256; // output columns per GEMM block (2 per warp's tiles)
constexpr int kExl3PrefillStages = 3;    // k-chunks in flight
constexpr int kExl3PrefillThreads = 256; // 8 warps

/// Dynamic shared memory of exl3MoePrefillGemmKernel<K, ...>: kExl3PrefillStages A stages of
/// 64 × 128 fp16 and each warp's ring of 3 slots of 16 tiles (8K words each); the epilogue reuses
/// it for the 64 × 260 f32 block of results (66.5 KB: more than the total only at K = 1).
GLM_HOST_DEVICE inline constexpr unsigned exl3MoePrefillSharedBytes(int bits) {
  const unsigned pipeline = kExl3PrefillStages * 16384u + static_cast<unsigned>(bits) * 12288u;
  const unsigned results = kExl3PrefillTileM * (kExl3PrefillColumns + 4) * 4u;
  return pipeline > results ? pipeline : results;
}

/// The most 64-slot tiles the experts' lists of a step can need.
GLM_HOST_DEVICE inline constexpr int64_t exl3MoePrefillTileBound(int64_t tokens, int64_t topK,
                                                                 int64_t experts) {
  const int64_t perExpert = experts * ((tokens + kExl3PrefillTileM - 1) / kExl3PrefillTileM);
  const int64_t bySlots = tokens * topK / kExl3PrefillTileM + experts;
  return perExpert < bySlots ? perExpert : bySlots;
}

#ifndef __CUDACC_RTC__
/// The launches of one step. `bits` and `codebook` (0 3INST, 1 MCG, 2 MUL1) select the fast path
/// (the plan's); matrices of another K or codebook take the generic decoder.
inline std::vector<NamedLaunch> exl3MoePrefillLaunches(int bits, int codebook, int64_t tokens,
                                                       int64_t hidden, int64_t inter,
                                                       int64_t experts, int64_t topK) {
  const std::string kc = std::to_string(bits) + ", " + std::to_string(codebook);
  const unsigned tiles = static_cast<unsigned>(exl3MoePrefillTileBound(tokens, topK, experts));
  LaunchDims route, perSlot, gateUp, down, combine;
  route.grid[0] = static_cast<unsigned>(experts);
  route.block[0] = 256;
  perSlot.grid[0] = static_cast<unsigned>(tokens * topK);
  perSlot.block[0] = kExl3PrefillThreads;
  gateUp.grid[0] = ceilDiv((inter + 127) / 128 * 128, kExl3PrefillColumns);
  gateUp.grid[1] = tiles;
  gateUp.grid[2] = 2;
  gateUp.block[0] = kExl3PrefillThreads;
  gateUp.sharedMemory = exl3MoePrefillSharedBytes(bits);
  down = gateUp;
  down.grid[0] = ceilDiv((hidden + 127) / 128 * 128, kExl3PrefillColumns);
  down.grid[2] = 1;
  combine.grid[0] = static_cast<unsigned>(tokens);
  combine.grid[1] = ceilDiv(hidden, 256);
  combine.block[0] = 256;
  return {{"glm::kernels::moeExpertsRouteKernel", route},
          {"glm::kernels::exl3MoePrefillRotateKernel", perSlot},
          {"glm::kernels::exl3MoePrefillGemmKernel<" + kc + ", false>", gateUp},
          {"glm::kernels::exl3MoePrefillSwigluKernel", perSlot},
          {"glm::kernels::exl3MoePrefillGemmKernel<" + kc + ", true>", down},
          {"glm::kernels::moeExpertsCombineKernel<glm::kernels::Bf16>", combine}};
}

/// Scratch layout: region A holds act (the rotated x for gate and up, later down's input), region
/// B z (f32 gate and up outputs, later the bf16 contributions), then counts and lists, each
/// 256-byte aligned. Flash at 2048 tokens × top 8: 268 + 268 + 2.4 MB.
struct Exl3MoePrefillScratch {
  int64_t act = 0, z = 0, counts = 0, lists = 0, bytes = 0;
};

inline Exl3MoePrefillScratch exl3MoePrefillScratch(int64_t tokens, int64_t topK, int64_t experts,
                                                   int64_t hidden, int64_t inter) {
  auto align = [](int64_t v) { return (v + 255) / 256 * 256; };
  const int64_t slots = tokens * topK;
  const int64_t paddedHidden = (hidden + 127) / 128 * 128, paddedInter = (inter + 127) / 128 * 128;
  Exl3MoePrefillScratch s;
  s.z = align(slots * 2 * std::max(paddedHidden, paddedInter) * 2);
  s.counts = align(s.z + slots * std::max(2 * paddedInter * 4, hidden * 2));
  s.lists = align(s.counts + experts * 4);
  s.bytes = align(s.lists + experts * tokens * 4);
  return s;
}

inline int64_t exl3MoePrefillScratchBytes(int64_t tokens, int64_t topK, int64_t experts,
                                          int64_t hidden, int64_t inter) {
  return exl3MoePrefillScratch(tokens, topK, experts, hidden, inter).bytes;
}

/// The prefill arguments of a step described by the decode kernel's `a` (its partial unused), with
/// the scratch fields pointed into `base` (device memory of exl3MoePrefillScratchBytes bytes).
inline Exl3MoePrefillGpuArgs exl3MoePrefillBindScratch(const Exl3MoeGpuArgs &a, void *base) {
  const Exl3MoePrefillScratch s =
      exl3MoePrefillScratch(a.tokens, a.topK, a.experts, a.hidden, a.inter);
  auto *b = static_cast<uint8_t *>(base);
  Exl3MoePrefillGpuArgs p{};
  p.moe.x = a.x;
  p.moe.expertIds = a.expertIds;
  p.moe.expertWeights = a.expertWeights;
  p.moe.out = a.out;
  p.moe.contrib = b + s.z;
  p.moe.counts = reinterpret_cast<int32_t *>(b + s.counts);
  p.moe.lists = reinterpret_cast<int32_t *>(b + s.lists);
  p.moe.tokens = a.tokens;
  p.moe.hidden = a.hidden;
  p.moe.inter = a.inter;
  p.moe.experts = a.experts;
  p.moe.topK = a.topK;
  p.moe.firstExpert = a.firstExpert;
  p.moe.limit = a.limit;
  p.gate = a.gate;
  p.up = a.up;
  p.down = a.down;
  p.act = reinterpret_cast<uint16_t *>(b + s.act);
  p.z = reinterpret_cast<float *>(b + s.z);
  return p;
}

static_assert(offsetof(Exl3MoePrefillGpuArgs, moe) == 0,
              "route and combine read the leading MoeExpertsGpuArgs");
#endif

} // namespace glm::kernels
