// Tests of the GLM-5.3 tensor table, the checkpoint check and the parameter/byte budgets.
#include "models/glm53/Budget.h"
#include "models/glm53/Config.h"
#include "models/glm53/Weights.h"
#include "runtime/weights/SafeTensors.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

namespace glm::glm53 {
namespace {

const std::filesystem::path kFixtures = GLM_FIXTURES_DIR;

Glm53Config loadConfig(const std::string &name) {
  Expected<Glm53Config> c = loadGlm53Config(kFixtures / name);
  EXPECT_TRUE(c.ok()) << c.status().toString();
  return std::move(c).value();
}

/// Parameters per layer and component, from the table.
std::map<std::pair<int64_t, Component>, int64_t> paramsByLayer(const std::vector<WeightInfo> &t) {
  std::map<std::pair<int64_t, Component>, int64_t> out;
  for (const WeightInfo &w : t) {
    out[{w.layer, w.component}] += w.numel();
  }
  return out;
}

TEST(Glm53Weights, ReleaseShapesMatchTheArchitectureReference) {
  // Per-layer sums from reference/glm53_arch.md §4.
  const Glm53Config c = loadConfig("glm53-flash");
  const auto byLayer = paramsByLayer(glm53Weights(c));
  EXPECT_EQ(byLayer.at({0, Component::Kda}), 137'732'288);
  EXPECT_EQ(byLayer.at({3, Component::MlaAttention}), 117'442'560);
  EXPECT_EQ(byLayer.at({3, Component::Indexer}), 7'471'872);
  EXPECT_EQ(byLayer.at({0, Component::Mhc}), 786'486);
  EXPECT_EQ(byLayer.at({0, Component::DenseMlp}), 150'994'944);
  EXPECT_EQ(byLayer.at({5, Component::Router}), 1'179'936);
  EXPECT_EQ(byLayer.at({5, Component::SharedExpert}), 25'165'824);
  EXPECT_EQ(byLayer.at({5, Component::RoutedExpert}), 288 * 25'165'824ll);
  EXPECT_EQ(byLayer.count({44, Component::MlaAttention}), 0u) << "layer 44 is KDA";
}

TEST(Glm53Weights, ReleaseParameterCounts) {
  const Glm53Config c = loadConfig("glm53-flash");
  const ParameterCounts p = countParameters(c, glm53Weights(c)).value();
  EXPECT_EQ(p.trunk, 313'326'811'966);
  EXPECT_EQ(p.trunkRouted, 304'405'807'104);
  EXPECT_EQ(p.mtp, 7'432'592'416);
  EXPECT_EQ(p.mtp - p.mtpRouted, 184'835'104);
  EXPECT_EQ(p.vision, 563'627'008);
  EXPECT_EQ(p.total, 321'323'031'390);
  EXPECT_EQ(p.activePerToken, 17'376'721'726);
}

TEST(Glm53Weights, ReleaseDecodeBytesAndState) {
  const Glm53Config c = loadConfig("glm53-flash");
  const std::vector<WeightInfo> table = glm53Weights(c);
  const DecodeWeightBytes b = decodeWeightBytes(c, table, nullptr).value();
  // §4: experts at 4 bits 4,227,858,432 B + non-expert bf16 16,573,232,764 B + one embedding row;
  // the fp32 tensors HF keeps (A_log, dt_bias, conv kernels, router bias) add their second half.
  uint64_t fp32Extra = 0;
  for (const WeightInfo &w : table) {
    if (w.releaseDType == DType::F32 && !w.isMtp && w.component != Component::Vision) {
      fp32Extra += 2 * static_cast<uint64_t>(w.numel());
    }
  }
  EXPECT_EQ(b.with4BitExperts, 4'227'858'432ull + 16'573'232'764ull + 8'192ull + fp32Extra);
  EXPECT_EQ(b.asStored, 2 * 4'227'858'432ull * 2 + 16'573'232'764ull + 8'192ull + fp32Extra);
  const StateBytes s = stateBytes(c).value();
  EXPECT_EQ(s.kdaPerSequence, 147'619'840u);
  EXPECT_EQ(s.dsaPerToken, 11'968u);
  EXPECT_EQ(s.mtpPerToken, 1'088u);
}

TEST(Glm53Weights, BudgetsPastTheConfigRangesAreErrorsNotOverflow) {
  // Built by hand past Config.cpp's ranges, which a parsed config cannot be: every count is
  // checked, so the answer is an error naming the quantity, not a wrapped number.
  Glm53Config c = loadConfig("glm53-tiny");
  c.hiddenSize = int64_t(1) << 40;
  c.moeIntermediateSize = int64_t(1) << 30;
  const std::vector<WeightInfo> table = glm53Weights(c);
  Expected<ParameterCounts> p = countParameters(c, table);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("of this config (hidden 1099511627776, 8 layers, 16 "
                                      "experts) overflows 64 bits"),
            std::string::npos)
      << p.status().message();
  EXPECT_FALSE(decodeWeightBytes(c, table, nullptr).ok());
  c = loadConfig("glm53-tiny");
  c.linearHeadDim = int64_t(1) << 40;
  Expected<StateBytes> s = stateBytes(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("KDA state size"), std::string::npos) << s.status().message();
  // A single tensor's count saturates rather than wrapping.
  WeightInfo w;
  w.shape = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_EQ(w.numel(), std::numeric_limits<int64_t>::max());
}

TEST(Glm53Weights, TinyFixtureNamesMatchTheTable) {
  const Glm53Config c = loadConfig("glm53-tiny");
  Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(kFixtures / "glm53-tiny");
  ASSERT_TRUE(ck.ok()) << ck.status().toString();
  const CheckpointCheck check = checkCheckpoint(glm53Weights(c), **ck);
  EXPECT_TRUE(check.ok());
  EXPECT_TRUE(check.errors.empty()) << check.errors.front();
  EXPECT_TRUE(check.unexpected.empty()) << check.unexpected.front();
  EXPECT_EQ(check.present, check.expected);
  EXPECT_EQ(static_cast<size_t>(check.expected), (*ck)->tensors().size());
}

TEST(Glm53Weights, MtpLayerFollowsTheTrunk) {
  Glm53Config c = loadConfig("glm53-flash");
  std::vector<WeightInfo> table = glm53Weights(c);
  int64_t mtpTensors = 0;
  for (const WeightInfo &w : table) {
    if (w.isMtp) {
      ++mtpTensors;
      EXPECT_EQ(w.layer, 45);
      EXPECT_EQ(w.name.rfind("model.language_model.layers.45.", 0), 0u) << w.name;
      EXPECT_EQ(w.name.find("hc_"), std::string::npos) << "the MTP layer has no mHC: " << w.name;
    }
  }
  EXPECT_GT(mtpTensors, 288 * 3);
  c.numNextnPredictLayers = 0;
  for (const WeightInfo &w : glm53Weights(c)) {
    EXPECT_FALSE(w.isMtp) << w.name;
  }
}

TEST(Glm53Weights, TiedEmbeddingsHaveNoHead) {
  Glm53Config c = loadConfig("glm53-tiny");
  c.tieWordEmbeddings = true;
  for (const WeightInfo &w : glm53Weights(c)) {
    EXPECT_NE(w.name, "lm_head.weight");
  }
}

TEST(Glm53Weights, AllowedDTypes) {
  EXPECT_TRUE(isAllowedDType(WeightRole::Linear, DType::F8_E4M3));
  EXPECT_FALSE(isAllowedDType(WeightRole::Param, DType::F8_E4M3));
  EXPECT_TRUE(isAllowedDType(WeightRole::Param, DType::F32));
  EXPECT_FALSE(isAllowedDType(WeightRole::Linear, DType::I32));
}

/// A checkpoint written from a table, with one tensor replaced by `mutate`.
class CheckCheckpoint : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("glm53_weights_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_ = loadConfig("glm53-tiny");
    table_ = glm53Weights(config_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  CheckpointCheck write(std::vector<TensorSpec> specs) {
    Status s = writeSafeTensors(dir_ / "model.safetensors", specs);
    EXPECT_TRUE(s.ok()) << s.toString();
    Expected<std::unique_ptr<Checkpoint>> ck = Checkpoint::open(dir_);
    EXPECT_TRUE(ck.ok()) << ck.status().toString();
    return checkCheckpoint(table_, **ck);
  }

  std::vector<TensorSpec> specsFromTable() {
    std::vector<TensorSpec> specs;
    for (const WeightInfo &w : table_) {
      specs.push_back({w.name, w.releaseDType, w.shape,
                       [](std::span<uint8_t> out) { std::memset(out.data(), 0, out.size()); }});
    }
    return specs;
  }

  std::filesystem::path dir_;
  Glm53Config config_;
  std::vector<WeightInfo> table_;
};

TEST_F(CheckCheckpoint, AcceptsFp8LinearWeightsWithBlockScales) {
  std::vector<TensorSpec> specs = specsFromTable();
  const std::string name = "model.language_model.layers.0.self_attn.q_proj.weight"; // [128, 128]
  for (TensorSpec &s : specs) {
    if (s.name == name) {
      s.dtype = DType::F8_E4M3;
    }
  }
  specs.push_back({name + "_scale_inv", DType::F32, {1, 1}, [](std::span<uint8_t> out) {
                     std::memset(out.data(), 0, out.size());
                   }});
  const CheckpointCheck check = write(specs);
  EXPECT_TRUE(check.ok()) << (check.errors.empty() ? "" : check.errors.front());
}

TEST_F(CheckCheckpoint, ReportsFp8WithoutScalesAndFp8Norms) {
  std::vector<TensorSpec> specs = specsFromTable();
  for (TensorSpec &s : specs) {
    if (s.name == "model.language_model.layers.0.self_attn.q_proj.weight" ||
        s.name == "model.language_model.norm.weight") {
      s.dtype = DType::F8_E4M3;
    }
  }
  const CheckpointCheck check = write(specs);
  ASSERT_EQ(check.errors.size(), 2u);
  EXPECT_NE(check.errors[0].find("q_proj.weight_scale_inv' are missing"), std::string::npos)
      << check.errors[0];
  EXPECT_NE(check.errors[1].find("'model.language_model.norm.weight' in model.safetensors is "
                                 "F8_E4M3, which is not allowed"),
            std::string::npos)
      << check.errors[1];
}

TEST_F(CheckCheckpoint, ReportsMissingMisshapenAndUnexpectedTensors) {
  std::vector<TensorSpec> specs = specsFromTable();
  specs.erase(specs.begin() + 1);
  specs[2].shape.back() += 1;
  specs.push_back(
      {"model.language_model.layers.9.extra", DType::BF16, {2}, [](std::span<uint8_t> out) {
         std::memset(out.data(), 0, out.size());
       }});
  const CheckpointCheck check = write(specs);
  EXPECT_FALSE(check.ok());
  ASSERT_EQ(check.errors.size(), 2u);
  EXPECT_NE(check.errors[0].find("missing tensor '" + table_[1].name + "'"), std::string::npos);
  EXPECT_NE(check.errors[1].find("has shape"), std::string::npos);
  ASSERT_EQ(check.unexpected.size(), 1u);
  EXPECT_NE(check.unexpected[0].find("layers.9.extra"), std::string::npos);
  EXPECT_EQ(check.present, check.expected - 2);
  // What compile, quantize and dequantize refuse with: the counts and the problems.
  const Status refused = checkpointMismatch(check, "/models/x");
  EXPECT_NE(refused.message().find("/models/x: the checkpoint does not match its config (2 "
                                   "error(s), 1 unexpected tensor(s); glmc info /models/x lists "
                                   "them all):\n  missing tensor '" +
                                   table_[1].name + "'"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("\n  unexpected tensor 'model.language_model.layers.9.extra'"),
            std::string::npos)
      << refused.message();
  EXPECT_TRUE(checkpointMismatch(CheckpointCheck{}, "/models/x").ok());
}

} // namespace
} // namespace glm::glm53
