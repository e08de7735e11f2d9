// exl3_moe on the GPU: the routed experts of one MoE layer with EXL3 weights (reference/
// exl3_format.md), decoded in registers, for decode steps of up to kExl3MoeMaxTokens tokens. The
// argument struct its kernels take by value, the launches of a shape and the scratch they share.
//
//   x              bf16 [tokens, hidden]
//   expertIds      i32  [tokens, topK]      global expert ids (from moe_router)
//   expertWeights  bf16 [tokens, topK]      (from moe_router)
//   gate, up       EXL3 binding of `experts` [inter, hidden] matrices (Exl3GpuWeights)
//   down           EXL3 binding of `experts` [hidden, inter] matrices
//   out            bf16 [tokens, hidden]    must not alias x
//   partial        scratch (exl3MoeScratchBytes, exl3MoeBindScratch)
//
// This rank holds global experts [firstExpert, firstExpert + experts); selections of other ranks'
// experts contribute nothing. A slot is one (token, k) pair, slot = token · topK + k; a token
// selects an expert at most once. K (1..8) and the codebook are read per matrix.
//
// Math, per slot s = (t, k) whose expert e is local, with the EXL3 linear of §4.2,
// lin(v) = ((((v ∘ suh) · Hk) · Ŵ) · Hn) ∘ svh (H the normalised 128-point Sylvester Hadamard, on
// each 128-block), and the clamped SwiGLU of swiglu.h:
//
//   g = lin_gate[e](x[t]),  u = lin_up[e](x[t])                       over the padded inter
//   h = silu(min(g, limit)) · clamp(u, ±limit)                        h = 0 past inter
//   out[t] = Σ_k expertWeights[t][k] · lin_down[e](h)                 k in increasing order
//
// Data flow. Hadamards act on 128-blocks, so the work splits by j, the 128-block of inter: the
// gate and up columns of block j (all of hidden reduced) give h_j alone, and h_j's 128 rows of
// down give a split-K partial of every down output. A work item is (local expert e, j), done by a
// cluster of kExl3MoeCluster = 4 blocks (the step's distinct local experts in increasing id; item
// i = blockIdx.x / 4 is expert number i / J, J = pad128(inter) / 128, block j = i % J), so that
// the 4 selections of a TP-2 rank at batch 1 still fill the GPU (64 items, 256 blocks, two per SM):
//   1. gate/up: each block of the cluster reduces a quarter of hidden's 128-chunks for the 2 · 128
//      columns of j. Per chunk it rotates its tokens' x ∘ suh (one warp per token and matrix,
//      H128 in f32, rounded once to fp16) into shared memory, the tensor-core A operand; 8 warps,
//      one per 2 tile columns of gate or up, stream the trellis with cp.async into a ring of
//      three chunks per warp in shared memory (two chunks ahead of the decode), decode it in
//      registers and run mma.m16n8k16 with the tokens as M (16 per group, G groups). One block
//      barrier per chunk (the A operand is shared by the warps). The resident path, for items of
//      at most kExl3MoeResidentRows rows whose block has at most kExl3MoeResidentChunks chunks:
//      x and suh of all the block's chunks staged at once, every chunk's A rotated before the
//      loop (a compact layout of the lanes' first-row registers), then each warp streams its
//      tiles with no block barrier. Same arithmetic per row on both paths.
//   2. The four quarters meet through distributed shared memory; every block sums them in rank
//      order (the same bits in each): H + svh, SwiGLU, ∘ suh_down, H -> fp16 A operand of down.
//   3. down: each block takes a quarter of down's output columns over the 128 rows of j and writes
//      its f32 partial, before the output rotation, to partial[slot][j][pad128(hidden)].
//   exl3MoeCombineKernel then sums, per slot, the J partials in order, rotates (H + svh_down),
//   weighs by the routing weight and sums the token's slots in k order: out in bf16. No atomics:
//   graph replays and eager launches give the same bits.
//
// Decode in registers (§2, §3, §5.1): a lane decodes stream positions 8l..8l+7 of a tile, which
// are its two B fragments. For MCG and 3INST a weight enters the tensor cores as the two fp16
// halves (lo, hi) of its masked hash, each against the same activation (the A operand holds every
// activation twice), so the mma forms lo + hi exactly instead of rounding it to fp16 first: the
// weight differs from §3.1's fp16 sum by at most half an fp16 ulp (2^-11 relative), far below the
// bf16 output rounding, and the fp16 add and the pairing of two weights into one register, a third
// of the decode's instructions, disappear. MUL1 and matrices whose K or codebook differ from the
// kernel's template arguments (the generic path: per-position exl3State, exl3CodebookHalf) use the
// exact fp16 value (w, 0). K = 4, per lane and tile (8 weights), as compiled for sm_90a: 2 shared
// loads of trellis words, 11 extraction ops (3 funnel shifts, masks, permutes, shifts), 8 IMAD,
// 8 LOP3, 4 mma per token group and half of a tile row's 2 A-fragment loads: ~33 instructions,
// ~4.1 per weight.
//
// Roundings: the A operands (x ∘ suh · H for gate/up, h ∘ suh_down · H for down) to fp16; the
// weights as above; everything else in f32 (mma accumulation, the cluster sum, SwiGLU, the
// partials and their sums); out once to bf16.
//
// Launches, in order:
//   exl3MoeKernel<K, CB, G>  grid (min(experts, tokens · topK) · J · 4), 256 threads, clusters of
//       4, exl3MoeSharedBytes(G, K) of dynamic shared memory; items past the step's distinct
//       experts return at once. K, CB: the bits and codebook of the fast path (the plan's); G =
//       ceil(tokens / 16) token groups per mma.
//   exl3MoeCombineKernel     grid (tokens, pad128(hidden) / 128), 256 threads.
// Limits: tokens <= kExl3MoeMaxTokens, topK <= kExl3MoeMaxTopK, experts <= kExl3MoeMaxExperts.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/exl3/exl3_gpu.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <algorithm>
#include <string>
#include <vector>
#endif

namespace glm::kernels {

struct Exl3MoeGpuArgs {
  const Bf16 *x;
  const int32_t *expertIds;
  const Bf16 *expertWeights;
  Exl3GpuWeights gate; // [experts] of [inter, hidden]
  Exl3GpuWeights up;
  Exl3GpuWeights down; // [experts] of [hidden, inter]
  Bf16 *out;
  float *partial; // scratch: f32 [tokens · topK][pad128(inter) / 128][pad128(hidden)]
  int64_t tokens;
  int64_t hidden;
  int64_t inter;
  int64_t experts; // this rank's
  int64_t topK;
  int32_t firstExpert;  // global id of this rank's expert 0
  float limit;          // swiglu_limit; +inf = no clamp
  int32_t residentRows; // items of at most this many rows (<= kExl3MoeResidentRows) take the
                        // resident path; 0: none (the plans' value: kExl3MoeResidentRowsDefault)
};

constexpr int kExl3MoeMaxTokens = 64;    // tokens per step
constexpr int kExl3MoeMaxTopK = 64;      // combine: a token's slots in shared memory
constexpr int kExl3MoeMaxExperts = 8192; // local experts: a bitmap in shared memory
constexpr int kExl3MoeThreads = 256;     // 8 warps; two blocks fit an SM
constexpr int kExl3MoeCluster = 4;       // blocks per (expert, 128-block of inter)
constexpr int kExl3MoeChunk = 128;       // hidden features per gate/up pipeline step
constexpr int kExl3MoeCombineThreads = 256;

/// Token groups of 16 (the mma's M) the main kernel is compiled for.
GLM_HOST_DEVICE inline constexpr int exl3MoeGroups(int64_t tokens) {
  return tokens <= 16 ? 1 : tokens <= 32 ? 2 : tokens <= 48 ? 3 : 4;
}

/// An item of at most kExl3MoeResidentRows rows (and args.residentRows) whose block reduces at most
/// kExl3MoeResidentChunks chunks of hidden (hidden <= 4096 at clusters of 4) builds its whole A
/// operand of gate and up once, before its loop, so that the loop has no block barrier (the
/// resident path).
constexpr int kExl3MoeResidentRows = 4;
/// What plans set args.residentRows to: 0 (every item chunked, the kernel that ran before) until a
/// GPU has run Exl3MoeGpu's tests over the resident path (written 2026-12-08, when no device could
/// be had); then kExl3MoeResidentRows.
constexpr int32_t kExl3MoeResidentRowsDefault = 0;
constexpr int kExl3MoeResidentChunks = 8;
/// Slots of 16 trellis tiles (2 KB at K = 4) in each warp's ring: the resident loop keeps all but
/// one in flight; the chunked loop and down use three.
constexpr int kExl3MoeRingSlots = 3;

/// Dynamic shared memory of exl3MoeKernel<K, CB, G>: the A operand of gate and up (chunked: two
/// chunks in mma-fragment order, each activation twice, 32 KB per group; resident: every chunk
/// of the block, 32 KB; later the cluster reduction, h and down's A operand), the staged x and suh
/// (chunked: two chunks, 8 KB per group + 1 KB; resident: every chunk, 12 KB), and each warp's
/// ring of kExl3MoeRingSlots slots of 16 trellis tiles (4 KB per bit of K a slot over the 8 warps):
/// 92 KB at G = 1, K = 4, so that two blocks share an SM.
GLM_HOST_DEVICE inline constexpr unsigned exl3MoeStagingBytes(int groups) {
  return static_cast<unsigned>(groups) * 8192u + 1024u > 12288u
             ? static_cast<unsigned>(groups) * 8192u + 1024u
             : 12288u;
}
GLM_HOST_DEVICE inline constexpr unsigned exl3MoeSharedBytes(int groups, int bits) {
  return static_cast<unsigned>(groups) * 32768u + exl3MoeStagingBytes(groups) +
         static_cast<unsigned>(bits) * 4096u * kExl3MoeRingSlots;
}

#ifndef __CUDACC_RTC__
/// The launches of one step. `bits` and `codebook` (0 3INST, 1 MCG, 2 MUL1) select the fast path:
/// the K and codebook most of the layer's matrices have (others take the generic path).
inline std::vector<NamedLaunch> exl3MoeLaunches(int bits, int codebook, int64_t tokens,
                                                int64_t hidden, int64_t inter, int64_t experts,
                                                int64_t topK) {
  const int groups = exl3MoeGroups(tokens);
  const int64_t blocksJ = (inter + 127) / 128;
  LaunchDims main;
  main.grid[0] =
      static_cast<unsigned>(std::min(experts, tokens * topK) * blocksJ * kExl3MoeCluster);
  main.block[0] = kExl3MoeThreads;
  main.sharedMemory = exl3MoeSharedBytes(groups, bits);
  LaunchDims combine;
  combine.grid[0] = static_cast<unsigned>(tokens);
  combine.grid[1] = ceilDiv(hidden, 128);
  combine.block[0] = kExl3MoeCombineThreads;
  return {{"glm::kernels::exl3MoeKernel<" + std::to_string(bits) + ", " + std::to_string(codebook) +
               ", " + std::to_string(groups) + ">",
           main},
          {"glm::kernels::exl3MoeCombineKernel", combine}};
}

/// Scratch: the f32 partials, tokens · topK · pad128(inter) / 128 · pad128(hidden) (256 KB per
/// slot at Flash's shapes: 2 MB at batch 1).
inline int64_t exl3MoeScratchBytes(int64_t tokens, int64_t topK, int64_t hidden, int64_t inter) {
  const int64_t padded = (hidden + 127) / 128 * 128;
  return tokens * topK * ((inter + 127) / 128) * padded * 4;
}

/// Points args' scratch fields into `base` (device memory of exl3MoeScratchBytes bytes).
inline void exl3MoeBindScratch(Exl3MoeGpuArgs &a, void *base) {
  a.partial = static_cast<float *>(base);
}
#endif

} // namespace glm::kernels
