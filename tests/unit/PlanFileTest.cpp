// Tests of plan loading: a valid plan round-trips; corrupt and hostile plans are refused clearly.
#include "runtime/plan/PlanFile.h"
#include "runtime/schema/PlanHash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>

namespace glm::runtime {
namespace {

namespace fb = flatbuffers;

/// What a test may change in the plan it builds.
struct PlanEdits {
  uint32_t version = kPlanFormatVersion;
  uint32_t tp = 1;
  uint64_t activationArenaSize = 4096;
  uint32_t alignment = 256;
  uint64_t tensorOffset = 0;
  std::optional<uint64_t> linearInputOffset; // where the linear reads its input (tensorOffset)
  std::vector<int64_t> tensorShape = {4, 8};
  uint32_t weightIndex = 0;
  uint32_t kernelIndex = 0;
  bool withLaunch = true;
  uint32_t argsSize = 48;
  uint32_t bindingOffset = 8;
  plan::ArgSource bindingSource = plan::ArgSource::Operand;
  uint32_t bindingIndex = 0;
  struct Segment {
    uint32_t first, count;
    plan::SegmentEnd end;
  };
  std::vector<Segment> segments = {{0, 3, plan::SegmentEnd::Collective}};
  uint32_t collectiveWorld = 1;
  bool duplicateProgram = false;
  std::vector<int64_t> logitsShape = {4, 8};
  bool withLogits = true;
  bool seal = true;
};

/// A three-step decode program of 4 sequences: an embedding of the token ids, a linear op with a
/// kernel launch, then an all-reduce that ends the program's one segment; its io slots the token
/// ids and the logits. Sealed with its
/// content hash unless told otherwise, so that each edit is a consistent (hostile) plan.
std::vector<uint8_t> buildPlan(const PlanEdits &e = {}) {
  fb::FlatBufferBuilder b;
  auto target = plan::CreateTargetDescDirect(b, "sm_90a", plan::Arch::Sm90a, 132, 232448,
                                             141ull << 30, 4.8e12);
  std::vector<fb::Offset<plan::Arena>> arenas = {
      plan::CreateArenaDirect(b, "weights", plan::ArenaKind::Weights, 8192, e.alignment),
      plan::CreateArenaDirect(b, "activations", plan::ArenaKind::Activations, e.activationArenaSize,
                              e.alignment),
  };
  const plan::Slice weightSlice(0, 0, 8 * 8 * 2);
  std::vector<int64_t> wshape = {8, 8};
  std::vector<fb::Offset<plan::WeightBinding>> weights = {plan::CreateWeightBindingDirect(
      b, "blk.0.attn.q_proj", "model.language_model.layers.0.self_attn.q_proj.weight", 0,
      plan::WeightFormat::BF16, &wshape, plan::ShardKind::Column, 0, plan::WeightLayout::AsStored,
      plan::ElementType::BF16, &wshape, &weightSlice)};
  std::vector<uint8_t> image(64, 0xAB);
  std::vector<fb::Offset<plan::Cubin>> cubins = {
      plan::CreateCubinDirect(b, plan::Arch::Sm90a, &image, "hash")};
  std::vector<fb::Offset<plan::Kernel>> kernels = {
      plan::CreateKernelDirect(b, "glm::kernels::linearKernel<float, float>",
                               "kernels/linear/linear.cuh", "glm_linear_f32", &cubins)};

  auto tensor = [&](const char *name, uint64_t offset) {
    const plan::Slice slice(1, offset, 4 * 8 * 4);
    return plan::CreateTensorRefDirect(b, name, plan::ElementType::F32, &e.tensorShape, &slice);
  };
  std::vector<fb::Offset<plan::TensorRef>> in = {
      tensor("blk.0.attn_norm", e.linearInputOffset.value_or(e.tensorOffset))};
  std::vector<fb::Offset<plan::TensorRef>> out = {tensor("blk.0.attn.q_proj", 512)};
  std::vector<uint32_t> weightIdx = {e.weightIndex};
  std::vector<uint32_t> grid = {1, 1, 1}, block = {128, 1, 1};
  std::vector<fb::Offset<plan::KernelLaunch>> launches;
  std::vector<uint8_t> args(e.argsSize, 0);
  std::vector<plan::ArgBinding> bindings = {{e.bindingOffset, e.bindingSource, e.bindingIndex, 0}};
  if (e.withLaunch) {
    launches.push_back(
        plan::CreateKernelLaunchDirect(b, e.kernelIndex, &grid, &block, 0, &args, &bindings));
  }
  const plan::Slice idsSlice(1, 1024, 16), logitsSlice(1, 2048, 128);
  const std::vector<int64_t> idsShape = {4};
  auto ids = [&] {
    return plan::CreateTensorRefDirect(b, "tokens", plan::ElementType::I32, &idsShape, &idsSlice);
  };
  std::vector<fb::Offset<plan::TensorRef>> embedIn = {ids()};
  std::vector<fb::Offset<plan::TensorRef>> embedOut = {tensor("blk.0.attn_norm", e.tensorOffset)};
  std::vector<fb::Offset<plan::Step>> steps = {
      plan::CreateStepDirect(b, "embedding", "embed", &embedIn, &embedOut),
      plan::CreateStepDirect(b, "linear", "blk.0.attn.q_proj", &in, &out, &weightIdx, nullptr,
                             nullptr, &launches, nullptr, 0, 512, 128, 512),
      plan::CreateStepDirect(
          b, "all_reduce", "blk.0.attn.o_proj.reduce", &out, &out, nullptr, nullptr, nullptr,
          nullptr, nullptr,
          plan::CreateCollective(b, plan::CollectiveKind::AllReduce, 0, e.collectiveWorld)),
  };
  std::vector<fb::Offset<plan::Segment>> segments;
  for (const PlanEdits::Segment &s : e.segments) {
    segments.push_back(plan::CreateSegmentDirect(b, s.first, s.count, s.end, "test"));
  }
  std::vector<fb::Offset<plan::IoSlot>> io;
  io.push_back(plan::CreateIoSlot(b, plan::IoKind::TokenIds, ids()));
  if (e.withLogits) {
    io.push_back(plan::CreateIoSlot(b, plan::IoKind::Logits,
                                    plan::CreateTensorRefDirect(b, "logits", plan::ElementType::F32,
                                                                &e.logitsShape, &logitsSlice)));
  }
  std::vector<fb::Offset<plan::Program>> programs = {plan::CreateProgramDirect(
      b, "decode_b4_r1", plan::ProgramKind::Decode, 4, 1, false, &io, &steps, &segments)};
  if (e.duplicateProgram) {
    programs.push_back(plan::CreateProgramDirect(b, "decode_b4_r1", plan::ProgramKind::Decode, 4, 1,
                                                 false, &io, &steps, &segments));
  }
  auto root = plan::CreatePlanDirect(b, e.version, "glmc test", "tiny", "0", target, e.tp,
                                     plan::Precision::BF16, &arenas, &weights, nullptr, 0, &kernels,
                                     &programs, /*content_hash=*/1);
  plan::FinishPlanBuffer(b, root);
  std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  if (e.seal) {
    EXPECT_TRUE(plan::sealPlanBuffer(bytes));
  }
  return bytes;
}

/// Asserts the plan is refused with a message containing `expected`.
void expectRefused(const std::vector<uint8_t> &bytes, const std::string &expected) {
  Expected<std::unique_ptr<PlanFile>> plan = PlanFile::fromBytes(bytes, "test.glmp");
  ASSERT_FALSE(plan.ok()) << "expected: " << expected;
  EXPECT_NE(plan.status().message().find(expected), std::string::npos) << plan.status().message();
  EXPECT_EQ(plan.status().message().rfind("test.glmp: ", 0), 0u) << plan.status().message();
}

TEST(PlanFile, LoadsAValidPlan) {
  Expected<std::unique_ptr<PlanFile>> plan = PlanFile::fromBytes(buildPlan(), "test.glmp");
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  const plan::Plan &root = (*plan)->root();
  EXPECT_EQ(root.format_version(), kPlanFormatVersion);
  EXPECT_EQ(root.programs()->Get(0)->steps()->size(), 3u);
  EXPECT_EQ(root.programs()->Get(0)->steps()->Get(1)->name()->str(), "blk.0.attn.q_proj");
  EXPECT_TRUE((*plan)->checkRunnableOn(plan::Arch::Sm90a).ok());
  EXPECT_TRUE((*plan)->checkRunnableOn(plan::Arch::Cpu).ok());
  Status s = (*plan)->checkRunnableOn(plan::Arch::Sm121a);
  EXPECT_EQ(s.code(), StatusCode::Unavailable);
  EXPECT_NE(s.message().find("no cubin for Sm121a"), std::string::npos);
}

TEST(PlanFile, RefusesWhatIsNotAPlan) {
  expectRefused({}, "not a glmc plan");
  expectRefused({1, 2, 3}, "not a glmc plan");
  std::vector<uint8_t> bytes = buildPlan();
  bytes[4] = 'X'; // the file identifier
  expectRefused(bytes, "not a glmc plan");
  bytes = buildPlan();
  bytes.resize(bytes.size() / 2);
  expectRefused(bytes, "corrupt plan");
}

TEST(PlanFile, RefusesOtherVersions) {
  expectRefused(buildPlan({.version = 99}),
                strCat("format version 99, this glmc reads version ", kPlanFormatVersion));
}

TEST(PlanFile, RefusesSlicesOutsideArenas) {
  expectRefused(buildPlan({.tensorOffset = 4096 - 64}),
                "step 0 (embed) tensor blk.0.attn_norm: slice [4032, +128) overruns "
                "arena activations of 4096 bytes");
  expectRefused(buildPlan({.activationArenaSize = 600}),
                "io tensor tokens: slice [1024, +16) overruns arena activations of 600 bytes");
  expectRefused(buildPlan({.tensorOffset = UINT64_MAX - 8}), "overruns arena activations");
}

TEST(PlanFile, RefusesTensorsLargerThanTheirSlice) {
  expectRefused(buildPlan({.tensorShape = {4, 9}}), "needs 144 bytes but its slice holds 128");
  expectRefused(buildPlan({.tensorShape = {4, -8}}), "negative dimension -8");
  expectRefused(buildPlan({.tensorShape = {1ll << 40, 1ll << 40}}), "overflows 64 bits");
}

TEST(PlanFile, RefusesIndicesOutOfRange) {
  expectRefused(buildPlan({.weightIndex = 3}), "names weight 3 of 1");
  expectRefused(buildPlan({.kernelIndex = 1}), "launches kernel 1 of 1");
}

TEST(PlanFile, RefusesLaunchArgumentsThatOverrunOrNameNothing) {
  expectRefused(buildPlan({.argsSize = 0}), "launch has a 0-byte argument struct");
  expectRefused(buildPlan({.argsSize = 8192}), "launch has a 8192-byte argument struct");
  expectRefused(buildPlan({.bindingOffset = 44}),
                "argument binding at byte 44 overruns its 48-byte struct");
  expectRefused(buildPlan({.bindingIndex = 1}), "argument binding names Operand 1 of 1");
  expectRefused(buildPlan({.bindingSource = plan::ArgSource::State}),
                "argument binding names State 0 of 0");
  expectRefused(buildPlan({.bindingSource = plan::ArgSource::Workspace}),
                "names a workspace the plan does not have");
  // A rank is written as 4 bytes: it fits where an address would not.
  EXPECT_TRUE(PlanFile::fromBytes(
                  buildPlan({.bindingOffset = 44, .bindingSource = plan::ArgSource::RankTimes}),
                  "test.glmp")
                  .ok());
}

TEST(PlanFile, RefusesBadSegmentsAndPrograms) {
  constexpr plan::SegmentEnd kEnd = plan::SegmentEnd::ProgramEnd,
                             kCollective = plan::SegmentEnd::Collective;
  expectRefused(buildPlan({.segments = {{0, 1, kEnd}}}), "segments cover 1 of 3 steps");
  expectRefused(buildPlan({.segments = {{1, 1, kCollective}, {0, 1, kEnd}}}),
                "segments do not cover the steps");
  expectRefused(buildPlan({.segments = {{0, 1, kEnd}, {1, 0, kEnd}, {1, 1, kCollective}}}),
                "segments do not cover");
  expectRefused(buildPlan({.segments = {{0, 4, kCollective}}}), "segments do not cover");
  // The host runs a collective between graphs: one must end its segment, and only one may.
  expectRefused(buildPlan({.segments = {{0, 3, kEnd}}}),
                "holds collective blk.0.attn.o_proj.reduce but does not end at it");
  expectRefused(buildPlan({.segments = {{0, 2, kCollective}, {2, 1, kCollective}}}),
                "ends at blk.0.attn.q_proj, which is not a collective");
  expectRefused(buildPlan({.duplicateProgram = true}), "program decode_b4_r1: appears twice");
  expectRefused(buildPlan({.alignment = 96}), "alignment 96 is not a power of two");
  expectRefused(buildPlan({.tp = 2}), "collective over 1 ranks in a TP 2 plan");
}

TEST(PlanFile, RefusesADamagedPlanAsDamaged) {
  // One byte of the model summary changed, or the hash never written: the content hash tells.
  std::vector<uint8_t> bytes = buildPlan();
  const std::string_view summary = "tiny";
  auto at = std::search(bytes.begin(), bytes.end(), summary.begin(), summary.end());
  ASSERT_NE(at, bytes.end());
  *at = 'T';
  expectRefused(bytes, "damaged plan (its content hash does not match");
  expectRefused(buildPlan({.seal = false}), "damaged plan");
}

TEST(PlanFile, TheContentHashIsFnv1aWithTheHashFieldAsZeros) {
  // The definition byte by byte, against the hash every plan file carries (so that plans written
  // before a faster planContentHash still load).
  const std::vector<uint8_t> bytes = buildPlan();
  const uint8_t *field = flatbuffers::GetRoot<flatbuffers::Table>(bytes.data())
                             ->GetAddressOf(plan::Plan::VT_CONTENT_HASH);
  ASSERT_NE(field, nullptr);
  const size_t at = static_cast<size_t>(field - bytes.data());
  uint64_t want = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < bytes.size(); ++i) {
    want = (want ^ (i >= at && i < at + 8 ? 0 : bytes[i])) * 0x100000001B3ull;
  }
  EXPECT_EQ(plan::planContentHash(bytes), want);
  EXPECT_EQ(plan::GetPlan(bytes.data())->content_hash(), want);
}

TEST(PlanFile, RefusesIoSlotsTheEnginesCannotUse) {
  expectRefused(buildPlan({.withLogits = false}), "program decode_b4_r1: has no logits io slot");
  expectRefused(buildPlan({.logitsShape = {1, 8}}),
                "program decode_b4_r1 io slot Logits: is F32 of 2 dimensions, not F32 [4, 8]");
  expectRefused(buildPlan({.logitsShape = {4, 8, 1}}), "io slot Logits");
}

TEST(PlanFile, RefusesStepsOfOtherRowsMisalignedSlicesAndDeepShapes) {
  // The engines run a step on its program's rows (or one a sequence): 3 of 4 would overrun.
  expectRefused(buildPlan({.tensorShape = {3, 8}}),
                "step 1 (blk.0.attn.q_proj): runs on 3 rows; its program has 4");
  expectRefused(buildPlan({.tensorOffset = 4}),
                "slice at byte 4 of arena activations is not aligned to its 256 bytes");
  expectRefused(buildPlan({.tensorShape = {4, 1, 1, 1, 8}}), "has 5 dimensions (at most 4)");
}

TEST(PlanFile, RefusesAStepThatReadsWhatNothingWrote) {
  // The linear reads its input from where the embedding did not write it.
  expectRefused(buildPlan({.linearInputOffset = 256}),
                "step 1 (blk.0.attn.q_proj): reads blk.0.attn_norm before any io slot or earlier "
                "step writes it");
}

TEST(PlanFile, SurvivesEveryByteCorrupted) {
  // Flip bits in every byte: each variant must be refused or accepted, never crash or hang.
  const std::vector<uint8_t> good = buildPlan();
  size_t refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= mask;
      Expected<std::unique_ptr<PlanFile>> plan = PlanFile::fromBytes(bad, "fuzz.glmp");
      refused += !plan.ok();
    }
  }
  // The content hash covers every byte: each flip is refused.
  EXPECT_EQ(refused, good.size() * 3);
}

TEST(PlanFile, OpenNamesAMissingFile) {
  Expected<std::unique_ptr<PlanFile>> plan = PlanFile::open("/nonexistent/x.glmp");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::NotFound);
  EXPECT_NE(plan.status().message().find("/nonexistent/x.glmp"), std::string::npos);
}

} // namespace
} // namespace glm::runtime
