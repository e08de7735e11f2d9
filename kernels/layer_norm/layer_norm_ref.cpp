// layer_norm: CPU reference of LayerNorm (biased variance) with optional affine weight and bias.
#include "kernels/layer_norm/layer_norm.h"

#include <cmath>
#include <vector>

namespace glm::kernels {

Status layerNormRef(const LayerNormArgs &a) {
  if (a.rows < 0 || a.dim <= 0) {
    return invalidArgument("layer_norm: rows must be >= 0 and dim > 0");
  }
  GLM_RETURN_IF_ERROR(checkOptionalWeight(a.weight, "layer_norm weight", {a.dim}));
  GLM_RETURN_IF_ERROR(checkOptionalWeight(a.bias, "layer_norm bias", {a.dim}));
  std::vector<float> w(a.dim, 1.0f);
  std::vector<float> b(a.dim, 0.0f);
  if (a.weight.present()) {
    a.weight.loadAll(w.data());
  }
  if (a.bias.present()) {
    a.bias.loadAll(b.data());
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    const float *x = a.x + r * a.dim;
    float *y = a.out + r * a.dim;
    double sum = 0.0;
    for (int64_t i = 0; i < a.dim; ++i) {
      sum += x[i];
    }
    const double mean = sum / static_cast<double>(a.dim);
    double var = 0.0;
    for (int64_t i = 0; i < a.dim; ++i) {
      const double d = x[i] - mean;
      var += d * d;
    }
    var /= static_cast<double>(a.dim);
    const double inv = 1.0 / std::sqrt(var + a.eps);
    for (int64_t i = 0; i < a.dim; ++i) {
      y[i] = static_cast<float>((x[i] - mean) * inv) * w[i] + b[i];
    }
  }
  return Status::success();
}

} // namespace glm::kernels
