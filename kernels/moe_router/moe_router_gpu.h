// moe_router on the GPU: the argument struct its kernels take by value, and their grid rules.
//
//   x               T [tokens, hidden]
//   weight          W [experts, hidden]        mlp.gate.weight: f32, bf16, or fp8 blocks
//   weightScaleInv  f32 [ceil(experts/128)][ceil(hidden/128)]   W = Fp8E4m3 only: the blocks'
//                                              scales (kernels/common/DenseFormats.h)
//   correctionBias  [experts] f32 or bf16 (biasBf16)   null = no bias
//   scores          f32 [tokens, experts]      the sigmoid scores: written by the first kernel,
//                                              read by the second (scratch when the plan has no
//                                              such output)
//   expertIds       i32 [tokens, topK]         global expert ids, by descending biased score
//   expertWeights   T [tokens, topK]           their mixing weights
//
// Math as kernels/moe_router/moe_router.h (HF's fp32 router): logits and sigmoid in f32 whatever
// T and W are (HF upcasts x and the weight), b = s + bias in f32, group-limited top-k with ties to
// the lower index (LowerIndex), weights s_e / (Σ s + 1e-20) · scaling (or s_e · scaling), rounded
// to T once.
//
// Two launches, in order:
//   scores, by moeRouterScoresKernelFor(tokens, hidden, sizeof(T)):
//     moeRouterScoresDecodeKernel<T, W>  tokens <= kMoeRouterGemvMaxTokens: grid ceil(experts /
//         4), 128 threads; a warp per expert holds its row in registers, 8 16-byte chunks a lane
//         at a time (all loaded before the first is used: one HBM round trip for Flash's fp8 row),
//         against the tokens staged in shared memory moeRouterDecodePass at a time (f32
//         accumulation).
//     moeRouterScoresGemvKernel<T, W>   the kernel it replaces, kept for the bench's comparison:
//         grid ceil(experts / 2), 64 threads, a warp per expert streaming its row in 8- or
//         16-byte loads, one or two in flight.
//     moeRouterScoresTiledKernel<T, W>  more tokens: grid (ceil(experts / 32), ceil(tokens / 64)),
//         256 threads; 64 tokens x 32 experts per block through shared memory.
//   moeRouterSelectKernel<T>  grid ceil(tokens / 4), 128 threads: one warp per token holds the
//       token's biased scores in shared memory and picks groups, then experts, by warp argmax
//       (value desc, index asc). experts <= kMoeRouterMaxExperts.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <algorithm>
#include <string>
#endif

namespace glm::kernels {

struct MoeRouterGpuArgs {
  const void *x;
  const void *weight;
  const void *correctionBias;
  float *scores;
  int32_t *expertIds;
  void *expertWeights;
  int64_t tokens;
  int64_t hidden;
  int64_t experts;
  int64_t topK;
  int64_t nGroup;    // 1 = no group limit
  int64_t topkGroup; // groups kept when nGroup > 1
  int32_t normTopkProb;
  int32_t biasBf16;
  float scaling; // routed_scaling_factor
  const float *weightScaleInv;
};

constexpr int kMoeRouterGemvWarps = 2;     // gemv scores: experts (warps) per block
constexpr int kMoeRouterDecodeWarps = 4;   // decode scores: experts (warps) per block
constexpr int kMoeRouterDecodeChunks = 8;  // decode scores: 16-byte chunks a lane holds
constexpr int kMoeRouterDecodeMaxPass = 8; // decode scores: tokens staged at most per pass
/// Decode scores: shared memory a block may stage tokens in (the default limit, no opt-in).
constexpr int64_t kMoeRouterDecodeStageBytes = 48 * 1024;
constexpr int kMoeRouterTokensPerPass = 8;  // gemv scores: tokens per pass over a weight row
constexpr int kMoeRouterGemvMaxTokens = 16; // tokens up to which the gemv kernel runs
constexpr int kMoeRouterTileTokens = 64;    // tiled scores: tokens per block
constexpr int kMoeRouterTileExperts = 32;   // tiled scores: experts per block
constexpr int kMoeRouterSelectWarps = 4;    // select kernel: tokens (warps) per block
constexpr int kMoeRouterMaxExperts = 1024;  // select kernel: biased scores held per token

#ifndef __CUDACC_RTC__
enum class MoeRouterScores { Gemv, Decode, Tiled };

/// Tokens moeRouterScoresDecodeKernel stages per pass over `tokens` rows of `hidden` activations
/// of `activationBytes` each (0: not one row fits).
inline int moeRouterDecodePass(int64_t tokens, int64_t hidden, int64_t activationBytes) {
  const int64_t fit = kMoeRouterDecodeStageBytes / (hidden * activationBytes);
  return static_cast<int>(std::min<int64_t>({fit, tokens, kMoeRouterDecodeMaxPass}));
}

inline MoeRouterScores moeRouterScoresKernelFor(int64_t tokens, int64_t hidden,
                                                int64_t activationBytes) {
  return tokens <= kMoeRouterGemvMaxTokens &&
                 moeRouterDecodePass(tokens, hidden, activationBytes) > 0
             ? MoeRouterScores::Decode
             : MoeRouterScores::Tiled;
}

/// The NVRTC name expression of a scores kernel for activations `t` and weights `w` ("float",
/// "glm::kernels::Bf16", "glm::kernels::Fp8E4m3").
inline std::string moeRouterScoresName(MoeRouterScores kernel, const std::string &t,
                                       const std::string &w) {
  return std::string(kernel == MoeRouterScores::Gemv ? "glm::kernels::moeRouterScoresGemvKernel<"
                     : kernel == MoeRouterScores::Decode
                         ? "glm::kernels::moeRouterScoresDecodeKernel<"
                         : "glm::kernels::moeRouterScoresTiledKernel<") +
         t + ", " + w + ">";
}

inline LaunchDims moeRouterScoresLaunch(MoeRouterScores kernel, int64_t tokens, int64_t experts,
                                        int64_t hidden, int64_t activationBytes) {
  LaunchDims d;
  if (kernel == MoeRouterScores::Decode) {
    d.grid[0] = ceilDiv(experts, kMoeRouterDecodeWarps);
    d.block[0] = 32 * kMoeRouterDecodeWarps;
    d.sharedMemory = static_cast<unsigned>(moeRouterDecodePass(tokens, hidden, activationBytes) *
                                           hidden * activationBytes);
  } else if (kernel == MoeRouterScores::Gemv) {
    d.grid[0] = ceilDiv(experts, kMoeRouterGemvWarps);
    d.block[0] = 32 * kMoeRouterGemvWarps;
  } else {
    d.grid[0] = ceilDiv(experts, kMoeRouterTileExperts);
    d.grid[1] = ceilDiv(tokens, kMoeRouterTileTokens);
    d.block[0] = 256;
  }
  return d;
}

inline LaunchDims moeRouterSelectLaunch(int64_t tokens) {
  LaunchDims d;
  d.grid[0] = ceilDiv(tokens, kMoeRouterSelectWarps);
  d.block[0] = 32 * kMoeRouterSelectWarps;
  return d;
}
#endif

} // namespace glm::kernels
