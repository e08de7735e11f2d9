// exl3: the launch contract of EXL3 (exllamav3 trellis) weights: bit-exact decode, dense
// reconstruction, the linear layer and the routed experts (reference/exl3_format.md).
//
// One EXL3 matrix of a linear layer with `in` input and `out` output features, k = pad128(in),
// n = pad128(out), K bits per weight:
//
//   trellis  u16 [k/16][n/16][16·K]   tile (kt, nt) holds one tail-biting bitstream of 256·K bits
//   suh      f16 [k]                  input-channel sign × scale
//   svh      f16 [n]                  output-channel sign × scale
//   bias     f16 [n]                  optional
//
//   Ŵ[16kt + r(p)][16nt + c(p)] = codebook(state_p of tile (kt, nt))      fp16, bit-exact (§2, §3,
//   §5) W (k × n, in × out) = diag(suh) · Hk · Ŵ · Hn · diag(svh)            Hk, Hn: block-diagonal
//   H128 y = x · W + bias = (((x ∘ suh) · Hk) · Ŵ · Hn) ∘ svh + bias           (§4.2)
//
// Shapes in the plan are PyTorch's [out, in]; reconstructed weights come out in that orientation,
// with the padding dropped. The CPU engine multiplies by the bf16 rounding of W (what
// `glmc dequantize` writes), so an EXL3 checkpoint and its dequantized twin give the same logits;
// exl3LinearRef instead applies the rotations to the activations in double precision, as the GPU
// kernels do in fp16/fp32, and is the reference they are tested against.
#pragma once

#include "base/Status.h"
#include "kernels/common/OpStep.h"
#include "kernels/common/WeightView.h"
#include "kernels/exl3/exl3_format.h"
#include "kernels/exl3/exl3_gpu.h"

#include <cmath>
#include <cstdint>

namespace glm::kernels {

inline constexpr int kExl3TileValues = 256;

/// §3: the fp16 bit pattern a codebook assigns to a 16-bit trellis state.
uint16_t exl3CodebookHalf(Exl3Codebook codebook, uint32_t state);
/// The same value as a float (exact), from a table built once per codebook.
float exl3CodebookValue(Exl3Codebook codebook, uint32_t state);
/// All 65536 values of a codebook, indexed by state.
const float *exl3CodebookTable(Exl3Codebook codebook);

/// §2.3: the 16-bit state of stream position p (0..255) of one tile of 16·K u16, read as the 16
/// stream bits that end at bit (p + 1)·K, cyclically.
uint32_t exl3State(const uint16_t *tile, int bits, int position);
/// All 256 states of a tile, in stream order.
void exl3TileStates(const uint16_t *tile, int bits, uint16_t *states);
/// §2.4: packs 256 states (stream order) into a tile of 16·K u16; only the low K bits of each
/// state are kept, so the states must chain (exl3StatesChain) to decode back to themselves.
void exl3PackTile(const uint16_t *states, int bits, uint16_t *tile);
/// §2.3's tail-biting condition: state[p] >> K == state[p-1] & (2^(16-K) - 1) for every p, p-1
/// taken mod 256.
bool exl3StatesChain(const uint16_t *states, int bits);

/// §4.1: x ← x · H128 on every 128-block of x (length a multiple of 128), H128 the normalised
/// natural-order Sylvester matrix (symmetric, orthonormal, its own inverse).
void exl3Hadamard(double *x, int64_t length);
void exl3Hadamard(float *x, int64_t length);

/// One EXL3 matrix, wherever its bytes are (a checkpoint mapping or the weights arena).
struct Exl3MatrixView {
  const uint16_t *trellis = nullptr; // [k/16][n/16][16·bits]
  const uint16_t *suh = nullptr;     // f16 [k]
  const uint16_t *svh = nullptr;     // f16 [n]
  const void *bias = nullptr;        // optional, [n] in biasDType (F16 or F32)
  DType biasDType = DType::F16;
  int bits = 4;
  Exl3Codebook codebook = Exl3Codebook::Inst3;
  int64_t in = 0;  // unpadded input features
  int64_t out = 0; // unpadded output features

  int64_t k() const { return exl3Padded(in); }
  int64_t n() const { return exl3Padded(out); }
};

/// Matrix m of an EXL3 binding's slice of the weights arena, laid out as `geometry` says; its K and
/// codebook are read from the slice.
Exl3MatrixView exl3MatrixAt(const uint8_t *slice, const Exl3Geometry &geometry, int64_t m);

/// Checks the view: pointers present, bits in 1..8, features positive.
Status checkExl3Matrix(const Exl3MatrixView &matrix, std::string_view what);

/// Ŵ, the rotated-domain weight, as floats (exact fp16 values): [k][n], row = input feature.
Status exl3DecodeRotatedRef(const Exl3MatrixView &matrix, float *wHat);

/// §5.2: the dense weight W in PyTorch orientation [out][in] (padding dropped), with both
/// Hadamards and the scales applied in double precision and rounded once to fp32. Parallel over
/// 128-column blocks.
Status exl3ReconstructRef(const Exl3MatrixView &matrix, float *weight);
/// The same rounded once (from double) to bf16: what `glmc dequantize` writes and what the CPU
/// engine multiplies by.
Status exl3ReconstructBf16Ref(const Exl3MatrixView &matrix, uint16_t *weight);

/// y = x W + bias with the rotations applied to the activations (§4.2), in double precision.
///
///   x  f32 [rows, in]     y  f32 [rows, out]   (must not alias x)
struct Exl3LinearArgs {
  const float *x = nullptr;
  Exl3MatrixView weight;
  float *y = nullptr;
  int64_t rows = 0;
};
Status exl3LinearRef(const Exl3LinearArgs &args);

} // namespace glm::kernels
