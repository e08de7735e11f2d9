// Tests of `glmc synth`'s checkpoints: valid against the table, deterministic, sharded when large.
#include "models/glm53/synth/Synth.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/SafeTensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace glm::glm53 {
namespace {

const std::filesystem::path kFixtures = GLM_FIXTURES_DIR;

std::string readFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Synth : public ::testing::Test {
protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("glm53_synth_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path synth(const std::string &name, SynthOptions options) {
    options.outDir = root_ / name;
    Status s = synthesizeCheckpoint(options);
    EXPECT_TRUE(s.ok()) << s.toString();
    return options.outDir;
  }

  std::filesystem::path root_;
};

/// Opens a synthesized directory and runs the checkpoint check against its own config.
CheckpointCheck checkDir(const std::filesystem::path &dir, Glm53Config *configOut = nullptr) {
  Expected<Glm53Config> config = loadGlm53Config(dir);
  EXPECT_TRUE(config.ok()) << config.status().toString();
  Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.ok()) << ck.status().toString();
  if (configOut != nullptr) {
    *configOut = *config;
  }
  return checkCheckpoint(glm53Weights(*config), **ck);
}

TEST_F(Synth, TinyCheckpointPassesTheCheck) {
  const auto dir = synth("tiny", {.preset = "tiny", .seed = 3});
  Glm53Config config;
  const CheckpointCheck check = checkDir(dir, &config);
  EXPECT_TRUE(check.ok()) << (check.errors.empty() ? "" : check.errors.front());
  EXPECT_EQ(check.present, check.expected);
  EXPECT_TRUE(config.hasMtp());
  EXPECT_TRUE(config.vision.has_value());
  EXPECT_NE(config.vHeadDim, config.qkNopeHeadDim) << "the demo model keeps them apart";
  for (const char *file : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / file)) << file;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
}

TEST_F(Synth, ReleaseDTypesAreKept) {
  const auto dir = synth("tiny", {.preset = "tiny", .seed = 3});
  Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ((*ck)->find("model.language_model.layers.0.self_attn.A_log")->dtype, DType::F32);
  EXPECT_EQ((*ck)->find("model.language_model.layers.3.mlp.gate.e_score_correction_bias")->dtype,
            DType::F32);
  EXPECT_EQ((*ck)->find("model.language_model.layers.0.self_attn.q_proj.weight")->dtype,
            DType::BF16);
}

TEST_F(Synth, DeterministicForASeed) {
  const auto a = synth("a", {.preset = "tiny", .seed = 7});
  const auto b = synth("b", {.preset = "tiny", .seed = 7});
  const auto c = synth("c", {.preset = "tiny", .seed = 8});
  for (const char *file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_EQ(readFile(a / file), readFile(b / file)) << file;
  }
  EXPECT_NE(readFile(a / "model.safetensors"), readFile(c / "model.safetensors"));
}

TEST_F(Synth, ValuesAreFiniteAndNonTrivial) {
  const auto dir = synth("tiny", {.preset = "tiny", .seed = 1});
  Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok());
  for (const TensorView *t : (*ck)->tensors()) {
    ASSERT_TRUE(t->dtype == DType::BF16 || t->dtype == DType::F32) << t->name;
    bool nonZero = false;
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; ++i) {
      float v = 0;
      if (t->dtype == DType::F32) {
        std::memcpy(&v, t->data + 4 * i, 4);
      } else {
        uint32_t bits = uint32_t(t->data[2 * i]) << 16 | uint32_t(t->data[2 * i + 1]) << 24;
        std::memcpy(&v, &bits, 4);
      }
      ASSERT_TRUE(std::isfinite(v)) << t->name << "[" << i << "]";
      nonZero |= v != 0.0f;
    }
    EXPECT_TRUE(nonZero) << t->name;
  }
}

TEST_F(Synth, ShardsWithAnIndexWhenLarge) {
  const auto dir = synth("sharded", {.preset = "tiny", .seed = 3, .maxShardBytes = 2'000'000});
  ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().toString();
  EXPECT_GT((*ck)->files().size(), 2u);
  EXPECT_TRUE(checkDir(dir).ok());
}

TEST_F(Synth, LayersOverrideDerivesTheSchedules) {
  const auto dir = synth("five", {.preset = "tiny", .layers = 5, .seed = 3});
  Glm53Config config;
  EXPECT_TRUE(checkDir(dir, &config).ok());
  EXPECT_EQ(config.numHiddenLayers, 5);
  EXPECT_EQ(config.countLayers(AttentionKind::Sparse), 1);
  EXPECT_EQ(config.countLayers(MlpKind::Sparse), 2);
}

TEST(SynthConfig, FlashPresetIsTheReleaseConfig) {
  Expected<std::string> text = synthConfigJson("glm53-flash", std::nullopt);
  ASSERT_TRUE(text.ok());
  Expected<Glm53Config> preset = parseGlm53Config(*text, "preset");
  Expected<Glm53Config> release = loadGlm53Config(kFixtures / "glm53-flash");
  ASSERT_TRUE(preset.ok()) << preset.status().toString();
  ASSERT_TRUE(release.ok());
  // Every field that shapes the model or its math.
  const Glm53Config &p = *preset, &r = *release;
  EXPECT_EQ(p.vocabSize, r.vocabSize);
  EXPECT_EQ(p.hiddenSize, r.hiddenSize);
  EXPECT_EQ(p.numHiddenLayers, r.numHiddenLayers);
  EXPECT_EQ(p.layerTypes, r.layerTypes);
  EXPECT_EQ(p.mlpLayerTypes, r.mlpLayerTypes);
  EXPECT_EQ(p.indexerTypes, r.indexerTypes);
  EXPECT_EQ(p.linearNumHeads, r.linearNumHeads);
  EXPECT_EQ(p.linearHeadDim, r.linearHeadDim);
  EXPECT_EQ(p.qLoraRank, r.qLoraRank);
  EXPECT_EQ(p.kvLoraRank, r.kvLoraRank);
  EXPECT_EQ(p.qkNopeHeadDim, r.qkNopeHeadDim);
  EXPECT_EQ(p.vHeadDim, r.vHeadDim);
  EXPECT_EQ(p.indexNHeads, r.indexNHeads);
  EXPECT_EQ(p.indexHeadDim, r.indexHeadDim);
  EXPECT_EQ(p.indexTopk, r.indexTopk);
  EXPECT_EQ(p.indexKpool, r.indexKpool);
  EXPECT_EQ(p.intermediateSize, r.intermediateSize);
  EXPECT_EQ(p.moeIntermediateSize, r.moeIntermediateSize);
  EXPECT_EQ(p.nRoutedExperts, r.nRoutedExperts);
  EXPECT_EQ(p.numExpertsPerTok, r.numExpertsPerTok);
  EXPECT_EQ(p.routedScalingFactor, r.routedScalingFactor);
  EXPECT_EQ(p.hcMult, r.hcMult);
  EXPECT_EQ(p.numNextnPredictLayers, r.numNextnPredictLayers);
  EXPECT_EQ(p.eosTokenIds, r.eosTokenIds);
  EXPECT_EQ(p.padTokenId, r.padTokenId);
  EXPECT_EQ(p.imageTokenId, r.imageTokenId);
  EXPECT_EQ(p.videoEndTokenId, r.videoEndTokenId);
  EXPECT_EQ(p.vision->outHiddenSize, r.vision->outHiddenSize);
  EXPECT_EQ(p.vision->depth, r.vision->depth);
  EXPECT_EQ(glm53Weights(p).size(), glm53Weights(r).size());
}

TEST(SynthConfig, RejectsUnknownPresetsAndLayerCounts) {
  EXPECT_FALSE(synthConfigJson("glm53-huge", std::nullopt).ok());
  EXPECT_FALSE(synthConfigJson("tiny", 0).ok());
  Status s = synthesizeCheckpoint({.preset = "nope", .outDir = "/tmp/unused"});
  EXPECT_NE(s.message().find("unknown preset 'nope'"), std::string::npos);
}

} // namespace
} // namespace glm::glm53
