// The EXL3 format's facts that kernels and the checkpoint reader share: the codebooks, the
// 128-feature blocks dimensions are padded to and rotated in, and the range of bits per weight
// (reference/exl3_format.md).
#pragma once

#include <cstdint>

namespace glm {

/// The codebook that maps a 16-bit trellis state to an fp16 weight (§3).
enum class Exl3Codebook : uint8_t { Inst3 = 0, Mcg = 1, Mul1 = 2 };

/// The marker tensors' values (§1.1), which are also the MCG and MUL1 codebooks' multipliers (§3);
/// exllamav3 no longer reads the markers, so they only need to exist.
inline constexpr uint32_t kExl3McgMarker = 0xCBAC1FEDu;
inline constexpr uint32_t kExl3Mul1Marker = 0x83DCD12Du;

/// Dimensions are padded to this, and Hadamard rotations act on blocks of this many features.
inline constexpr int64_t kExl3Block = 128;
inline constexpr int kExl3MinBits = 1;
inline constexpr int kExl3MaxBits = 8;

inline int64_t exl3Padded(int64_t features) {
  return (features + kExl3Block - 1) / kExl3Block * kExl3Block;
}

} // namespace glm
