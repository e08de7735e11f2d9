// quantize: the load-time quantizer kernels, Q4 groups and fp8 blocks (what they write and in
// which order they run: quantize_gpu.h; the bytes: quantize.h's quantizeQ4 / quantizeFp8Blocks,
// bit for bit). Every f32 operation goes through quantize_search.h's qMul/qAdd/... (__fmul_rn &
// co.) and every f64 one through __dmul_rn/__dadd_rn/__dsub_rn, so that nothing is contracted
// into a fused multiply-add the host reference does not do.
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/quantize/quantize_gpu.h"

namespace glm::kernels {

namespace quantize_detail {

__device__ __forceinline__ float widen16(uint32_t bits, int32_t source) {
  return source == static_cast<int32_t>(QuantizeSourceType::Bf16)
             ? __uint_as_float(bits << 16)
             : qF16ToFloat(static_cast<uint16_t>(bits));
}

/// Element i of the source, widened to f32 exactly (as WeightView does on the host).
__device__ __forceinline__ float load(const void *src, int32_t source, int64_t i) {
  if (source == static_cast<int32_t>(QuantizeSourceType::F32)) {
    return static_cast<const float *>(src)[i];
  }
  return widen16(static_cast<const uint16_t *>(src)[i], source);
}

/// The kQ4Group elements from `first` (a multiple of kQ4Group; the source 16-byte aligned).
__device__ __forceinline__ void loadGroup(const void *src, int32_t source, int64_t first,
                                          float *w) {
  if (source == static_cast<int32_t>(QuantizeSourceType::F32)) {
    const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(src) + first);
#pragma unroll
    for (int j = 0; j < kQ4Group / 4; ++j) {
      const float4 v = p[j];
      w[4 * j] = v.x;
      w[4 * j + 1] = v.y;
      w[4 * j + 2] = v.z;
      w[4 * j + 3] = v.w;
    }
    return;
  }
  const uint4 *p = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(src) + first);
#pragma unroll
  for (int j = 0; j < kQ4Group / 8; ++j) {
    const uint4 v = p[j];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[8 * j + 2 * k] = widen16(words[k] & 0xFFFFu, source);
      w[8 * j + 2 * k + 1] = widen16(words[k] >> 16, source);
    }
  }
}

__device__ __forceinline__ double squaredDifference(float value, float w) {
  const double e = __dsub_rn(static_cast<double>(value), static_cast<double>(w));
  return __dmul_rn(e, e);
}

__device__ __forceinline__ double squared(float w) {
  return __dmul_rn(static_cast<double>(w), static_cast<double>(w));
}

} // namespace quantize_detail

/// One thread per group of kQ4Group: the group's (scale, minimum), codes and f32 error sums.
__global__ void __launch_bounds__(kQuantizeThreads) q4QuantizeKernel(Q4QuantizeGpuArgs a) {
  const int64_t groupsPerRow = a.cols / kQ4Group;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * groupsPerRow) {
    return;
  }
  // Row r's group g is elements [r·cols + 64g, +64) = [64i, +64): rows are whole groups.
  float w[kQ4Group];
  quantize_detail::loadGroup(a.src, a.source, i * kQ4Group, w);
  bool finite = true;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < kQ4Group; j += 8) {
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      finite = finite && qIsFinite(w[j + l]);
      acc[l] = qAdd(acc[l], qMul(w[j + l], w[j + l]));
    }
  }
  if (!finite) {
    atomicOr(a.bad, 1u);
    return;
  }
  const Q4GroupFit fit = q4FitGroup(w, a.search);
  if (!(fit.error < qInf())) {
    atomicOr(a.bad, 1u);
    return;
  }
  uint8_t packed[kQ4Group / 2];
  q4PackGroup(w, fit, packed);
  uint32_t words[kQ4Group / 8];
#pragma unroll
  for (int j = 0; j < kQ4Group / 8; ++j) {
    words[j] = static_cast<uint32_t>(packed[4 * j]) |
               (static_cast<uint32_t>(packed[4 * j + 1]) << 8) |
               (static_cast<uint32_t>(packed[4 * j + 2]) << 16) |
               (static_cast<uint32_t>(packed[4 * j + 3]) << 24);
  }
  uint4 *codes = reinterpret_cast<uint4 *>(a.codes + i * (kQ4Group / 2));
  codes[0] = make_uint4(words[0], words[1], words[2], words[3]);
  codes[1] = make_uint4(words[4], words[5], words[6], words[7]);
  a.pairs[i] = static_cast<uint32_t>(fit.scale) | (static_cast<uint32_t>(fit.minimum) << 16);
  a.groupError[i] = fit.error;
  a.groupSource[i] = q4detail::laneSum(acc);
}

/// One thread per row, after q4QuantizeKernel: quantizeQ4's per-row sums from the stored bytes.
__global__ void __launch_bounds__(kQuantizeThreads) q4RowStatsKernel(Q4RowStatsGpuArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) {
    return;
  }
  const int64_t groupsPerRow = a.cols / kQ4Group;
  double error = 0.0, source = 0.0;
  for (int64_t g = 0; g < groupsPerRow; ++g) {
    const int64_t group = r * groupsPerRow + g;
    float w[kQ4Group];
    quantize_detail::loadGroup(a.src, a.source, group * kQ4Group, w);
    const uint32_t pair = a.pairs[group];
    const float scale = qF16ToFloat(static_cast<uint16_t>(pair & 0xFFFFu));
    const float minimum = qF16ToFloat(static_cast<uint16_t>(pair >> 16));
    const uint8_t *packed = a.codes + group * (kQ4Group / 2);
#pragma unroll 8
    for (int j = 0; j < kQ4Group; ++j) {
      const uint32_t q = (j & 1) != 0 ? packed[j / 2] >> 4 : packed[j / 2] & 0xFu;
      const float value = q4Value(scale, static_cast<float>(q), minimum);
      error = __dadd_rn(error, quantize_detail::squaredDifference(value, w[j]));
      source = __dadd_rn(source, quantize_detail::squared(w[j]));
    }
  }
  a.rowError[r] = error;
  a.rowSource[r] = source;
}

/// One thread per (block, candidate): the candidate's scaleInv and its error over the block.
__global__ void __launch_bounds__(kQuantizeThreads) fp8CandidatesKernel(Fp8CandidatesGpuArgs a) {
  const int64_t colBlocks = fp8BlocksOf(a.cols);
  const int64_t blocks = fp8BlocksOf(a.rows) * colBlocks;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= blocks * a.candidates) {
    return;
  }
  const int64_t b = t / a.candidates;
  const int k = static_cast<int>(t % a.candidates);
  const int64_t r0 = (b / colBlocks) * kFp8Block, c0 = (b % colBlocks) * kFp8Block;
  const int64_t r1 = r0 + kFp8Block < a.rows ? r0 + kFp8Block : a.rows;
  const int64_t c1 = c0 + kFp8Block < a.cols ? c0 + kFp8Block : a.cols;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const float w = quantize_detail::load(a.src, a.source, r * a.cols + c);
      finite = finite && qIsFinite(w);
      const float x = qAbs(w);
      amax = amax < x ? x : amax; // std::max(amax, x)
    }
  }
  if (!finite) {
    atomicOr(a.bad, 1u);
    return;
  }
  float scale = 1.0f; // a block of zeros
  if (amax > 0.0f) {
    const float base = qDiv(amax, 448.0f);
    const float factor = qAdd(1.0f, qDiv(static_cast<float>(k), static_cast<float>(a.candidates)));
    const float candidate = qMul(base, factor);
    const float smallest = qBitsFloat(0x00800000u); // 2^-126
    scale = candidate < smallest ? smallest : candidate;
  }
  double error = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const float w = quantize_detail::load(a.src, a.source, r * a.cols + c);
      const float stored = qMul(toFloat(Fp8E4m3{qFloatToFp8E4m3(qDiv(w, scale))}), scale);
      error = __dadd_rn(error, quantize_detail::squaredDifference(stored, w));
    }
  }
  a.candidateError[t] = error;
  a.candidateScale[t] = scale;
}

/// One thread block per block, a thread per column: the first least candidate, its scaleInv and
/// the block's e4m3 values.
__global__ void __launch_bounds__(kFp8EncodeThreads) fp8EncodeKernel(Fp8EncodeGpuArgs a) {
  __shared__ float chosen;
  const int64_t colBlocks = fp8BlocksOf(a.cols);
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) {
    double best = 0.0;
    float scale = 1.0f;
    for (int k = 0; k < a.candidates; ++k) {
      const double e = a.candidateError[b * a.candidates + k];
      if (k == 0 || e < best) {
        best = e;
        scale = a.candidateScale[b * a.candidates + k];
      }
    }
    chosen = scale;
    a.blockError[b] = best;
    a.scales[b] = scale;
  }
  __syncthreads();
  const float scale = chosen;
  const int64_t r0 = (b / colBlocks) * kFp8Block;
  const int64_t c = (b % colBlocks) * kFp8Block + threadIdx.x;
  const int64_t r1 = r0 + kFp8Block < a.rows ? r0 + kFp8Block : a.rows;
  if (c >= a.cols) {
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float w = quantize_detail::load(a.src, a.source, r * a.cols + c);
    a.values[r * a.cols + c] = qFloatToFp8E4m3(qDiv(w, scale));
  }
}

/// One thread per row of blocks: Σ w², block by block, row-major within each (quantizeFp8Blocks's
/// order).
__global__ void __launch_bounds__(kQuantizeThreads) fp8SourceKernel(Fp8SourceGpuArgs a) {
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (rb >= fp8BlocksOf(a.rows)) {
    return;
  }
  const int64_t r0 = rb * kFp8Block;
  const int64_t r1 = r0 + kFp8Block < a.rows ? r0 + kFp8Block : a.rows;
  double source = 0.0;
  for (int64_t c0 = 0; c0 < a.cols; c0 += kFp8Block) {
    const int64_t c1 = c0 + kFp8Block < a.cols ? c0 + kFp8Block : a.cols;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        source = __dadd_rn(source, quantize_detail::squared(
                                       quantize_detail::load(a.src, a.source, r * a.cols + c)));
      }
    }
  }
  a.rowBlockSource[rb] = source;
}

} // namespace glm::kernels
