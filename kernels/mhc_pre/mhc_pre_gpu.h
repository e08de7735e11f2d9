// mhc_pre on the GPU: the argument struct the kernels take by value, and their grid rule.
//
//   streams T   [tokens, hc, hidden]      X[t][s]
//   fn      W   [(2+hc)·hc, hc·hidden]    hc_{attn,ffn}_fn
//   base    W   [(2+hc)·hc]
//   scale   W   [3]
//   pre     f32 [tokens, hc]              optional (null: not written)
//   post    f32 [tokens, hc]
//   comb    f32 [tokens, hc, hc]
//   x       T   [tokens, hidden]
//
// One launch per step does the whole mixer (projection, Sinkhorn, collapse); hc is a template
// parameter (4 for GLM-5.3). 256 threads a block. The projection is f32 (HF upcasts fn and
// normalises X in f32), so is everything up to comb; with T = bf16, x is rounded once at the end,
// as HF's bf16(Σ_s pre[s]·X[s]). Two kernels:
//
//   mhcPreDecodeKernel   (tokens <= kMhcPreDecodeMaxTokens) a cluster of kMhcPreCluster blocks per
//       token, grid kMhcPreCluster · tokens. Block k of the cluster owns the k-th eighth of the
//       hidden positions of every stream: it reads that slice of fn and of the streams once,
//       reduces its partial mixing dots and sum of squares over the block, and the cluster adds
//       the eight partials through distributed shared memory (no global scratch, no second
//       launch), so a token's 786 KB of bf16 fn streams through eight SMs. Every block then knows
//       the RMS scale and the pre weights and writes its slice of x = Σ_s pre[s]·X[s]; block 0's
//       last warp also writes pre and post and runs Sinkhorn for comb, while its other warps
//       collapse.
//   mhcPrePrefillKernel  one block per kMhcPrePrefillTokens tokens, grid ceil(tokens / 16): each
//       thread carries 4 tokens' dot products, 4 groups of 64 threads cover 16 tokens, so fn is
//       read from L2 once per 16 tokens and no block waits on another; 2048 rows fill one wave.
//
// Folded with the mhc_post before it (plan-fuse-mhc: the streams this mixer reads are that
// mhc_post's result), the decode kernel's twin mhcPostPreDecodeKernel computes the streams itself,
//
//   y         T   [tokens, hidden]        the previous sub-block's output
//   residual  T   [tokens, hc, hidden]    the streams the previous mhc_pre read
//   lastPost  f32 [tokens, hc]            its post and comb
//   lastComb  f32 [tokens, hc, hc]
//   newStreams T  [tokens, hc, hidden]    mhc_post's result: written, then mixed (never residual)
//
// each thread its chunks with mhc_post's own arithmetic (mhc::postStream, so the bits are those of
// the two launches), stores them and mixes them: one launch and one pass over the streams instead
// of two. `streams` is unused there. A prefill step runs mhcPostKernel, then mhcPrePrefillKernel.
//
// Folded with the RMSNorm after it (plan-fuse-mhc-norm: the sub-block's input norm, weighted, over
// the whole row of x), the decode kernels' twins mhcPreNormDecodeKernel and
// mhcPostPreNormDecodeKernel (NW: the norm weight's type) also write
//
//   inputNormWeight NW [hidden]
//   normed          T  [tokens, hidden]   rms_norm(x) with eps inputNormEps (never x itself)
//
// Each thread arrives at the cluster barrier once its slice of x is stored (block 0's Sinkhorn
// warp at once, as it stores none), so after the wait every block reads the whole row of x from
// L2 and sums its squares exactly as rmsNormKernel's block does (kernels/rms_norm/rms_norm.cuh:
// rmsNormRow), then writes the normalised values of its own slice: the bits of the two launches,
// one barrier wait and one L2 round trip later than the mixer alone, and no launch of its own. A
// prefill step runs rmsNormKernel after its mixer.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

constexpr int kMhcPreCluster = 8; // decode: blocks per token (the portable cluster size limit)
constexpr int kMhcPreThreads = 256;
constexpr int kMhcPrePrefillTokens = 16; // prefill: tokens per block
// Up to here eight SMs per token beat one block per 16 tokens (which takes as long for 16 tokens as
// for 2048): decode batches use the decode kernel.
constexpr int kMhcPreDecodeMaxTokens = 64;

struct MhcPreGpuArgs {
  const void *streams;
  const void *fn;
  const void *base;
  const void *scale;
  void *pre; // optional
  void *post;
  void *comb;
  void *x;
  int64_t tokens;
  int64_t hidden;
  int32_t sinkhornIters;
  float normEps;
  float hcEps;
  // mhcPostPreDecodeKernel only (null elsewhere): the folded mhc_post's operands and result.
  const void *y;
  const void *residual;
  const void *lastPost;
  const void *lastComb;
  void *newStreams;
  // The *NormDecodeKernels only (null elsewhere): the folded RMSNorm's weight, eps and result.
  const void *inputNormWeight;
  void *normed;
  float inputNormEps;
};

#ifndef __CUDACC_RTC__
/// Whether `tokens` rows take mhcPrePrefillKernel (else mhcPreDecodeKernel).
inline bool mhcPreUsesPrefill(int64_t tokens) { return tokens > kMhcPreDecodeMaxTokens; }

/// The grid of the kernel the rule picks, or of the one `prefill` names (tests, benchmarks).
inline LaunchDims mhcPreLaunch(int64_t tokens, bool prefill) {
  LaunchDims d;
  d.grid[0] = prefill ? ceilDiv(tokens, kMhcPrePrefillTokens) : kMhcPreCluster * tokens;
  d.block[0] = kMhcPreThreads;
  return d;
}

inline LaunchDims mhcPreLaunch(int64_t tokens) {
  return mhcPreLaunch(tokens, mhcPreUsesPrefill(tokens));
}
#endif

} // namespace glm::kernels
