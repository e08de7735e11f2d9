// Writing EXL3 layers into a checkpoint in exllamav3's layout (reference/exl3_format.md §1.1-1.2):
// the tensors of one quantized linear, its tensor_storage entry, and the quantization_config.
// `glmc quantize` fills them from its encoder, `glmc synth --experts exl3` with random trellises.
#pragma once

#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace glm {

/// The exllamav3 format version our checkpoints declare.
inline constexpr const char *kExl3FormatVersion = "1.4.1";

/// One EXL3 linear to write. k and n are the padded input and output features; the fills write
/// the trellis (u16 [k/16][n/16][16 bits]), suh (f16 [k]) and svh (f16 [n]).
struct Exl3LayerSpec {
  std::string key; // the module key: "...experts.3.gate_proj"
  int64_t k = 0, n = 0;
  int bits = 4;
  Exl3Codebook codebook = Exl3Codebook::Mcg;
  std::function<void(std::span<uint8_t>)> trellis, suh, svh;
};

/// Bytes one layer stores (trellis, suh and svh; the marker's 4 bytes not counted).
uint64_t exl3StoredBytes(int64_t k, int64_t n, int bits);

/// Appends the layer's tensors (trellis, suh, svh, and the codebook marker unless 3INST) to
/// `specs` and returns its entry of quantization_config.json's `tensor_storage`.
nlohmann::ordered_json appendExl3Layer(const Exl3LayerSpec &layer, std::vector<TensorSpec> &specs);

/// config.json's `quantization_config` (§1.2): `bits` is the model-average bits per weight of the
/// quantized layers, `quantizer` says what wrote it.
nlohmann::ordered_json exl3QuantizationConfig(double bits, Exl3Codebook codebook,
                                              const std::string &quantizer);

} // namespace glm
