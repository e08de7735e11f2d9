// quantize_search: the per-group math of the Q4 quantizer (kernels/common/DenseFormats.h) and the
// fp8 e4m3 encoder of the fp8-block quantizer, written once for the host reference
// (quantize_ref.cpp, compiled with -ffp-contract=off) and for a GPU kernel under NVRTC: no std::,
// no library calls, every f32 operation through qMul/qAdd/qSub/qDiv (on the device __fmul_rn &
// co., which NVCC never contracts), f16 rounding by hand.
//
// One group is kQ4Group = 64 f32 source values w. What is stored is (scale, minimum) as f16 and 64
// codes; the value of code q is f32(scale)·q + f32(minimum) (product rounded, then the sum).
//
// Codes (q4RoundCode): for stored scale s > 0 and minimum m, t = (w − m) · (1/s) in f32 (1/s one
// correctly rounded f32 division), clamped to [0, 15], then rounded to the nearest integer with
// ties to even (the add-and-subtract of 2^23, exact for 0 <= t <= 15): q = clamp(rne(t), 0, 15).
// For s == 0 every code is 0 and every value is m (a constant group; also any group whose range
// rounds to scale 0).
//
// The search (q4FitGroup) over candidates (s, m), each rounded to f16 BEFORE its codes and its
// error are computed, so the error compared is that of the bytes that would be stored:
//   1. min-max: s = (hi − lo)/15, m = lo, the plain round-to-nearest quantizer (always first, so
//      the search is never worse than it);
//   2. a 2-D grid of clipped ranges: lo' = lo + a·(hi − lo), hi' = hi − b·(hi − lo) for a, b from
//      Q4Search::clip, a-major (the pair (0, 0) is the min-max candidate itself, not repeated);
//   3. the `refitBest` best candidates so far, each refitted by least squares: with its codes q
//      fixed, (s, m) = argmin Σ (s·q + m − w)², rounded to f16, codes recomputed, repeated up to
//      `refitRounds` times while the error drops (a Lloyd iteration on the affine grid).
// The error of a candidate is Σ (value − w)² accumulated in f32 over 8 lanes (lane i%8, then a
// fixed pairwise sum), identical on the host and the device. The result is the candidate with the
// least error, ties going to the earlier candidate in the order above.
#pragma once

#include "kernels/common/DenseFormats.h"
#include "kernels/common/DeviceTypes.h"

namespace glm::kernels {

// --- f32 arithmetic, one rounding each, never fused --------------------------------------------

GLM_HOST_DEVICE inline float qMul(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GLM_HOST_DEVICE inline float qAdd(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GLM_HOST_DEVICE inline float qSub(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GLM_HOST_DEVICE inline float qDiv(float a, float b) {
#ifdef __CUDACC_RTC__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

GLM_HOST_DEVICE inline uint32_t qFloatBits(float x) {
#ifdef __CUDACC_RTC__
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}
GLM_HOST_DEVICE inline float qBitsFloat(uint32_t u) {
#ifdef __CUDACC_RTC__
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

GLM_HOST_DEVICE inline float qAbs(float x) {
#ifdef __CUDACC_RTC__
  return fabsf(x);
#else
  return __builtin_fabsf(x);
#endif
}

GLM_HOST_DEVICE inline float qInf() { return qBitsFloat(0x7F800000u); }

/// Whether x is neither NaN nor infinite.
GLM_HOST_DEVICE inline bool qIsFinite(float x) {
  return (qFloatBits(x) & 0x7F800000u) != 0x7F800000u;
}

// --- f16 -----------------------------------------------------------------------------------------

/// fp32 -> IEEE binary16, round to nearest even (subnormals included); magnitudes from 65520 up
/// become infinity, NaN a quiet NaN. Equal to FloatFormats.h's doubleToF16(double(x)).
GLM_HOST_DEVICE inline uint16_t qFloatToF16(float x) {
  const uint32_t u = qFloatBits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {
    return static_cast<uint16_t>(sign | 0x7E00u);
  }
  if (a >= 0x477FF000u) { // 65520: halfway between 65504 and 2^16, rounds to infinity
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (a < 0x38800000u) {   // below 2^-14: a multiple of 2^-24 in f16
    if (a < 0x33000000u) { // below 2^-25 (2^-25 itself is a tie, to even: zero)
      return sign;
    }
    const uint32_t exponent = a >> 23; // 102..112
    const uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exponent; // 14..24
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u) != 0)) {
      ++q; // 1024 is the smallest normal's code
    }
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3FFu);
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) {
    ++h; // a carry into the exponent is the right result
  }
  return static_cast<uint16_t>(sign | h);
}

/// IEEE binary16 -> fp32, exact.
GLM_HOST_DEVICE inline float qF16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = qMul(static_cast<float>(mantissa), 5.9604644775390625e-8f); // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1Fu) {
    return qBitsFloat(sign | 0x7F800000u | (mantissa << 13));
  }
  return qBitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// x rounded to the nearest f16, as f32.
GLM_HOST_DEVICE inline float qRoundF16(float x) { return qF16ToFloat(qFloatToF16(x)); }

// --- fp8 e4m3fn ----------------------------------------------------------------------------------

/// fp32 -> fp8 e4m3fn, round to nearest even, finite values beyond ±448 saturating to ±448, NaN
/// and infinities to NaN: FloatFormats.h's floatToFp8E4m3 (the tests compare them), written
/// without branches (selects only) for NVRTC and for speed.
GLM_HOST_DEVICE inline uint8_t qFloatToFp8E4m3(float x) {
  const uint32_t u = qFloatBits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normal: the top 8 exponent and 3 mantissa bits, rounded to nearest even by adding just under
  // half an ulp plus the kept lowest bit (a carry into the exponent is the right result), rebiased
  // from 127 to 7.
  const uint32_t rounded = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  const uint32_t normal = rounded > 0x3C0u + 0x7Eu ? 0x7Eu : rounded - 0x3C0u;
  // Below 2^-6: a multiple of 2^-9, rounded to nearest even by the 2^23 add (|x| · 2^9 < 8 is
  // exact); 8 is the smallest normal's code.
  const float magnitude = qBitsFloat(a);
  const uint32_t subnormal =
      static_cast<uint32_t>(qSub(qAdd(qMul(magnitude, 512.0f), 8388608.0f), 8388608.0f));
  uint32_t code = a < 0x3C800000u ? subnormal : normal;
  code = a >= 0x7F800000u ? 0x7Fu : code;
  return static_cast<uint8_t>(sign | code);
}

// --- one group -----------------------------------------------------------------------------------

/// The code of w, as an f32 integer in 0..15, for a stored scale > 0 with inverse = 1/scale.
/// Written without comparisons so that compilers vectorize it (GCC will not turn `t < 0 ? 0 : t`
/// into a max without -ffinite-math-only): max(t, 0) = (t + |t|)/2 and min(q, 15) =
/// 15 − max(15 − q, 0) are exact for finite t and integer q, and rounding before the upper clamp
/// gives the same code as clamping first.
GLM_HOST_DEVICE inline float q4RoundCode(float w, float minimum, float inverse) {
  float t = qMul(qSub(w, minimum), inverse);
  t = qMul(0.5f, qAdd(t, qAbs(t)));                       // max(t, 0)
  float q = qSub(qAdd(t, 8388608.0f), 8388608.0f);        // nearest integer, ties to even
  const float over = qSub(15.0f, q);                      // integers: exact
  return qSub(15.0f, qMul(0.5f, qAdd(over, qAbs(over)))); // min(q, 15)
}

/// The stored value of code q (DenseFormats.h): the product rounded to f32, then the sum.
GLM_HOST_DEVICE inline float q4Value(float scale, float q, float minimum) {
  return qAdd(qMul(scale, q), minimum);
}

/// Σ (value − w)² over the group for stored (scale, minimum) (f16 values widened to f32).
GLM_HOST_DEVICE inline float q4GroupError(const float *w, float scale, float minimum) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (scale == 0.0f) {
    for (int i = 0; i < kQ4Group; i += 8) {
      for (int l = 0; l < 8; ++l) {
        const float e = qSub(minimum, w[i + l]);
        acc[l] = qAdd(acc[l], qMul(e, e));
      }
    }
  } else {
    const float inverse = qDiv(1.0f, scale);
    for (int i = 0; i < kQ4Group; i += 8) {
      for (int l = 0; l < 8; ++l) {
        const float q = q4RoundCode(w[i + l], minimum, inverse);
        const float e = qSub(q4Value(scale, q, minimum), w[i + l]);
        acc[l] = qAdd(acc[l], qMul(e, e));
      }
    }
  }
  return qAdd(qAdd(qAdd(acc[0], acc[1]), qAdd(acc[2], acc[3])),
              qAdd(qAdd(acc[4], acc[5]), qAdd(acc[6], acc[7])));
}

/// What the search does. The default is what `quantizeQ4` uses (docs/quantization.md measures
/// it); `q4MinMax()` is plain min-max round-to-nearest, the baseline.
struct Q4Search {
  static constexpr int kMaxClip = 8;
  static constexpr int kMaxRefit = 4;
  /// Fractions of the range clipped off each end; clip[0] must be 0 (the min-max candidate). The
  /// winners of a dense grid on Gaussian and Student-t groups clip 0-7% off an end, rarely more:
  /// with 16 levels over 64 values, clipping the extreme value costs more than the finer step
  /// saves.
  float clip[kMaxClip] = {0.0f, 0.02f, 0.04f, 0.06f, 0.0f, 0.0f, 0.0f, 0.0f};
  int clipCount = 4;
  /// How many of the best grid candidates get least-squares refits, and at most how many rounds
  /// each (a round stops the refit when it does not lower the error).
  int refitBest = 2;
  int refitRounds = 3;
};

GLM_HOST_DEVICE inline Q4Search q4MinMax() {
  Q4Search s;
  s.clipCount = 1;
  s.refitBest = 0;
  return s;
}

/// A group's stored parameters (f16 bits) and the error of the stored group.
struct Q4GroupFit {
  uint16_t scale = 0;
  uint16_t minimum = 0;
  float error = 0.0f;
};

namespace q4detail {

struct Candidate {
  float scale;   // f16-rounded, > 0
  float minimum; // f16-rounded
  float error;
};

/// The sums a least-squares refit needs for a candidate's codes q, with d = w − minimum (values
/// taken relative to the minimum so that a group far from zero does not cancel): Σq and Σq² are
/// integers below 2^24, exact in f32.
struct LsSums {
  float sq, sqq, sd, sqd;
};

GLM_HOST_DEVICE inline float laneSum(const float *acc) {
  return qAdd(qAdd(qAdd(acc[0], acc[1]), qAdd(acc[2], acc[3])),
              qAdd(qAdd(acc[4], acc[5]), qAdd(acc[6], acc[7])));
}

/// q4GroupError for scale > 0 (the same value, bit for bit), and the refit sums of its codes.
GLM_HOST_DEVICE inline float errorAndSums(const float *w, float scale, float minimum,
                                          LsSums *sums) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float sq[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float sqq[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float sd[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  float sqd[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const float inverse = qDiv(1.0f, scale);
  for (int i = 0; i < kQ4Group; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const float q = q4RoundCode(w[i + l], minimum, inverse);
      const float e = qSub(q4Value(scale, q, minimum), w[i + l]);
      const float d = qSub(w[i + l], minimum);
      acc[l] = qAdd(acc[l], qMul(e, e));
      sq[l] = qAdd(sq[l], q);
      sqq[l] = qAdd(sqq[l], qMul(q, q));
      sd[l] = qAdd(sd[l], d);
      sqd[l] = qAdd(sqd[l], qMul(q, d));
    }
  }
  sums->sq = laneSum(sq);
  sums->sqq = laneSum(sqq);
  sums->sd = laneSum(sd);
  sums->sqd = laneSum(sqd);
  return laneSum(acc);
}

GLM_HOST_DEVICE inline bool storable(float scale, float minimum) {
  return qIsFinite(scale) && qIsFinite(minimum);
}

/// The candidate for range [lo, hi], rounded to f16; error +inf when f16 cannot hold it.
GLM_HOST_DEVICE inline Candidate rangeCandidate(const float *w, float lo, float hi) {
  Candidate c;
  c.scale = qRoundF16(qDiv(qSub(hi, lo), 15.0f));
  c.minimum = qRoundF16(lo);
  c.error = storable(c.scale, c.minimum) ? q4GroupError(w, c.scale, c.minimum) : qInf();
  return c;
}

/// Keeps best[0, count) sorted by error, earlier candidates first among equals.
GLM_HOST_DEVICE inline void keepBest(Candidate *best, int count, const Candidate &c) {
  int i = count;
  while (i > 0 && c.error < best[i - 1].error) {
    --i;
  }
  if (i >= count) {
    return;
  }
  for (int j = count - 1; j > i; --j) {
    best[j] = best[j - 1];
  }
  best[i] = c;
}

/// The (scale, minimum) minimising Σ (s·q + m − w)² for the codes q that `sums` describes (taken
/// relative to `from`'s minimum), rounded to f16; false when they do not give a positive,
/// storable scale (all codes equal, say).
GLM_HOST_DEVICE inline bool leastSquares(const Candidate &from, const LsSums &sums,
                                         Candidate *out) {
  const float n = static_cast<float>(kQ4Group);
  const float det = qSub(qMul(n, sums.sqq), qMul(sums.sq, sums.sq)); // exact
  if (!(det > 0.0f)) {
    return false;
  }
  const float scale = qDiv(qSub(qMul(n, sums.sqd), qMul(sums.sq, sums.sd)), det);
  const float offset = qDiv(qSub(sums.sd, qMul(scale, sums.sq)), n);
  out->scale = qRoundF16(scale);
  out->minimum = qRoundF16(qAdd(from.minimum, offset));
  return out->scale > 0.0f && storable(out->scale, out->minimum);
}

} // namespace q4detail

/// The search above for one group of kQ4Group finite values. error is +inf when the group's
/// min-max parameters do not fit f16 (minimum or range / 15 from 65520 up), which the caller
/// refuses rather than clip such values.
GLM_HOST_DEVICE inline Q4GroupFit q4FitGroup(const float *w, const Q4Search &search) {
  using q4detail::Candidate;
  float lo = w[0], hi = w[0];
  for (int i = 1; i < kQ4Group; ++i) {
    lo = w[i] < lo ? w[i] : lo;
    hi = w[i] > hi ? w[i] : hi;
  }
  Q4GroupFit fit;
  const Candidate minMax = q4detail::rangeCandidate(w, lo, hi);
  if (!q4detail::storable(minMax.scale, minMax.minimum)) {
    fit.error = qInf(); // the min-max range does not fit f16: refused, not clipped
    return fit;
  }
  if (lo == hi || !(minMax.scale > 0.0f)) {
    // A constant group, or one whose range rounds to scale 0: every value is the minimum. (Only
    // the min-max candidate can have scale 0; the clipped ones have smaller ranges.)
    fit.scale = qFloatToF16(minMax.scale);
    fit.minimum = qFloatToF16(minMax.minimum);
    fit.error = minMax.error;
    return fit;
  }
  const int keep = search.refitBest < 1                     ? 1
                   : search.refitBest > Q4Search::kMaxRefit ? Q4Search::kMaxRefit
                                                            : search.refitBest;
  const int clips = search.clipCount < 1                    ? 1
                    : search.clipCount > Q4Search::kMaxClip ? Q4Search::kMaxClip
                                                            : search.clipCount;
  Candidate best[Q4Search::kMaxRefit];
  best[0] = minMax;
  for (int k = 1; k < keep; ++k) {
    best[k].error = qInf();
  }
  Candidate winner = minMax;
  const float range = qSub(hi, lo);
  for (int a = 0; a < clips; ++a) {
    for (int b = 0; b < clips; ++b) {
      if (a == 0 && b == 0) {
        continue;
      }
      const Candidate c = q4detail::rangeCandidate(w, qAdd(lo, qMul(search.clip[a], range)),
                                                   qSub(hi, qMul(search.clip[b], range)));
      if (!(c.scale > 0.0f)) {
        continue;
      }
      q4detail::keepBest(best, keep, c);
      if (c.error < winner.error) {
        winner = c;
      }
    }
  }
  for (int k = 0; k < search.refitBest && k < keep && search.refitRounds > 0; ++k) {
    Candidate current = best[k];
    if (!(current.error < qInf())) {
      continue;
    }
    q4detail::LsSums sums;
    q4detail::errorAndSums(w, current.scale, current.minimum, &sums);
    for (int round = 0; round < search.refitRounds; ++round) {
      Candidate next;
      if (!q4detail::leastSquares(current, sums, &next)) {
        break;
      }
      next.error = q4detail::errorAndSums(w, next.scale, next.minimum, &sums);
      if (!(next.error < current.error)) {
        break;
      }
      current = next;
      if (current.error < winner.error) {
        winner = current;
      }
    }
  }
  fit.scale = qFloatToF16(winner.scale);
  fit.minimum = qFloatToF16(winner.minimum);
  fit.error = winner.error;
  return fit;
}

/// The 64 codes of a group for its stored parameters, packed two a byte (low nibble = even index):
/// 32 bytes at `packed`.
GLM_HOST_DEVICE inline void q4PackGroup(const float *w, const Q4GroupFit &fit, uint8_t *packed) {
  const float scale = qF16ToFloat(fit.scale);
  const float minimum = qF16ToFloat(fit.minimum);
  if (scale == 0.0f) {
    for (int i = 0; i < kQ4Group / 2; ++i) {
      packed[i] = 0;
    }
    return;
  }
  const float inverse = qDiv(1.0f, scale);
  for (int i = 0; i < kQ4Group / 2; ++i) {
    const uint32_t even = static_cast<uint32_t>(q4RoundCode(w[2 * i], minimum, inverse));
    const uint32_t odd = static_cast<uint32_t>(q4RoundCode(w[2 * i + 1], minimum, inverse));
    packed[i] = static_cast<uint8_t>(even | (odd << 4));
  }
}

} // namespace glm::kernels
