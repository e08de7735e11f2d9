// SplitMix64: a tiny seeded generator whose output is fixed by its definition, so a seed gives the
// same bytes on every platform (std's distributions are implementation-defined).
#pragma once

#include <cstdint>

namespace glm {

class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, n); the modulo bias (below 2^-40 for small n) does not matter here.
  uint64_t below(uint64_t n) { return next() % n; }
  bool chance(uint64_t percent) { return below(100) < percent; }

  /// Uniform in [0, 1), 24 bits.
  float uniform() { return static_cast<float>(next() >> 40) / 16777216.0f; }

  /// Approximately standard normal: the Irwin-Hall sum of four 16-bit uniforms from one draw,
  /// rescaled to unit variance. Cheap enough for tens of billions of values; tails stop near
  /// 3.5 sigma, which random test weights do not miss.
  float normal() {
    const uint64_t r = next();
    const float sum =
        static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) /
        65536.0f;
    return (sum - 2.0f) * 1.7320508f;
  }

private:
  uint64_t state_;
};

} // namespace glm
