// mhc_post: the launch contract of the mHC residual update that writes a sub-block's output back
// into the hc streams.
//
//   y        f32 [tokens, hidden]        sub-block (attention or MLP) output
//   residual f32 [tokens, hc, hidden]    R: the streams mhc_pre read
//   post     f32 [tokens, hc]
//   comb     f32 [tokens, hc, hc]        comb[t][i][j] (from mhc_pre)
//   out      f32 [tokens, hc, hidden]    may alias residual
//
//   out[t][j] = post[t][j] · y[t] + Σ_i comb[t][i][j] · R[t][i]
//
// Note the transpose: new stream j sums the old streams i down column j of comb (HF:
// comb.transpose(-1, -2) @ residual).
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct MhcPostArgs {
  const float *y = nullptr;
  const float *residual = nullptr;
  const float *post = nullptr;
  const float *comb = nullptr;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t hcMult = 0;
  int64_t hidden = 0;
};

Status mhcPostRef(const MhcPostArgs &args);

} // namespace glm::kernels
