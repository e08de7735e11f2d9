// Tests of config.json parsing: the fixtures, transformers' derivations, and every invalid case.
#include "models/glm53/Config.h"
#include "runtime/weights/SafeTensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace glm::glm53 {
namespace {

using Json = nlohmann::json;

Json readJson(const std::filesystem::path &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return Json::parse(s.str());
}

const std::filesystem::path kFixtures = GLM_FIXTURES_DIR;

Json flashConfig() { return readJson(kFixtures / "glm53-flash" / "config.json"); }

Expected<Glm53Config> parse(const Json &j) { return parseGlm53Config(j.dump(), "config.json"); }

/// Asserts that parsing fails and that the message names `field`.
void expectInvalid(const Json &j, const std::string &field) {
  Expected<Glm53Config> c = parse(j);
  ASSERT_FALSE(c.ok()) << "expected an error naming " << field;
  EXPECT_NE(c.status().message().find(field), std::string::npos)
      << "message '" << c.status().message() << "' does not name " << field;
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
}

TEST(Glm53Config, ParsesTheReleaseConfig) {
  Expected<Glm53Config> parsed = loadGlm53Config(kFixtures / "glm53-flash");
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  const Glm53Config &c = *parsed;
  EXPECT_EQ(c.modelType, "glm5_next");
  EXPECT_EQ(c.vocabSize, 154880);
  EXPECT_EQ(c.hiddenSize, 4096);
  EXPECT_EQ(c.numHiddenLayers, 45);
  EXPECT_EQ(c.countLayers(AttentionKind::Linear), 34);
  EXPECT_EQ(c.countLayers(AttentionKind::Sparse), 11);
  EXPECT_EQ(c.layerTypes[3], AttentionKind::Sparse);
  EXPECT_EQ(c.layerTypes[44], AttentionKind::Linear);
  EXPECT_EQ(c.countLayers(MlpKind::Dense), 3);
  EXPECT_EQ(c.linearNumHeads, 64);
  EXPECT_EQ(c.linearHeadDim, 128);
  EXPECT_EQ(c.linearConvKernelDim, 4);
  EXPECT_EQ(c.linearLowerBound, -5.0);
  EXPECT_EQ(c.qLoraRank, 1536);
  EXPECT_EQ(c.kvLoraRank, 512);
  EXPECT_EQ(c.qkHeadDim(), 256);
  EXPECT_EQ(c.vHeadDim, 256);
  EXPECT_EQ(c.indexKpool, 4);
  EXPECT_EQ(c.indexTopk, 2048);
  EXPECT_EQ(c.selectedPools(), 512);
  EXPECT_EQ(c.nRoutedExperts, 288);
  EXPECT_EQ(c.numExpertsPerTok, 8);
  EXPECT_EQ(c.routedScalingFactor, 2.5);
  EXPECT_EQ(c.hcMult, 4);
  EXPECT_EQ(c.hcMixDim(), 24);
  EXPECT_EQ(c.hcSinkhornIters, 20);
  EXPECT_EQ(c.numNextnPredictLayers, 1);
  EXPECT_EQ(c.eosTokenIds, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_EQ(c.padTokenId, 154820);
  EXPECT_FALSE(c.bosTokenId.has_value());
  EXPECT_EQ(c.imageTokenId, 154854);
  ASSERT_TRUE(c.vision.has_value());
  EXPECT_EQ(c.vision->depth, 24);
  EXPECT_EQ(c.vision->outHiddenSize, 4096);
  for (IndexerKind k : c.indexerTypes) {
    EXPECT_EQ(k, IndexerKind::Full);
  }
}

TEST(Glm53Config, ParsesTheTinyFixture) {
  Expected<Glm53Config> parsed = loadGlm53Config(kFixtures / "glm53-tiny" / "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  EXPECT_EQ(parsed->hiddenSize, 128);
  EXPECT_EQ(parsed->numHiddenLayers, 8);
  EXPECT_EQ(parsed->nRoutedExperts, 16);
  // The fixture's config does not name MTP layers: transformers has no such field, so none.
  EXPECT_EQ(parsed->numNextnPredictLayers, 0);
  EXPECT_EQ(parsed->vision->hiddenSize, 64);
}

TEST(Glm53Config, BareTextConfigHasNoVisionTower) {
  Json text = flashConfig()["text_config"];
  Expected<Glm53Config> c = parse(text);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->modelType, "glm5_next_text");
  EXPECT_FALSE(c->vision.has_value());
  EXPECT_EQ(c->numHiddenLayers, 45);
}

TEST(Glm53Config, FlatOuterConfigReadsTextFieldsAtTopLevel) {
  Json j = flashConfig();
  Json flat = j["text_config"];
  flat["model_type"] = "glm5_next";
  Expected<Glm53Config> c = parse(flat);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->hiddenSize, 4096);
  // transformers builds its default vision tower when vision_config is absent.
  ASSERT_TRUE(c->vision.has_value());
  EXPECT_EQ(c->vision->outHiddenSize, 1536);
}

TEST(Glm53Config, DerivesSchedulesLikeTransformers) {
  Json j = flashConfig();
  Json &t = j["text_config"];
  t.erase("layer_types");
  t.erase("mlp_layer_types");
  t.erase("indexer_types");
  t["num_hidden_layers"] = 10;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  ASSERT_EQ(c->layerTypes.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(c->layerTypes[i], i % 4 == 3 ? AttentionKind::Sparse : AttentionKind::Linear) << i;
    EXPECT_EQ(c->mlpLayerTypes[i], i < 3 ? MlpKind::Dense : MlpKind::Sparse) << i;
    EXPECT_EQ(c->indexerTypes[i], IndexerKind::Full) << i;
  }
}

TEST(Glm53Config, FewerThanThreeLayersAreAllDense) {
  Json j = flashConfig();
  Json &t = j["text_config"];
  t.erase("layer_types");
  t.erase("mlp_layer_types");
  t.erase("indexer_types");
  t["num_hidden_layers"] = 2;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->mlpLayerTypes, (std::vector<MlpKind>{MlpKind::Dense, MlpKind::Dense}));
}

TEST(Glm53Config, IndexerTypesFromFreqAndOffset) {
  // GLM-5.2-style sharing: freq 4, offset 3 -> F F F S S S F S S S F ...
  Json j = flashConfig();
  Json &t = j["text_config"];
  t.erase("indexer_types");
  t["layer_types"] = Json::array();
  for (int i = 0; i < 45; ++i) {
    t["layer_types"].push_back("deepseek_sparse_attention");
  }
  t["index_topk_freq"] = 4;
  t["index_skip_topk_offset"] = 3;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  const std::string expected = "FFFSSSFSSSFSSS";
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(c->indexerTypes[i], expected[i] == 'F' ? IndexerKind::Full : IndexerKind::Shared)
        << i;
  }
}

TEST(Glm53Config, IndexerTypesFromPattern) {
  Json j = flashConfig();
  Json &t = j["text_config"];
  t.erase("indexer_types");
  std::string pattern(45, 'F');
  pattern[7] = 'S';
  t["index_topk_pattern"] = pattern;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->indexerTypes[7], IndexerKind::Shared);
  EXPECT_EQ(c->indexerTypes[3], IndexerKind::Full);
}

TEST(Glm53Config, FullAttentionIsAnAliasOfSparseAttention) {
  Json j = flashConfig();
  j["text_config"]["layer_types"][3] = "full_attention";
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->layerTypes[3], AttentionKind::Sparse);
}

TEST(Glm53Config, LinearAttnConfigOverridesFlatFields) {
  Json j = flashConfig();
  Json &t = j["text_config"];
  t.erase("linear_num_heads");
  t.erase("linear_head_dim");
  t["linear_lower_bound"] = -3.0;
  Json lac;
  lac["num_heads"] = 32;
  lac["head_dim"] = 64;
  lac["short_conv_kernel_size"] = 3;
  lac["gate_lower_bound"] = -5.0;
  lac["full_attn_layers"] = Json::array();
  lac["kda_layers"] = Json::array();
  for (int i = 0; i < 45; ++i) {
    (i % 4 == 3 ? lac["full_attn_layers"] : lac["kda_layers"]).push_back(i);
  }
  t["linear_attn_config"] = lac;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->linearNumHeads, 32);
  EXPECT_EQ(c->linearHeadDim, 64);
  EXPECT_EQ(c->linearConvKernelDim, 3);
  EXPECT_EQ(c->linearLowerBound, -5.0);
}

TEST(Glm53Config, CheckpointValuesWinOverLibraryDefaults) {
  Json j = flashConfig();
  j["text_config"]["index_kpool"] = 8;
  j["text_config"]["num_experts_per_tok"] = 6;
  j["text_config"]["routed_scaling_factor"] = 1.5;
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->indexKpool, 8);
  EXPECT_EQ(c->selectedPools(), 256);
  EXPECT_EQ(c->numExpertsPerTok, 6);
  EXPECT_EQ(c->routedScalingFactor, 1.5);
}

TEST(Glm53Config, RejectsIndexTopkNotDivisibleByKpool) {
  Json j = flashConfig();
  j["text_config"]["index_topk"] = 2050;
  expectInvalid(j, "text_config.index_topk");
}

TEST(Glm53Config, RejectsRope) {
  Json j = flashConfig();
  j["text_config"]["qk_rope_head_dim"] = 64;
  expectInvalid(j, "text_config.qk_rope_head_dim");
}

TEST(Glm53Config, RejectsGqa) {
  Json j = flashConfig();
  j["text_config"]["num_key_value_heads"] = 8;
  expectInvalid(j, "text_config.num_key_value_heads");
}

TEST(Glm53Config, RejectsMissingFields) {
  for (const char *field : {"hidden_size", "vocab_size", "num_hidden_layers", "index_kpool",
                            "num_experts_per_tok", "q_lora_rank", "kv_lora_rank", "hc_mult",
                            "n_routed_experts", "moe_intermediate_size", "index_topk"}) {
    Json j = flashConfig();
    j["text_config"].erase(field);
    expectInvalid(j, std::string("text_config.") + field);
  }
}

TEST(Glm53Config, RejectsNullQLoraRank) {
  Json j = flashConfig();
  j["text_config"]["q_lora_rank"] = nullptr;
  expectInvalid(j, "text_config.q_lora_rank");
}

TEST(Glm53Config, RejectsMistypedFields) {
  struct Case {
    const char *field;
    Json value;
  };
  for (const Case &c :
       {Case{"hidden_size", "4096"}, Case{"hidden_size", 4096.5}, Case{"norm_topk_prob", 1},
        Case{"rms_norm_eps", "1e-5"}, Case{"layer_types", "linear_attention"},
        Case{"eos_token_id", "x"}, Case{"hidden_act", 3}, Case{"linear_attn_config", 5},
        Case{"mlp_layer_types", Json::array({1, 2})}}) {
    Json j = flashConfig();
    j["text_config"][c.field] = c.value;
    expectInvalid(j, std::string("text_config.") + c.field);
  }
}

TEST(Glm53Config, RejectsUnknownLayerTypes) {
  Json j = flashConfig();
  j["text_config"]["layer_types"][5] = "sliding_attention";
  expectInvalid(j, "text_config.layer_types");
  j = flashConfig();
  j["text_config"]["mlp_layer_types"][4] = "moe";
  expectInvalid(j, "text_config.mlp_layer_types");
  j = flashConfig();
  j["text_config"]["indexer_types"][3] = "partial";
  expectInvalid(j, "text_config.indexer_types");
}

TEST(Glm53Config, RejectsScheduleLengthMismatch) {
  Json j = flashConfig();
  j["text_config"]["layer_types"].erase(0);
  expectInvalid(j, "text_config.layer_types");
  j = flashConfig();
  j["text_config"]["num_hidden_layers"] = 46;
  expectInvalid(j, "text_config.layer_types");
}

TEST(Glm53Config, RejectsSharedIndexerWithoutAFullOne) {
  Json j = flashConfig();
  j["text_config"]["indexer_types"][3] = "shared";
  expectInvalid(j, "text_config.indexer_types");
}

TEST(Glm53Config, RejectsContradictoryLinearAttnLayerLists) {
  Json j = flashConfig();
  j["text_config"]["linear_attn_config"] = {{"full_attn_layers", {0, 4}}};
  expectInvalid(j, "linear_attn_config.full_attn_layers");
}

TEST(Glm53Config, RejectsBadValues) {
  struct Case {
    const char *field;
    Json value;
  };
  for (const Case &c :
       {Case{"hidden_size", 0}, Case{"num_experts_per_tok", 300}, Case{"index_kpool", 0},
        Case{"scoring_func", "softmax"}, Case{"hidden_act", "gelu"},
        Case{"num_nextn_predict_layers", 2}, Case{"pad_token_id", 154880}, Case{"eos_token_id", -1},
        Case{"linear_lower_bound", 1.0}, Case{"mhc", false}, Case{"n_group", 7},
        Case{"rms_norm_eps", 0.0}}) {
    Json j = flashConfig();
    j["text_config"][c.field] = c.value;
    expectInvalid(j, std::string("text_config.") + c.field);
  }
}

TEST(Glm53Config, RejectsBadVisionConfig) {
  Json j = flashConfig();
  j["vision_config"]["num_heads"] = 7;
  expectInvalid(j, "vision_config.hidden_size");
  j = flashConfig();
  j["vision_config"]["depth"] = "24";
  expectInvalid(j, "vision_config.depth");
}

TEST(Glm53Config, RejectsOtherModelsAndBadJson) {
  Json j = flashConfig();
  j["model_type"] = "deepseek_v3";
  expectInvalid(j, "model_type");
  j.erase("model_type");
  expectInvalid(j, "model_type");
  Expected<Glm53Config> c = parseGlm53Config("{\"model_type\": ", "broken.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("broken.json"), std::string::npos);
  c = parseGlm53Config("[1, 2]", "array.json");
  ASSERT_FALSE(c.ok());
}

/// Asserts that parsing fails with a message containing `text`.
void expectMessage(const Json &j, const std::string &text) {
  Expected<Glm53Config> c = parse(j);
  ASSERT_FALSE(c.ok()) << "expected an error containing " << text;
  EXPECT_NE(c.status().message().find(text), std::string::npos)
      << "message '" << c.status().message() << "' lacks '" << text << "'";
}

/// Where a ranged field lives in the flash config: its object and key, and its JSON path.
struct FieldSlot {
  Json *object;
  std::string key;
  std::string path;
};
FieldSlot slotOf(Json &j, std::string_view field) {
  constexpr std::string_view kVision = "vision_config.";
  if (field.substr(0, kVision.size()) == kVision) {
    return {&j["vision_config"], std::string(field.substr(kVision.size())), std::string(field)};
  }
  return {&j["text_config"], std::string(field), "text_config." + std::string(field)};
}

TEST(Glm53Config, EveryRangedFieldIsRefusedPastItsCeilingByName) {
  ASSERT_FALSE(configFieldRanges().empty());
  for (const ConfigFieldRange &r : configFieldRanges()) {
    SCOPED_TRACE(std::string(r.field));
    Json j = flashConfig();
    FieldSlot slot = slotOf(j, r.field);
    // The released value in the table is the release's, where its config states it.
    if (slot.object->contains(slot.key)) {
      EXPECT_EQ((*slot.object)[slot.key].get<int64_t>(), r.release);
    }
    EXPECT_GT(r.max, r.release);
    if (slot.key == "index_topk_freq" || slot.key == "index_skip_topk_offset") {
      slot.object->erase("indexer_types"); // they only derive it
    }
    (*slot.object)[slot.key] = r.max + 1;
    expectMessage(j, strCat("config.json: field '", slot.path, "' (", r.max + 1, ") exceeds ",
                            r.max, ", the most glmc reads (GLM-5.3-Flash has ", r.release, ")"));
    (*slot.object)[slot.key] = r.min - 1;
    expectMessage(j, strCat("field '", slot.path, "' "));
  }
}

TEST(Glm53Config, RefusesHostileDimensionsBeforeUsingThem) {
  // 10^9 layers with derived schedules: refused before a billion schedule entries are built.
  Json j = flashConfig();
  for (const char *derived : {"layer_types", "mlp_layer_types", "indexer_types"}) {
    j["text_config"].erase(derived);
  }
  j["text_config"]["num_hidden_layers"] = 1000000000;
  expectMessage(j, "field 'text_config.num_hidden_layers' (1000000000) exceeds 256, the most "
                   "glmc reads (GLM-5.3-Flash has 45)");
  // 2^62: every product with it would overflow.
  j = flashConfig();
  j["text_config"]["hidden_size"] = int64_t(1) << 62;
  expectMessage(j, "field 'text_config.hidden_size' (4611686018427387904) exceeds 32768");
  j = flashConfig();
  j["text_config"]["hc_sinkhorn_iters"] = 1000000000;
  expectMessage(j, "field 'text_config.hc_sinkhorn_iters' (1000000000) exceeds 1000");
  j = flashConfig();
  j["text_config"]["n_routed_experts"] = 1000000000;
  expectMessage(j, "field 'text_config.n_routed_experts' (1000000000) exceeds 2048");
  // A nested override is named where it was given.
  j = flashConfig();
  j["text_config"]["linear_attn_config"] = {{"num_heads", 1 << 20}};
  expectMessage(j, "field 'text_config.linear_attn_config.num_heads' (1048576) exceeds 512");
  j = flashConfig();
  j["vision_config"]["patch_size"] = int64_t(1) << 40;
  expectMessage(j, "field 'vision_config.patch_size' (1099511627776) exceeds 1024");
  j = flashConfig();
  j["text_config"].erase("indexer_types");
  j["text_config"]["index_skip_topk_offset"] = std::numeric_limits<int64_t>::min();
  expectMessage(j, "field 'text_config.index_skip_topk_offset' (-9223372036854775808) is below "
                   "-256");
}

TEST(Glm53Config, RefusesUnknownQuantMethodsByName) {
  Json j = flashConfig();
  j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  expectMessage(j, "field 'quantization_config.quant_method' is 'gptq', which glmc does not "
                   "read; it reads exl3 (exllamav3) and fp8");
  j["quantization_config"] = {{"bits", 4}};
  expectMessage(j, "field 'quantization_config.quant_method' is missing");
  // The fp8 releases' own quantization_config is read; another block size is not.
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"fmt", "e4m3"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}}};
  Expected<Glm53Config> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->quantMethod, "fp8");
  j["quantization_config"]["weight_block_size"] = {64, 64};
  expectMessage(j, "field 'quantization_config.weight_block_size' is [64,64]; glmc reads fp8 "
                   "scales of 128 x 128 blocks");
  j["quantization_config"]["weight_block_size"] = {128, 128};
  j["quantization_config"]["fmt"] = "e5m2";
  expectMessage(j, "field 'quantization_config.fmt' is 'e5m2'");
  for (std::string_view method : kKnownQuantMethods) {
    EXPECT_TRUE(method == "exl3" || method == "fp8");
  }
}

TEST(Glm53Config, RefusesDeepJson) {
  const std::string deep =
      "{\"model_type\": " + std::string(100, '[') + std::string(100, ']') + "}";
  Expected<Glm53Config> c = parseGlm53Config(deep, "deep.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("deep.json: nests deeper than 32 levels"), std::string::npos)
      << c.status().message();
}

/// A fresh directory, removed at scope end.
class TempDir {
public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              strCat("glm53_config_test_", ::getpid(), "_", counter_++)) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path &path() const { return path_; }

private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(Glm53Config, ReadsOnlyRegularFilesOfBoundedSize) {
  TempDir dir;
  const std::filesystem::path config = dir.path() / "config.json";
  // A link to /dev/urandom would be read without end; a FIFO would block the open.
  std::filesystem::create_symlink("/dev/urandom", config);
  Expected<Glm53Config> c = loadGlm53Config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("config.json: config.json is not a regular file (a device)"),
            std::string::npos)
      << c.status().message();
  std::filesystem::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  c = loadGlm53Config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is not a regular file (a FIFO)"), std::string::npos)
      << c.status().message();
  std::filesystem::remove(config);
  std::ofstream(config) << std::string(kMaxConfigJsonBytes + 1, ' ');
  c = loadGlm53Config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(strCat("is ", kMaxConfigJsonBytes + 1,
                                             " bytes, more than the ", kMaxConfigJsonBytes)),
            std::string::npos)
      << c.status().message();
}

TEST(Glm53Config, MissingFileNamesThePath) {
  Expected<Glm53Config> c = loadGlm53Config("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/model/config.json"), std::string::npos);
}

} // namespace
} // namespace glm::glm53
