// Glm53Config: a checkpoint's config.json, validated; nothing downstream of models/glm53 reads
// JSON.
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm::glm53 {

/// The token mixer of a decoder layer (`layer_types`).
enum class AttentionKind {
  Linear, // "linear_attention": Kimi Delta Attention with a short conv
  Sparse, // "deepseek_sparse_attention" (alias "full_attention"): NoPE MLA with the KPool indexer
};

/// The channel mixer of a decoder layer (`mlp_layer_types`).
enum class MlpKind {
  Dense,  // "dense": one clamped-SwiGLU MLP of intermediate_size
  Sparse, // "sparse": routed experts + shared expert
};

/// What a sparse-attention layer's indexer does (`indexer_types`).
enum class IndexerKind {
  Full,   // "full": runs its own indexer
  Shared, // "shared": reuses the top-k of the previous full layer
};

std::string_view attentionKindName(AttentionKind kind);
std::string_view mlpKindName(MlpKind kind);
std::string_view indexerKindName(IndexerKind kind);

/// `vision_config` (HF Glm5NextVisionConfig), with HF's defaults for absent fields.
struct Glm53VisionConfig {
  int64_t depth = 24;
  int64_t hiddenSize = 1024;
  int64_t numHeads = 16;
  int64_t intermediateSize = 4096;
  int64_t outHiddenSize = 1536;
  int64_t projectionIntermediateSize = 10240;
  int64_t inChannels = 3;
  int64_t imageSize = 336;
  int64_t patchSize = 14;
  int64_t temporalPatchSize = 2;
  int64_t spatialMergeSize = 2;
  bool attentionBias = true;
  double rmsNormEps = 1e-5;
  double swigluLimit = 10.0;
  std::string hiddenAct = "silu";

  int64_t headDim() const { return hiddenSize / numHeads; }
};

/// Every field of a GLM-5.3 (`glm5_next`) checkpoint's config that the math or the layout depends
/// on. Field names follow config.json (camelBack); reference/glm53_arch.md §1 gives their meaning.
struct Glm53Config {
  // Which JSON this came from: "glm5_next" (outer, with text_config) or "glm5_next_text" (bare).
  std::string modelType;
  std::vector<std::string> architectures;
  std::string dtype = "bfloat16";

  // Trunk.
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numHiddenLayers = 0;
  std::vector<AttentionKind> layerTypes;
  std::vector<MlpKind> mlpLayerTypes;
  std::vector<IndexerKind> indexerTypes;
  double rmsNormEps = 1e-5;
  int64_t maxPositionEmbeddings = 1048576;
  bool tieWordEmbeddings = false;
  std::string hiddenAct = "silu";
  double swigluLimit = 10.0;

  // Kimi Delta Attention (linear_attention layers).
  int64_t linearNumHeads = 0;
  int64_t linearHeadDim = 0;
  int64_t linearConvKernelDim = 4;
  double linearLowerBound = -5.0;

  // MLA (deepseek_sparse_attention layers).
  int64_t numAttentionHeads = 0;
  int64_t numKeyValueHeads = 0;
  int64_t qLoraRank = 0;
  int64_t kvLoraRank = 0;
  int64_t qkNopeHeadDim = 0;
  int64_t qkRopeHeadDim = 0; // always 0: the text tower is NoPE
  int64_t vHeadDim = 0;
  bool attentionBias = false;

  // Lightning indexer with KPool.
  int64_t indexNHeads = 0;
  int64_t indexHeadDim = 0;
  int64_t indexTopk = 0;
  int64_t indexKpool = 0;
  bool indexKpoolCompress = true;
  bool indexKpoolAlwaysSelectTail = true;
  bool indexerRopeInterleave = true;
  bool indexShareForMtpIteration = true;

  // MLPs and MoE.
  int64_t intermediateSize = 0;
  int64_t moeIntermediateSize = 0;
  int64_t nRoutedExperts = 0;
  int64_t numExpertsPerTok = 0;
  int64_t nSharedExperts = 1;
  int64_t nGroup = 1;
  int64_t topkGroup = 1;
  bool normTopkProb = true;
  double routedScalingFactor = 2.5;
  std::string scoringFunc = "sigmoid";
  std::string topkMethod = "noaux_tc";
  std::string moeRouterDtype = "float32";

  // mHC residual streams.
  int64_t hcMult = 0;
  double hcEps = 1e-6;
  int64_t hcSinkhornIters = 20;

  // MTP head, stored as layer numHiddenLayers; absent from HF's config class, so 0 unless given.
  int64_t numNextnPredictLayers = 0;

  // Tokens.
  std::optional<int64_t> padTokenId;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;
  int64_t imageTokenId = 154854;
  int64_t videoTokenId = 154855;
  int64_t imageStartTokenId = 154830;
  int64_t imageEndTokenId = 154831;
  int64_t videoStartTokenId = 154832;
  int64_t videoEndTokenId = 154833;

  // `quantization_config.quant_method` if the checkpoint declares one: one of kKnownQuantMethods.
  std::optional<std::string> quantMethod;
  // The rest of an EXL3 checkpoint's quantization_config (reference/exl3_format.md §1.2),
  // checked for type and range; informational, since K and the codebook are read per tensor.
  struct Exl3Quantization {
    std::string version;        // the exllamav3 format version, e.g. "1.4.1"
    std::optional<double> bits; // model-average bits per weight (not a per-tensor K)
    std::optional<double> headBits;
    std::string codebook;  // "mcg", "mul1", "3inst"; empty in models made before the key
    std::string outScales; // "always", "never", "auto"; empty when absent
  };
  std::optional<Exl3Quantization> exl3;

  // The vision tower; absent for a bare glm5_next_text config.
  std::optional<Glm53VisionConfig> vision;

  // Derived quantities. A parsed config's fields lie within configFieldRanges(), so none of these
  // products comes near int64's range (Config.cpp proves it at compile time).
  int64_t qkHeadDim() const { return qkNopeHeadDim + qkRopeHeadDim; }
  int64_t kdaProjDim() const { return linearNumHeads * linearHeadDim; }
  int64_t sharedExpertIntermediateSize() const { return moeIntermediateSize * nSharedExperts; }
  int64_t hcMixDim() const { return (2 + hcMult) * hcMult; }
  int64_t selectedPools() const { return indexTopk / indexKpool; }
  int64_t countLayers(AttentionKind kind) const;
  int64_t countLayers(MlpKind kind) const;
  bool hasMtp() const { return numNextnPredictLayers > 0; }
};

/// The values glmc reads of one integer field of config.json. Every dimension, count and
/// iteration count has one, checked as the field is read, before any arithmetic uses it: a
/// hostile config of 10^9 layers or a 2^62 hidden size is refused by name, not allocated,
/// multiplied or looped over. Each ceiling is several times the released GLM-5.3-Flash's value
/// and low enough that every shape, parameter count, byte budget and FLOP count derived from the
/// fields together stays far inside int64. The table, and why each ceiling sits where it does,
/// is in Config.cpp.
struct ConfigFieldRange {
  std::string_view field; // the JSON key in text_config, or "vision_config.<key>"
  int64_t min;
  int64_t max;
  int64_t release; // GLM-5.3-Flash's value (fixtures/glm53-flash/config.json), for scale
};
std::span<const ConfigFieldRange> configFieldRanges();

/// The quantization_config.quant_method values glmc reads: "exl3" (exllamav3 trellis layers)
/// and "fp8" (e4m3 linears with 128 x 128 block scales, as DeepSeek and GLM release them).
inline constexpr std::string_view kKnownQuantMethods[] = {"exl3", "fp8"};

/// Parses and validates config.json text. `source` names the file in error messages. Errors name
/// the offending field by its JSON path, e.g. "text_config.index_topk".
Expected<Glm53Config> parseGlm53Config(std::string_view json, std::string_view source);

/// config.json nests four levels (text_config.linear_attn_config.kda_layers); JSON deeper than
/// this is refused before a DOM is built.
inline constexpr size_t kMaxConfigJsonDepth = 32;

/// Reads MODEL_DIR/config.json (or the file itself when given a file): a regular file of at
/// most kMaxConfigJsonBytes (runtime/weights/SafeTensors.h), parsed depth-limited.
Expected<Glm53Config> loadGlm53Config(const std::filesystem::path &modelDirOrFile);

} // namespace glm::glm53
