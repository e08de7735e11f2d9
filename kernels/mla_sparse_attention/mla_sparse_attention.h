// mla_sparse_attention: the launch contract of GLM-5.3's NoPE multi-head latent attention over the
// token set the indexer selected (HF Glm5NextTextAttention, eager path).
//
//   q        f32 [tokens, heads, dqk]            q_b(RMSNorm(q_a(x))), dqk = qk_nope_head_dim
//   latent   f32 [tokens, rank]                  c = RMSNorm(kv_a(x)), rank = kv_lora_rank
//   kvB          [heads·(dqk + dv), rank]        kv_b_proj.weight; head h's block is dqk key rows
//                                                Wk_h then dv value rows Wv_h (dv = v_head_dim,
//                                                which may differ from dqk)
//   selected i32 [tokens, selectedWidth]         absolute positions from dsa_indexer, −1 = none
//   cache        MlaLatentCache                  in/out: c of every earlier token
//   out      f32 [tokens, heads·dv]              input of o_proj
//
// Query i sits at absolute position t = cache->length (on entry) + i; the call appends this
// chunk's latents first, so a query can select itself and earlier tokens of its own chunk.
//   K_j,h = Wk_h c_j   V_j,h = Wv_h c_j                       (no RoPE part: NoPE)
//   s_j   = scale · q_h · K_j,h   for j in Sel(t)             scale = qk_head_dim^-½
//   a     = softmax_j(s)                                      over the selected set only
//   o_h   = Σ_j a_j V_j,h
// The reference computes the absorbed form, the same math reassociated: q̃_h = Wk_hᵀ q_h (rank
// values), s_j = scale · q̃_h · c_j, o_h = Wv_h (Σ_j a_j c_j), so only c is cached (rank floats per
// token) as the serving kernels will. Duplicate positions count once (the mask is a set); a query
// with nothing selected outputs zeros; a position after t or beyond the cache is an error.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

/// One sequence's latent rows for one sparse-attention layer. The caller owns the memory.
struct MlaLatentCache {
  float *latents = nullptr; // [maxTokens, rank]: c of absolute position j in row j, j < length
  int64_t maxTokens = 0;
  int64_t length = 0;
};

struct MlaSparseAttentionArgs {
  const float *q = nullptr;
  const float *latent = nullptr;
  WeightView kvB;
  const int32_t *selected = nullptr;
  MlaLatentCache *cache = nullptr;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t qkHeadDim = 0; // qk_nope_head_dim (qk_rope_head_dim is 0)
  int64_t vHeadDim = 0;
  int64_t kvLoraRank = 0;
  int64_t selectedWidth = 0;
  float scale = 0.0f; // qk_head_dim^-½
};

Status mlaSparseAttentionRef(const MlaSparseAttentionArgs &args);

} // namespace glm::kernels
