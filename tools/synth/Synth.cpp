// Random-weight GLM-5.3 checkpoints: config from a preset, tensors from the table, seeded values.
#include "tools/synth/Synth.h"

#include "base/Progress.h"
#include "base/Random.h"
#include "kernels/common/DenseFormats.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/Exl3Writer.h"
#include "runtime/weights/SafeTensorsWriter.h"
#include "tools/synth/SynthTokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

namespace glm::glm53 {

using OrderedJson = nlohmann::ordered_json;

namespace {

/// Dimensions a preset fixes; everything else follows the release's config.
struct Preset {
  int64_t vocabSize, firstSpecialId, hiddenSize, numHiddenLayers, intermediateSize,
      moeIntermediateSize, numAttentionHeads, qLoraRank, kvLoraRank, qkNopeHeadDim, vHeadDim,
      indexNHeads, indexHeadDim, indexTopk, indexKpool, linearNumHeads, linearHeadDim,
      nRoutedExperts, numExpertsPerTok, numNextnPredictLayers, maxMerges;
  // Vision tower.
  int64_t visionDepth, visionHidden, visionHeads, visionIntermediate, visionOut,
      visionProjectionIntermediate;
};

std::optional<Preset> findPreset(std::string_view name) {
  if (name == "tiny") {
    // Every block type at toy widths. v_head_dim differs from qk_nope_head_dim on purpose, so
    // code that confuses the two fails on the demo model.
    return Preset{1024, 988, 128, 8,  256, 64, 4,   64, 32, 32, 48,  4,   32, 16,
                  4,    4,   32,  16, 4,   1,  732, 2,  64, 2,  128, 128, 256};
  }
  if (name == "glm53-flash") {
    return Preset{154880, 154820, 4096, 45,  12288, 2048, 64,   1536, 512,
                  256,    256,    32,   128, 2048,  4,    64,   128,  288,
                  8,      1,      4000, 24,  1024,  16,   4096, 4096, 10240};
  }
  return std::nullopt;
}

OrderedJson presetConfig(const Preset &p, int64_t layers) {
  OrderedJson text;
  const int64_t first = p.firstSpecialId;
  text["model_type"] = "glm5_next_text";
  text["vocab_size"] = p.vocabSize;
  text["hidden_size"] = p.hiddenSize;
  text["num_hidden_layers"] = layers;
  OrderedJson layerTypes = OrderedJson::array(), mlpTypes = OrderedJson::array(),
              indexerTypes = OrderedJson::array();
  for (int64_t i = 0; i < layers; ++i) {
    // transformers' defaults: every fourth layer sparse attention, the first three MLPs dense.
    layerTypes.push_back(i % 4 == 3 ? "deepseek_sparse_attention" : "linear_attention");
    mlpTypes.push_back(i < 3 ? "dense" : "sparse");
    indexerTypes.push_back("full");
  }
  text["layer_types"] = layerTypes;
  text["mlp_layer_types"] = mlpTypes;
  text["indexer_types"] = indexerTypes;
  text["linear_num_heads"] = p.linearNumHeads;
  text["linear_head_dim"] = p.linearHeadDim;
  text["linear_conv_kernel_dim"] = 4;
  text["linear_lower_bound"] = -5.0;
  text["num_attention_heads"] = p.numAttentionHeads;
  text["num_key_value_heads"] = p.numAttentionHeads;
  text["q_lora_rank"] = p.qLoraRank;
  text["kv_lora_rank"] = p.kvLoraRank;
  text["qk_nope_head_dim"] = p.qkNopeHeadDim;
  text["qk_rope_head_dim"] = 0;
  text["qk_head_dim"] = p.qkNopeHeadDim;
  text["head_dim"] = 0;
  text["v_head_dim"] = p.vHeadDim;
  text["attention_bias"] = false;
  text["index_n_heads"] = p.indexNHeads;
  text["index_head_dim"] = p.indexHeadDim;
  text["index_topk"] = p.indexTopk;
  text["index_kpool"] = p.indexKpool;
  text["index_kpool_always_select_tail"] = true;
  text["intermediate_size"] = p.intermediateSize;
  text["moe_intermediate_size"] = p.moeIntermediateSize;
  text["n_routed_experts"] = p.nRoutedExperts;
  text["num_experts_per_tok"] = p.numExpertsPerTok;
  text["n_shared_experts"] = 1;
  text["n_group"] = 1;
  text["topk_group"] = 1;
  text["norm_topk_prob"] = true;
  text["routed_scaling_factor"] = 2.5;
  text["swiglu_limit"] = 10.0;
  text["hidden_act"] = "silu";
  text["hc_mult"] = 4;
  text["hc_eps"] = 1e-6;
  text["hc_sinkhorn_iters"] = 20;
  text["rms_norm_eps"] = 1e-5;
  text["max_position_embeddings"] = 1048576;
  text["tie_word_embeddings"] = false;
  text["num_nextn_predict_layers"] = p.numNextnPredictLayers;
  text["pad_token_id"] = first;
  text["bos_token_id"] = nullptr;
  // <|endoftext|>, <|user|>, <|observation|>
  text["eos_token_id"] = {first, first + 7, first + 9};
  text["dtype"] = "bfloat16";

  OrderedJson vision;
  vision["model_type"] = "glm5_next_vision";
  vision["depth"] = p.visionDepth;
  vision["hidden_size"] = p.visionHidden;
  vision["num_heads"] = p.visionHeads;
  vision["intermediate_size"] = p.visionIntermediate;
  vision["out_hidden_size"] = p.visionOut;
  vision["projection_intermediate_size"] = p.visionProjectionIntermediate;
  vision["attention_bias"] = true;
  vision["hidden_act"] = "silu";
  vision["in_channels"] = 3;
  vision["image_size"] = 336;
  vision["patch_size"] = 14;
  vision["temporal_patch_size"] = 2;
  vision["spatial_merge_size"] = 2;
  vision["rms_norm_eps"] = 1e-5;
  vision["swiglu_limit"] = 10.0;

  OrderedJson root;
  root["architectures"] = {"Glm5NextForConditionalGeneration"};
  root["model_type"] = "glm5_next";
  root["dtype"] = "bfloat16";
  // Special-token ids in the release's order (reference/glm53_arch.md §5.1).
  root["image_token_id"] = first + 34;
  root["video_token_id"] = first + 35;
  root["image_start_token_id"] = first + 10;
  root["image_end_token_id"] = first + 11;
  root["video_start_token_id"] = first + 12;
  root["video_end_token_id"] = first + 13;
  root["tie_word_embeddings"] = false;
  root["text_config"] = text;
  root["vision_config"] = vision;
  return root;
}

/// The seed of one tensor's stream: FNV-1a of its name mixed with the user's seed, so a tensor's
/// values depend on neither the other tensors' sizes nor the order they are written in.
uint64_t hashName(std::string_view name, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (char c : name) {
    h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  }
  return h;
}

uint16_t toBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  // Round to nearest even; the values here are finite.
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// How a tensor's values are drawn, by its role in the model: every parameter non-trivial (no
/// zero or one initialisations that would let a term of the math go unexercised), magnitudes
/// that keep activations finite through many layers.
std::function<float(SplitMix64 &)> distributionFor(const WeightInfo &w) {
  const std::string &n = w.name;
  if (endsWith(n, "A_log") || endsWith(n, "dt_bias") || endsWith(n, "index_kpool_compress_ape") ||
      endsWith(n, "_base")) {
    return [](SplitMix64 &r) { return 0.5f * r.normal(); };
  }
  if (endsWith(n, "_scale") && w.component == Component::Mhc) {
    return [](SplitMix64 &r) { return 0.5f + r.uniform(); };
  }
  if (endsWith(n, "e_score_correction_bias")) {
    return [](SplitMix64 &r) { return 0.05f * r.normal(); };
  }
  if (n.find("norm") != std::string::npos && endsWith(n, "weight")) {
    return [](SplitMix64 &r) { return 1.0f + 0.1f * r.normal(); };
  }
  if (endsWith(n, "bias")) {
    return [](SplitMix64 &r) { return 0.1f * r.normal(); };
  }
  // Matrices and kernels: std min(0.05, 1/sqrt(fan_in)), fan_in = product of the trailing dims.
  int64_t fanIn = 1;
  for (size_t i = 1; i < w.shape.size(); ++i) {
    fanIn *= w.shape[i];
  }
  const float stddev =
      std::min(0.05f, 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(fanIn, 1))));
  return [stddev](SplitMix64 &r) { return stddev * r.normal(); };
}

/// Values are drawn in blocks of this many elements, each from its own stream, so large tensors
/// fill on all cores and the bytes do not depend on how many cores there are.
constexpr size_t kBlockElements = size_t(1) << 20;

/// Runs fill(block) for every block on all cores; blocks are independent, so the bytes do not
/// depend on the core count.
void fillBlocks(size_t blocks, const std::function<void(size_t)> &fillBlock) {
  const size_t workers =
      std::min<size_t>(blocks, std::max(1u, std::thread::hardware_concurrency()));
  if (workers <= 1) {
    for (size_t block = 0; block < blocks; ++block) {
      fillBlock(block);
    }
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < workers; ++t) {
    threads.emplace_back([&] {
      for (size_t block = next++; block < blocks; block = next++) {
        fillBlock(block);
      }
    });
  }
  for (std::thread &thread : threads) {
    thread.join();
  }
}

TensorSpec randomTensor(const WeightInfo &w, uint64_t seed) {
  TensorSpec spec;
  spec.name = w.name;
  spec.dtype = w.releaseDType;
  spec.shape = w.shape;
  spec.fill = [w, seed](std::span<uint8_t> out) {
    const auto draw = distributionFor(w);
    const size_t n = static_cast<size_t>(w.numel());
    const uint64_t tensorSeed = hashName(w.name, seed);
    fillBlocks((n + kBlockElements - 1) / kBlockElements, [&](size_t block) {
      SplitMix64 rng(tensorSeed + block * 0xD1B54A32D192ED03ull);
      const size_t end = std::min(n, (block + 1) * kBlockElements);
      for (size_t i = block * kBlockElements; i < end; ++i) {
        const float v = draw(rng);
        if (w.releaseDType == DType::F32) {
          std::memcpy(out.data() + 4 * i, &v, 4);
        } else {
          const uint16_t h = toBf16(v);
          std::memcpy(out.data() + 2 * i, &h, 2);
        }
      }
    });
  };
  return spec;
}

/// Whether `--dense fp8` writes `w` in fp8: the linears glmc reads through its linear op (the MLA's
/// kv_b is read inside attention, the router picks experts, the head is the release's bf16).
bool writesFp8(const WeightInfo &w) {
  switch (w.component) {
  case Component::Kda:
  case Component::Indexer:
  case Component::DenseMlp:
  case Component::SharedExpert:
    return w.role == WeightRole::Linear;
  case Component::MlaAttention:
    return w.role == WeightRole::Linear && !endsWith(w.name, "kv_b_proj.weight");
  default:
    return false;
  }
}

/// A linear as FP8: the random bf16 tensor's values (randomTensor's), quantized to e4m3 with
/// 128 x 128 block scales by the loader's own quantizer, as two tensors: `name` and
/// `name_scale_inv`.
void appendFp8Tensor(const WeightInfo &w, uint64_t seed, std::vector<TensorSpec> &tensors) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  // Both tensors' fills quantize the same values (each fill runs once, and quantizing again is
  // cheaper than holding the result between them).
  auto quantized = [w, seed, rows, cols](std::vector<uint8_t> &bytes) {
    TensorSpec bf16 = randomTensor(w, seed);
    std::vector<uint8_t> source(static_cast<size_t>(bf16.byteSize()));
    bf16.fill(source);
    bytes.resize(static_cast<size_t>(kernels::fp8Bytes(1, rows, cols)));
    kernels::QuantizeStats stats;
    const Status s = kernels::quantizeFp8Blocks(
        kernels::WeightView::raw(source.data(), bf16.dtype, {rows, cols}), bytes.data(), &stats);
    (void)s; // finite random values of a 2-D shape always quantize
  };
  TensorSpec values;
  values.name = w.name;
  values.dtype = DType::F8_E4M3;
  values.shape = w.shape;
  values.fill = [quantized](std::span<uint8_t> out) {
    std::vector<uint8_t> bytes;
    quantized(bytes);
    std::memcpy(out.data(), bytes.data(), out.size());
  };
  TensorSpec scales;
  scales.name = w.name + "_scale_inv";
  scales.dtype = DType::F32;
  scales.shape = {kernels::fp8BlocksOf(rows), kernels::fp8BlocksOf(cols)};
  scales.fill = [quantized, rows, cols](std::span<uint8_t> out) {
    std::vector<uint8_t> bytes;
    quantized(bytes);
    std::memcpy(out.data(), bytes.data() + kernels::fp8ScalesOffset(1, rows, cols), out.size());
  };
  tensors.push_back(std::move(values));
  tensors.push_back(std::move(scales));
}

/// A routed expert as an EXL3 layer with random content: any bitstream is a valid trellis (every
/// K-bit step of the shift register decodes to some codebook value), suh holds random signs and
/// svh random signs times the scale that gives the dense experts' spread (the codebooks have
/// about unit RMS and the Hadamard rotations keep norms).
Exl3LayerSpec randomExl3Layer(const WeightInfo &w, uint64_t seed, int bits) {
  const int64_t out = w.shape[0], in = w.shape[1];
  Exl3LayerSpec layer{exl3ModuleKey(w.name), exl3Padded(in), exl3Padded(out), bits,
                      Exl3Codebook::Mcg,     nullptr,        nullptr,         nullptr};
  const uint64_t tensorSeed = hashName(w.name, seed);
  layer.trellis = [tensorSeed](std::span<uint8_t> bytes) {
    const size_t words = bytes.size() / 8;
    fillBlocks((words + kBlockElements - 1) / kBlockElements, [&](size_t block) {
      SplitMix64 rng(tensorSeed + block * 0xD1B54A32D192ED03ull);
      const size_t end = std::min(words, (block + 1) * kBlockElements);
      for (size_t i = block * kBlockElements; i < end; ++i) {
        const uint64_t v = rng.next();
        std::memcpy(bytes.data() + 8 * i, &v, 8);
      }
    });
  };
  auto signs = [](uint64_t streamSeed, float magnitude) {
    return [streamSeed, magnitude](std::span<uint8_t> bytes) {
      SplitMix64 rng(streamSeed);
      for (size_t i = 0; i + 2 <= bytes.size(); i += 2) {
        const uint16_t h = kernels::doubleToF16((rng.next() & 1) ? -magnitude : magnitude);
        std::memcpy(bytes.data() + i, &h, 2);
      }
    };
  };
  const float spread = std::min(0.05f, 1.0f / std::sqrt(static_cast<float>(in)));
  layer.suh = signs(tensorSeed ^ 0x5348u, 1.0f);
  layer.svh = signs(tensorSeed ^ 0x5356u, spread);
  return layer;
}

Status writeText(const std::filesystem::path &path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) {
    return ioError(path.string(), ": write failed");
  }
  return Status::success();
}

} // namespace

const std::vector<std::string> &synthPresets() {
  static const std::vector<std::string> presets = {"tiny", "glm53-flash"};
  return presets;
}

Expected<std::string> synthConfigJson(std::string_view preset, std::optional<int64_t> layers) {
  std::optional<Preset> p = findPreset(preset);
  if (!p) {
    return invalidArgument("unknown preset '", preset, "' (known: tiny, glm53-flash)");
  }
  const int64_t n = layers.value_or(p->numHiddenLayers);
  if (n < 1 || n > 1024) {
    return invalidArgument("--layers must be between 1 and 1024, got ", n);
  }
  return presetConfig(*p, n).dump(2) + "\n";
}

Status synthesizeCheckpoint(const SynthOptions &options) {
  if (options.experts != "bf16" && options.experts != "exl3") {
    return invalidArgument("--experts is bf16 or exl3, got '", options.experts, "'");
  }
  const bool exl3 = options.experts == "exl3";
  if (options.dense != "bf16" && options.dense != "fp8") {
    return invalidArgument("--dense is bf16 or fp8, got '", options.dense, "'");
  }
  const bool fp8 = options.dense == "fp8";
  if (exl3 && (options.exl3Bits < kExl3MinBits || options.exl3Bits > kExl3MaxBits)) {
    return invalidArgument("EXL3 bits must be between ", kExl3MinBits, " and ", kExl3MaxBits,
                           ", got ", options.exl3Bits);
  }
  GLM_ASSIGN_OR_RETURN(std::string configText, synthConfigJson(options.preset, options.layers));
  const Preset preset = *findPreset(options.preset);
  // Validate through the same parser every consumer uses: a preset that does not parse is a bug.
  GLM_ASSIGN_OR_RETURN(Glm53Config config, parseGlm53Config(configText, "synthesized config.json"));

  std::error_code ec;
  std::filesystem::create_directories(options.outDir, ec);
  if (ec) {
    return ioError(options.outDir.string(), ": cannot create directory: ", ec.message());
  }
  GLM_RETURN_IF_ERROR(writeText(options.outDir / "config.json", configText));

  SynthTokenizerOptions tokenizerOptions;
  tokenizerOptions.vocabSize = preset.vocabSize;
  tokenizerOptions.firstSpecialId = preset.firstSpecialId;
  tokenizerOptions.maxMerges = preset.maxMerges;
  tokenizerOptions.seed = options.seed;
  GLM_ASSIGN_OR_RETURN(std::string tokenizerJson, makeSynthTokenizerJson(tokenizerOptions));
  GLM_RETURN_IF_ERROR(writeText(options.outDir / "tokenizer.json", tokenizerJson));
  GLM_RETURN_IF_ERROR(
      writeText(options.outDir / "tokenizer_config.json", makeSynthTokenizerConfigJson()));
  GLM_RETURN_IF_ERROR(writeText(options.outDir / "chat_template.jinja", glm53ChatTemplate()));

  std::vector<TensorSpec> tensors;
  nlohmann::ordered_json storage = nlohmann::ordered_json::object();
  uint64_t exl3Bytes = 0, exl3Weights = 0;
  for (const WeightInfo &w : glm53Weights(config)) {
    // The MTP layer's routed experts too: `--assume-weights exl3-experts` and the plans read
    // every routed expert in the deployed format.
    if (exl3 && w.component == Component::RoutedExpert && w.role == WeightRole::Linear) {
      const Exl3LayerSpec layer = randomExl3Layer(w, options.seed, options.exl3Bits);
      storage[layer.key] = appendExl3Layer(layer, tensors);
      exl3Bytes += exl3StoredBytes(layer.k, layer.n, layer.bits);
      exl3Weights += static_cast<uint64_t>(w.numel());
    } else if (fp8 && writesFp8(w)) {
      appendFp8Tensor(w, options.seed, tensors);
    } else {
      tensors.push_back(randomTensor(w, options.seed));
    }
  }
  if (fp8 && !exl3) {
    // The FP8 release's quantization_config (an EXL3 one, above, takes precedence: the fp8
    // tensors describe themselves).
    nlohmann::ordered_json root = nlohmann::ordered_json::parse(configText);
    root["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {kernels::kFp8Block, kernels::kFp8Block}}};
    configText = root.dump(2) + "\n";
    GLM_RETURN_IF_ERROR(writeText(options.outDir / "config.json", configText));
  }
  if (exl3) {
    // config.json gains exllamav3's quantization_config, as `glmc quantize` writes it.
    nlohmann::ordered_json root = nlohmann::ordered_json::parse(configText);
    const double bits =
        std::round(static_cast<double>(exl3Bytes) * 800.0 / static_cast<double>(exl3Weights)) /
        100.0;
    root["quantization_config"] =
        exl3QuantizationConfig(bits, Exl3Codebook::Mcg, "glmc synth --experts exl3 (random)");
    GLM_RETURN_IF_ERROR(writeText(options.outDir / "config.json", root.dump(2) + "\n"));
    nlohmann::ordered_json details = root["quantization_config"];
    details["tensor_storage"] = storage;
    GLM_RETURN_IF_ERROR(
        writeText(options.outDir / "quantization_config.json", details.dump(2) + "\n"));
  }
  if (options.configOnly) {
    return Status::success();
  }
  uint64_t totalBytes = 0;
  for (const TensorSpec &t : tensors) {
    totalBytes += t.byteSize();
  }
  ProgressReporter::Options progressOptions;
  progressOptions.label = "synth " + options.outDir.filename().string();
  progressOptions.total = totalBytes;
  progressOptions.unit = ProgressReporter::Unit::Bytes;
  ProgressReporter progress(std::move(progressOptions));
  GLM_RETURN_IF_ERROR(writeCheckpointShards(options.outDir, tensors, options.maxShardBytes,
                                            [&](uint64_t bytes) { progress.advance(bytes); }));
  progress.finish();
  return Status::success();
}

} // namespace glm::glm53
