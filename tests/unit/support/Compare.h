// Comparisons the numerical tests share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace glm::testing {

/// ‖a − b‖₂ / ‖b‖₂ over n values, accumulated in double.
inline double relativeL2(const float *a, const float *b, int64_t n) {
  double diff = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

} // namespace glm::testing
