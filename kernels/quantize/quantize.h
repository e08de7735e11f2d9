// quantize: the load-time quantizer of dense weights into the formats of
// kernels/common/DenseFormats.h (Q4 groups with an error search, fp8 blocks), and the
// refusal-direction ablation applied to a weight before it is quantized. Host reference
// (quantize_ref.cpp); the per-group Q4 math is quantize_search.h, which NVRTC also compiles.
//
//   quantizeQ4          src [R, C] (C % 64 == 0)  ->  q4Bytes(1, R, C) bytes at dst
//   quantizeFp8Blocks   src [R, C]                ->  fp8Bytes(1, R, C) bytes at dst
//
// Both read any dtype WeightView widens (bf16, f16, f32, ...), refuse NaN and infinities
// (InvalidArgument naming the row and column: a checkpoint should not hold them), write every byte
// of the destination (alignment padding zero), run parallel over rows (parallelFor) and give the
// same bytes and the same QuantizeStats for any thread count. docs/quantization.md has the
// measured errors and speed.
//
// Q4: each group of 64 gets the (scale, minimum) that q4FitGroup (quantize_search.h) picks with
// the given Q4Search (default: min-max, a 4 x 4 grid of clipped ranges and least-squares refits;
// q4MinMax(): plain min-max round-to-nearest), and the codes q4PackGroup derives from them.
//
// fp8 blocks: per 128 x 128 block (partial at the edges), scaleInv = amax / 448 · f in f32, f the
// first of 1, 1 + 1/K, ..., 1 + (K−1)/K (Fp8Search::candidates = K, default 8) with the least
// Σ (stored − w)² (double, row-major over the block), so never worse than amax / 448 itself;
// values are qFloatToFp8E4m3(w / scaleInv) (= floatToFp8E4m3: round to nearest even, saturating
// at ±448, which w / scaleInv can round just above for the block's largest element). f >= 1 never
// clips; it moves where the block's largest values fall on e4m3's 3-bit mantissa grid, which is
// where most of the squared error is (docs/quantization.md: 1-5% lower RMS error than f = 1). A
// block of zeros gets scaleInv 1 (its values encode 0 and decode to 0 · 1 = 0); a scale below
// 2^-126 is raised to 2^-126, so that 1 / scaleInv stays finite.
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize_search.h"

#include <cmath>
#include <cstdint>
#include <span>

namespace glm::kernels {

/// Error accounting of quantized weights, in double, summed over every element quantized into
/// it (one matrix or many: the quantizers add to it).
struct QuantizeStats {
  double sumSquaredError = 0.0;  // Σ (stored value − source value)²
  double sumSquaredSource = 0.0; // Σ source value²
  int64_t elements = 0;

  void add(const QuantizeStats &other) {
    sumSquaredError += other.sumSquaredError;
    sumSquaredSource += other.sumSquaredSource;
    elements += other.elements;
  }
  /// The statistics of `n` rows (or rows of blocks) of `elements` weights in all, from each row's
  /// error and source sums, added in row order (the order every quantizer sums in, so that the
  /// host's and the GPU's are bit-equal).
  static QuantizeStats ofRows(const double *error, const double *source, int64_t n,
                              int64_t elements) {
    QuantizeStats s;
    for (int64_t r = 0; r < n; ++r) {
      s.sumSquaredError += error[r];
      s.sumSquaredSource += source[r];
    }
    s.elements = elements;
    return s;
  }
  /// sqrt(Σ error² / Σ source²); 0 for an all-zero source quantized exactly.
  double relativeRms() const {
    return sumSquaredSource > 0.0  ? std::sqrt(sumSquaredError / sumSquaredSource)
           : sumSquaredError > 0.0 ? INFINITY
                                   : 0.0;
  }
};

/// Q4 groups of a 2-D src [R, C], q4Bytes(1, R, C) bytes at dst, with the default search. Adds
/// the error to *stats when stats is not null. InvalidArgument when src is not 2-D, C is not a
/// multiple of 64, a value is NaN or infinite, or a group does not fit f16.
Status quantizeQ4(const WeightView &src, uint8_t *dst, QuantizeStats *stats = nullptr);
/// The same with an explicit search (q4MinMax() for the round-to-nearest baseline).
Status quantizeQ4(const WeightView &src, const Q4Search &search, uint8_t *dst,
                  QuantizeStats *stats = nullptr);

/// The fp8 block scale search: candidates factors of amax / 448 (1 = no search, the DeepSeek/GLM
/// release quantizer's choice).
struct Fp8Search {
  int candidates = 8;
};

/// fp8 blocks of a 2-D src [R, C] (any R, C), fp8Bytes(1, R, C) bytes at dst, with the default
/// search. Adds the error to *stats when not null. InvalidArgument when src is not 2-D or holds a
/// NaN or infinity.
Status quantizeFp8Blocks(const WeightView &src, uint8_t *dst, QuantizeStats *stats = nullptr);
Status quantizeFp8Blocks(const WeightView &src, const Fp8Search &search, uint8_t *dst,
                         QuantizeStats *stats = nullptr);

/// The refusal-direction ablation of a weight that writes into the residual stream: weight is
/// [out, in] row-major (out = hidden size), direction has out elements, and
///   W' = W − alpha · d̂ (d̂ᵀ W),  d̂ = d / |d|,
/// computed in double and stored back to weight as f32 (the caller rounds to the weight's own
/// precision). alpha = 1 removes the direction from every output: d̂ᵀ W' = (1 − alpha) d̂ᵀ W.
/// InvalidArgument when direction's width is not out (naming both), weight is not out · in long,
/// or the direction is zero or not finite. Parallel over columns, then rows; the result does not
/// depend on the thread count.
Status ablateDirection(std::span<float> weight, int64_t out, int64_t in,
                       std::span<const float> direction, double alpha);

} // namespace glm::kernels
