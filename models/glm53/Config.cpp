// Parsing and validation of GLM-5.3 config.json, following transformers' Glm5NextConfig.
#include "models/glm53/Config.h"

#include "base/InputFile.h"
#include "runtime/weights/SafeTensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <set>

namespace glm::glm53 {

using Json = nlohmann::json;

std::string_view attentionKindName(AttentionKind kind) {
  return kind == AttentionKind::Linear ? "linear_attention" : "deepseek_sparse_attention";
}
std::string_view mlpKindName(MlpKind kind) { return kind == MlpKind::Dense ? "dense" : "sparse"; }
std::string_view indexerKindName(IndexerKind kind) {
  return kind == IndexerKind::Full ? "full" : "shared";
}

int64_t Glm53Config::countLayers(AttentionKind kind) const {
  int64_t n = 0;
  for (AttentionKind k : layerTypes) {
    n += k == kind;
  }
  return n;
}

int64_t Glm53Config::countLayers(MlpKind kind) const {
  int64_t n = 0;
  for (MlpKind k : mlpLayerTypes) {
    n += k == kind;
  }
  return n;
}

namespace {

const char *jsonTypeName(const Json &value) {
  if (value.is_null()) {
    return "null";
  }
  if (value.is_boolean()) {
    return "a boolean";
  }
  if (value.is_number_integer()) {
    return "an integer";
  }
  if (value.is_number()) {
    return "a number";
  }
  if (value.is_string()) {
    return "a string";
  }
  if (value.is_array()) {
    return "an array";
  }
  return "an object";
}

/// Reads typed fields of one JSON object; the first failure is kept and later reads are no-ops,
/// so a parse reads like a list of fields and reports the first bad one by its full path.
class FieldReader {
public:
  FieldReader(const Json &object, std::string prefix, std::string_view source, Status &status)
      : object_(object), prefix_(std::move(prefix)), source_(source), status_(status) {}

  bool has(const char *key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  const Json *raw(const char *key) const { return has(key) ? &object_.at(key) : nullptr; }
  std::string path(std::string_view key) const { return strCat(prefix_, key); }

  void fail(std::string_view key, std::string_view what) {
    if (status_.ok()) {
      status_ = invalidArgument(source_, ": field '", path(key), "' ", what);
    }
  }

  /// An integer field; `required` makes absence an error, otherwise `out` keeps its default.
  void integer(const char *key, int64_t &out, bool required) {
    const Json *v = raw(key);
    if (v == nullptr) {
      if (required) {
        fail(key, "is missing");
      }
      return;
    }
    if (!v->is_number_integer()) {
      fail(key, strCat("must be an integer, got ", jsonTypeName(*v)));
      return;
    }
    out = v->get<int64_t>();
  }

  void optionalInteger(const char *key, std::optional<int64_t> &out) {
    if (object_.contains(key) && object_.at(key).is_null()) {
      out.reset();
      return;
    }
    int64_t value = 0;
    if (raw(key) != nullptr) {
      integer(key, value, true);
      out = value;
    }
  }

  void number(const char *key, double &out) {
    const Json *v = raw(key);
    if (v == nullptr) {
      return;
    }
    if (!v->is_number()) {
      fail(key, strCat("must be a number, got ", jsonTypeName(*v)));
      return;
    }
    out = v->get<double>();
  }

  void boolean(const char *key, bool &out) {
    const Json *v = raw(key);
    if (v == nullptr) {
      return;
    }
    if (!v->is_boolean()) {
      fail(key, strCat("must be true or false, got ", jsonTypeName(*v)));
      return;
    }
    out = v->get<bool>();
  }

  void string(const char *key, std::string &out) {
    const Json *v = raw(key);
    if (v == nullptr) {
      return;
    }
    if (!v->is_string()) {
      fail(key, strCat("must be a string, got ", jsonTypeName(*v)));
      return;
    }
    out = v->get<std::string>();
  }

  /// An array of strings, each mapped through `parse`; absent leaves `out` empty.
  template <typename T, typename ParseFn>
  void stringList(const char *key, std::vector<T> &out, ParseFn parse) {
    const Json *v = raw(key);
    if (v == nullptr) {
      return;
    }
    if (!v->is_array()) {
      fail(key, strCat("must be an array of strings, got ", jsonTypeName(*v)));
      return;
    }
    std::vector<T> values;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json &item = (*v)[i];
      if (!item.is_string()) {
        fail(key, strCat("[", i, "] must be a string, got ", jsonTypeName(item)));
        return;
      }
      std::optional<T> parsed = parse(item.get<std::string>());
      if (!parsed) {
        fail(key,
             strCat("[", i, "] is '", item.get<std::string>(), "', which is not a known value"));
        return;
      }
      values.push_back(*parsed);
    }
    out = std::move(values);
  }

  bool failed() const { return !status_.ok(); }

private:
  const Json &object_;
  std::string prefix_;
  std::string_view source_;
  Status &status_;
};

std::optional<AttentionKind> parseAttentionKind(const std::string &s) {
  if (s == "linear_attention") {
    return AttentionKind::Linear;
  }
  // transformers renames "full_attention" to "deepseek_sparse_attention".
  if (s == "deepseek_sparse_attention" || s == "full_attention") {
    return AttentionKind::Sparse;
  }
  return std::nullopt;
}

std::optional<MlpKind> parseMlpKind(const std::string &s) {
  if (s == "dense") {
    return MlpKind::Dense;
  }
  if (s == "sparse") {
    return MlpKind::Sparse;
  }
  return std::nullopt;
}

std::optional<IndexerKind> parseIndexerKind(const std::string &s) {
  if (s == "full") {
    return IndexerKind::Full;
  }
  if (s == "shared") {
    return IndexerKind::Shared;
  }
  return std::nullopt;
}

/// One ranged integer field of config.json and where it lands: a Glm53Config member, a
/// Glm53VisionConfig member, or neither (a field read only to derive others).
struct RangedField {
  ConfigFieldRange range;
  int64_t Glm53Config::*text = nullptr;
  int64_t Glm53VisionConfig::*vision = nullptr;
  /// The linear_attn_config key that overrides the flat field, if any (named in errors when the
  /// value came from there).
  const char *nested = nullptr;
};

/// Every integer field glmc reads, with its range: the one place the ceilings live. Each is
/// several times (mostly 4-16x) the released GLM-5.3-Flash's value, the last column, so any
/// checkpoint of this architecture fits, while a hostile one is refused before a loop, an
/// allocation or a product uses the value. The products of all ceilings together stay far
/// inside int64 (the static_asserts below), so no shape, parameter count or byte budget derived
/// from a parsed config can overflow.
constexpr RangedField kRangedFields[] = {
    // Trunk. 256 layers is 5.7x the release; each layer's tensors are listed and built one by
    // one, so this also bounds the table and the IR.
    {{"vocab_size", 1, 1 << 20, 154880}, &Glm53Config::vocabSize},
    {{"hidden_size", 1, 32768, 4096}, &Glm53Config::hiddenSize},
    {{"num_hidden_layers", 1, 256, 45}, &Glm53Config::numHiddenLayers},
    {{"intermediate_size", 1, 131072, 12288}, &Glm53Config::intermediateSize},
    {{"max_position_embeddings", 1, 1 << 24, 1048576}, &Glm53Config::maxPositionEmbeddings},
    // MLA.
    {{"num_attention_heads", 1, 512, 64}, &Glm53Config::numAttentionHeads},
    {{"num_key_value_heads", 1, 512, 64}, &Glm53Config::numKeyValueHeads},
    {{"q_lora_rank", 1, 16384, 1536}, &Glm53Config::qLoraRank},
    {{"kv_lora_rank", 1, 8192, 512}, &Glm53Config::kvLoraRank},
    {{"qk_nope_head_dim", 1, 2048, 256}, &Glm53Config::qkNopeHeadDim},
    {{"qk_rope_head_dim", 0, 2048, 0}, &Glm53Config::qkRopeHeadDim},
    {{"v_head_dim", 1, 2048, 256}, &Glm53Config::vHeadDim},
    // Lightning indexer; index_topk_freq and index_skip_topk_offset only derive indexer_types.
    {{"index_n_heads", 1, 512, 32}, &Glm53Config::indexNHeads},
    {{"index_head_dim", 1, 2048, 128}, &Glm53Config::indexHeadDim},
    {{"index_topk", 1, 65536, 2048}, &Glm53Config::indexTopk},
    {{"index_kpool", 1, 256, 4}, &Glm53Config::indexKpool},
    {{"index_topk_freq", 1, 256, 1}},
    {{"index_skip_topk_offset", -256, 256, 2}},
    // MoE: experts and their routing groups. 2048 experts is 7x the release.
    {{"moe_intermediate_size", 1, 32768, 2048}, &Glm53Config::moeIntermediateSize},
    {{"n_routed_experts", 1, 2048, 288}, &Glm53Config::nRoutedExperts},
    {{"num_experts_per_tok", 1, 256, 8}, &Glm53Config::numExpertsPerTok},
    {{"n_shared_experts", 1, 16, 1}, &Glm53Config::nSharedExperts},
    {{"n_group", 1, 2048, 1}, &Glm53Config::nGroup},
    {{"topk_group", 1, 2048, 1}, &Glm53Config::topkGroup},
    // mHC: streams, and the Sinkhorn iterations every layer runs per token (each one a pass over
    // an hc_mult x hc_mult matrix; 50x the release, so a step stays bounded in time).
    {{"hc_mult", 1, 32, 4}, &Glm53Config::hcMult},
    {{"hc_sinkhorn_iters", 1, 1000, 20}, &Glm53Config::hcSinkhornIters},
    // KDA: the recurrent state is heads x dim x dim floats per layer and sequence.
    {{"linear_num_heads", 1, 512, 64}, &Glm53Config::linearNumHeads, nullptr, "num_heads"},
    {{"linear_head_dim", 1, 1024, 128}, &Glm53Config::linearHeadDim, nullptr, "head_dim"},
    {{"linear_conv_kernel_dim", 1, 64, 4},
     &Glm53Config::linearConvKernelDim,
     nullptr,
     "short_conv_kernel_size"},
    // The vision tower.
    {{"vision_config.depth", 1, 256, 24}, nullptr, &Glm53VisionConfig::depth},
    {{"vision_config.hidden_size", 1, 16384, 1024}, nullptr, &Glm53VisionConfig::hiddenSize},
    {{"vision_config.num_heads", 1, 256, 16}, nullptr, &Glm53VisionConfig::numHeads},
    {{"vision_config.intermediate_size", 1, 65536, 4096},
     nullptr,
     &Glm53VisionConfig::intermediateSize},
    {{"vision_config.out_hidden_size", 1, 65536, 4096}, nullptr, &Glm53VisionConfig::outHiddenSize},
    {{"vision_config.projection_intermediate_size", 1, 131072, 10240},
     nullptr,
     &Glm53VisionConfig::projectionIntermediateSize},
    {{"vision_config.in_channels", 1, 16, 3}, nullptr, &Glm53VisionConfig::inChannels},
    {{"vision_config.image_size", 1, 16384, 336}, nullptr, &Glm53VisionConfig::imageSize},
    {{"vision_config.patch_size", 1, 1024, 14}, nullptr, &Glm53VisionConfig::patchSize},
    {{"vision_config.temporal_patch_size", 1, 16, 2},
     nullptr,
     &Glm53VisionConfig::temporalPatchSize},
    {{"vision_config.spatial_merge_size", 1, 16, 2}, nullptr, &Glm53VisionConfig::spatialMergeSize},
};

constexpr int64_t ceilingOf(std::string_view field) {
  for (const RangedField &f : kRangedFields) {
    if (f.range.field == field) {
      return f.range.max;
    }
  }
  throw "no such ranged field"; // a compile error where evaluated at compile time
}

// The largest quantities a config at every ceiling at once can give, each well below 2^63 (and an
// overflow inside a static_assert is itself a compile error). Raising a ceiling means checking
// these still hold.
constexpr int64_t kMaxLayersWithMtp = ceilingOf("num_hidden_layers") + 1;
constexpr int64_t kMaxHidden = ceilingOf("hidden_size");
// Routed experts dominate the parameter count: every layer an MoE of the most, widest experts,
// plus the shared experts, the dense MLP width and the attention's largest projections.
constexpr int64_t kMaxParameters =
    kMaxLayersWithMtp *
        (3 * kMaxHidden * ceilingOf("moe_intermediate_size") *
             (ceilingOf("n_routed_experts") + ceilingOf("n_shared_experts")) +
         3 * kMaxHidden * ceilingOf("intermediate_size") +
         ceilingOf("num_attention_heads") *
             (ceilingOf("qk_nope_head_dim") + ceilingOf("qk_rope_head_dim") +
              ceilingOf("v_head_dim")) *
             (ceilingOf("q_lora_rank") + ceilingOf("kv_lora_rank") + kMaxHidden) +
         (2 + ceilingOf("hc_mult")) * ceilingOf("hc_mult") * ceilingOf("hc_mult") * kMaxHidden * 2 +
         8 * ceilingOf("linear_num_heads") * ceilingOf("linear_head_dim") * kMaxHidden) +
    2 * ceilingOf("vocab_size") * kMaxHidden;
static_assert(kMaxParameters < (int64_t(1) << 54), "a model at the ceilings has too many "
                                                   "parameters to count in bytes (x8) safely");
// The largest single tensor (the vision patch embedding, a 5-D kernel).
static_assert(ceilingOf("vision_config.hidden_size") * ceilingOf("vision_config.in_channels") *
                      ceilingOf("vision_config.temporal_patch_size") *
                      ceilingOf("vision_config.patch_size") *
                      ceilingOf("vision_config.patch_size") <
                  (int64_t(1) << 48),
              "the vision patch embedding at the ceilings is too large");
// Decode state of one sequence at the longest context: KDA's fp32 states, MLA latent rows and
// pooled index keys.
static_assert(kMaxLayersWithMtp * (ceilingOf("linear_num_heads") * ceilingOf("linear_head_dim") *
                                       ceilingOf("linear_head_dim") * 4 +
                                   (ceilingOf("kv_lora_rank") + ceilingOf("index_head_dim")) * 2 *
                                       ceilingOf("max_position_embeddings")) <
                  (int64_t(1) << 56),
              "a sequence's state at the ceilings is too large");

/// Checks `value` of the ranged field `field` (a key of kRangedFields) read at `key` of `reader`.
void checkRange(FieldReader &reader, std::string_view field, std::string_view key, int64_t value) {
  for (const RangedField &f : kRangedFields) {
    if (f.range.field != field) {
      continue;
    }
    const ConfigFieldRange &r = f.range;
    if (value < r.min) {
      reader.fail(key, r.min == 1 ? strCat("must be positive, got ", value)
                       : r.min == 0
                           ? strCat("must not be negative, got ", value)
                           : strCat("(", value, ") is below ", r.min, ", the least glmc reads"));
    } else if (value > r.max) {
      reader.fail(key, strCat("(", value, ") exceeds ", r.max,
                              ", the most glmc reads (GLM-5.3-Flash has ", r.release, ")"));
    }
    return;
  }
}

/// Checks every text field of kRangedFields, as read into `c`, before anything derives from them.
void checkTextRanges(FieldReader &text, const Glm53Config &c, std::string_view source,
                     Status &status) {
  const Json *lac = text.raw("linear_attn_config");
  for (const RangedField &f : kRangedFields) {
    if (f.text == nullptr) {
      continue;
    }
    if (f.nested != nullptr && lac != nullptr && lac->is_object() && lac->contains(f.nested)) {
      FieldReader nested(*lac, text.path("linear_attn_config."), source, status);
      checkRange(nested, f.range.field, f.nested, c.*f.text);
    } else {
      checkRange(text, f.range.field, f.range.field, c.*f.text);
    }
    if (text.failed()) {
      return;
    }
  }
}

/// Checks every vision_config field of kRangedFields, as read into `v`.
void checkVisionRanges(FieldReader &vision, const Glm53VisionConfig &v) {
  constexpr std::string_view kPrefix = "vision_config.";
  for (const RangedField &f : kRangedFields) {
    if (f.vision != nullptr) {
      checkRange(vision, f.range.field, f.range.field.substr(kPrefix.size()), v.*f.vision);
    }
  }
}

/// `linear_attn_config` (the Kimi-style nested form): its values override the flat linear_* fields,
/// as in transformers; its layer lists, when given, must agree with layer_types.
void readLinearAttnConfig(FieldReader &text, Glm53Config &c, std::vector<int64_t> &kdaLayers,
                          std::vector<int64_t> &fullAttnLayers, std::string_view source,
                          Status &status) {
  const Json *lac = text.raw("linear_attn_config");
  if (lac == nullptr) {
    return;
  }
  if (!lac->is_object()) {
    text.fail("linear_attn_config", strCat("must be an object, got ", jsonTypeName(*lac)));
    return;
  }
  FieldReader r(*lac, text.path("linear_attn_config."), source, status);
  r.integer("head_dim", c.linearHeadDim, false);
  r.integer("num_heads", c.linearNumHeads, false);
  r.integer("short_conv_kernel_size", c.linearConvKernelDim, false);
  // Older transformers read "lower_bound", newer ones "gate_lower_bound"; the newer key wins.
  r.number("lower_bound", c.linearLowerBound);
  r.number("gate_lower_bound", c.linearLowerBound);
  for (auto [key, out] :
       {std::pair{"kda_layers", &kdaLayers}, std::pair{"full_attn_layers", &fullAttnLayers}}) {
    const Json *list = r.raw(key);
    if (list == nullptr) {
      continue;
    }
    if (!list->is_array()) {
      r.fail(key, "must be an array of layer indices");
      return;
    }
    for (const Json &item : *list) {
      if (!item.is_number_integer()) {
        r.fail(key, "must be an array of layer indices");
        return;
      }
      out->push_back(item.get<int64_t>());
    }
  }
}

/// transformers' Glm5NextTextConfig.__post_init__ defaults for the per-layer schedules.
void deriveLayerSchedules(Glm53Config &c, const FieldReader &text) {
  const int64_t n = c.numHiddenLayers;
  if (c.mlpLayerTypes.empty() && text.raw("mlp_layer_types") == nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      c.mlpLayerTypes.push_back(i < 3 ? MlpKind::Dense : MlpKind::Sparse);
    }
  }
  if (c.layerTypes.empty() && text.raw("layer_types") == nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      c.layerTypes.push_back(i % 4 == 3 ? AttentionKind::Sparse : AttentionKind::Linear);
    }
  }
}

void deriveIndexerTypes(Glm53Config &c, FieldReader &text) {
  if (text.raw("indexer_types") != nullptr) {
    return;
  }
  const int64_t n = c.numHiddenLayers;
  // A pattern ("FSSF...") overrides the freq/offset schedule.
  if (const Json *pattern = text.raw("index_topk_pattern")) {
    if (pattern->is_string()) {
      const std::string p = pattern->get<std::string>();
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 'F') {
          c.indexerTypes.push_back(IndexerKind::Full);
        } else if (p[i] == 'S') {
          c.indexerTypes.push_back(IndexerKind::Shared);
        } else {
          text.fail("index_topk_pattern", strCat("[", i, "] is '", p[i], "'; expected 'F' or 'S'"));
          return;
        }
      }
    } else {
      text.stringList("index_topk_pattern", c.indexerTypes, parseIndexerKind);
    }
    return;
  }
  int64_t freq = 1;
  int64_t offset = 2;
  text.integer("index_topk_freq", freq, false);
  text.integer("index_skip_topk_offset", offset, false);
  checkRange(text, "index_topk_freq", "index_topk_freq", freq);
  checkRange(text, "index_skip_topk_offset", "index_skip_topk_offset", offset);
  if (text.failed()) {
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    c.indexerTypes.push_back(
        std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? IndexerKind::Full : IndexerKind::Shared);
  }
}

/// quantization_config, which transformers keeps at the top level of a composite config and which
/// flat configs keep beside the text fields; the first one read wins.
void readQuantizationConfig(FieldReader &t, std::string_view source, Glm53Config &c,
                            Status &status) {
  const Json *q = t.raw("quantization_config");
  if (q == nullptr || c.quantMethod) {
    return;
  }
  if (!q->is_object()) {
    t.fail("quantization_config", strCat("must be an object, got ", jsonTypeName(*q)));
    return;
  }
  FieldReader qr(*q, t.path("quantization_config."), source, status);
  std::string method;
  qr.string("quant_method", method);
  if (method.empty() && status.ok()) {
    qr.fail("quant_method", "is missing; glmc reads exl3 and fp8 checkpoints");
  }
  if (!status.ok()) {
    return;
  }
  if (std::find(std::begin(kKnownQuantMethods), std::end(kKnownQuantMethods), method) ==
      std::end(kKnownQuantMethods)) {
    // A checkpoint quantized some other way (gptq, awq, bitsandbytes...) would be read as if its
    // packed integers were weights.
    qr.fail("quant_method", strCat("is '", method,
                                   "', which glmc does not read; it reads exl3 (exllamav3) and "
                                   "fp8 (e4m3, 128 x 128 block scales) checkpoints"));
    return;
  }
  c.quantMethod = method;
  if (method == "fp8") {
    // DeepSeek's and GLM's fp8 releases: e4m3 values, one inverse scale per 128 x 128 block
    // (kFp8BlockSize); another format or block size would be read wrongly.
    std::string fmt = "e4m3";
    qr.string("fmt", fmt);
    if (status.ok() && fmt != "e4m3") {
      qr.fail("fmt", strCat("is '", fmt, "'; glmc reads fp8 as e4m3"));
    }
    if (const Json *block = qr.raw("weight_block_size");
        block != nullptr && status.ok() && *block != Json::array({128, 128})) {
      qr.fail("weight_block_size",
              strCat("is ", block->dump(), "; glmc reads fp8 scales of 128 x 128 blocks"));
    }
    return;
  }
  // reference/exl3_format.md §1.2.
  Glm53Config::Exl3Quantization e;
  qr.string("version", e.version);
  double bits = 0, headBits = 0;
  if (qr.raw("bits") != nullptr) {
    qr.number("bits", bits);
    if (status.ok() && !(bits > 0 && bits <= 16)) {
      qr.fail("bits", strCat("must be a bits-per-weight average in (0, 16], got ", bits));
    }
    e.bits = bits;
  }
  if (qr.raw("head_bits") != nullptr) {
    qr.number("head_bits", headBits);
    if (status.ok() && !(headBits >= 1 && headBits <= 16)) {
      qr.fail("head_bits", strCat("must be in 1..16, got ", headBits));
    }
    e.headBits = headBits;
  }
  qr.string("codebook", e.codebook);
  if (status.ok() && !e.codebook.empty() && e.codebook != "mcg" && e.codebook != "mul1" &&
      e.codebook != "3inst") {
    qr.fail("codebook", strCat("is '", e.codebook, "'; EXL3 codebooks are mcg, mul1 and 3inst"));
  }
  qr.string("out_scales", e.outScales);
  if (status.ok() && !e.outScales.empty() && e.outScales != "always" && e.outScales != "never" &&
      e.outScales != "auto") {
    qr.fail("out_scales", strCat("is '", e.outScales, "'; expected always, never or auto"));
  }
  c.exl3 = e;
}

void readTextConfig(const Json &object, const std::string &prefix, std::string_view source,
                    Glm53Config &c, Status &status) {
  FieldReader t(object, prefix, source, status);

  // The dimensions that fix every tensor's shape are required: transformers would fall back to
  // the 321B release's values, which for a checkpoint that omits them is a silent wrong model.
  t.integer("vocab_size", c.vocabSize, true);
  t.integer("hidden_size", c.hiddenSize, true);
  t.integer("num_hidden_layers", c.numHiddenLayers, true);
  t.integer("intermediate_size", c.intermediateSize, true);
  t.integer("moe_intermediate_size", c.moeIntermediateSize, true);
  t.integer("num_attention_heads", c.numAttentionHeads, true);
  c.numKeyValueHeads = c.numAttentionHeads;
  t.integer("num_key_value_heads", c.numKeyValueHeads, false);
  if (t.raw("q_lora_rank") == nullptr) {
    t.fail("q_lora_rank",
           "is missing or null; the DSA indexer reads the q_a latent, so it is required");
  }
  t.integer("q_lora_rank", c.qLoraRank, false);
  t.integer("kv_lora_rank", c.kvLoraRank, true);
  t.integer("qk_nope_head_dim", c.qkNopeHeadDim, true);
  t.integer("qk_rope_head_dim", c.qkRopeHeadDim, false);
  t.integer("v_head_dim", c.vHeadDim, true);
  t.integer("index_n_heads", c.indexNHeads, true);
  t.integer("index_head_dim", c.indexHeadDim, true);
  t.integer("index_topk", c.indexTopk, true);
  // transformers defaults index_kpool to 16, the release uses 4: never assume it.
  t.integer("index_kpool", c.indexKpool, true);
  t.integer("n_routed_experts", c.nRoutedExperts, true);
  // transformers defaults to 8, SGLang and vLLM to 7: never assume it.
  t.integer("num_experts_per_tok", c.numExpertsPerTok, true);
  t.integer("hc_mult", c.hcMult, true);

  // Behaviour with a well-defined default in transformers (or, for fields transformers does not
  // know, in the release).
  t.integer("n_shared_experts", c.nSharedExperts, false);
  t.integer("n_group", c.nGroup, false);
  t.integer("topk_group", c.topkGroup, false);
  t.boolean("norm_topk_prob", c.normTopkProb);
  t.number("routed_scaling_factor", c.routedScalingFactor);
  t.string("scoring_func", c.scoringFunc);
  t.string("topk_method", c.topkMethod);
  t.string("moe_router_dtype", c.moeRouterDtype);
  t.string("hidden_act", c.hiddenAct);
  t.number("swiglu_limit", c.swigluLimit);
  t.number("rms_norm_eps", c.rmsNormEps);
  t.integer("max_position_embeddings", c.maxPositionEmbeddings, false);
  t.boolean("tie_word_embeddings", c.tieWordEmbeddings);
  t.boolean("attention_bias", c.attentionBias);
  t.number("hc_eps", c.hcEps);
  t.integer("hc_sinkhorn_iters", c.hcSinkhornIters, false);
  bool mhc = true;
  t.boolean("mhc", mhc);
  if (!mhc) {
    t.fail("mhc", "is false; only mHC checkpoints (hc_mult residual streams) are supported");
  }
  t.boolean("index_kpool_compress", c.indexKpoolCompress);
  t.boolean("index_kpool_always_select_tail", c.indexKpoolAlwaysSelectTail);
  t.boolean("indexer_rope_interleave", c.indexerRopeInterleave);
  t.boolean("index_share_for_mtp_iteration", c.indexShareForMtpIteration);
  t.integer("num_nextn_predict_layers", c.numNextnPredictLayers, false);
  t.string("dtype", c.dtype);
  if (!t.has("dtype")) {
    t.string("torch_dtype", c.dtype);
  }

  // KDA: flat fields first, then linear_attn_config overrides them (transformers' order).
  c.linearNumHeads = 0;
  c.linearHeadDim = 0;
  t.integer("linear_num_heads", c.linearNumHeads, false);
  t.integer("linear_head_dim", c.linearHeadDim, false);
  t.integer("linear_conv_kernel_dim", c.linearConvKernelDim, false);
  t.number("linear_lower_bound", c.linearLowerBound);
  std::vector<int64_t> kdaLayers, fullAttnLayers;
  readLinearAttnConfig(t, c, kdaLayers, fullAttnLayers, source, status);
  if (c.linearNumHeads == 0 && !t.failed()) {
    t.fail("linear_num_heads", "is missing (give it or linear_attn_config.num_heads)");
  }
  if (c.linearHeadDim == 0 && !t.failed()) {
    t.fail("linear_head_dim", "is missing (give it or linear_attn_config.head_dim)");
  }

  // Tokens.
  t.optionalInteger("pad_token_id", c.padTokenId);
  t.optionalInteger("bos_token_id", c.bosTokenId);
  if (const Json *eos = t.raw("eos_token_id")) {
    if (eos->is_number_integer()) {
      c.eosTokenIds = {eos->get<int64_t>()};
    } else if (eos->is_array()) {
      for (const Json &id : *eos) {
        if (!id.is_number_integer()) {
          t.fail("eos_token_id", "must be an integer or an array of integers");
          break;
        }
        c.eosTokenIds.push_back(id.get<int64_t>());
      }
    } else {
      t.fail("eos_token_id",
             strCat("must be an integer or an array of integers, got ", jsonTypeName(*eos)));
    }
  }

  readQuantizationConfig(t, source, c, status);
  if (t.failed()) {
    return;
  }
  // Every dimension within its range before the schedules loop over the layers and anything
  // multiplies.
  checkTextRanges(t, c, source, status);

  // Per-layer schedules: given lists win; absent ones are derived as transformers does.
  t.stringList("layer_types", c.layerTypes, parseAttentionKind);
  t.stringList("mlp_layer_types", c.mlpLayerTypes, parseMlpKind);
  t.stringList("indexer_types", c.indexerTypes, parseIndexerKind);
  if (t.failed()) {
    return;
  }
  deriveLayerSchedules(c, t);
  deriveIndexerTypes(c, t);
  if (t.failed()) {
    return;
  }

  // linear_attn_config's layer lists are informational in transformers; a config whose lists
  // contradict layer_types is ambiguous, so refuse it rather than guess.
  for (auto [key, list, kind] :
       {std::tuple{"linear_attn_config.kda_layers", &kdaLayers, AttentionKind::Linear},
        std::tuple{"linear_attn_config.full_attn_layers", &fullAttnLayers,
                   AttentionKind::Sparse}}) {
    if (list->empty()) {
      continue;
    }
    std::set<int64_t> listed(list->begin(), list->end());
    for (int64_t i = 0; i < static_cast<int64_t>(c.layerTypes.size()); ++i) {
      if ((c.layerTypes[i] == kind) != (listed.count(i) != 0)) {
        t.fail(key, strCat("disagrees with layer_types at layer ", i, " (layer_types says ",
                           attentionKindName(c.layerTypes[i]), ")"));
        return;
      }
    }
  }
}

void readVisionConfig(const Json &object, std::string_view source, Glm53VisionConfig &v,
                      Status &status) {
  FieldReader r(object, "vision_config.", source, status);
  r.integer("depth", v.depth, false);
  r.integer("hidden_size", v.hiddenSize, false);
  r.integer("num_heads", v.numHeads, false);
  r.integer("intermediate_size", v.intermediateSize, false);
  r.integer("out_hidden_size", v.outHiddenSize, false);
  r.integer("projection_intermediate_size", v.projectionIntermediateSize, false);
  r.integer("in_channels", v.inChannels, false);
  r.integer("image_size", v.imageSize, false);
  r.integer("patch_size", v.patchSize, false);
  r.integer("temporal_patch_size", v.temporalPatchSize, false);
  r.integer("spatial_merge_size", v.spatialMergeSize, false);
  r.boolean("attention_bias", v.attentionBias);
  r.number("rms_norm_eps", v.rmsNormEps);
  r.number("swiglu_limit", v.swigluLimit);
  r.string("hidden_act", v.hiddenAct);
  if (!r.failed()) {
    checkVisionRanges(r, v);
  }
}

Status validate(const Glm53Config &c, const std::string &p, std::string_view source) {
  auto bad = [&](std::string_view field, auto &&...what) {
    return invalidArgument(source, ": field '", p, field, "' ", what...);
  };
  // Every integer field was range-checked as it was read (kRangedFields); what remains are the
  // relations between fields.
  if (c.numKeyValueHeads != c.numAttentionHeads) {
    return bad("num_key_value_heads", "(", c.numKeyValueHeads, ") must equal num_attention_heads (",
               c.numAttentionHeads, "): MLA has no GQA");
  }
  if (c.qkRopeHeadDim != 0) {
    return bad("qk_rope_head_dim", "is ", c.qkRopeHeadDim,
               "; GLM-5.3's sparse attention is NoPE, so it must be 0");
  }
  if (c.indexTopk % c.indexKpool != 0) {
    return bad("index_topk", "(", c.indexTopk, ") must be divisible by index_kpool (", c.indexKpool,
               ")");
  }
  if (!c.indexKpoolCompress) {
    return bad("index_kpool_compress", "is false; only the KPool-compressed indexer is supported");
  }
  if (c.numExpertsPerTok > c.nRoutedExperts) {
    return bad("num_experts_per_tok", "(", c.numExpertsPerTok, ") exceeds n_routed_experts (",
               c.nRoutedExperts, ")");
  }
  if (c.nRoutedExperts % c.nGroup != 0) {
    return bad("n_group", "(", c.nGroup, ") must divide n_routed_experts (", c.nRoutedExperts, ")");
  }
  if (c.topkGroup > c.nGroup) {
    return bad("topk_group", "(", c.topkGroup, ") exceeds n_group (", c.nGroup, ")");
  }
  if (c.scoringFunc != "sigmoid") {
    return bad("scoring_func", "is '", c.scoringFunc, "'; only 'sigmoid' is supported");
  }
  if (c.topkMethod != "noaux_tc") {
    return bad("topk_method", "is '", c.topkMethod, "'; only 'noaux_tc' is supported");
  }
  if (c.hiddenAct != "silu") {
    return bad("hidden_act", "is '", c.hiddenAct, "'; only 'silu' is supported");
  }
  if (!(c.rmsNormEps > 0)) {
    return bad("rms_norm_eps", "must be positive");
  }
  if (!(c.hcEps >= 0)) {
    return bad("hc_eps", "must not be negative");
  }
  if (!(c.swigluLimit > 0)) {
    return bad("swiglu_limit", "must be positive");
  }
  if (!(c.linearLowerBound < 0)) {
    return bad("linear_lower_bound",
               "must be negative (it scales a sigmoid into a log decay), got ", c.linearLowerBound);
  }
  if (c.numNextnPredictLayers < 0 || c.numNextnPredictLayers > 1) {
    return bad("num_nextn_predict_layers", "is ", c.numNextnPredictLayers,
               "; 0 or 1 MTP layers are supported");
  }
  const auto n = static_cast<size_t>(c.numHiddenLayers);
  if (c.layerTypes.size() != n) {
    return bad("layer_types", "has ", c.layerTypes.size(), " entries for ", n, " layers");
  }
  if (c.mlpLayerTypes.size() != n) {
    return bad("mlp_layer_types", "has ", c.mlpLayerTypes.size(), " entries for ", n, " layers");
  }
  if (c.indexerTypes.size() < n) {
    return bad("indexer_types", "has ", c.indexerTypes.size(), " entries for ", n, " layers");
  }
  bool seenFullIndexer = false;
  for (size_t i = 0; i < n; ++i) {
    if (c.layerTypes[i] != AttentionKind::Sparse) {
      continue;
    }
    if (c.indexerTypes[i] == IndexerKind::Full) {
      seenFullIndexer = true;
    } else if (!seenFullIndexer) {
      return bad("indexer_types", "[", i, "] is 'shared' but no earlier sparse-attention layer ",
                 "runs a full indexer to share");
    }
  }
  auto checkToken = [&](std::string_view field, int64_t id) -> Status {
    if (id < 0 || id >= c.vocabSize) {
      return bad(field, "(", id, ") is outside the vocabulary [0, ", c.vocabSize, ")");
    }
    return Status::success();
  };
  if (c.padTokenId) {
    GLM_RETURN_IF_ERROR(checkToken("pad_token_id", *c.padTokenId));
  }
  if (c.bosTokenId) {
    GLM_RETURN_IF_ERROR(checkToken("bos_token_id", *c.bosTokenId));
  }
  for (int64_t id : c.eosTokenIds) {
    GLM_RETURN_IF_ERROR(checkToken("eos_token_id", id));
  }
  if (c.vision) {
    const Glm53VisionConfig &v = *c.vision;
    if (v.hiddenSize % v.numHeads != 0) {
      return invalidArgument(source, ": field 'vision_config.hidden_size' (", v.hiddenSize,
                             ") must be divisible by vision_config.num_heads (", v.numHeads, ")");
    }
  }
  return Status::success();
}

} // namespace

std::span<const ConfigFieldRange> configFieldRanges() {
  static const std::vector<ConfigFieldRange> ranges = [] {
    std::vector<ConfigFieldRange> out;
    for (const RangedField &f : kRangedFields) {
      out.push_back(f.range);
    }
    return out;
  }();
  return ranges;
}

Expected<Glm53Config> parseGlm53Config(std::string_view text, std::string_view source) {
  GLM_ASSIGN_OR_RETURN(Json root, parseUntrustedJson<Json>(text, source, kMaxConfigJsonDepth));
  if (!root.is_object()) {
    return invalidArgument(source, ": expected a JSON object at the top level");
  }

  Glm53Config c;
  Status status;
  FieldReader outer(root, "", source, status);
  outer.string("model_type", c.modelType);
  if (!status.ok()) {
    return status;
  }
  if (const Json *archs = outer.raw("architectures"); archs != nullptr && archs->is_array()) {
    for (const Json &a : *archs) {
      if (a.is_string()) {
        c.architectures.push_back(a.get<std::string>());
      }
    }
  }

  std::string textPrefix;
  if (c.modelType == "glm5_next") {
    outer.integer("image_token_id", c.imageTokenId, false);
    outer.integer("video_token_id", c.videoTokenId, false);
    outer.integer("image_start_token_id", c.imageStartTokenId, false);
    outer.integer("image_end_token_id", c.imageEndTokenId, false);
    outer.integer("video_start_token_id", c.videoStartTokenId, false);
    outer.integer("video_end_token_id", c.videoEndTokenId, false);
    outer.string("dtype", c.dtype);
    readQuantizationConfig(outer, source, c, status);
    const Json *textConfig = outer.raw("text_config");
    if (textConfig != nullptr && !textConfig->is_object()) {
      outer.fail("text_config", strCat("must be an object, got ", jsonTypeName(*textConfig)));
      return status;
    }
    // Flat text-only glm5_next checkpoints keep the text fields at the top level.
    if (textConfig != nullptr) {
      textPrefix = "text_config.";
      readTextConfig(*textConfig, textPrefix, source, c, status);
    } else {
      readTextConfig(root, "", source, c, status);
    }
    // transformers builds a default vision tower when vision_config is absent.
    c.vision = Glm53VisionConfig{};
    if (const Json *visionConfig = outer.raw("vision_config")) {
      if (!visionConfig->is_object()) {
        outer.fail("vision_config", strCat("must be an object, got ", jsonTypeName(*visionConfig)));
      } else {
        readVisionConfig(*visionConfig, source, *c.vision, status);
      }
    }
  } else if (c.modelType == "glm5_next_text") {
    readTextConfig(root, "", source, c, status);
  } else if (c.modelType.empty()) {
    return invalidArgument(source, ": field 'model_type' is missing; expected 'glm5_next' or "
                                   "'glm5_next_text'");
  } else {
    return invalidArgument(source, ": field 'model_type' is '", c.modelType,
                           "'; expected 'glm5_next' or 'glm5_next_text'");
  }
  if (!status.ok()) {
    return status;
  }
  GLM_RETURN_IF_ERROR(validate(c, textPrefix, source));
  return c;
}

Expected<Glm53Config> loadGlm53Config(const std::filesystem::path &modelDirOrFile) {
  std::filesystem::path path = modelDirOrFile;
  std::error_code ec;
  // A directory, or a path that does not exist and does not name a .json file, is a model
  // directory: the error then names the config.json that was looked for.
  if (std::filesystem::is_directory(path, ec) ||
      (!std::filesystem::exists(path, ec) && path.extension() != ".json")) {
    path /= "config.json";
  }
  Expected<std::string> text = readConfigJson(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::NotFound) {
      return notFound(path.string(), ": cannot open (a checkpoint directory holds config.json)");
    }
    return text.status();
  }
  return parseGlm53Config(*text, path.string());
}

} // namespace glm::glm53
