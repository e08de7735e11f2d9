// rms_norm on the GPU: the argument struct the kernel takes by value, and its grid rule.
//
//   x       T [rows, dim]
//   weight  W [dim]          null = unweighted (W: f32 or bf16)
//   out     T [rows, dim]    may alias x
//
// One 256-thread block per row. The row's sum of squares is accumulated in f32 and reduced across
// the block in a fixed order (no atomics: the same bits every run); the normalised row is rounded
// to T before the weight product as HF does, then rounded again.
//
// Why this shape (decode: 1-8 rows of 4096 bf16, 21 norms a step of GLM-5.3-Flash's 8 layers).
// The row moves 8 KB of x, 8 KB of weight and 8 KB of output: nothing at 4 TB/s (~6 ns), so the
// kernel's time is its chain of dependent memory latencies (~0.5-0.8 µs per round trip to L2 or
// HBM), not its bytes.
//   Before: a strided loop of 2-byte loads, each thread's 16 values of x fetched one iteration at a
//   time (~16 round trips), then a second pass that read x and the weight again: ~7 µs of a 12.7 µs
//   eagerly timed call.
//   Now: each thread owns 8-element chunks (thread t: chunks t and t + 256, so 4096 values stay in
//   registers) and issues every 16-byte load of x and of the weight before it uses any: one round
//   trip, the block reduction (two barriers), then 16-byte stores. x is never read twice. A row
//   wider than 256 · kRmsNormKeptChunks · 8 reads the rest again in the output pass. A row that is
//   not 16-byte aligned, or whose dim is not a multiple of 8, takes element-wise accesses (its
//   loads still all issued first).
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

constexpr int kRmsNormThreads = 256;
/// 8-element chunks each thread keeps in registers between the sum and the output pass.
constexpr int kRmsNormKeptChunks = 2;

struct RmsNormGpuArgs {
  const void *x;
  const void *weight;
  void *out;
  int64_t rows;
  int64_t dim;
  float eps;
};

#ifndef __CUDACC_RTC__
inline LaunchDims rmsNormLaunch(int64_t rows) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(rows);
  d.block[0] = kRmsNormThreads;
  return d;
}
#endif

} // namespace glm::kernels
