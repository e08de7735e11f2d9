// gated_rms_norm: CPU reference of w ⊙ RMSNorm(x) ⊙ sigmoid(gate), per row.
#include "kernels/gated_rms_norm/gated_rms_norm.h"

#include "kernels/common/Math.h"

#include <cmath>
#include <vector>

namespace glm::kernels {

Status gatedRmsNormRef(const GatedRmsNormArgs &a) {
  if (a.rows < 0 || a.dim <= 0) {
    return invalidArgument("gated_rms_norm: rows must be >= 0 and dim > 0");
  }
  GLM_RETURN_IF_ERROR(checkWeight(a.weight, "gated_rms_norm weight", {a.dim}));
  std::vector<float> w(a.dim);
  a.weight.loadAll(w.data());
  for (int64_t r = 0; r < a.rows; ++r) {
    const float *x = a.x + r * a.dim;
    const float *gate = a.gate + r * a.dim;
    float *y = a.out + r * a.dim;
    const double inv = 1.0 / std::sqrt(sumSquares(x, a.dim) / static_cast<double>(a.dim) + a.eps);
    for (int64_t i = 0; i < a.dim; ++i) {
      y[i] = static_cast<float>(w[i] * (x[i] * inv) * sigmoid(static_cast<double>(gate[i])));
    }
  }
  return Status::success();
}

} // namespace glm::kernels
