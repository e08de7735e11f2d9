// Tests of `glmc synth`'s checkpoints: valid against the table, deterministic, sharded when large.
#include "tools/synth/Synth.h"
#include "kernels/exl3/exl3.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/KernelViews.h"
#include "runtime/weights/SafeTensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
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

TEST_F(Synth, Exl3ExpertsAreValidEncodedLayersOfTheDenseSpread) {
  // Layers 0-2 dense, layer 3 MoE: 16 experts x 3 matrices as EXL3 at K = 3.
  const auto dir =
      synth("exl3", {.preset = "tiny", .layers = 4, .seed = 5, .experts = "exl3", .exl3Bits = 3});
  Glm53Config config;
  const CheckpointCheck check = checkDir(dir, &config);
  EXPECT_TRUE(check.ok()) << (check.errors.empty() ? "" : check.errors.front());
  EXPECT_EQ(check.present, check.expected);
  ASSERT_EQ(config.quantMethod, std::optional<std::string>("exl3"));
  const auto quantization =
      nlohmann::json::parse(readFile(dir / "config.json"))["quantization_config"];
  // The model-average bits per real weight: every expert matrix ([64, 128] or [128, 64]) is
  // padded to 128 x 128, so it stores 128·128·3/8 trellis bytes and 2·(128 + 128) scale bytes for
  // 64·128 weights: (6144 + 512) · 8 / 8192 = 6.5.
  EXPECT_DOUBLE_EQ(quantization["bits"].get<double>(), 6.5);
  EXPECT_EQ(quantization["codebook"], "mcg");
  EXPECT_TRUE(std::filesystem::exists(dir / "quantization_config.json"));

  std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(dir)).value();
  const std::string key = "model.language_model.layers.3.mlp.experts.7.down_proj";
  EXPECT_EQ(ck->find(key + ".weight"), nullptr);
  EXPECT_NE(ck->find(key + ".mcg"), nullptr);
  // down_proj is [hidden 128, moe_intermediate 64]: k = pad(64) = 128, n = 128.
  Expected<Exl3Tensors> tensors = findExl3Tensors(*ck, key, 64, 128);
  ASSERT_TRUE(tensors.ok()) << tensors.status().toString();
  EXPECT_EQ(tensors->bits, 3);
  EXPECT_EQ(tensors->codebook, Exl3Codebook::Mcg);
  // Decoded, the random trellis has about the spread of the dense experts (1/sqrt(fan-in) = 1/8):
  // the codebook's RMS is near 1 and the rotations keep norms.
  std::vector<float> weight(128 * 64);
  ASSERT_TRUE(kernels::exl3ReconstructRef(exl3MatrixOf(*tensors, 64, 128), weight.data()).ok());
  double sum = 0.0;
  for (float v : weight) {
    ASSERT_TRUE(std::isfinite(v));
    sum += static_cast<double>(v) * v;
  }
  const double rms = std::sqrt(sum / static_cast<double>(weight.size()));
  EXPECT_GT(rms, 0.05 / 2);
  EXPECT_LT(rms, 0.05 * 2);

  // Deterministic for a seed.
  const auto again = synth(
      "exl3-again", {.preset = "tiny", .layers = 4, .seed = 5, .experts = "exl3", .exl3Bits = 3});
  EXPECT_EQ(readFile(dir / "model.safetensors"), readFile(again / "model.safetensors"));
}

TEST_F(Synth, RefusesUnknownExpertFormatsAndBits) {
  SynthOptions options{.preset = "tiny", .outDir = root_ / "x", .experts = "fp4"};
  EXPECT_NE(synthesizeCheckpoint(options).message().find("--experts is bf16 or exl3, got 'fp4'"),
            std::string::npos);
  options.experts = "exl3";
  options.exl3Bits = 9;
  EXPECT_NE(synthesizeCheckpoint(options).message().find("EXL3 bits must be between 1 and 8"),
            std::string::npos);
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
