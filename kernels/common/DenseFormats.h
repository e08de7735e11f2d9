// The formats glmc quantizes dense linear weights into at load (compile option --dense / --head),
// and the fp8 block format the release checkpoint ships. This header is the definition: the
// loader writes these bytes, the reference kernels read them through WeightView, the GPU kernels
// through the same index arithmetic (it compiles on the host and under NVRTC).
//
// A weight is seen as M matrices of [R, C] (M > 1 only for stacked experts), row-major, C the
// input features.
//
// Q4 groups ("q4"): 4-bit codes in groups of kQ4Group consecutive input features of one row, each
// group with an f16 scale and an f16 minimum; C must be a multiple of kQ4Group.
//
//   offset 0             codes  u8 [M][R][C/2]      element (r, c) is the low nibble of byte c/2
//                                                   when c is even, the high nibble when odd
//   q4GroupsOffset       groups f16 [M][R][C/64][2] (scale, minimum) of each group
//   size                 q4GroupsOffset + M·R·(C/64)·4
//
//   w(r, c) = f32(scale) · q + f32(minimum), q in 0..15: the product rounded to f32, then the sum
//   (no fused multiply-add), on every backend.
//
// Why this layout, by the kernels that read it: a decode GEMV streams each row's codes with
// 16-byte loads (32 weights, half a group), and the group parameters are a separate plane so those
// loads stay aligned; one 4-byte load gives a group's (scale, minimum). With codes q and the
// group's activations x, Σ x·w = scale · Σ x·q + minimum · Σ x: the minimum costs one multiply per
// group once Σ x over the group is known, which every output shares. 4.5 bits a weight (the
// minimum is 0.25 of them; it pays for itself in error, see docs/quantization.md).
//
// fp8 blocks ("fp8"): e4m3fn values and an f32 inverse scale per kFp8Block x kFp8Block block,
// exactly as DeepSeek/GLM FP8 checkpoints store `weight` and `weight_scale_inv`:
//
//   offset 0             values   e4m3 [M][R][C]
//   fp8ScalesOffset      scaleInv f32  [M][ceil(R/128)][ceil(C/128)]
//   size                 fp8ScalesOffset + M·ceil(R/128)·ceil(C/128)·4
//
//   w(r, c) = f32(e4m3) · scaleInv[r/128][c/128], one f32 rounding.
//
// Sections start at multiples of kDenseFormatAlign bytes.
#pragma once

#include "kernels/common/DeviceTypes.h"

namespace glm::kernels {

inline constexpr int64_t kQ4Group = 64;
inline constexpr int64_t kFp8Block = 128;
inline constexpr int64_t kDenseFormatAlign = 256;

/// How a dense weight's slice is encoded in the weights arena.
enum class DenseEncoding : uint8_t {
  Plain = 0, // bf16, f16 or f32 elements
  Q4 = 1,    // Q4 groups, above
  Fp8 = 2,   // fp8 blocks, above
};

GLM_HOST_DEVICE inline constexpr int64_t denseAlignUp(int64_t bytes) {
  return (bytes + kDenseFormatAlign - 1) / kDenseFormatAlign * kDenseFormatAlign;
}

/// Where the group parameters of M matrices [R, C] in Q4 start.
GLM_HOST_DEVICE inline constexpr int64_t q4GroupsOffset(int64_t m, int64_t r, int64_t c) {
  return denseAlignUp(m * r * (c / 2));
}
GLM_HOST_DEVICE inline constexpr int64_t q4Bytes(int64_t m, int64_t r, int64_t c) {
  return q4GroupsOffset(m, r, c) + m * r * (c / kQ4Group) * 4;
}

GLM_HOST_DEVICE inline constexpr int64_t fp8BlocksOf(int64_t n) {
  return (n + kFp8Block - 1) / kFp8Block;
}
/// Where the inverse scales of M matrices [R, C] in fp8 blocks start.
GLM_HOST_DEVICE inline constexpr int64_t fp8ScalesOffset(int64_t m, int64_t r, int64_t c) {
  return denseAlignUp(m * r * c);
}
GLM_HOST_DEVICE inline constexpr int64_t fp8Bytes(int64_t m, int64_t r, int64_t c) {
  return fp8ScalesOffset(m, r, c) + m * fp8BlocksOf(r) * fp8BlocksOf(c) * 4;
}

/// Whether a rank's part of a matrix, `local` of `global` features along one dimension (an even
/// split), keeps its encoding whole, so that a TP plan's slices hold exactly the TP 1 plan's
/// groups and blocks. Q4 groups run along the input features: the part must hold them whole.
GLM_HOST_DEVICE inline constexpr bool q4SliceKeepsGroups(int64_t localInputs) {
  return localInputs % kQ4Group == 0;
}
/// fp8 blocks: a split dimension in whole blocks, or, for a weight stored in fp8 (`asStored`:
/// its blocks cannot be recomputed), a part that lies inside one block and keeps its scale.
GLM_HOST_DEVICE inline constexpr bool fp8SliceKeepsBlocks(int64_t local, int64_t global,
                                                          bool asStored) {
  return local == global || local % kFp8Block == 0 ||
         (asStored && local > 0 && kFp8Block % local == 0);
}

/// The 4-bit code of element (r, c) of a row-major [R, C] code plane.
GLM_HOST_DEVICE inline uint32_t q4Code(const uint8_t *codes, int64_t cols, int64_t r, int64_t c) {
  const uint8_t byte = codes[r * (cols / 2) + c / 2];
  return (c & 1) != 0 ? byte >> 4 : byte & 0xFu;
}

} // namespace glm::kernels
