// The GLM-5.3 tensor table (names as on the Hub) and the checkpoint check built on it.
#include "models/glm53/Weights.h"

#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensors.h"

#include <limits>
#include <map>
#include <set>

namespace glm::glm53 {

std::string_view componentName(Component component) {
  switch (component) {
  case Component::Embedding:
    return "embedding";
  case Component::Head:
    return "lm_head";
  case Component::FinalNorm:
    return "final norm";
  case Component::LayerNorms:
    return "layer norms";
  case Component::Mhc:
    return "mHC";
  case Component::Kda:
    return "KDA attention";
  case Component::MlaAttention:
    return "MLA attention";
  case Component::Indexer:
    return "DSA indexer";
  case Component::DenseMlp:
    return "dense MLP";
  case Component::Router:
    return "router";
  case Component::SharedExpert:
    return "shared experts";
  case Component::RoutedExpert:
    return "routed experts";
  case Component::MtpProjection:
    return "MTP projection";
  case Component::Vision:
    return "vision tower";
  }
  return "?";
}

int64_t WeightInfo::numel() const {
  // A parsed config's ranges keep every table shape far inside int64 (Config.cpp); a product
  // past it saturates instead of wrapping, and Budget's checked counts report it.
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      return std::numeric_limits<int64_t>::max();
    }
  }
  return n;
}

namespace {

/// Appends tensors under one name prefix, all of one component and layer.
class TableBuilder {
public:
  explicit TableBuilder(std::vector<WeightInfo> &out) : out_(out) {}

  TableBuilder &at(std::string prefix, Component component, int64_t layer = -1, bool mtp = false,
                   int64_t expert = -1) {
    prefix_ = std::move(prefix);
    component_ = component;
    layer_ = layer;
    mtp_ = mtp;
    expert_ = expert;
    return *this;
  }

  void linear(std::string_view name, int64_t out, int64_t in) {
    add(name, {out, in}, WeightRole::Linear, DType::BF16);
  }
  void param(std::string_view name, std::vector<int64_t> shape, DType dtype = DType::BF16) {
    add(name, std::move(shape), WeightRole::Param, dtype);
  }

private:
  void add(std::string_view name, std::vector<int64_t> shape, WeightRole role, DType dtype) {
    WeightInfo w;
    w.name = prefix_ + std::string(name);
    w.shape = std::move(shape);
    w.component = component_;
    w.role = role;
    w.releaseDType = dtype;
    w.layer = layer_;
    w.expert = expert_;
    w.isMtp = mtp_;
    out_.push_back(std::move(w));
  }

  std::vector<WeightInfo> &out_;
  std::string prefix_;
  Component component_ = Component::Embedding;
  int64_t layer_ = -1;
  bool mtp_ = false;
  int64_t expert_ = -1;
};

/// HF Glm5NextTextLinearAttention (reference/glm53_arch.md §2.4).
void addKda(TableBuilder &t, const Glm53Config &c, const std::string &p, int64_t layer) {
  const int64_t h = c.hiddenSize;
  const int64_t proj = c.kdaProjDim();
  const int64_t dk = c.linearHeadDim;
  t.at(p + "self_attn.", Component::Kda, layer);
  t.linear("q_proj.weight", proj, h);
  t.linear("k_proj.weight", proj, h);
  t.linear("v_proj.weight", proj, h);
  // HF keeps the short-conv kernels, A_log and dt_bias in fp32.
  t.param("q_conv1d.weight", {proj, 1, c.linearConvKernelDim}, DType::F32);
  t.param("k_conv1d.weight", {proj, 1, c.linearConvKernelDim}, DType::F32);
  t.param("v_conv1d.weight", {proj, 1, c.linearConvKernelDim}, DType::F32);
  t.linear("f_a_proj.weight", dk, h);
  t.linear("f_b_proj.weight", proj, dk);
  t.param("dt_bias", {proj}, DType::F32);
  t.param("A_log", {c.linearNumHeads}, DType::F32);
  t.linear("b_proj.weight", c.linearNumHeads, h);
  t.linear("g_a_proj.weight", dk, h);
  t.linear("g_b_proj.weight", proj, dk);
  t.param("o_norm.weight", {dk});
  t.linear("o_proj.weight", h, proj);
}

/// HF Glm5NextTextAttention + Glm5NextTextIndexer (reference/glm53_arch.md §2.5).
void addDsa(TableBuilder &t, const Glm53Config &c, const std::string &p, int64_t layer, bool mtp) {
  const int64_t h = c.hiddenSize;
  const int64_t heads = c.numAttentionHeads;
  t.at(p + "self_attn.", Component::MlaAttention, layer, mtp);
  t.linear("q_a_proj.weight", c.qLoraRank, h);
  if (c.attentionBias) {
    t.param("q_a_proj.bias", {c.qLoraRank});
  }
  t.param("q_a_layernorm.weight", {c.qLoraRank});
  t.linear("q_b_proj.weight", heads * c.qkHeadDim(), c.qLoraRank);
  t.linear("kv_a_proj_with_mqa.weight", c.kvLoraRank + c.qkRopeHeadDim, h);
  if (c.attentionBias) {
    t.param("kv_a_proj_with_mqa.bias", {c.kvLoraRank + c.qkRopeHeadDim});
  }
  t.param("kv_a_layernorm.weight", {c.kvLoraRank});
  t.linear("kv_b_proj.weight", heads * (c.qkNopeHeadDim + c.vHeadDim), c.kvLoraRank);
  t.linear("o_proj.weight", h, heads * c.vHeadDim);
  if (c.attentionBias) {
    t.param("o_proj.bias", {h});
  }
  t.at(p + "self_attn.indexer.", Component::Indexer, layer, mtp);
  t.linear("wq_b.weight", c.indexNHeads * c.indexHeadDim, c.qLoraRank);
  t.linear("wk.weight", c.indexHeadDim, h);
  t.param("k_norm.weight", {c.indexHeadDim});
  t.param("k_norm.bias", {c.indexHeadDim});
  t.linear("weights_proj.weight", c.indexNHeads, h);
  t.linear("index_kpool_compress_gate", c.indexHeadDim, h);
  t.param("index_kpool_compress_ape", {c.indexKpool, c.indexHeadDim});
}

void addSwiGlu(TableBuilder &t, int64_t hidden, int64_t intermediate) {
  t.linear("gate_proj.weight", intermediate, hidden);
  t.linear("up_proj.weight", intermediate, hidden);
  t.linear("down_proj.weight", hidden, intermediate);
}

/// HF Glm5NextTextMoE (reference/glm53_arch.md §2.7), experts in the Hub's per-expert layout.
void addMoe(TableBuilder &t, const Glm53Config &c, const std::string &p, int64_t layer, bool mtp) {
  const int64_t h = c.hiddenSize;
  t.at(p + "mlp.gate.", Component::Router, layer, mtp);
  t.linear("weight", c.nRoutedExperts, h);
  t.param("e_score_correction_bias", {c.nRoutedExperts}, DType::F32);
  for (int64_t e = 0; e < c.nRoutedExperts; ++e) {
    t.at(p + "mlp.experts." + std::to_string(e) + ".", Component::RoutedExpert, layer, mtp, e);
    addSwiGlu(t, h, c.moeIntermediateSize);
  }
  t.at(p + "mlp.shared_experts.", Component::SharedExpert, layer, mtp);
  addSwiGlu(t, h, c.sharedExpertIntermediateSize());
}

void addMhc(TableBuilder &t, const Glm53Config &c, const std::string &p, int64_t layer) {
  t.at(p, Component::Mhc, layer);
  for (const char *site : {"attn", "ffn"}) {
    const std::string s = std::string("hc_") + site + "_";
    t.param(s + "fn", {c.hcMixDim(), c.hcMult * c.hiddenSize});
    t.param(s + "base", {c.hcMixDim()});
    t.param(s + "scale", {3});
  }
}

/// HF Glm5NextVisionModel; names as model.visual.* in the Hub checkpoint.
void addVision(TableBuilder &t, const Glm53VisionConfig &v) {
  const std::string p = "model.visual.";
  const int64_t d = v.hiddenSize;
  const int64_t out = v.outHiddenSize;
  t.at(p + "patch_embed.", Component::Vision);
  t.param("proj.weight", {d, v.inChannels, v.temporalPatchSize, v.patchSize, v.patchSize});
  t.param("proj.bias", {d});
  for (int64_t b = 0; b < v.depth; ++b) {
    t.at(p + "blocks." + std::to_string(b) + ".", Component::Vision);
    t.param("norm1.weight", {d});
    t.param("norm2.weight", {d});
    t.linear("attn.qkv.weight", 3 * d, d);
    if (v.attentionBias) {
      t.param("attn.qkv.bias", {3 * d});
    }
    t.linear("attn.proj.weight", d, d);
    if (v.attentionBias) {
      t.param("attn.proj.bias", {d});
    }
    t.param("attn.q_norm.weight", {v.headDim()});
    t.param("attn.k_norm.weight", {v.headDim()});
    // The block MLP's bias follows attention_bias in HF (Glm5NextVisionBlock).
    for (auto [name, o, i] : {std::tuple{"mlp.gate_proj", v.intermediateSize, d},
                              std::tuple{"mlp.up_proj", v.intermediateSize, d},
                              std::tuple{"mlp.down_proj", d, v.intermediateSize}}) {
      t.linear(std::string(name) + ".weight", o, i);
      if (v.attentionBias) {
        t.param(std::string(name) + ".bias", {o});
      }
    }
  }
  t.at(p, Component::Vision);
  t.param("post_layernorm.weight", {d});
  t.param("downsample.weight", {out, d, v.spatialMergeSize, v.spatialMergeSize});
  t.param("downsample.bias", {out});
  t.at(p + "merger.", Component::Vision);
  t.linear("proj.weight", out, out);
  t.param("post_projection_norm.weight", {out});
  t.param("post_projection_norm.bias", {out});
  addSwiGlu(t, out, v.projectionIntermediateSize);
}

} // namespace

std::vector<WeightInfo> glm53Weights(const Glm53Config &c) {
  std::vector<WeightInfo> table;
  TableBuilder t(table);
  const std::string text = "model.language_model.";
  const int64_t h = c.hiddenSize;

  t.at(text, Component::Embedding);
  t.param("embed_tokens.weight", {c.vocabSize, h});

  for (int64_t layer = 0; layer < c.numHiddenLayers; ++layer) {
    const std::string p = text + "layers." + std::to_string(layer) + ".";
    addMhc(t, c, p, layer);
    t.at(p, Component::LayerNorms, layer);
    t.param("input_layernorm.weight", {h});
    t.param("post_attention_layernorm.weight", {h});
    if (c.layerTypes[layer] == AttentionKind::Linear) {
      addKda(t, c, p, layer);
    } else {
      addDsa(t, c, p, layer, /*mtp=*/false);
    }
    if (c.mlpLayerTypes[layer] == MlpKind::Dense) {
      t.at(p + "mlp.", Component::DenseMlp, layer);
      addSwiGlu(t, h, c.intermediateSize);
    } else {
      addMoe(t, c, p, layer, /*mtp=*/false);
    }
  }

  t.at(text, Component::FinalNorm);
  t.param("norm.weight", {h});
  if (!c.tieWordEmbeddings) {
    t.at("", Component::Head);
    t.linear("lm_head.weight", c.vocabSize, h);
  }

  // The MTP block (reference/glm53_arch.md §2.8): a DSA layer and an MoE without mHC, fed by
  // eh_proj over [enorm(embedding), hnorm(trunk output)]; it shares the trunk's embedding and head.
  if (c.hasMtp()) {
    const int64_t layer = c.numHiddenLayers;
    const std::string p = text + "layers." + std::to_string(layer) + ".";
    t.at(p, Component::MtpProjection, layer, /*mtp=*/true);
    t.linear("eh_proj.weight", h, 2 * h);
    t.param("enorm.weight", {h});
    t.param("hnorm.weight", {h});
    t.param("shared_head.norm.weight", {h});
    t.param("input_layernorm.weight", {h});
    t.param("post_attention_layernorm.weight", {h});
    addDsa(t, c, p, layer, /*mtp=*/true);
    addMoe(t, c, p, layer, /*mtp=*/true);
  }

  if (c.vision) {
    addVision(t, *c.vision);
  }
  return table;
}

bool isAllowedDType(WeightRole role, DType dtype) {
  switch (dtype) {
  case DType::BF16:
  case DType::F16:
  case DType::F32:
    return true;
  case DType::F8_E4M3:
    return role == WeightRole::Linear;
  default:
    return false;
  }
}

namespace {

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

std::string scaleNameFor(const std::string &weightName) { return weightName + "_scale_inv"; }

} // namespace

CheckpointCheck checkCheckpoint(const std::vector<WeightInfo> &table,
                                const Checkpoint &checkpoint) {
  CheckpointCheck check;
  check.expected = static_cast<int64_t>(table.size());
  check.storedBytes.assign(table.size(), 0);
  std::set<std::string, std::less<>> accounted;

  for (size_t i = 0; i < table.size(); ++i) {
    const WeightInfo &w = table[i];
    const TensorView *t = checkpoint.find(w.name);
    if (t == nullptr && w.role == WeightRole::Linear &&
        hasExl3Tensors(checkpoint, exl3ModuleKey(w.name))) {
      // An EXL3 layer (reference/exl3_format.md §1.1) in place of the dense weight.
      const std::string key = exl3ModuleKey(w.name);
      for (const char *part : {".trellis", ".suh", ".svh", ".su", ".sv", ".mcg", ".mul1"}) {
        if (checkpoint.find(key + part) != nullptr) {
          accounted.insert(key + part);
        }
      }
      Expected<Exl3Tensors> group = findExl3Tensors(checkpoint, key, w.shape[1], w.shape[0]);
      if (!group.ok()) {
        check.errors.push_back(group.status().message());
        continue;
      }
      for (const std::string &name : group->tensorNames()) {
        accounted.insert(name);
      }
      check.storedBytes[i] = group->storedBytes();
      ++check.exl3;
      ++check.present;
      continue;
    }
    if (t == nullptr) {
      check.errors.push_back(
          strCat("missing tensor '", w.name, "' (expected ", shapeString(w.shape), ")"));
      continue;
    }
    accounted.insert(w.name);
    const std::string where = strCat("tensor '", w.name, "' in ", t->file->filename().string());
    if (t->shape != w.shape) {
      check.errors.push_back(
          strCat(where, " has shape ", shapeString(t->shape), ", expected ", shapeString(w.shape)));
      continue;
    }
    if (!isAllowedDType(w.role, t->dtype)) {
      check.errors.push_back(
          strCat(where, " is ", dtypeName(t->dtype), ", which is not allowed for ",
                 w.role == WeightRole::Linear ? "a linear weight" : "this tensor",
                 " (allowed: BF16, F16, F32",
                 w.role == WeightRole::Linear ? ", F8_E4M3 with block scales" : "", ")"));
      continue;
    }
    check.storedBytes[i] = t->byteSize;
    if (t->dtype == DType::F8_E4M3) {
      // FP8 weights carry per-128x128-block inverse scales as a companion tensor.
      const std::string scaleName = scaleNameFor(w.name);
      const TensorView *scale = checkpoint.find(scaleName);
      const std::vector<int64_t> scaleShape = {(w.shape[0] + kFp8BlockSize - 1) / kFp8BlockSize,
                                               (w.shape[1] + kFp8BlockSize - 1) / kFp8BlockSize};
      if (scale == nullptr) {
        check.errors.push_back(
            strCat(where, " is F8_E4M3 but its block scales '", scaleName, "' are missing"));
        continue;
      }
      accounted.insert(scaleName);
      if (scale->shape != scaleShape || scale->dtype != DType::F32) {
        check.errors.push_back(strCat("tensor '", scaleName, "' is ", dtypeName(scale->dtype), " ",
                                      shapeString(scale->shape), ", expected F32 ",
                                      shapeString(scaleShape)));
        continue;
      }
      check.storedBytes[i] += scale->byteSize;
    }
    ++check.present;
  }

  for (const TensorView *t : checkpoint.tensors()) {
    if (accounted.count(t->name) == 0) {
      check.unexpected.push_back(strCat("'", t->name, "' (", dtypeName(t->dtype), " ",
                                        shapeString(t->shape), ") in ",
                                        t->file->filename().string()));
    }
  }
  return check;
}

Status checkpointMismatch(const CheckpointCheck &check, const std::filesystem::path &modelDir) {
  if (check.ok()) {
    return Status::success();
  }
  constexpr size_t kShown = 5;
  std::string listed;
  size_t shown = 0;
  for (const std::vector<std::string> *list : {&check.errors, &check.unexpected}) {
    for (const std::string &problem : *list) {
      if (shown++ < kShown) {
        listed += strCat("\n  ", list == &check.unexpected ? "unexpected tensor " : "", problem);
      }
    }
  }
  if (shown > kShown) {
    listed += strCat("\n  ... and ", shown - kShown, " more");
  }
  return invalidArgument(modelDir.string(), ": the checkpoint does not match its config (",
                         check.errors.size(), " error(s), ", check.unexpected.size(),
                         " unexpected tensor(s); glmc info ", modelDir.string(),
                         " lists them all):", listed);
}

Status checkQuantization(const Glm53Config &config, const std::vector<WeightInfo> &table,
                         const Checkpoint &checkpoint, std::vector<std::string> *warnings) {
  int64_t exl3 = 0;
  std::string firstExl3;
  std::set<std::string> codebooks;
  for (const WeightInfo &w : table) {
    if (w.role != WeightRole::Linear || checkpoint.find(w.name) != nullptr) {
      continue;
    }
    const std::string key = exl3ModuleKey(w.name);
    if (!hasExl3Tensors(checkpoint, key)) {
      continue;
    }
    if (exl3++ == 0) {
      firstExl3 = key;
    }
    codebooks.insert(checkpoint.find(key + ".mcg") != nullptr    ? "mcg"
                     : checkpoint.find(key + ".mul1") != nullptr ? "mul1"
                                                                 : "3inst");
  }
  const std::string configPath = (checkpoint.directory() / "config.json").string();
  if (exl3 > 0 && config.quantMethod != "exl3") {
    return invalidArgument(configPath, ": the checkpoint holds EXL3 layers ('", firstExl3,
                           ".trellis', ", exl3, " in all) but quantization_config.quant_method is ",
                           config.quantMethod ? "'" + *config.quantMethod + "'" : "absent",
                           "; an exllamav3 checkpoint declares \"exl3\"");
  }
  if (exl3 == 0 && config.quantMethod == "exl3") {
    return invalidArgument(configPath,
                           ": quantization_config.quant_method is \"exl3\" but no linear weight of "
                           "the model is stored as an EXL3 layer (no '<layer>.trellis' tensors)");
  }
  if (warnings != nullptr && config.exl3 && !config.exl3->codebook.empty() &&
      (codebooks.size() != 1 || *codebooks.begin() != config.exl3->codebook)) {
    std::string found;
    for (const std::string &c : codebooks) {
      found += (found.empty() ? "" : ", ") + c;
    }
    warnings->push_back(strCat(configPath, ": quantization_config.codebook is '",
                               config.exl3->codebook, "' but the tensors' markers say ", found,
                               "; the markers are used"));
  }
  return Status::success();
}

} // namespace glm::glm53
