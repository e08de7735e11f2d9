// The tensors and JSON of EXL3 layers, as exllamav3 writes them.
#include "runtime/weights/Exl3Writer.h"

#include <cstring>

namespace glm {

uint64_t exl3StoredBytes(int64_t k, int64_t n, int bits) {
  return static_cast<uint64_t>(k * n * bits / 8) + static_cast<uint64_t>(2 * (k + n));
}

nlohmann::ordered_json appendExl3Layer(const Exl3LayerSpec &layer, std::vector<TensorSpec> &specs) {
  using OrderedJson = nlohmann::ordered_json;
  const std::vector<int64_t> trellisShape = {layer.k / 16, layer.n / 16, 16 * layer.bits};
  specs.push_back({layer.key + ".trellis", DType::I16, trellisShape, layer.trellis});
  specs.push_back({layer.key + ".suh", DType::F16, {layer.k}, layer.suh});
  specs.push_back({layer.key + ".svh", DType::F16, {layer.n}, layer.svh});
  OrderedJson stored = OrderedJson::object();
  stored[layer.key + ".trellis"] = {
      {"shape", trellisShape}, {"n_bytes", layer.k * layer.n * layer.bits / 8}, {"dtype", "int16"}};
  stored[layer.key + ".suh"] = {
      {"shape", OrderedJson::array({layer.k})}, {"n_bytes", 2 * layer.k}, {"dtype", "float16"}};
  stored[layer.key + ".svh"] = {
      {"shape", OrderedJson::array({layer.n})}, {"n_bytes", 2 * layer.n}, {"dtype", "float16"}};
  OrderedJson module = {
      {"stored_tensors", stored}, {"quant_format", "exl3"}, {"bits_per_weight", layer.bits}};
  if (layer.codebook != Exl3Codebook::Inst3) {
    const bool mcg = layer.codebook == Exl3Codebook::Mcg;
    const uint32_t marker = mcg ? kExl3McgMarker : kExl3Mul1Marker;
    const std::string part = mcg ? ".mcg" : ".mul1";
    specs.push_back({layer.key + part, DType::I32, {}, [marker](std::span<uint8_t> bytes) {
                       std::memcpy(bytes.data(), &marker, 4);
                     }});
    module["stored_tensors"][layer.key + part] = {
        {"shape", OrderedJson::array()}, {"n_bytes", 4}, {"dtype", "int32"}};
    module[mcg ? "mcg_multiplier" : "mul1_multiplier"] = std::to_string(marker);
  }
  return module;
}

nlohmann::ordered_json exl3QuantizationConfig(double bits, Exl3Codebook codebook,
                                              const std::string &quantizer) {
  return {{"quant_method", "exl3"}, {"version", kExl3FormatVersion},
          {"bits", bits},           {"head_bits", 16},
          {"out_scales", "always"}, {"codebook", std::string(exl3CodebookName(codebook))},
          {"quantizer", quantizer}};
}

} // namespace glm
