// Tests of binding a checkpoint to a plan: each rank's slices, at TP 1 and TP 2.
#include "runtime/weights/PlanWeights.h"
#include "runtime/plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace glm {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// Compiles the tiny fixture with glmc into a temporary plan and loads it.
std::unique_ptr<runtime::PlanFile> compileTiny(int tp) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("plan_weights_test_" + std::to_string(::getpid()) + "_tp" + std::to_string(tp) + ".glmp");
  const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                              out.string() + " --target cpu --precision f32 --tp " +
                              std::to_string(tp) + " 2>/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(out);
  std::filesystem::remove(out);
  EXPECT_TRUE(plan.ok()) << plan.status().toString();
  return std::move(plan).value();
}

std::vector<uint8_t> bind(const runtime::PlanFile &plan, const Checkpoint &ck, uint32_t rank) {
  std::vector<uint8_t> arena(plan.root().arenas()->Get(0)->size());
  Status s = loadPlanWeights(plan.root(), ck, rank, arena);
  EXPECT_TRUE(s.ok()) << s.toString();
  return arena;
}

const plan::WeightBinding *binding(const plan::Plan &p, const std::string &name) {
  for (const plan::WeightBinding *w : *p.weights()) {
    if (w->name()->str() == name) {
      return w;
    }
  }
  ADD_FAILURE() << "no binding " << name;
  return nullptr;
}

/// Row r of a 2-D bf16 tensor, as bytes.
std::vector<uint8_t> row(const TensorView &t, int64_t r) {
  const size_t bytes = static_cast<size_t>(t.shape[1]) * 2;
  return {t.data + r * bytes, t.data + (r + 1) * bytes};
}

class PlanWeights : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    checkpoint_ = std::move(Checkpoint::open(kTiny)).value();
    tp1_ = compileTiny(1);
    tp2_ = compileTiny(2);
  }
  static void TearDownTestSuite() {
    tp1_.reset();
    tp2_.reset();
    checkpoint_.reset();
  }

  static std::unique_ptr<Checkpoint> checkpoint_;
  static std::unique_ptr<runtime::PlanFile> tp1_, tp2_;
};
std::unique_ptr<Checkpoint> PlanWeights::checkpoint_;
std::unique_ptr<runtime::PlanFile> PlanWeights::tp1_, PlanWeights::tp2_;

TEST_F(PlanWeights, TpOneHoldsEveryTensorWhole) {
  const std::vector<uint8_t> arena = bind(*tp1_, *checkpoint_, 0);
  for (const plan::WeightBinding *w : *tp1_->root().weights()) {
    const std::string pattern = w->checkpoint()->str();
    const uint8_t *dst = arena.data() + w->slice()->offset();
    if (w->experts() == 0) {
      const TensorView *t = checkpoint_->find(pattern);
      ASSERT_NE(t, nullptr) << pattern;
      EXPECT_EQ(std::memcmp(dst, t->data, t->byteSize), 0) << pattern;
      continue;
    }
    for (uint32_t e = 0; e < w->experts(); ++e) {
      std::string name = pattern;
      name.replace(name.find("{e}"), 3, std::to_string(e));
      const TensorView *t = checkpoint_->find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(std::memcmp(dst + e * t->byteSize, t->data, t->byteSize), 0) << name;
    }
  }
}

TEST_F(PlanWeights, TpTwoSplitsColumnsRowsAndExperts) {
  const plan::Plan &p = tp2_->root();
  std::vector<uint8_t> ranks[2] = {bind(*tp2_, *checkpoint_, 0), bind(*tp2_, *checkpoint_, 1)};

  // Column split (q_proj [128, 128] -> [64, 128]): rank r holds rows [64 r, 64 r + 64).
  const plan::WeightBinding *q = binding(p, "blk.0.attn.q_proj");
  const TensorView *qt = checkpoint_->find("model.language_model.layers.0.self_attn.q_proj.weight");
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < 64; ++i) {
      const std::vector<uint8_t> expected = row(*qt, 64 * r + i);
      EXPECT_EQ(std::memcmp(ranks[r].data() + q->slice()->offset() + i * 256, expected.data(), 256),
                0)
          << "rank " << r << " row " << i;
    }
  }

  // Row split (o_proj [128, 128] -> [128, 64]): rank r holds columns [64 r, 64 r + 64).
  const plan::WeightBinding *o = binding(p, "blk.0.attn.o_proj");
  const TensorView *ot = checkpoint_->find("model.language_model.layers.0.self_attn.o_proj.weight");
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < 128; ++i) {
      EXPECT_EQ(std::memcmp(ranks[r].data() + o->slice()->offset() + i * 128,
                            ot->data + i * 256 + r * 128, 128),
                0)
          << "rank " << r << " row " << i;
    }
  }

  // Expert split (16 experts -> 8 per rank): rank 1's first expert is expert 8.
  const plan::WeightBinding *gate = binding(p, "blk.3.ffn.experts.gate_proj");
  const TensorView *e8 =
      checkpoint_->find("model.language_model.layers.3.mlp.experts.8.gate_proj.weight");
  EXPECT_EQ(gate->experts(), 16u);
  EXPECT_EQ(std::memcmp(ranks[1].data() + gate->slice()->offset(), e8->data, e8->byteSize), 0);

  // Replicated (the router): the same bytes on both ranks.
  const plan::WeightBinding *router = binding(p, "blk.3.ffn.router");
  EXPECT_EQ(std::memcmp(ranks[0].data() + router->slice()->offset(),
                        ranks[1].data() + router->slice()->offset(), router->slice()->size()),
            0);
}

TEST_F(PlanWeights, WindowsOfWholeBindingsLoadTheSameBytes) {
  // Small windows (many bindings are larger than 4 KB and get windows of their own) must put every
  // byte where the whole-arena load does, at TP 1 and on each rank at TP 2.
  for (const auto &[plan, rank] :
       {std::pair{tp1_.get(), 0u}, std::pair{tp2_.get(), 0u}, std::pair{tp2_.get(), 1u}}) {
    const std::vector<uint8_t> whole = bind(*plan, *checkpoint_, rank);
    std::vector<uint8_t> windowed(whole.size(), 0);
    const std::vector<WeightWindow> windows = planWeightWindows(plan->root(), 4096);
    ASSERT_GT(windows.size(), 10u);
    uint64_t end = 0;
    for (const WeightWindow &w : windows) {
      EXPECT_GE(w.offset, end) << "windows are in arena order and do not overlap";
      end = w.offset + w.bytes;
      std::vector<uint8_t> bytes(w.bytes, 0);
      Status s = loadPlanWeightsWindow(plan->root(), *checkpoint_, rank, w.offset, bytes);
      ASSERT_TRUE(s.ok()) << s.toString();
      std::copy(bytes.begin(), bytes.end(), windowed.begin() + static_cast<int64_t>(w.offset));
    }
    EXPECT_EQ(windowed, whole) << "rank " << rank;
  }
}

TEST_F(PlanWeights, RefusesACheckpointThatDoesNotMatchThePlan) {
  // The plan of the tiny fixture bound to a synthesized checkpoint of other dimensions.
  const std::filesystem::path other =
      std::filesystem::temp_directory_path() / ("plan_weights_other_" + std::to_string(::getpid()));
  const std::string command =
      std::string(GLM_GLMC_PATH) + " synth --preset tiny -o " + other.string() + " 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(other)).value();
  std::vector<uint8_t> arena(tp1_->root().arenas()->Get(0)->size());
  Status s = loadPlanWeights(tp1_->root(), *ck, 0, arena);
  std::filesystem::remove_all(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has shape"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("the plan expects"), std::string::npos) << s.message();
  EXPECT_FALSE(loadPlanWeights(tp2_->root(), *checkpoint_, 2, arena).ok());
}

} // namespace
} // namespace glm
