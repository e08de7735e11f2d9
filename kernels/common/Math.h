// Scalar helpers shared by the reference kernels: double-accumulated dot products, sigmoid, SiLU.
#pragma once

#include <cmath>
#include <cstdint>

namespace glm::kernels {

/// Σ_i a[i]·b[i], accumulated in double. The reference kernels accumulate every reduction in double
/// so that they sit closer to the exact value than any fp32 kernel they are used to check; four
/// independent partial sums keep the loop pipelined.
inline double dot(const float *a, const float *b, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i]) * b[i];
    s1 += static_cast<double>(a[i + 1]) * b[i + 1];
    s2 += static_cast<double>(a[i + 2]) * b[i + 2];
    s3 += static_cast<double>(a[i + 3]) * b[i + 3];
  }
  for (; i < n; ++i) {
    s0 += static_cast<double>(a[i]) * b[i];
  }
  return (s0 + s1) + (s2 + s3);
}

/// Σ_i a[i]², accumulated in double.
inline double sumSquares(const float *a, int64_t n) { return dot(a, a, n); }

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// SiLU(x) = x·sigmoid(x).
inline float silu(float x) { return x * sigmoid(x); }

} // namespace glm::kernels
