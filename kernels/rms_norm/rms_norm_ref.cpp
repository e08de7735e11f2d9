// rms_norm: CPU reference of (optionally weighted) RMSNorm over the last dimension.
#include "kernels/rms_norm/rms_norm.h"

#include "kernels/common/Math.h"

#include <cmath>
#include <vector>

namespace glm::kernels {

Status rmsNormRef(const RmsNormArgs &a) {
  if (a.rows < 0 || a.dim <= 0) {
    return invalidArgument("rms_norm: rows must be >= 0 and dim > 0");
  }
  GLM_RETURN_IF_ERROR(checkOptionalWeight(a.weight, "rms_norm weight", {a.dim}));
  std::vector<float> w(a.dim, 1.0f);
  if (a.weight.present()) {
    a.weight.loadAll(w.data());
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    const float *x = a.x + r * a.dim;
    float *y = a.out + r * a.dim;
    const double meanSquare = sumSquares(x, a.dim) / static_cast<double>(a.dim);
    const float inv = static_cast<float>(1.0 / std::sqrt(meanSquare + a.eps));
    for (int64_t i = 0; i < a.dim; ++i) {
      y[i] = w[i] * (x[i] * inv);
    }
  }
  return Status::success();
}

} // namespace glm::kernels
