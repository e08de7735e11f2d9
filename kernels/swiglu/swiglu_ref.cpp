// swiglu: CPU reference of the clamped SwiGLU activation, and of the MLP built around it from three
// linear products.
#include "kernels/swiglu/swiglu.h"

#include "kernels/common/Math.h"
#include "kernels/linear/linear.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

Status swigluActivationRef(const SwigluActivationArgs &a) {
  if (a.gate == nullptr || a.up == nullptr || a.out == nullptr || a.count < 0 || !(a.limit > 0)) {
    return invalidArgument("swiglu activation: gate, up, out, count >= 0 and limit > 0 are "
                           "required");
  }
  for (int64_t i = 0; i < a.count; ++i) {
    const float g = std::min(a.gate[i], a.limit);
    const float u = std::clamp(a.up[i], -a.limit, a.limit);
    a.out[i] = silu(g) * u;
  }
  return Status::success();
}

Status swigluRef(const SwigluArgs &a) {
  if (a.tokens < 0 || a.hidden <= 0 || a.intermediate <= 0 || !(a.limit > 0)) {
    return invalidArgument("swiglu: tokens >= 0, hidden and intermediate > 0, limit > 0 are "
                           "required");
  }
  std::vector<float> gate(a.tokens * a.intermediate);
  std::vector<float> up(a.tokens * a.intermediate);
  GLM_RETURN_IF_ERROR(linearRef({.x = a.x,
                                 .weight = a.gate,
                                 .y = gate.data(),
                                 .rows = a.tokens,
                                 .inFeatures = a.hidden,
                                 .outFeatures = a.intermediate}));
  GLM_RETURN_IF_ERROR(linearRef({.x = a.x,
                                 .weight = a.up,
                                 .y = up.data(),
                                 .rows = a.tokens,
                                 .inFeatures = a.hidden,
                                 .outFeatures = a.intermediate}));
  GLM_RETURN_IF_ERROR(swigluActivationRef({.gate = gate.data(),
                                           .up = up.data(),
                                           .out = gate.data(),
                                           .count = static_cast<int64_t>(gate.size()),
                                           .limit = a.limit}));
  return linearRef({.x = gate.data(),
                    .weight = a.down,
                    .y = a.out,
                    .rows = a.tokens,
                    .inFeatures = a.intermediate,
                    .outFeatures = a.hidden});
}

} // namespace glm::kernels
