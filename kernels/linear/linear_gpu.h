// linear on the GPU: the argument struct its kernels take by value, the host rule that picks the
// kernel for a shape, and each kernel's grid rule.
//
//   x               T [rows, in]
//   weight          W [out, in]                      PyTorch layout
//   weightScaleInv  f32 [ceil(out/128), ceil(in/128)] W = Fp8E4m3 only (128 x 128 block scales)
//   weightGroups    f16 pairs [out][in/64]            W = Q4Groups only: (scale, minimum) per group
//   bias            [out] f32 or bf16 (biasBf16)      null = no bias
//   addend          T [rows, out]                    null = none; may not alias y
//   y               T [rows, out]                    must not alias x
//
//   y[r][o] = roundTo<T>(Σ_i x[r][i] · W[o][i] + b[o]), accumulated in f32, rounded once (HF's bf16
//   F.linear rounds the f32 GEMM result plus bias once); with an addend (the add after the linear,
//   folded into it by plan-fuse-linear-add), y[r][o] = roundTo<T>(that + addend[r][o]): the add
//   kernel's arithmetic on the linear's rounded output, so the bits are the two steps'.
//
// Five kernels (six instances for bf16 x bf16); linearKernelFor picks one from T, W, the shape and
// the target:
//   linearDecodeMmaKernel<Bf16, Bf16>     rows <= 64: a streaming GEMV on tensor cores. A block
//       owns 32 outputs x 16 rows; its warps split K and stream every weight byte once with
//       16-byte loads (mma.m16n8k16, weights as A, activations as B, K permuted identically on
//       both sides so that a thread's 16-byte load is its fragment). Rows beyond 16 take more
//       blocks, next to each other in launch order, so that the L2 serves their shared weights.
//   linearDecodeMmaKernel<Bf16, Bf16, 4, 1>  the same with 64 outputs per block (one chunk per
//       row in flight instead of two): activations, re-read by every block, cost half as much.
//       Taken when its blocks still cover the SMs (H200: out >= ~7900 per 16 rows).
//   linearPrefillWgmmaKernel<Bf16, Bf16>  rows > 64 on sm_90a: 128 x 256 x 64 tiles, two
//       warpgroups of wgmma.m64n256k16 reading 128-byte-swizzled shared memory, 4 cp.async
//       stages.
//   linearPrefillMmaKernel<Bf16, Bf16>    rows > 64 elsewhere (sm_121a): 128 x 128 x 32 tiles,
//       warps of 64 x 64, 4 cp.async stages (64 KB) into XOR-swizzled shared memory, ldmatrix,
//       mma.sync (template arguments 3 and 4 also build 128 x 256 tiles and 64-k stages).
//   linearGemvKernel<T, W>                other T/W, rows <= 16: f32 FMA; a block owns 4 outputs x
//       8 rows, its 4 warps split K, 16-byte weight loads.
//   linearTiledKernel<T, W>               other T/W, rows > 16: f32 FMA over 64 x 64 x 16 tiles.
// Every kernel handles any in/out/rows: misaligned rows (in not a multiple of 16 bytes of W) take
// element loads with zero fill, tails are masked. T = float is exact to f32 accumulation (no TF32).
//
// Quantized weights (kernels/common/DenseFormats.h; W = Q4Groups or Fp8E4m3, the plan binds
// weightGroups / weightScaleInv to the sections after the codes):
//   linearDecodeQuantKernel<Bf16, W>      rows <= 64: the decode-mma kernel's structure (warps
//       split K in units of 128 k Q4 / 64 k fp8, each warp streaming its units' codes, group
//       parameters and activations by cp.async through a ring of kLinearQuantStages
//       shared-memory slots) with the codes decoded
//       in registers to exact bf16 integers (Q4: 128 + q by one LOP3 per pair, no subtraction;
//       fp8: the e4m3 value times 2^-120 moved into bf16's fields, times 2^120 by one bf16x2
//       multiply) and one f32 accumulator per group: Q4 folds a group as
//       scale · Σx(128 + q) + (minimum - 128 scale) · Σx, with Σx from one more mma against ones;
//       fp8 folds a 128-block as scaleInv · Σx·v. Σ x·w is the reference's up to f32 rounding.
//       linearDecodeQuantSplitKernel<Bf16, W, 2, S> (DecodeQuantSplit2/4/8): the same with K
//       split over a cluster of S blocks that add their sums through distributed shared memory.
//   linearPrefillMmaKernel<Bf16, W>       rows > 64 (both targets): the mma.sync prefill kernel
//       with the weight tile loaded into registers one stage ahead and stored decoded to bf16
//       after the current stage's mmas. fp8: the e4m3 values exactly, the accumulators kept in
//       units of the current 128-block's scale (rescaled by the ratio at each block, times the
//       last scale at the end). Q4: w = scale · q + minimum in f32, rounded to bf16 (one more
//       bf16 rounding than the decode kernel: the weight's).
//   linearGemvKernel / linearTiledKernel<float, W>  f32 plans: every weight widened exactly as the
//       reference widens it (Q4: fmaf(scale, q, minimum), the same value as the two roundings,
//       since scale · q is exact in f32), f32 FMA.
#pragma once

#include "kernels/common/DenseFormats.h"
#include "kernels/common/DeviceTypes.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"

#include <string>
#include <string_view>
#endif

namespace glm::kernels {

/// The weight type of kernels that read Q4 groups (DenseFormats.h): `weight` is the code plane,
/// two codes a byte, and `weightGroups` the (scale, minimum) pairs.
struct Q4Groups {
  uint8_t codes;
};

struct LinearGpuArgs {
  const void *x;
  const void *weight;
  const float *weightScaleInv;
  const void *bias;
  void *y;
  int64_t rows;
  int64_t inFeatures;
  int64_t outFeatures;
  int32_t biasBf16;
  const uint32_t *weightGroups;
  const void *addend;
};

/// Shapes of the kernels' work units, shared by the kernels and their grid rules.
constexpr int kLinearDecodeMTiles = 2;    // decode-mma: 16 x this many outputs per block
constexpr int kLinearDecodeUnroll = 2;    // decode-mma: 16-byte chunks per weight row per step
constexpr int kLinearDecodeRows = 16;     // decode-mma rows per block
constexpr int kLinearDecodeMaxWarps = 16; // decode-mma K-splitting warps per block, at most
constexpr int kLinearDecodeMaxRows = 64;  // rows up to which bf16 x bf16 takes the decode kernel
constexpr int kLinearGemvOuts = 4;        // gemv outputs per block
constexpr int kLinearGemvRows = 8;        // gemv rows per block
constexpr int kLinearGemvWarps = 4;
constexpr int kLinearGemvMaxRows = 16;   // rows up to which other T/W take the gemv kernel
constexpr int kLinearTile = 64;          // tiled kernel: 64 x 64 outputs per block
constexpr int kLinearPrefillTileM = 128; // both prefill kernels: 128 rows per block
constexpr int kLinearPrefillTileN = 128; // mma.sync prefill: outputs per block (128 or 256)
constexpr int kLinearPrefillK = 32;      // mma.sync prefill: k per stage (32: 4 stages, 64: 3)
constexpr int kLinearWgmmaTileN = 256;   // wgmma prefill: outputs per block
constexpr int kLinearWgmmaStages = 4;    // wgmma prefill: stages of 64 k
constexpr int kLinearQuantStages = 2;    // decode-quant: ring slots per warp (units in flight + 1)
constexpr int kLinearQuantMaxWarps = 16; // decode-quant: K-splitting warps per block, at most
constexpr int kLinearQuantMaxShared = 99 * 1024; // sm_121a's shared memory a block (opt-in)

/// Bytes of one slot of a decode-quant warp's ring (one unit of K: 128 k for Q4, 64 for fp8) at
/// `rows` activation rows: the codes of the warp's 16 x `mTiles` weight rows, Q4's (scale,
/// minimum) of the unit's two groups of those rows, and the unit's activations of the block's
/// rows (at most 16), which arrive with the codes so that nothing in the loop waits on memory.
GLM_HOST_DEVICE constexpr int linearQuantSlotBytes(bool q4, int mTiles, int64_t rows) {
  const int xRows = rows < kLinearDecodeRows ? static_cast<int>(rows) : kLinearDecodeRows;
  return 2 * mTiles * 512 + (q4 ? 2 * mTiles * 64 : 0) + xRows * (q4 ? 256 : 128);
}

#ifndef __CUDACC_RTC__
enum class LinearKernel {
  DecodeMma,
  DecodeMmaWide,
  PrefillMma,
  PrefillWgmma,
  Gemv,
  Tiled,
  DecodeQuant,
  DecodeQuantWide,
  DecodeQuantSplit2, // DecodeQuant with K split over a cluster of 2, 4 or 8 blocks
  DecodeQuantSplit4,
  DecodeQuantSplit8,
};

/// The cluster size of a decode-quant kernel (1 for the unsplit ones).
inline int linearQuantSplit(LinearKernel kernel) {
  return kernel == LinearKernel::DecodeQuantSplit2   ? 2
         : kernel == LinearKernel::DecodeQuantSplit4 ? 4
         : kernel == LinearKernel::DecodeQuantSplit8 ? 8
                                                     : 1;
}

/// The kernel for a product: tensor cores when activations and weights are both bf16 (`bf16Mma`),
/// f32 FMA otherwise; a streaming kernel for few rows, a tiled one for many; wgmma where the
/// target is sm_90a (`arch` and `smCount` as the plan's target gives them).
///
/// Measured on the H200 (glm-kernel-bench): the 64-output decode blocks win wherever they still
/// number about one per SM (batch 1: q_b 19.3 vs 21.5 us, MLP gate 33.4 vs 34.7, lm_head 309 vs
/// 314; batch 16: gate 40.3 vs 49.6) and lose where they do not (o_proj, 64 blocks: 31.6 vs 25.5
/// us). The decode kernel beats the wgmma one up to 64 rows (65 vs 90 us at 64, 117 vs 91 at
/// 128).
inline LinearKernel linearKernelFor(bool bf16Mma, int64_t rows, int64_t out, std::string_view arch,
                                    int smCount) {
  if (bf16Mma) {
    if (rows <= kLinearDecodeMaxRows) {
      const int64_t wideBlocks =
          ((out + 63) / 64) * ((rows + kLinearDecodeRows - 1) / kLinearDecodeRows);
      return wideBlocks * 16 >= 15 * static_cast<int64_t>(smCount) ? LinearKernel::DecodeMmaWide
                                                                   : LinearKernel::DecodeMma;
    }
    return arch == "sm_90a" ? LinearKernel::PrefillWgmma : LinearKernel::PrefillMma;
  }
  return rows <= kLinearGemvMaxRows ? LinearKernel::Gemv : LinearKernel::Tiled;
}

/// The kernel for quantized weights (Q4 groups or fp8 blocks): bf16 activations take the
/// decode-quant kernel up to kLinearDecodeMaxRows rows and the mma.sync prefill kernel with the
/// tile decoded beyond (on sm_90a too: no wgmma form reads quantized tiles yet); f32 activations
/// the exact FMA kernels. Where the 32-output blocks number fewer than 7/8 of the SMs, K is split
/// over a cluster of 2 or 4 blocks (GB10, 48 SMs: 576 outputs split 4, 1024 split 2, 1536 and
/// more none; H200: 2048 split 2, 576-1536 split 4).
///
/// Measured on the H200 (glm-kernel-bench --family linear_quant, 2026-12-02, per launch of a
/// 20-launch graph, 1 row): the 32-output blocks beat the 64-output ones everywhere (Q4 q_b 14.6
/// vs 21+ us, lm_head 70 vs 85+); the split beats the plain blocks where they are few (Q4 576 x
/// 4096: 6.0 plain, 4.8 split 2, 3.9 split 4, 4.1 split 8; 1024 x 4096: 6.3 / 5.1 / 4.8 / 4.8;
/// 2048 x 4096: 6.8 / 5.8 / 6.6 / 6.5) and ties or loses from 128 blocks on (4096 x 4096: 7.8 vs
/// 7.9 split 2; in 1024: 3.7 vs 4.2). Split 2 still gains 6% at 128 blocks with in 8192 (11.6 vs
/// 12.4 us), which the rule leaves (it does not see `in`). The decode kernel beats the decoding
/// prefill up to 64 rows everywhere (Q4 4096 x 4096 at 64 rows: 38.9 vs 136 us, first version).
inline LinearKernel linearQuantKernelFor(bool bf16Activations, int64_t rows, int64_t out,
                                         int smCount) {
  if (!bf16Activations) {
    return rows <= kLinearGemvMaxRows ? LinearKernel::Gemv : LinearKernel::Tiled;
  }
  if (rows > kLinearDecodeMaxRows) {
    return LinearKernel::PrefillMma;
  }
  // Split K over a cluster where the plain blocks leave SMs idle: 2 blocks a cluster where that
  // makes 7/8 of the SMs, else 4 (8 measured no faster: 576 x 4096 4.1 against 3.9 us).
  const int64_t blocks = ((rows + kLinearDecodeRows - 1) / kLinearDecodeRows) *
                         ((out + 16 * kLinearDecodeMTiles - 1) / (16 * kLinearDecodeMTiles));
  const int64_t want = (7 * static_cast<int64_t>(smCount) + 7) / 8;
  if (blocks >= want) {
    return LinearKernel::DecodeQuant;
  }
  return blocks * 2 >= want ? LinearKernel::DecodeQuantSplit2 : LinearKernel::DecodeQuantSplit4;
}

/// The NVRTC name expression of `kernel` for activations `t` and weights `w`, spelled as the
/// engine spells types: "float", "glm::kernels::Bf16", "glm::kernels::Fp8E4m3",
/// "glm::kernels::Q4Groups". DecodeMma, DecodeMmaWide and PrefillWgmma exist for <Bf16, Bf16>
/// only (PrefillWgmma for sm_90a only); PrefillMma for <Bf16, W> with W in {Bf16, Fp8E4m3,
/// Q4Groups}; DecodeQuant(Wide) for <Bf16, Fp8E4m3 | Q4Groups>; Gemv and Tiled for every T in
/// {float, Bf16} and W in {float, Bf16, Fp8E4m3, Q4Groups}.
inline std::string linearKernelName(LinearKernel kernel, const std::string &t,
                                    const std::string &w) {
  if (kernel == LinearKernel::DecodeMmaWide) {
    return "glm::kernels::linearDecodeMmaKernel<" + t + ", " + w + ", 4, 1>";
  }
  if (kernel == LinearKernel::DecodeQuant || kernel == LinearKernel::DecodeQuantWide) {
    return "glm::kernels::linearDecodeQuantKernel<" + t + ", " + w +
           (kernel == LinearKernel::DecodeQuantWide ? ", 4>" : ">");
  }
  if (const int split = linearQuantSplit(kernel); split > 1) {
    return "glm::kernels::linearDecodeQuantSplitKernel<" + t + ", " + w + ", 2, " +
           std::to_string(split) + ">";
  }
  const char *base = kernel == LinearKernel::DecodeMma    ? "glm::kernels::linearDecodeMmaKernel"
                     : kernel == LinearKernel::PrefillMma ? "glm::kernels::linearPrefillMmaKernel"
                     : kernel == LinearKernel::PrefillWgmma
                         ? "glm::kernels::linearPrefillWgmmaKernel"
                     : kernel == LinearKernel::Gemv ? "glm::kernels::linearGemvKernel"
                                                    : "glm::kernels::linearTiledKernel";
  return std::string(base) + "<" + t + ", " + w + ">";
}

/// The decode kernel's grid for blocks of 16 x `mTiles` outputs (its default, or another width a
/// bench instantiates). `smCount` is the target's SM count (132 on an H200, 48 on a GB10): the
/// block size is the largest whose blocks all fit in one wave, where one does.
inline LaunchDims linearDecodeLaunch(int64_t rows, int64_t out, int smCount,
                                     int mTiles = kLinearDecodeMTiles) {
  LaunchDims d;
  const unsigned rowGroups = ceilDiv(rows, kLinearDecodeRows);
  const unsigned tiles = ceilDiv(out, 16 * mTiles);
  // Block b serves row group b % rowGroups of output tile b / rowGroups: the blocks sharing a
  // weight tile are launched together (grid.x also has room for lm_head's 4840 tiles).
  d.grid[0] = rowGroups * tiles;
  // An SM holds 16 warps of this kernel (<= 128 registers). The most warps per block (more loads
  // in flight, shorter K per warp) whose blocks all fit in one wave; 8 when none does.
  const int64_t blocks = d.grid[0];
  const int64_t slots = 16 * static_cast<int64_t>(smCount > 0 ? smCount : 1);
  unsigned warps = 8;
  for (unsigned w : {16u, 8u, 4u}) {
    if (blocks * w <= slots) {
      warps = w;
      break;
    }
  }
  d.block[0] = 32 * warps;
  d.sharedMemory = warps * 16 * mTiles * kLinearDecodeRows * 4;
  return d;
}

/// What a decode-quant launch is sized by besides the product and the SMs: the weights' format
/// (a Q4 slot holds the groups' ranges and twice fp8's activations) and the shared memory a
/// block may have, the target's opt-in maximum (sm_90a 227 KB, sm_121a 99 KB). The defaults
/// fit either format on either target (Q4's slot, sm_121a's cap), at the cost of warps.
struct LinearQuantSizing {
  bool q4 = true;
  int64_t sharedLimit = kLinearQuantMaxShared;
};

/// The decode-quant kernel's grid for blocks of 16 x `mTiles` outputs, K split over clusters of
/// `split` blocks: the most warps (16, 8, else 4) whose blocks of one row group all fit one wave
/// of 16 warps an SM (occupancy is what the kernel is bound by: 16-warp blocks made Q4 4096 x 4096
/// 7.8 us against 10.1 with 8), no more than half the block's units of K (counted as Q4's 128 k),
/// so that each warp has two units to overlap, and rings of the codes and parameters within
/// `sizing.sharedLimit`. None of that depends on the rows: warps split K, so their count sets the
/// order of the sums, and a row must get the same bits in a verify window or a batch as alone
/// (docs/speculative-decoding.md). The rows decide only whether the activations ride the ring:
/// they do where the rings with them still fit (the kernel reads the launch's shared memory to
/// know), else they come from global memory.
///
/// Shared memory at 32 outputs a block and 16 warps: rings of codes and parameters 72 KB (Q4) or
/// 64 KB (fp8); with one row's activations 80 or 68 KB, with 16 rows' 200 or 128 KB (so on
/// sm_121a's 99 KB activations ride the ring up to 3 rows for Q4, 8 for fp8).
inline LaunchDims linearDecodeQuantLaunch(int64_t rows, int64_t in, int64_t out, int smCount,
                                          LinearQuantSizing sizing = {},
                                          int mTiles = kLinearDecodeMTiles, int split = 1) {
  LaunchDims d;
  const unsigned rowGroups = ceilDiv(rows, kLinearDecodeRows);
  const unsigned tiles = ceilDiv(out, 16 * mTiles);
  d.grid[0] = rowGroups * tiles * static_cast<unsigned>(split);
  const int64_t blocks = static_cast<int64_t>(tiles) * split; // of one row group
  const int64_t sms = smCount > 0 ? smCount : 1;
  const int64_t blockUnits = ceilDiv(in, 128) / split;
  const int codesRing = kLinearQuantStages * linearQuantSlotBytes(sizing.q4, mTiles, 0);
  // An SM holds 16 warps of this kernel (128 registers), so 16 / w blocks of w warps. (5-warp
  // blocks, 3 an SM, were measured slower than 4-warp ones at q_b's 384 blocks: 12.6 against
  // 12.3 us.)
  unsigned warps = 4;
  for (unsigned w : {16u, 8u}) {
    if (blocks <= static_cast<int64_t>(16 / w) * sms) {
      warps = w;
      break;
    }
  }
  while (warps > 1 && (2 * static_cast<int64_t>(warps) > blockUnits ||
                       static_cast<int64_t>(warps) * codesRing > sizing.sharedLimit)) {
    warps /= 2;
  }
  const int withX = kLinearQuantStages * linearQuantSlotBytes(sizing.q4, mTiles, rows);
  d.block[0] = 32 * warps;
  d.sharedMemory =
      warps * (static_cast<int64_t>(warps) * withX <= sizing.sharedLimit ? withX : codesRing);
  return d;
}

/// linearDecodeQuantLaunch for a ring of `stages` slots a warp (the kernel's kStages, which the
/// bench and the tests vary), with warps halved until the rings fit `sizing.sharedLimit`.
inline LaunchDims linearDecodeQuantStagesLaunch(int64_t rows, int64_t in, int64_t out, int smCount,
                                                int stages, LinearQuantSizing sizing) {
  LaunchDims d = linearDecodeQuantLaunch(rows, in, out, smCount, sizing);
  d.sharedMemory = d.sharedMemory / kLinearQuantStages * stages;
  while (d.block[0] > 32 && d.sharedMemory > sizing.sharedLimit) {
    d.block[0] /= 2;
    d.sharedMemory /= 2;
  }
  return d;
}

/// The mma.sync prefill kernel's grid for an output tile of `tileN` and stages of `k` (its
/// template defaults, or the other sizes a bench instantiates): 2 x tileN / 64 warps.
inline LaunchDims linearPrefillLaunch(int64_t rows, int64_t out, int tileN = kLinearPrefillTileN,
                                      int k = kLinearPrefillK) {
  LaunchDims d;
  // Row tiles fast: the blocks resident together share a few weight tiles through the L2.
  d.grid[0] = ceilDiv(rows, kLinearPrefillTileM);
  d.grid[1] = ceilDiv(out, tileN);
  d.block[0] = tileN;
  d.sharedMemory = (k == 32 ? 4 : 3) * (kLinearPrefillTileM + tileN) * k * 2;
  return d;
}

/// The grid of `kernel` for the product (`sizing` matters to the decode-quant kernels only).
inline LaunchDims linearLaunch(LinearKernel kernel, int64_t rows, int64_t in, int64_t out,
                               int smCount, LinearQuantSizing sizing = {}) {
  LaunchDims d;
  switch (kernel) {
  case LinearKernel::DecodeMma:
    return linearDecodeLaunch(rows, out, smCount);
  case LinearKernel::DecodeMmaWide:
    return linearDecodeLaunch(rows, out, smCount, 4);
  case LinearKernel::PrefillMma:
    return linearPrefillLaunch(rows, out);
  case LinearKernel::DecodeQuant:
    return linearDecodeQuantLaunch(rows, in, out, smCount, sizing);
  case LinearKernel::DecodeQuantWide:
    return linearDecodeQuantLaunch(rows, in, out, smCount, sizing, 4);
  case LinearKernel::DecodeQuantSplit2:
  case LinearKernel::DecodeQuantSplit4:
  case LinearKernel::DecodeQuantSplit8:
    return linearDecodeQuantLaunch(rows, in, out, smCount, sizing, kLinearDecodeMTiles,
                                   linearQuantSplit(kernel));
  case LinearKernel::PrefillWgmma:
    d.grid[0] = ceilDiv(rows, kLinearPrefillTileM);
    d.grid[1] = ceilDiv(out, kLinearWgmmaTileN);
    d.block[0] = 256;
    // Stages of both tiles, plus slack to start them on a 1 KB boundary.
    d.sharedMemory = kLinearWgmmaStages * (kLinearPrefillTileM + kLinearWgmmaTileN) * 64 * 2 + 1024;
    return d;
  case LinearKernel::Gemv:
    // Flattened as the decode kernel's: block b serves row group b % rowGroups.
    d.grid[0] = ceilDiv(rows, kLinearGemvRows) * ceilDiv(out, kLinearGemvOuts);
    d.block[0] = 32 * kLinearGemvWarps;
    return d;
  case LinearKernel::Tiled:
    d.grid[0] = ceilDiv(rows, kLinearTile);
    d.grid[1] = ceilDiv(out, kLinearTile);
    d.block[0] = 256;
    return d;
  }
  return d;
}
#endif

} // namespace glm::kernels
