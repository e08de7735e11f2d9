// quantize on the GPU: the argument structs the load-time quantizer kernels (quantize.cuh) take by
// value, and their grid rules. They write the bytes quantize_ref.cpp writes (quantizeQ4,
// quantizeFp8Blocks), bit for bit: the same quantize_search.h math, every f32 and f64 operation
// one correctly rounded operation (__fmul_rn, __dadd_rn, ...), nothing fused.
//
// The source is a contiguous [rows, cols] matrix in device memory of bf16, f16 or f32
// (QuantizeSourceType), 16-byte aligned; the destination is the binding's slice, q4Bytes(1, rows,
// cols) or fp8Bytes(1, rows, cols) bytes, whose alignment padding the caller zeroes (the kernels
// write codes, values and scales only), given as its planes' addresses, so that a matrix can also
// be quantized a band of rows at a time (Q4: any rows; fp8: whole 128-row blocks), each band's
// planes offset by its first row.
//
// Q4, two kernels:
//   q4QuantizeKernel   one thread per group of 64: q4FitGroup, q4PackGroup, the (scale, minimum)
//                      pair; and the group's f32 error (the fit's, the stored bytes' Σ (value −
//                      w)² over 8 lanes) and f32 Σ w² (8 lanes), from which the host can sum a
//                      close (not bit-equal) QuantizeStats on GPUs with slow f64.
//   q4RowStatsKernel   one thread per row, after it: quantizeQ4's per-row Σ (value − w)² and
//                      Σ w², in double, in column order, from the stored bytes: summed over the
//                      rows in order they are exactly quantizeQ4's QuantizeStats.
// fp8 blocks, three kernels, in this order:
//   fp8CandidatesKernel one thread per (128 x 128 block, candidate factor): amax, the candidate's
//                      scaleInv and its Σ (stored − w)², double, row-major over the block, as
//                      quantizeFp8Blocks sums it (so the chosen scale is the same)
//   fp8EncodeKernel    one thread block of 128 per block: picks the first least candidate (ties to
//                      the earlier), writes scaleInv, the e4m3 values and the block's error
//   fp8SourceKernel    one thread per row of blocks: quantizeFp8Blocks's Σ w² of that row of
//                      blocks (double; block by block, row-major within each)
// Summed in block order (blockError along each row of blocks, then the rows of blocks), the
// error and source sums are exactly quantizeFp8Blocks's QuantizeStats.
//
// A non-finite source value, or a Q4 group whose min-max parameters do not fit f16, sets *bad to
// 1 (the bytes are then meaningless): the caller runs the host quantizer, which refuses naming the
// element.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/quantize/quantize_search.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#include "kernels/quantize/quantize.h"
#endif

namespace glm::kernels {

/// The element type of a quantizer kernel's source.
enum class QuantizeSourceType : int32_t { Bf16 = 0, F16 = 1, F32 = 2 };

struct Q4QuantizeGpuArgs {
  const void *src;    // [rows, cols], QuantizeSourceType `source`, 16-byte aligned
  uint8_t *codes;     // [rows][cols / 2]: dst, 16-byte aligned
  uint32_t *pairs;    // [rows][cols / 64] (scale, minimum): dst + q4GroupsOffset(1, rows, cols)
  float *groupError;  // [rows][cols / 64]: the fit's f32 error of the stored group
  float *groupSource; // [rows][cols / 64]: Σ w² in f32 (8 lanes, then the fixed pairwise sum)
  uint32_t *bad;      // set to 1 on a non-finite value or a group beyond f16
  int64_t rows, cols; // cols % 64 == 0
  int32_t source;     // QuantizeSourceType
  int32_t pad;
  Q4Search search;
};

struct Q4RowStatsGpuArgs {
  const void *src;
  const uint8_t *codes; // as q4QuantizeKernel left them
  const uint32_t *pairs;
  double *rowError;  // [rows]: Σ (value − w)², double, in column order
  double *rowSource; // [rows]: Σ w², double, in column order
  int64_t rows, cols;
  int32_t source;
  int32_t pad;
};

struct Fp8CandidatesGpuArgs {
  const void *src;
  double *candidateError; // [blocks][candidates]: each candidate's Σ (stored − w)²
  float *candidateScale;  // [blocks][candidates]: its scaleInv
  uint32_t *bad;          // set to 1 on a non-finite value
  int64_t rows, cols;
  int32_t source;
  int32_t candidates; // Fp8Search::candidates, at least 1
};

struct Fp8EncodeGpuArgs {
  const void *src;
  uint8_t *values; // [rows][cols] e4m3: dst
  float *scales;   // [ceil(rows / 128)][ceil(cols / 128)]: dst + fp8ScalesOffset(1, rows, cols)
  const double *candidateError;
  const float *candidateScale;
  double *blockError; // [blocks]: the chosen candidate's error
  int64_t rows, cols;
  int32_t source;
  int32_t candidates;
};

struct Fp8SourceGpuArgs {
  const void *src;
  double *rowBlockSource; // [ceil(rows / 128)]
  int64_t rows, cols;
  int32_t source;
  int32_t pad;
};

constexpr int kQuantizeThreads = 128;
constexpr int kFp8EncodeThreads = 128; // one per column of a block

#ifndef __CUDACC_RTC__
namespace quantize_detail {
inline LaunchDims threadsFor(int64_t n) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>((n + kQuantizeThreads - 1) / kQuantizeThreads);
  d.block[0] = kQuantizeThreads;
  return d;
}
} // namespace quantize_detail

inline LaunchDims q4QuantizeLaunch(int64_t rows, int64_t cols) {
  return quantize_detail::threadsFor(rows * (cols / kQ4Group));
}
inline LaunchDims q4RowStatsLaunch(int64_t rows) { return quantize_detail::threadsFor(rows); }
inline int64_t fp8BlockCount(int64_t rows, int64_t cols) {
  return fp8BlocksOf(rows) * fp8BlocksOf(cols);
}
inline LaunchDims fp8CandidatesLaunch(int64_t rows, int64_t cols, int candidates) {
  return quantize_detail::threadsFor(fp8BlockCount(rows, cols) * candidates);
}
inline LaunchDims fp8EncodeLaunch(int64_t rows, int64_t cols) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(fp8BlockCount(rows, cols));
  d.block[0] = kFp8EncodeThreads;
  return d;
}
inline LaunchDims fp8SourceLaunch(int64_t rows) {
  return quantize_detail::threadsFor(fp8BlocksOf(rows));
}

/// A close QuantizeStats from q4QuantizeKernel's f32 group sums alone, for GPUs whose f64 is too
/// slow for q4RowStatsKernel: each group's sums differ from the double ones by f32 rounding
/// (relative ~1e-7), not bit-equal.
inline QuantizeStats q4StatsFromGroups(const float *groupError, const float *groupSource,
                                       int64_t rows, int64_t cols) {
  QuantizeStats s;
  const int64_t groupsPerRow = cols / kQ4Group;
  for (int64_t r = 0; r < rows; ++r) {
    double error = 0.0, source = 0.0;
    for (int64_t g = 0; g < groupsPerRow; ++g) {
      error += groupError[r * groupsPerRow + g];
      source += groupSource[r * groupsPerRow + g];
    }
    s.sumSquaredError += error;
    s.sumSquaredSource += source;
  }
  s.elements = rows * cols;
  return s;
}

/// quantizeFp8Blocks's QuantizeStats from fp8EncodeKernel's block errors and fp8SourceKernel's
/// sums (each row of blocks' errors in block order, then the rows of blocks in order: bit-equal).
inline QuantizeStats fp8StatsFromBlocks(const double *blockError, const double *rowBlockSource,
                                        int64_t rows, int64_t cols) {
  QuantizeStats s;
  const int64_t rowBlocks = fp8BlocksOf(rows), colBlocks = fp8BlocksOf(cols);
  for (int64_t rb = 0; rb < rowBlocks; ++rb) {
    double error = 0.0;
    for (int64_t cb = 0; cb < colBlocks; ++cb) {
      error += blockError[rb * colBlocks + cb];
    }
    s.sumSquaredError += error;
    s.sumSquaredSource += rowBlockSource[rb];
  }
  s.elements = rows * cols;
  return s;
}
#endif

} // namespace glm::kernels
