// stream_mean: the launch contract of the final mHC stream collapse (HF Glm5NextTextHyperHead).
//
//   streams f32 [tokens, hc, hidden]
//   out     f32 [tokens, hidden]
//
//   out[t] = (1/hc) Σ_s streams[t][s]
//
// GLM-5.3 collapses its streams with an unweighted mean (no hc_head weights, unlike DeepSeek-V4);
// the final RMSNorm and lm_head follow as rms_norm and linear.
#pragma once

#include "base/Status.h"

#include <cstdint>

namespace glm::kernels {

struct StreamMeanArgs {
  const float *streams = nullptr;
  float *out = nullptr;
  int64_t tokens = 0;
  int64_t hcMult = 0;
  int64_t hidden = 0;
};

Status streamMeanRef(const StreamMeanArgs &args);

} // namespace glm::kernels
