// rms_norm: RMSNorm over the last dimension (contract and design in rms_norm_gpu.h), and the row
// routine that gated_rms_norm shares.
#pragma once

#include "kernels/add/add.cuh"
#include "kernels/rms_norm/rms_norm_gpu.h"

namespace glm::kernels {
namespace norm {

using elementwise::Bytes16;
using elementwise::kChunk;

/// One thread's chunk of 8 elements of E (f32 or bf16) as loaded, before it is widened to f32.
/// A row's loads are all issued before any value is used: a thread stalls at the first use of a
/// load until it returns, so widening each chunk as it arrives would cost a round trip per chunk.
/// widen() gives zeros past the row's end.
template <typename E, bool kVector> struct Chunk;

/// A whole chunk of a 16-byte-aligned row: one 16-byte load of bf16, two of f32. A chunk past the
/// row's end reads the row's first chunk instead (a select, not a branch around the load).
template <typename E> struct Chunk<E, true> {
  Bytes16 b[sizeof(E) / 2];

  __device__ __forceinline__ void load(const E *row, int64_t first, int n) {
    const Bytes16 *p = reinterpret_cast<const Bytes16 *>(row + (n > 0 ? first : 0));
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(E) / 2); ++k) {
      b[k] = p[k];
    }
  }
  __device__ __forceinline__ void widen(float (&v)[kChunk], int n) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      float f;
      if constexpr (sizeof(E) == 4) {
        f = __uint_as_float(b[i / 4].w[i % 4]);
      } else {
        const uint32_t w = b[0].w[i / 2];
        f = __uint_as_float(i % 2 == 0 ? w << 16 : w & 0xFFFF0000u);
      }
      v[i] = i < n ? f : 0.0f;
    }
  }
};

/// Any row: element by element, each load predicated on the element being in the row.
template <typename E> struct Chunk<E, false> {
  E e[kChunk];

  __device__ __forceinline__ void load(const E *row, int64_t first, int n) {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      e[i] = E{};
      if (i < n) {
        e[i] = row[first + i];
      }
    }
  }
  __device__ __forceinline__ void widen(float (&v)[kChunk], int n) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = i < n ? toFloat(e[i]) : 0.0f;
    }
  }
};

/// Elements of the chunk at `first` in a row of `dim` (0 past its end).
__device__ __forceinline__ int countAt(int64_t first, int64_t dim) {
  return first < dim ? elementwise::chunkCount(first, dim) : 0;
}

/// The chunk widened, or ones for an absent operand (which was not loaded).
template <typename E, bool kVector>
__device__ __forceinline__ void widenOrOnes(const Chunk<E, kVector> &c, bool present,
                                            float (&v)[kChunk], int n) {
  if (present) {
    c.widen(v, n);
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      v[i] = 1.0f;
    }
  }
}

/// The operands of one chunk: x, and gate and w where present (an absent one reads as ones).
template <typename T, typename W, bool kVector> struct Operands {
  Chunk<T, kVector> x, gate;
  Chunk<W, kVector> w;

  __device__ __forceinline__ void load(const T *xRow, const T *gateRow, const W *wRow,
                                       int64_t first, int n) {
    x.load(xRow, first, n);
    if (gateRow != nullptr) {
      gate.load(gateRow, first, n);
    }
    if (wRow != nullptr) {
      w.load(wRow, first, n);
    }
  }
  template <typename Output>
  __device__ __forceinline__ void store(T *outRow, const T *gateRow, const W *wRow, int64_t first,
                                        int n, float inv, Output output) const {
    float xs[kChunk], gs[kChunk], ws[kChunk];
    x.widen(xs, n);
    widenOrOnes(gate, gateRow != nullptr, gs, n);
    widenOrOnes(w, wRow != nullptr, ws, n);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      xs[i] = output(xs[i] * inv, ws[i], gs[i]);
    }
    elementwise::store8(outRow + first, xs, n, kVector && n == kChunk);
  }
};

/// f32 sum of squares of a loaded chunk, added to `sum`.
template <typename E, bool kVector>
__device__ __forceinline__ float addSquares(const Chunk<E, kVector> &c, int n, float sum) {
  float v[kChunk];
  c.widen(v, n);
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    sum = fmaf(v[i], v[i], sum);
  }
  return sum;
}

/// The elements [begin, end) of a row that a call writes (whole chunks: both multiples of 8, or
/// end the row's end); it still reads the whole row for the sum.
struct WriteSpan {
  int64_t begin = 0, end = 0x7FFFFFFFFFFFFFFF;

  __device__ __forceinline__ bool holds(int64_t first) const {
    return first >= begin && first < end;
  }
};

template <int kKept, bool kVector, typename T, typename W, typename Reduce, typename Output>
__device__ __forceinline__ void normaliseRowAs(const T *x, const T *gate, const W *w, T *out,
                                               int64_t dim, float eps, int rank, int team,
                                               Reduce reduce, Output output, WriteSpan span) {
  const int64_t stride = static_cast<int64_t>(team) * kChunk;
  const int64_t mine = static_cast<int64_t>(rank) * kChunk;
  Operands<T, W, kVector> kept[kKept];
#pragma unroll
  for (int j = 0; j < kKept; ++j) {
    const int64_t first = mine + j * stride;
    kept[j].load(x, gate, w, first, countAt(first, dim));
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kKept; ++j) {
    sum = addSquares(kept[j].x, countAt(mine + j * stride, dim), sum);
  }
  // A row wider than the team keeps: the rest is read for the sum here and again below.
  const int64_t rest = mine + kKept * stride;
  for (int64_t first = rest; first < dim; first += stride) {
    Chunk<T, kVector> c;
    const int n = countAt(first, dim);
    c.load(x, first, n);
    sum = addSquares(c, n, sum);
  }
  const float inv = rsqrtf(reduce(sum) / static_cast<float>(dim) + eps);

#pragma unroll
  for (int j = 0; j < kKept; ++j) {
    const int64_t first = mine + j * stride;
    const int n = countAt(first, dim);
    if (n > 0 && span.holds(first)) {
      kept[j].store(out, gate, w, first, n, inv, output);
    }
  }
  for (int64_t first = rest; first < dim; first += stride) {
    if (!span.holds(first)) {
      continue;
    }
    Operands<T, W, kVector> c;
    const int n = countAt(first, dim);
    c.load(x, gate, w, first, n);
    c.store(out, gate, w, first, n, inv, output);
  }
}

/// Normalises one row of `dim` elements with a team of `team` threads, this one `rank`:
///
///   out[i] = output(x[i] · rsqrt(mean_i x[i]² + eps), w[i], gate[i])
///
/// with `reduce` the team's f32 sum (every member gets it; a fixed order, so the result is the
/// same every run). gate and w may be null (read as ones). Thread `rank` owns the 8-element chunks
/// rank, rank + team, ...: it loads its first kKept chunks of x, gate and w before it uses any, so
/// the row costs one memory round trip, and keeps them in registers for the output pass. Chunks
/// past kKept · team (a row wider than that) are read for the sum and again for the output. Each
/// element is read and written by the same thread, so out may alias x or gate. Only the elements
/// of `span` are written (the whole row by default).
template <int kKept, typename T, typename W, typename Reduce, typename Output>
__device__ __forceinline__ void normaliseRow(const T *x, const T *gate, const W *w, T *out,
                                             int64_t dim, float eps, int rank, int team,
                                             Reduce reduce, Output output, WriteSpan span = {}) {
  using elementwise::aligned16;
  if (dim <= 0) {
    return; // nothing to normalise, and no first element for the loads past the end to read
  }
  // 16-byte accesses when every chunk is whole and 16-byte aligned (null counts as aligned).
  if (dim % kChunk == 0 && aligned16(x) && aligned16(out) && aligned16(gate) && aligned16(w)) {
    normaliseRowAs<kKept, true>(x, gate, w, out, dim, eps, rank, team, reduce, output, span);
  } else {
    normaliseRowAs<kKept, false>(x, gate, w, out, dim, eps, rank, team, reduce, output, span);
  }
}

/// The chunks read E as f32 (4 bytes) or bf16 (2 bytes): other element types must not compile.
template <typename E> constexpr bool kNormElement = sizeof(E) == 4 || sizeof(E) == 2;

/// One row of RMSNorm by the whole block of kRmsNormThreads threads, writing `span` of it: what
/// rmsNormKernel does per row, and what mhc_pre's decode mixer does for the norm folded into it
/// (plan-fuse-mhc-norm), each block of its cluster its own span, so the two give the same bits.
template <typename T, typename W>
__device__ __forceinline__ void rmsNormRow(const T *x, const W *w, T *out, int64_t dim, float eps,
                                           float *scratch, WriteSpan span = {}) {
  static_assert(kNormElement<T> && kNormElement<W>, "RMSNorm takes f32 or bf16");
  normaliseRow<kRmsNormKeptChunks>(
      x, static_cast<const T *>(nullptr), w, out, dim, eps, threadIdx.x, kRmsNormThreads,
      [&](float s) { return blockSum(s, scratch); },
      // y rounded to T before the weight product, as HF's RMSNorm; unweighted, w = 1 exactly.
      [](float y, float w, float) { return w * roundTo<T>(y); }, span);
}

} // namespace norm

template <typename T, typename W>
__global__ void __launch_bounds__(kRmsNormThreads) rmsNormKernel(RmsNormGpuArgs a) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  norm::rmsNormRow(static_cast<const T *>(a.x) + row * a.dim, static_cast<const W *>(a.weight),
                   static_cast<T *>(a.out) + row * a.dim, a.dim, a.eps, scratch);
}

} // namespace glm::kernels
