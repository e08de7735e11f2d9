// Scalar conversions between fp32 and the narrow float formats checkpoints store: bf16, f16 and
// fp8 e4m3fn.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace glm::kernels {

/// bf16 is the upper half of an fp32, so widening is a shift and exact.
inline float bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

/// fp32 -> bf16, round to nearest even (what torch's .to(bfloat16) does); NaN stays a quiet NaN.
inline uint16_t floatToBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The fp32 value nearest to x that bf16 can hold.
inline float roundToBf16(float x) { return bf16ToFloat(floatToBf16(x)); }

/// double -> bf16, rounded once to nearest even (no detour through fp32, whose rounding could
/// decide a tie differently); NaN stays a quiet NaN, overflow becomes infinity.
inline uint16_t doubleToBf16(double x) {
  if (std::isnan(x)) {
    return 0x7FC0u;
  }
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0x0000u;
  const double a = std::fabs(x);
  if (a < 0x1p-126) {
    // Subnormal range: a multiple of 2^-133; 128 becomes the smallest normal, whose code is 128.
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 133))));
  }
  int e = 0;
  const double fraction = std::frexp(a, &e); // a = fraction * 2^e, fraction in [0.5, 1)
  int exponent = e - 1;
  double m = std::nearbyint((2.0 * fraction - 1.0) * 128.0); // default rounding: nearest even
  if (m == 128.0) {
    m = 0.0;
    ++exponent;
  }
  if (exponent > 127) {
    return static_cast<uint16_t>(sign | 0x7F80u);
  }
  return static_cast<uint16_t>(sign | ((exponent + 127) << 7) | static_cast<uint16_t>(m));
}

/// IEEE binary16 -> fp32, exact (subnormals, infinities and NaN included).
inline float f16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// double -> IEEE binary16, rounded once to nearest even (subnormals included); NaN stays a quiet
/// NaN, magnitudes from 65520 up become infinity.
inline uint16_t doubleToF16(double x) {
  if (std::isnan(x)) {
    return 0x7E00u;
  }
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0x0000u;
  const double a = std::fabs(x);
  if (a < 0x1p-14) {
    // Subnormal range: a multiple of 2^-24; 1024 becomes the smallest normal, whose code is 1024.
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  const double fraction = std::frexp(a, &e);
  int exponent = e - 1;
  double m = std::nearbyint((2.0 * fraction - 1.0) * 1024.0);
  if (m == 1024.0) {
    m = 0.0;
    ++exponent;
  }
  if (exponent > 15) {
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | static_cast<uint16_t>(m));
}

/// fp8 e4m3fn (OCP "E4M3", torch.float8_e4m3fn) -> fp32, exact. Bias 7, no infinities; S.1111.111
/// is NaN, so the largest finite magnitude is 448.
inline float fp8E4m3ToFloat(uint8_t v) {
  const bool negative = (v & 0x80u) != 0;
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9); // subnormal: m/8 * 2^-6
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10); // 1.m * 2^(e-7)
  }
  return negative ? -magnitude : magnitude;
}

/// fp32 -> fp8 e4m3fn, round to nearest even, saturating finite values beyond 448 to +-448 (the
/// DeepSeek/GLM fp8 quantizers clamp before casting); NaN and infinities become NaN.
inline uint8_t floatToFp8E4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  if (std::isnan(x) || std::isinf(x)) {
    return static_cast<uint8_t>(sign | 0x7Fu);
  }
  const float a = std::fabs(x);
  if (a >= 448.0f) {
    return static_cast<uint8_t>(sign | 0x7Eu);
  }
  if (a < std::ldexp(1.0f, -6)) {
    // Subnormal range: a multiple of 2^-9. A result of 8 is the smallest normal, whose code is 8.
    const float m = std::nearbyint(std::ldexp(a, 9)); // default rounding mode: to nearest even
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(m));
  }
  int e = 0;
  const float fraction = std::frexp(a, &e); // a = fraction * 2^e, fraction in [0.5, 1)
  int exponent = e - 1;                     // a = (2 * fraction) * 2^exponent
  int m = static_cast<int>(std::nearbyint((2.0f * fraction - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exponent;
  }
  const int code = ((exponent + 7) << 3) | m;
  return static_cast<uint8_t>(sign | (code > 0x7E ? 0x7E : code));
}

} // namespace glm::kernels
