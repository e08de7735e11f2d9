// stream_mean: CPU reference of the unweighted mean over the mHC streams.
#include "kernels/stream_mean/stream_mean.h"

namespace glm::kernels {

Status streamMeanRef(const StreamMeanArgs &a) {
  if (a.tokens < 0 || a.hcMult <= 0 || a.hidden <= 0) {
    return invalidArgument("stream_mean: tokens >= 0, hc_mult > 0 and hidden > 0 are required");
  }
  for (int64_t t = 0; t < a.tokens; ++t) {
    const float *x = a.streams + t * a.hcMult * a.hidden;
    for (int64_t d = 0; d < a.hidden; ++d) {
      double sum = 0.0;
      for (int64_t s = 0; s < a.hcMult; ++s) {
        sum += x[s * a.hidden + d];
      }
      a.out[t * a.hidden + d] = static_cast<float>(sum / static_cast<double>(a.hcMult));
    }
  }
  return Status::success();
}

} // namespace glm::kernels
