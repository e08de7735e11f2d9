// `glmc info`: what a GLM-5.3 checkpoint is, what it costs to run, and whether its files are whole.
#include "base/Progress.h"
#include "models/glm53/Budget.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/SafeTensors.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace glm::tools {
namespace {

using glm53::AttentionKind;
using glm53::Component;
using glm53::Glm53Config;
using glm53::MlpKind;
using OrderedJson = nlohmann::ordered_json;

/// 313326811966 -> "313,326,811,966".
std::string withCommas(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return out;
}

std::string decimalBytes(uint64_t bytes) {
  return ProgressReporter::formatAmount(bytes, ProgressReporter::Unit::Bytes);
}

/// Binary units for memory sizes: "140.8 MiB", "11.83 GiB".
std::string memorySize(uint64_t bytes) {
  char buffer[64];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib < 1024.0) {
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", mib);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f GiB", mib / 1024.0);
  }
  return buffer;
}

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

/// Context lengths the state table is shown for: 32K, 128K and the model's maximum.
std::vector<uint64_t> stateContexts(const Glm53Config &c) {
  std::vector<uint64_t> contexts;
  for (uint64_t t : {32768ull, 131072ull}) {
    if (t < static_cast<uint64_t>(c.maxPositionEmbeddings)) {
      contexts.push_back(t);
    }
  }
  contexts.push_back(static_cast<uint64_t>(c.maxPositionEmbeddings));
  return contexts;
}

struct Report {
  std::string modelDir;
  Glm53Config config;
  std::vector<glm53::WeightInfo> table;
  glm53::ParameterCounts params;
  glm53::DecodeWeightBytes decode;
  glm53::StateBytes state;
  bool hasWeights = false;
  // When weights are present:
  size_t files = 0;
  size_t tensorsInCheckpoint = 0;
  glm53::CheckpointCheck check;
};

OrderedJson toJson(const Report &r) {
  const Glm53Config &c = r.config;
  OrderedJson j;
  j["model_dir"] = r.modelDir;
  OrderedJson cfg;
  cfg["model_type"] = c.modelType;
  cfg["vocab_size"] = c.vocabSize;
  cfg["hidden_size"] = c.hiddenSize;
  cfg["num_hidden_layers"] = c.numHiddenLayers;
  cfg["kda_layers"] = c.countLayers(AttentionKind::Linear);
  cfg["dsa_layers"] = c.countLayers(AttentionKind::Sparse);
  cfg["dense_mlp_layers"] = c.countLayers(MlpKind::Dense);
  cfg["moe_layers"] = c.countLayers(MlpKind::Sparse);
  cfg["mtp_layers"] = c.numNextnPredictLayers;
  cfg["n_routed_experts"] = c.nRoutedExperts;
  cfg["num_experts_per_tok"] = c.numExpertsPerTok;
  cfg["index_topk"] = c.indexTopk;
  cfg["index_kpool"] = c.indexKpool;
  cfg["hc_mult"] = c.hcMult;
  cfg["max_position_embeddings"] = c.maxPositionEmbeddings;
  cfg["vision"] = c.vision.has_value();
  j["config"] = cfg;

  OrderedJson params;
  params["trunk"] = r.params.trunk;
  params["trunk_routed_experts"] = r.params.trunkRouted;
  params["trunk_non_routed"] = r.params.trunk - r.params.trunkRouted;
  params["mtp"] = r.params.mtp;
  params["vision"] = r.params.vision;
  params["total"] = r.params.total;
  params["active_per_token"] = r.params.activePerToken;
  OrderedJson byComponent;
  for (auto [component, n] : r.params.trunkByComponent) {
    byComponent[std::string(glm53::componentName(component))] = n;
  }
  params["trunk_by_component"] = byComponent;
  j["parameters"] = params;

  OrderedJson decode;
  decode["as_stored"] = r.decode.asStored;
  decode["with_4bit_routed_experts"] = r.decode.with4BitExperts;
  decode["mtp_draft_as_stored"] = r.decode.mtpAsStored;
  decode["mtp_draft_with_4bit_routed_experts"] = r.decode.mtpWith4BitExperts;
  decode["source"] = r.hasWeights ? "checkpoint dtypes" : "release dtypes (config.json only)";
  j["weight_bytes_per_decoded_token"] = decode;

  OrderedJson state;
  state["kda_per_sequence"] = r.state.kdaPerSequence;
  state["dsa_per_token"] = r.state.dsaPerToken;
  state["dsa_tail_per_sequence"] = r.state.dsaTailPerSequence;
  state["mtp_per_token"] = r.state.mtpPerToken;
  OrderedJson perContext = OrderedJson::object();
  for (uint64_t t : stateContexts(c)) {
    perContext[std::to_string(t)] = r.state.perSequence(t);
  }
  state["per_sequence_at_context"] = perContext;
  j["state_bytes"] = state;

  if (r.hasWeights) {
    OrderedJson ck;
    ck["files"] = r.files;
    ck["tensors"] = r.tensorsInCheckpoint;
    ck["expected"] = r.check.expected;
    ck["present"] = r.check.present;
    ck["exl3"] = r.check.exl3;
    ck["errors"] = r.check.errors;
    ck["unexpected"] = r.check.unexpected;
    ck["ok"] = r.check.ok();
    j["checkpoint"] = ck;
  } else {
    j["checkpoint"] = nullptr;
  }
  return j;
}

void printText(const Report &r) {
  const Glm53Config &c = r.config;
  const int64_t kda = c.countLayers(AttentionKind::Linear);
  const int64_t dsa = c.countLayers(AttentionKind::Sparse);
  std::printf("GLM-5.3 model: %s (%s)\n", r.modelDir.c_str(), c.modelType.c_str());
  std::printf("  layers       %lld: %lld KDA + %lld sparse MLA; MLP %lld dense + %lld MoE; "
              "%lld MTP\n",
              (long long)c.numHiddenLayers, (long long)kda, (long long)dsa,
              (long long)c.countLayers(MlpKind::Dense), (long long)c.countLayers(MlpKind::Sparse),
              (long long)c.numNextnPredictLayers);
  std::printf("  hidden       %lld, vocab %lld, context %lld, %s\n", (long long)c.hiddenSize,
              (long long)c.vocabSize, (long long)c.maxPositionEmbeddings, c.dtype.c_str());
  std::printf("  KDA          %lld heads x %lld, short conv %lld, gate lower bound %s\n",
              (long long)c.linearNumHeads, (long long)c.linearHeadDim,
              (long long)c.linearConvKernelDim, number(c.linearLowerBound).c_str());
  std::printf("  MLA          %lld heads, q rank %lld, kv rank %lld, qk %lld (NoPE), v %lld\n",
              (long long)c.numAttentionHeads, (long long)c.qLoraRank, (long long)c.kvLoraRank,
              (long long)c.qkHeadDim(), (long long)c.vHeadDim);
  std::printf("  indexer      %lld heads x %lld, top %lld tokens = %lld pools of %lld%s\n",
              (long long)c.indexNHeads, (long long)c.indexHeadDim, (long long)c.indexTopk,
              (long long)c.selectedPools(), (long long)c.indexKpool,
              c.indexKpoolAlwaysSelectTail ? ", open pool always selected" : "");
  std::printf("  MoE          %lld experts, top %lld + %lld shared, expert width %lld, "
              "dense width %lld, scale %s, SwiGLU limit %s\n",
              (long long)c.nRoutedExperts, (long long)c.numExpertsPerTok,
              (long long)c.nSharedExperts, (long long)c.moeIntermediateSize,
              (long long)c.intermediateSize, number(c.routedScalingFactor).c_str(),
              number(c.swigluLimit).c_str());
  std::printf("  mHC          %lld streams, %lld Sinkhorn iterations\n", (long long)c.hcMult,
              (long long)c.hcSinkhornIters);
  if (c.vision) {
    std::printf("  vision       %lld blocks x %lld, %lld heads, out %lld\n",
                (long long)c.vision->depth, (long long)c.vision->hiddenSize,
                (long long)c.vision->numHeads, (long long)c.vision->outHiddenSize);
  }

  std::printf("\nParameters\n");
  std::printf("  trunk              %20s\n", withCommas(r.params.trunk).c_str());
  for (auto [component, n] : r.params.trunkByComponent) {
    std::printf("    %-16s %20s\n", std::string(glm53::componentName(component)).c_str(),
                withCommas(n).c_str());
  }
  std::printf("  MTP layer          %20s\n", withCommas(r.params.mtp).c_str());
  std::printf("  vision tower       %20s\n", withCommas(r.params.vision).c_str());
  std::printf("  total              %20s\n", withCommas(r.params.total).c_str());
  std::printf("  active per token   %20s  (trunk: non-routed + %lld of %lld experts per MoE "
              "layer)\n",
              withCommas(r.params.activePerToken).c_str(), (long long)c.numExpertsPerTok,
              (long long)c.nRoutedExperts);

  std::printf("\nWeight bytes read per decoded token (batch 1, trunk; %s)\n",
              r.hasWeights ? "checkpoint dtypes" : "release dtypes: bf16, fp32 where HF keeps it");
  std::printf("  as stored          %20s  (%s)\n", withCommas(r.decode.asStored).c_str(),
              decimalBytes(r.decode.asStored).c_str());
  std::printf("  4-bit routed       %20s  (%s)\n", withCommas(r.decode.with4BitExperts).c_str(),
              decimalBytes(r.decode.with4BitExperts).c_str());
  if (c.hasMtp()) {
    std::printf("  + per MTP draft    %20s  (%s as stored, %s with 4-bit experts)\n",
                withCommas(r.decode.mtpWith4BitExperts).c_str(),
                decimalBytes(r.decode.mtpAsStored).c_str(),
                decimalBytes(r.decode.mtpWith4BitExperts).c_str());
  }

  std::printf("\nDecode state (KDA fp32 state + bf16 conv window; bf16 MLA latent + pooled key)\n");
  std::printf("  KDA per sequence   %20s  (%s)\n", withCommas(r.state.kdaPerSequence).c_str(),
              memorySize(r.state.kdaPerSequence).c_str());
  std::printf("  DSA per token      %20s\n", withCommas(r.state.dsaPerToken).c_str());
  std::printf("  DSA open-pool tail %20s  per sequence\n",
              withCommas(r.state.dsaTailPerSequence).c_str());
  for (uint64_t t : stateContexts(c)) {
    std::printf("  sequence at %-7llu%20s  (%s)\n", (unsigned long long)t,
                withCommas(r.state.perSequence(t)).c_str(),
                memorySize(r.state.perSequence(t)).c_str());
  }

  std::printf("\nCheckpoint\n");
  if (!r.hasWeights) {
    std::printf("  no weights (config.json only)\n");
    return;
  }
  std::printf("  %zu tensors in %zu file(s); %lld of %lld expected tensors present and valid\n",
              r.tensorsInCheckpoint, r.files, (long long)r.check.present,
              (long long)r.check.expected);
  if (r.check.exl3 > 0) {
    std::printf("  %lld linear weights stored as EXL3 layers (trellis, suh, svh)\n",
                (long long)r.check.exl3);
  }
  for (const std::string &e : r.check.errors) {
    std::printf("  error: %s\n", e.c_str());
  }
  for (const std::string &u : r.check.unexpected) {
    std::printf("  unexpected: %s\n", u.c_str());
  }
  std::printf("  %s\n", r.check.ok() ? "OK" : "FAILED");
}

} // namespace

int runInfo(const std::vector<std::string> &args) {
  CommandLine cl("glmc info", "MODEL_DIR [--json]",
                 "Summarizes a checkpoint: its config, parameters, bytes read per token, and a "
                 "check of its tensors\nagainst the config.");
  cl.flag("json", "print JSON").positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  Report r;
  r.modelDir = cl.positionals()[0];
  Expected<Glm53Config> config = glm53::loadGlm53Config(r.modelDir);
  if (!config.ok()) {
    return cl.fail(config.status());
  }
  r.config = std::move(config).value();
  r.table = glm53::glm53Weights(r.config);
  Expected<glm53::ParameterCounts> params = glm53::countParameters(r.config, r.table);
  Expected<glm53::StateBytes> state = glm53::stateBytes(r.config);
  for (const Status &s : {params.status(), state.status()}) {
    if (!s.ok()) {
      return cl.fail(s);
    }
  }
  r.params = *params;
  r.state = *state;
  r.hasWeights = Checkpoint::hasWeights(r.modelDir);
  std::unique_ptr<Checkpoint> checkpoint;
  if (r.hasWeights) {
    Expected<std::unique_ptr<Checkpoint>> opened = Checkpoint::open(r.modelDir);
    if (!opened.ok()) {
      return cl.fail(opened.status());
    }
    checkpoint = std::move(opened).value();
    r.files = checkpoint->files().size();
    r.tensorsInCheckpoint = checkpoint->tensors().size();
    r.check = glm53::checkCheckpoint(r.table, *checkpoint);
    std::vector<std::string> warnings;
    if (Status q = glm53::checkQuantization(r.config, r.table, *checkpoint, &warnings); !q.ok()) {
      r.check.errors.push_back(q.message());
    }
    for (const std::string &w : warnings) {
      std::fprintf(stderr, "glmc info: warning: %s\n", w.c_str());
    }
  }
  // Bytes per token from what is stored, once every tensor is accounted for.
  Expected<glm53::DecodeWeightBytes> decode = glm53::decodeWeightBytes(
      r.config, r.table, r.hasWeights && r.check.errors.empty() ? &r.check.storedBytes : nullptr);
  if (!decode.ok()) {
    return cl.fail(decode.status());
  }
  r.decode = *decode;

  if (cl.has("json")) {
    std::printf("%s\n", toJson(r).dump(2).c_str());
  } else {
    printText(r);
  }
  if (r.hasWeights && !r.check.ok()) {
    std::fprintf(stderr,
                 "glmc info: checkpoint check failed: %zu error(s), %zu unexpected "
                 "tensor(s)\n",
                 r.check.errors.size(), r.check.unexpected.size());
    return 1;
  }
  return 0;
}

} // namespace glm::tools
