// Seeded random test data for the reference-kernel tests (same values on every platform).
#pragma once

#include "base/Random.h"
#include "kernels/common/FloatFormats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace glm::kernels {

/// n values, roughly normal with standard deviation `scale`.
inline std::vector<float> randomFloats(SplitMix64 &rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (float &x : v) {
    x = rng.normal() * scale;
  }
  return v;
}

/// The bf16 encodings of `values`.
inline std::vector<uint16_t> toBf16(const std::vector<float> &values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = floatToBf16(values[i]);
  }
  return out;
}

/// `values` rounded to bf16 and widened back: what a bf16 weight holds.
inline std::vector<float> bf16Rounded(const std::vector<float> &values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = roundToBf16(values[i]);
  }
  return out;
}

/// ‖a − b‖∞ / max(‖b‖∞, tiny): the comparisons below bound the worst element.
inline double maxRelativeError(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(ref, 1e-30);
}

} // namespace glm::kernels
