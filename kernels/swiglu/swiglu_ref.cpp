// swiglu: CPU reference of the clamped SwiGLU MLP, built from three linear products.
#include "kernels/swiglu/swiglu.h"

#include "kernels/common/Math.h"
#include "kernels/linear/linear.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

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
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = std::min(gate[i], a.limit);
    const float u = std::clamp(up[i], -a.limit, a.limit);
    gate[i] = silu(g) * u;
  }
  return linearRef({.x = gate.data(),
                    .weight = a.down,
                    .y = a.out,
                    .rows = a.tokens,
                    .inFeatures = a.intermediate,
                    .outFeatures = a.hidden});
}

} // namespace glm::kernels
