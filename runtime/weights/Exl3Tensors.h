// EXL3 (exllamav3 trellis) linear layers in a checkpoint, and their layout in a plan's weights
// arena.
//
// reference/exl3_format.md §1.1: a quantized linear `<key>` is stored as `<key>.trellis` (I16
// [k/16, n/16, 16K]), `<key>.suh` (F16 [k]), `<key>.svh` (F16 [n]), an optional `<key>.bias` and a
// codebook marker (`<key>.mcg` or `<key>.mul1`, I32 0-dim; neither = 3INST). k and n are the input
// and output features padded up to multiples of 128; K, the bits per weight, comes from each
// trellis shape.
#pragma once

#include "base/Status.h"
#include "kernels/exl3/exl3_format.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace glm {

/// "3inst", "mcg", "mul1": the spelling of quantization_config.codebook and `glmc quantize`.
std::string_view exl3CodebookName(Exl3Codebook codebook);
std::optional<Exl3Codebook> parseExl3Codebook(std::string_view name);

/// The module key of a Hub weight name: "...q_proj.weight" -> "...q_proj"; a name without the
/// ".weight" suffix (GLM's bare `index_kpool_compress_gate`) is its own key.
std::string exl3ModuleKey(std::string_view weightName);

/// One EXL3 linear layer of a checkpoint, validated.
struct Exl3Tensors {
  std::string key;
  const TensorView *trellis = nullptr;
  const TensorView *suh = nullptr;
  const TensorView *svh = nullptr;
  const TensorView *bias = nullptr;   // optional, F16 or F32 [n]
  const TensorView *marker = nullptr; // `mcg` or `mul1`; nullptr for 3INST
  int bits = 0;
  Exl3Codebook codebook = Exl3Codebook::Inst3;
  int64_t k = 0; // padded input features
  int64_t n = 0; // padded output features

  /// Bytes of every tensor of the group.
  uint64_t storedBytes() const;
  /// The names of every tensor of the group, for accounting.
  std::vector<std::string> tensorNames() const;
};

/// Whether the checkpoint holds an EXL3 layer under `key` (a `<key>.trellis`, or a legacy or
/// pre-sliced variant that findExl3Tensors explains).
bool hasExl3Tensors(const Checkpoint &checkpoint, std::string_view key);

/// Finds and checks the group under `key`: dtypes, shapes, K in 1..8, at most one marker. Legacy
/// packed-sign `su`/`sv` tensors and per-rank pre-sliced trellises are refused with a message that
/// names the tensor. With `inFeatures`/`outFeatures` given, k and n must be their padded sizes.
Expected<Exl3Tensors> findExl3Tensors(const Checkpoint &checkpoint, std::string_view key,
                                      std::optional<int64_t> inFeatures = std::nullopt,
                                      std::optional<int64_t> outFeatures = std::nullopt);

/// The rank slice of an EXL3 weight binding in the weights arena. The binding holds `matrices`
/// matrices (its local experts, or 1), each [out, in] in the plan's (PyTorch) orientation, and
/// k = exl3Padded(in), n = exl3Padded(out). Every matrix gets room for `slotBits` bits per weight,
/// the largest K the plan was compiled for, so matrices of mixed K share one stride:
///
///   offset 0         trellis  u16 [matrices][k/16][n/16][16·slotBits]   stride k·n·slotBits/8
///                    (a matrix of K < slotBits fills the first k·n·K/8 bytes of its stride as
///                     [k/16][n/16][16·K], exactly as stored in the checkpoint)
///   suhOffset()      suh      f16 [matrices][k]
///   svhOffset()      svh      f16 [matrices][n]
///   metaOffset()     meta     u32 [matrices][2]: K, codebook (0 3INST, 1 MCG, 2 MUL1)
///
/// Each section starts at a multiple of 256 bytes from the slice start (k, n are multiples of 128).
struct Exl3ArenaLayout {
  int64_t matrices = 1;
  int64_t in = 0, out = 0; // unpadded, as the binding's rank shape says
  int64_t k = 0, n = 0;    // padded
  int slotBits = 4;

  uint64_t trellisStride() const {
    return static_cast<uint64_t>(k) * static_cast<uint64_t>(n) * static_cast<uint64_t>(slotBits) /
           8;
  }
  uint64_t suhOffset() const { return static_cast<uint64_t>(matrices) * trellisStride(); }
  uint64_t svhOffset() const {
    return suhOffset() + static_cast<uint64_t>(matrices) * 2 * static_cast<uint64_t>(k);
  }
  uint64_t metaOffset() const {
    return svhOffset() + static_cast<uint64_t>(matrices) * 2 * static_cast<uint64_t>(n);
  }
  uint64_t bytes() const { return metaOffset() + static_cast<uint64_t>(matrices) * 8; }

  /// The slice bytes of `matrices` [out, in] matrices at `slotBits`: what the compiler reserves.
  static uint64_t bytesFor(int64_t matrices, int64_t out, int64_t in, int slotBits) {
    return Exl3ArenaLayout{matrices, in, out, exl3Padded(in), exl3Padded(out), slotBits}.bytes();
  }
  /// The layout of a slice of `sliceBytes` bytes; slotBits is recovered from the size, which must
  /// be exactly that of one K in 1..8.
  static Expected<Exl3ArenaLayout> fromSlice(int64_t matrices, int64_t out, int64_t in,
                                             uint64_t sliceBytes);
  /// The layout of a binding `name` of logical (bf16) shape `rankShape` ([experts, out, in] when
  /// `stacked`, else [out, in]) in a slice of `sliceBytes` bytes.
  static Expected<Exl3ArenaLayout> ofBinding(std::string_view name,
                                             std::span<const int64_t> rankShape, bool stacked,
                                             uint64_t sliceBytes);
};

} // namespace glm
