// exl3 on the GPU: an EXL3 binding of the weights arena as kernels see it, and the exact
// reconstruction of its matrices into the bf16 dense weights the CPU engine multiplies by.
//
// An EXL3 binding (runtime/weights/Exl3Tensors.h, Exl3ArenaLayout; Exl3Geometry here) holds
// `matrices` matrices of [out, in] features, padded to k = pad128(in), n = pad128(out):
//
//   trellis  u16 [matrices][k/16][n/16][16·K]   each matrix at its own `trellisStride` bytes
//   suh      f16 [matrices][k]
//   svh      f16 [matrices][n]
//   meta     u32 [matrices][2]                  K (1..8), codebook (0 3INST, 1 MCG, 2 MUL1)
//
// K and the codebook are read per matrix on the device: a checkpoint may mix them.
//
// Reconstruction (exl3ReconstructKernel):
//   W[o][i] = bf16((diag(suh) · Hk · Ŵ · Hn · diag(svh))[i][o])
// with the Hadamards in double precision in the CPU reference's order (each row of a 128 × 128
// block of Ŵ, then each column, each scaled by 1/√128; then × suh[i], then × svh[o]) and one
// rounding from double to bf16: bit for bit what exl3ReconstructBf16Ref (and `glmc dequantize`)
// produce, so a plan that multiplies by the result gives the dequantized checkpoint's logits.
//
//   exl3SelectKernel          grid 1, 1024 threads: mask[m] = 1 for each local expert some slot
//                             selects (the routed experts' reconstruction skips the others).
//   exl3ReconstructKernel     grid ((k/128)·(n/128), matrices), 256 threads,
//                             kExl3ReconstructSmem bytes of dynamic shared memory: one 128 × 128
//                             block of one matrix per block; unselected matrices return at once.
#pragma once

#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#include "kernels/common/OpStep.h"
#endif

namespace glm::kernels {

/// §5.1: the tile row (input-feature offset) and column (output-feature offset) of stream
/// position p.
GLM_HOST_DEVICE inline int exl3TileRow(int p) {
  const int lane = p >> 3, j = p & 7;
  return 2 * (lane & 3) + (j & 1) + 8 * ((j >> 1) & 1);
}
GLM_HOST_DEVICE inline int exl3TileCol(int p) {
  const int lane = p >> 3, j = p & 7;
  return (lane >> 2) + 8 * (j >> 2);
}

/// One EXL3 binding of the weights arena (Exl3ArenaLayout), by value in argument structs.
struct Exl3GpuWeights {
  const uint8_t *slice; // the binding's first byte
  int64_t matrices;
  int64_t in, out; // unpadded features
  int64_t k, n;    // padded to multiples of 128
  uint64_t trellisStride;
  uint64_t suhOffset, svhOffset, metaOffset; // bytes from `slice`
};

struct Exl3SelectGpuArgs {
  const int32_t *expertIds; // [slots] global expert ids
  int64_t slots;
  int32_t firstExpert; // global id of local expert 0
  int64_t experts;     // local experts
  int32_t *mask;       // [experts] out
};

struct Exl3ReconstructGpuArgs {
  Exl3GpuWeights weights;
  const int32_t *mask; // [matrices]: reconstruct matrix m only where mask[m] != 0; null = all
  Bf16 *out;           // [matrices][out][in]
};

constexpr int kExl3ReconstructColumns = 32; // columns of a block per pass over its rows
/// Ŵ of a 128 × 128 block as f16 bits, then one pass's row-rotated columns as doubles (row stride
/// kExl3ReconstructColumns + 1: the column pass reads across rows without bank conflicts).
constexpr unsigned kExl3ReconstructSmem = 128 * 128 * 2 + 128 * (kExl3ReconstructColumns + 1) * 8;

#ifndef __CUDACC_RTC__
/// The binding at `slice`, laid out as `g` says.
inline Exl3GpuWeights exl3GpuWeights(const void *slice, const Exl3Geometry &g) {
  return {static_cast<const uint8_t *>(slice),
          g.matrices,
          g.in,
          g.out,
          g.k,
          g.n,
          g.trellisStride,
          g.suhOffset,
          g.svhOffset,
          g.metaOffset};
}

inline LaunchDims exl3SelectLaunch() {
  LaunchDims d;
  d.block[0] = 1024;
  return d;
}

inline LaunchDims exl3ReconstructLaunch(int64_t matrices, int64_t k, int64_t n) {
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>((k / 128) * (n / 128));
  d.grid[1] = static_cast<unsigned>(matrices);
  d.block[0] = 256;
  d.sharedMemory = kExl3ReconstructSmem;
  return d;
}
#endif

} // namespace glm::kernels
