// short_conv: KDA's causal depthwise conv with a carried window, one or several parts a launch
// (contract in short_conv_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/short_conv/short_conv_gpu.h"

namespace glm::kernels {

template <typename T, typename W> __global__ void shortConvKernel(ShortConvGpuArgs a) {
  constexpr int kMax = kShortConvMaxKernel;
  // The block's part, by constant indices into the parameters (a dynamic index would copy the
  // struct to local memory): the last part whose first block is at or before this one.
  const int64_t block = blockIdx.x;
  ShortConvPart part = a.part[0];
  int64_t firstBlock = 0;
#pragma unroll
  for (int q = 1; q < kShortConvMaxParts; ++q) {
    if (q < a.parts && block >= a.part[q - 1].blockEnd) {
      part = a.part[q];
      firstBlock = a.part[q - 1].blockEnd;
    }
  }
  const int64_t channels = part.channels;
  const int64_t c = (block - firstBlock) * blockDim.x + threadIdx.x;
  if (c >= channels) {
    return;
  }
  const int kernel = a.kernelSize, history = kernel - 1;
  const int rowsPerSeq = a.ctx.rowsPerSequence;
  const int64_t seq = blockIdx.z;
  const int r0 = blockIdx.y * kShortConvSegment;
  const int r1 = min(r0 + kShortConvSegment, rowsPerSeq);
  const int32_t *pos = a.ctx.positions + seq * rowsPerSeq;
  const T *x = static_cast<const T *>(part.x) + seq * rowsPerSeq * channels + c;
  T *out = static_cast<T *>(part.out) + seq * rowsPerSeq * channels + c;
  T *state = nullptr;
  if (part.state.base != nullptr) {
    uint8_t *slot = slotOf(part.state, a.ctx, seq);
    state = slot != nullptr ? reinterpret_cast<T *>(slot) + c * history : nullptr;
  }

  // Right-aligned: once a row's input is shifted in, win[kMax − 1] holds it and win[kMax − 1 − d]
  // the input d rows before it, and wr[kMax − 1 − d] = w[K − 1 − d]; slots beyond the kernel
  // weigh nothing. Constant indices keep both arrays in registers whatever the runtime kernel
  // size. Before the first row is shifted in, win[kMax − d] holds the input d rows before r0.
  const W *w = static_cast<const W *>(part.weight) + c * kernel;
  float wr[kMax], win[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const int lag = kMax - 1 - j;
    wr[j] = lag < kernel ? toFloat(w[kernel - 1 - lag]) : 0.0f;
    win[j] = 0.0f;
    const int d = kMax - j;
    if (d <= history) {
      const int m = r0 - d; // a row before this segment: an earlier row, or the state
      if (m >= 0) {
        win[j] = toFloat(x[m * channels]);
      } else if (state != nullptr) {
        win[j] = toFloat(state[history + m]);
      }
    }
  }

  bool any = false;
  for (int r = r0; r < r1; ++r) {
    if (pos[r] < 0) {
      out[r * channels] = fromFloat<T>(0.0f);
      continue;
    }
    any = true;
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j) {
      win[j] = win[j + 1];
    }
    win[kMax - 1] = toFloat(x[r * channels]);
    float z = 0.0f;
#pragma unroll
    for (int j = 0; j < kMax; ++j) {
      if (kMax - 1 - j < kernel) { // older inputs, shifted past the window, must not reach z
        z = fmaf(wr[j], win[j], z);
      }
    }
    if (a.silu) {
      z = z / (1.0f + expf(-z));
    }
    out[r * channels] = fromFloat<T>(z);
  }

  // New state: the last K − 1 inputs of [state | real rows]. Real rows are a prefix; find how many.
  if (blockIdx.y != 0 || state == nullptr || !any) {
    return;
  }
  int lo = 0, hi = rowsPerSeq;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (pos[mid] >= 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int n = lo;
  // Ascending j reads state[j + n] before any write reaches it (n >= 1), so in place is safe.
  for (int j = 0; j < history; ++j) {
    const int m = n - history + j;
    state[j] = m >= 0 ? x[m * channels] : state[history + m];
  }
}

} // namespace glm::kernels
