// dsa_indexer: the launch contract of GLM-5.3's lightning indexer with KPool compression (HF
// Glm5NextTextIndexer), which picks the tokens each query of a sparse-attention layer attends to.
//
//   q           f32 [tokens, heads, d]        qI = wq_b(q_resid)
//   k           f32 [tokens, d]               kI = LayerNorm(wk(x); k_norm, eps 1e-6)
//   gate        f32 [tokens, d]               gI = index_kpool_compress_gate · x
//   headWeights f32 [tokens, heads]           weights_proj(x), before the heads^-½ scale
//   ape             [kpool, d]                index_kpool_compress_ape
//   cache           DsaIndexerCache           in/out: closed pools' keys + the open pool's rows
//   selected    i32 [tokens, width]           width = topk + (alwaysSelectTail ? kpool − 1 : 0)
//   poolScores  f32 [tokens, poolScoresStride] optional: I[p] of every closed pool p, −inf for
//                                             pools that are not (yet) candidates of the query
//
// Tokens are grouped into pools of kpool consecutive positions: pool p = {p·R, …, p·R + R − 1},
// R = kpool. When a pool's last token arrives the pool closes and its key is fixed for good:
//   Kp[p][c] = Σ_r softmax_r( gI[p·R + r][c] + ape[r][c] ) · kI[p·R + r][c]   (softmax over the R
//                                                                           positions, per channel)
// For the query at absolute position t (the first token of a call sits at cache->length):
//   I[p]   = Σ_h headWeights[h]·heads^-½ · relu( q[h] · Kp[p] · d^-½ )   over closed pools p
//   candidates: pools whose last token is ≤ t, i.e. p < (t + 1) / R
//   chosen: the min(topk / R, #candidates) candidates of highest I; equal scores at the cut are
//           resolved by tieRule (ReLU makes exact-zero ties common when few heads score a pool)
//   tail:   positions R·⌊(t + 1)/R⌋ … t, the (t + 1) mod R tokens of the open pool (if
//           alwaysSelectTail)
// Row layout (absolute positions, −1 = empty slot): slots [0, topk) hold the chosen pools' tokens
// in descending I order, −1 padded; slots [topk, topk + R − 1) hold the tail, −1 padded. HF's [S,
// topk + R − 1] output holds the same set (HF moves the tail forward when there are fewer than topk
// / R pools; the attention mask is a set either way).
//
// Chunked prefill: each call appends its tokens to `cache` (closing pools as they complete) before
// scoring, so calls over consecutive chunks select exactly what one call over the whole sequence
// would. The cache keeps one pooled key per closed pool plus the raw kI/gI of the open pool's
// ≤ R − 1 tokens: exact, since a closed pool's key never changes.
#pragma once

#include "base/Status.h"
#include "kernels/common/TopK.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

/// One sequence's indexer state for one sparse-attention layer. The caller owns the memory.
struct DsaIndexerCache {
  float *poolKeys = nullptr; // [maxPools, d]: Kp of pool p in row p, for p < length / kpool
  int64_t maxPools = 0;
  float *openKeys =
      nullptr; // [kpool, d]: kI of positions kpool·⌊length/kpool⌋ + r, r < length % kpool
  float *openGates = nullptr; // [kpool, d]: gI of the same positions
  int64_t length = 0;         // tokens appended so far = the next token's absolute position
};

struct DsaIndexerArgs {
  const float *q = nullptr;
  const float *k = nullptr;
  const float *gate = nullptr;
  const float *headWeights = nullptr;
  WeightView ape;
  DsaIndexerCache *cache = nullptr;
  int32_t *selected = nullptr;
  float *poolScores = nullptr; // optional; poolScoresStride ≥ (cache->length + tokens) / kpool
  int64_t poolScoresStride = 0;
  int64_t tokens = 0;
  int64_t heads = 0;   // index_n_heads
  int64_t headDim = 0; // index_head_dim
  int64_t topk = 0;    // index_topk (tokens; topk / kpool pools)
  int64_t kpool = 0;   // index_kpool
  bool alwaysSelectTail = true;
  /// LowerIndex is the contract; TorchCpu reproduces HF's CPU run, where torch.topk ranks all
  /// closed pools (non-candidates at float32 min) by their fp32 scores.
  TopkTieRule tieRule = TopkTieRule::LowerIndex;
};

/// Slots per query row of `selected`.
inline int64_t dsaIndexerWidth(int64_t topk, int64_t kpool, bool alwaysSelectTail) {
  return topk + (alwaysSelectTail ? kpool - 1 : 0);
}

/// Fails if the arguments disagree or the cache has no room for the pools this call closes.
Status dsaIndexerRef(const DsaIndexerArgs &args);

} // namespace glm::kernels
