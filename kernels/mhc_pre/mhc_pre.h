// mhc_pre: the launch contract of the mHC mixer (HF Glm5NextTextHyperConnection), which turns the
// hc residual streams into the sub-block input and the weights mhc_post applies afterwards.
//
//   streams f32 [tokens, hc, hidden]        X[t][s] = stream s of token t
//   fn          [(2+hc)·hc, hc·hidden]      hc_{attn,ffn}_fn
//   base        [(2+hc)·hc]                 hc_{attn,ffn}_base
//   scale       [3]                         hc_{attn,ffn}_scale
//   pre     f32 [tokens, hc]                optional output
//   post    f32 [tokens, hc]
//   comb    f32 [tokens, hc, hc]            comb[t][i][j]: weight of old stream i in new stream j
//   x       f32 [tokens, hidden]
//
// Per token (glm53_arch.md §2.3):
//   a     = flatten(X[t])                  stream-major, hc·hidden values
//   a     = a · rsqrt(mean(a²) + normEps)  unweighted RMSNorm, normEps = rms_norm_eps
//   m     = fn · a                         (2+hc)·hc mixing logits
//   pre   = sigmoid(m[0:hc]·scale[0] + base[0:hc]) + hcEps
//   post  = 2 · sigmoid(m[hc:2hc]·scale[1] + base[hc:2hc])
//   C     = m[2hc:]·scale[2] + base[2hc:]  viewed [hc, hc] row-major
//   C     = softmax over each row (j) + hcEps
//   C     = C / (column sums + hcEps)
//   repeat sinkhornIters − 1 times: C = C / (row sums + hcEps); C = C / (column sums + hcEps)
//   comb  = C                              (Sinkhorn-Knopp: close to doubly stochastic)
//   x     = Σ_s pre[s] · X[t][s]
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"

#include <cstdint>

namespace glm::kernels {

/// The most Sinkhorn iterations a step may ask for: far above any checkpoint (GLM-5.3 uses 20),
/// low enough that a hostile plan cannot stall a token for minutes.
inline constexpr int64_t kMhcMaxSinkhornIters = 10000;

struct MhcPreArgs {
  const float *streams = nullptr;
  WeightView fn;
  WeightView base;
  WeightView scale;
  float *pre = nullptr; // optional
  float *post = nullptr;
  float *comb = nullptr;
  float *x = nullptr;
  int64_t tokens = 0;
  int64_t hcMult = 0;
  int64_t hidden = 0;
  int64_t sinkhornIters = 20; // hc_sinkhorn_iters, at most kMhcMaxSinkhornIters
  float normEps = 1e-5f;      // rms_norm_eps
  float hcEps = 1e-6f;        // hc_eps
};

Status mhcPreRef(const MhcPreArgs &args);

} // namespace glm::kernels
