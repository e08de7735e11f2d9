// short_conv: CPU reference of the causal depthwise conv over [state | chunk], then SiLU.
#include "kernels/short_conv/short_conv.h"

#include "kernels/common/Math.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

Status shortConvRef(const ShortConvArgs &a) {
  const int64_t k = a.kernelSize;
  if (a.tokens < 0 || a.channels <= 0 || k <= 0) {
    return invalidArgument("short_conv: tokens >= 0, channels > 0 and kernel > 0 are required");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.weight, "short_conv weight", {a.channels, k}));
  const int64_t history = k - 1;
  std::vector<float> w(a.channels * k);
  a.weight.loadAll(w.data());

  // Per channel: u = [state (K−1 values) | this chunk (T values)], z_t = Σ_j w[j]·u[t + j].
  std::vector<float> u(history + a.tokens);
  for (int64_t c = 0; c < a.channels; ++c) {
    for (int64_t j = 0; j < history; ++j) {
      u[j] = a.state != nullptr ? a.state[c * history + j] : 0.0f;
    }
    for (int64_t t = 0; t < a.tokens; ++t) {
      u[history + t] = a.x[t * a.channels + c];
    }
    const float *wc = w.data() + c * k;
    for (int64_t t = 0; t < a.tokens; ++t) {
      const float z = static_cast<float>(dot(wc, u.data() + t, k));
      a.out[t * a.channels + c] = a.activation == ConvActivation::Silu ? silu(z) : z;
    }
    if (a.state != nullptr) {
      std::copy(u.end() - history, u.end(), a.state + c * history);
    }
  }
  return Status::success();
}

} // namespace glm::kernels
