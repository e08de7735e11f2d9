// `glmc synth`: random-weight GLM-5.3 checkpoints in the Hub layout, for demos, tests and
// benchmarks.
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::glm53 {

struct SynthOptions {
  /// "tiny" (toy widths, every block type, an MTP layer and a vision tower) or "glm53-flash"
  /// (the release's dimensions).
  std::string preset;
  /// Overrides num_hidden_layers; the layer schedules are then derived as transformers does.
  std::optional<int64_t> layers;
  uint64_t seed = 0;
  std::filesystem::path outDir;
  /// Checkpoints larger than this are sharded with an index, as the Hub does.
  uint64_t maxShardBytes = 5'000'000'000;
  /// "bf16" (the release's dense experts) or "exl3": routed experts as EXL3 layers at `exl3Bits`
  /// (MCG codebook) with random trellises, so that benchmarks run the deployed format without
  /// running the encoder (hours for full-width experts).
  std::string experts = "bf16";
  int exl3Bits = 4;
  /// Everything but the weights' shards: config.json (with its quantization_config), the
  /// quantization and tokenizer files. What glmc compile --assume-weights needs to plan the
  /// checkpoint on a machine that will not hold it (the GPU machine writes it again, same seed).
  bool configOnly = false;
  /// "bf16", or "fp8": the dense linears (attention, KDA and indexer projections, dense MLPs,
  /// shared experts; not the head, router, MLA kv_b, routed experts or vision tower) as the FP8
  /// release stores them, e4m3 with a `weight_scale_inv` f32 per 128 x 128 block.
  std::string dense = "bf16";
};

/// The preset names `glmc synth` accepts.
const std::vector<std::string> &synthPresets();

/// config.json text of a preset (outer glm5_next config with text_config and vision_config, every
/// per-layer list written out).
Expected<std::string> synthConfigJson(std::string_view preset, std::optional<int64_t> layers);

/// Writes config.json, the weights (unless configOnly), tokenizer.json, tokenizer_config.json and
/// chat_template.jinja into options.outDir (created if needed), reporting progress on stderr.
/// Deterministic for a seed.
Status synthesizeCheckpoint(const SynthOptions &options);

} // namespace glm::glm53
