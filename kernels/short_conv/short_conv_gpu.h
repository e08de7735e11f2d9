// short_conv on the GPU: the argument struct the kernel takes by value, and its grid rule. A
// launch runs one to kShortConvMaxParts parts, each its own conv (x, weight, state, out and width)
// over the same rows (ctx): a KDA layer's q, k and v convs are one launch. For each part:
//
//   x       T [rows, channels]                 rows = batch · ctx.rowsPerSequence
//   weight  W [channels, kernel]               ([channels, 1, kernel] as stored)
//   out     T [rows, channels]                 must not alias x (a plan never lets one step's
//                                              buffers share bytes)
//   state   T [channels, kernel − 1] per slot  the last kernel − 1 inputs, oldest first; a null
//                                              base means zero history and nothing kept
//   ctx     which sequence each row belongs to, its slot, and which rows are padding
//
//   out_t[c] = act( Σ_j w[c][j] · u_{t−(K−1)+j}[c] ),  u = [state | this step's rows]
//
// Grid (Σ_p ceil(channels_p / 256), ceil(rowsPerSequence / 16), batch), 256 threads: part p owns
// the x-blocks [blockEnd_{p−1}, blockEnd_p), and a thread owns one channel of a 16-row segment of
// one sequence and slides a kernel-wide window down those rows in
// registers, reading each input once (plus kernel − 1 rows of overlap). Only segment 0 reads the
// state, and the same thread writes the channel's new state, so no two threads race on it.
//
// Padding: a row with a negative position is written as 0 and neither read into nor written to
// the state; a sequence whose slot is negative has no state. A sequence's real rows come first
// (its padding is a suffix), as StepContext lays them out. Outputs are f32 sums of the window,
// SiLU in f32, rounded once to T (HF runs the conv in fp32 and casts its output).
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

/// The widest conv window the kernel's registers hold (GLM-5.3 uses 4).
constexpr int kShortConvMaxKernel = 8;
constexpr int kShortConvThreads = 256;
/// Rows per thread; at least kShortConvMaxKernel − 1 so that only segment 0 needs the state.
constexpr int kShortConvSegment = 16;
/// Parts a launch holds at most: GLM's KDA layers have three convs (q, k, v).
constexpr int kShortConvMaxParts = 4;

struct ShortConvPart {
  const void *x;
  const void *weight;
  void *out;
  SlotState state;
  int64_t channels;
  int64_t blockEnd; // this part's last x-block + 1 (shortConvPartEnd)
};

struct ShortConvGpuArgs {
  ShortConvPart part[kShortConvMaxParts];
  int32_t parts;
  StepContext ctx;
  int32_t kernelSize; // 1 ..= kShortConvMaxKernel, every part's
  int32_t silu;       // 1: SiLU after the conv (KDA), 0: none
};

#ifndef __CUDACC_RTC__
/// The x-block end of a part of `channels` channels after parts ending at `previousEnd`.
inline int64_t shortConvPartEnd(int64_t previousEnd, int64_t channels) {
  return previousEnd + ceilDiv(channels, kShortConvThreads);
}

/// The grid of `a`'s parts over `batch` sequences of ctx.rowsPerSequence rows.
inline LaunchDims shortConvLaunch(const ShortConvGpuArgs &a, int64_t batch) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(a.parts > 0 ? a.part[a.parts - 1].blockEnd : 0);
  d.grid[1] = ceilDiv(a.ctx.rowsPerSequence, kShortConvSegment);
  d.grid[2] = static_cast<unsigned>(batch);
  d.block[0] = kShortConvThreads;
  return d;
}
#endif

} // namespace glm::kernels
