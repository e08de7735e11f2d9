// The MTP head (reference/glm53_arch.md §2.8) against transformers: the f32 CPU plan of a
// synthetic checkpoint with an MTP layer reproduces tests/goldens/glm53-tiny-mtp (made by its
// make_golden.py from transformers' glm5_next modules) over a prompt, prefilled whole and in
// chunks, and serial greedy decode steps; its draws reach the sampled tokens, the same at TP 2 as
// at TP 1; a plan without it is the same trunk; and drafting with it changes no reply.
#include "base/Hmac.h"
#include "runtime/comm/LoopbackComm.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/weights/SafeTensors.h"
#include "tests/unit/support/Compare.h"
#include "tests/unit/support/Requests.h"
#include "tests/unit/support/TinyPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>
#include <unistd.h>

namespace glm::runtime {
namespace {

using glm::testing::relativeL2;
using testing::TinyPlan;

constexpr double kTolerance = 1e-4; // an exact fp32 plan lands near 1e-6

const std::filesystem::path kGoldenDir = std::filesystem::path(GLM_GOLDENS_DIR) / "glm53-tiny-mtp";

class MtpHead : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("mtp_head_" + std::to_string(::getpid())));
    const std::string command = std::string(GLM_GLMC_PATH) + " synth --preset tiny --seed 7 -o " +
                                checkpoint().string() + " 2>/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    golden_ = std::move(SafeTensorsFile::open(kGoldenDir / "golden.safetensors")).value().release();
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete golden_;
  }

  static std::filesystem::path checkpoint() { return *dir_ / "checkpoint"; }
  static const TensorView &tensor(const std::string &name) {
    const TensorView *t = golden_->find(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  static const float *floats(const TensorView &t) {
    return reinterpret_cast<const float *>(t.data);
  }
  static std::vector<int32_t> ints(const std::string &name) {
    const TensorView &t = tensor(name);
    const auto *p = reinterpret_cast<const int32_t *>(t.data);
    return std::vector<int32_t>(p, p + t.shape[0]);
  }
  static int64_t vocab() { return tensor("mtp_logits").shape[1]; }

  /// An f32 CPU plan of the synthetic checkpoint with every prefill row's logits (TP 1 unless
  /// `options` says otherwise).
  static TinyPlan planWith(const std::string &options) {
    const std::string tp = options.find("--tp ") == std::string::npos ? "--tp 1 " : "";
    return TinyPlan(tp + "--max-seqs 2 --max-context 128 --prefill-logits all " + options,
                    checkpoint());
  }
  /// A directory for one engine's dumps.
  static std::filesystem::path dumpDir(const std::string &name) {
    const std::filesystem::path dir = *dir_ / name;
    std::filesystem::create_directories(dir);
    return dir;
  }

  /// Prefills the golden prompt in chunks of the plan's prefill program and feeds the golden
  /// greedy tokens one decode step each, on an engine dumping the MTP head's logits and its
  /// indexer's selections; compares them with the golden rows. The trunk's logits are checked
  /// too: the head reads its output.
  void expectGoldenRows(const TinyPlan &plan, const std::string &name) {
    const std::filesystem::path dir = dumpDir(name);
    std::unique_ptr<CpuEngine> engine =
        plan.engine({.tieRule = kernels::TopkTieRule::LowerIndex,
                     .dumpPattern = "blk.8.head.logits,blk.8.attn.indexer.topk",
                     .dumpDir = dir.string()});
    ASSERT_NE(engine, nullptr);
    const std::vector<int32_t> prompt = ints("input_ids"), greedy = ints("greedy_tokens");
    const int64_t v = vocab(), promptTokens = static_cast<int64_t>(prompt.size());
    const int slot = *engine->newSequence();
    Expected<std::vector<float>> prefill = engine->prefill(slot, prompt);
    ASSERT_TRUE(prefill.ok()) << prefill.status().toString();
    for (int64_t t = 0; t < promptTokens; ++t) {
      EXPECT_LE(relativeL2(prefill->data() + t * v, floats(tensor("prefill_logits")) + t * v, v),
                kTolerance)
          << "trunk row " << t;
    }
    for (size_t j = 0; j + 1 < greedy.size(); ++j) {
      const int slots[] = {slot};
      Expected<std::vector<float>> logits =
          engine->decode(slots, std::span<const int32_t>(&greedy[j], 1));
      ASSERT_TRUE(logits.ok()) << logits.status().toString();
      EXPECT_EQ(std::max_element(logits->begin(), logits->end()) - logits->begin(), greedy[j + 1])
          << "the trunk's greedy token after step " << j;
    }

    // The dumps, run by run: the head's logits and its indexer's selections of each run's rows.
    std::vector<std::filesystem::path> runs;
    for (const auto &entry : std::filesystem::directory_iterator(dir)) {
      runs.push_back(entry.path());
    }
    auto runNumber = [](const std::filesystem::path &p) {
      return std::stol(p.filename().string().substr(0, p.filename().string().find('.')));
    };
    std::sort(runs.begin(), runs.end(),
              [&](const auto &a, const auto &b) { return runNumber(a) < runNumber(b); });
    const TensorView &mtpLogits = tensor("mtp_logits"), &mtpTopk = tensor("mtp_topk");
    const int64_t width = mtpTopk.shape[1];
    int64_t row = 0;
    for (const std::filesystem::path &run : runs) {
      Expected<std::unique_ptr<SafeTensorsFile>> dump = SafeTensorsFile::open(run);
      ASSERT_TRUE(dump.ok()) << dump.status().toString();
      const TensorView *logits = (*dump)->find("blk.8.head.logits");
      const TensorView *topk = (*dump)->find("blk.8.attn.indexer.topk");
      ASSERT_TRUE(logits != nullptr && topk != nullptr) << run;
      ASSERT_EQ(topk->shape[1], width);
      for (int64_t r = 0; r < logits->shape[0]; ++r, ++row) {
        ASSERT_LT(row, mtpLogits.shape[0]) << "more rows than the golden holds";
        EXPECT_LE(relativeL2(floats(*logits) + r * v, floats(mtpLogits) + row * v, v), kTolerance)
            << "MTP row " << row << " (" << run.filename() << ")";
        const auto *ours = reinterpret_cast<const int32_t *>(topk->data) + r * width;
        const auto *theirs = reinterpret_cast<const int32_t *>(mtpTopk.data) + row * width;
        std::set<int32_t> a(ours, ours + width), b(theirs, theirs + width);
        a.erase(-1);
        b.erase(-1);
        EXPECT_EQ(a, b) << "MTP indexer row " << row;
      }
    }
    EXPECT_EQ(row, mtpLogits.shape[0]) << "rows compared";
  }

  static std::filesystem::path *dir_;
  static SafeTensorsFile *golden_;
};

std::filesystem::path *MtpHead::dir_ = nullptr;
SafeTensorsFile *MtpHead::golden_ = nullptr;

TEST_F(MtpHead, TheGoldensBelongToTheSynthesizedCheckpoint) {
  // The goldens were made from `glmc synth --preset tiny --seed 7`: if synth's output changed,
  // they must be made again (make_golden.py), not the tolerance moved.
  const nlohmann::json info =
      nlohmann::json::parse(std::ifstream(kGoldenDir / "golden.json"), nullptr, false);
  ASSERT_TRUE(info.is_object());
  for (const char *file : {"model.safetensors", "config.json"}) {
    std::ifstream in(checkpoint() / file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Sha256Digest digest = Sha256().add(bytes).finish();
    EXPECT_EQ(hexOf(digest.data(), digest.size()),
              info.value(std::string(file) + " sha256", std::string()))
        << file << " differs from the one the goldens were made from";
  }
}

TEST_F(MtpHead, MatchesTransformersOverAPromptAndGreedyDecodeSteps) {
  expectGoldenRows(planWith("--prefill 64 --decode 1x1"), "whole");
}

TEST_F(MtpHead, MatchesTransformersWhenThePromptIsPrefilledInChunks) {
  // 40 prompt tokens in chunks of 16: each chunk's last row embeds the next chunk's first token
  // (the sampling parameters' `following` word), not the chunk's draw.
  expectGoldenRows(planWith("--prefill 16 --decode 1x1"), "chunked");
}

TEST_F(MtpHead, ItsGreedyDrawsComeWithTheSampledTokensAndAPlanWithoutItIsTheSameTrunk) {
  const TinyPlan with = planWith("--prefill 64 --decode 1x1");
  const TinyPlan without = planWith("--prefill 64 --decode 1x1 --mtp off");
  const std::vector<int32_t> prompt = ints("input_ids"), greedy = ints("greedy_tokens");
  SamplingParams params;
  params.temperature = 0.0f;
  const RowSampling row{&params, static_cast<int64_t>(prompt.size())};
  const int64_t v = vocab(), last = static_cast<int64_t>(prompt.size()) - 1;
  auto argmax = [&](int64_t goldenRow) {
    const float *p = floats(tensor("mtp_logits")) + goldenRow * v;
    return static_cast<int32_t>(std::max_element(p, p + v) - p);
  };
  std::vector<std::vector<float>> trunk;
  for (const TinyPlan *plan : {&with, &without}) {
    std::unique_ptr<CpuEngine> engine = plan->engine({.tieRule = kernels::TopkTieRule::LowerIndex});
    ASSERT_NE(engine, nullptr);
    const int slot = *engine->newSequence();
    std::vector<float> logits;
    Expected<SampledToken> first = engine->prefillSample(slot, prompt, row, &logits);
    ASSERT_TRUE(first.ok()) << first.status().toString();
    EXPECT_EQ(first->id, greedy[0]);
    EXPECT_EQ(first->draft, plan == &with ? argmax(last) : -1);
    const int slots[] = {slot};
    Expected<std::vector<SampledToken>> next = engine->decodeSample(
        slots, std::span<const int32_t>(&greedy[0], 1), std::span<const RowSampling>(&row, 1));
    ASSERT_TRUE(next.ok()) << next.status().toString();
    EXPECT_EQ((*next)[0].id, greedy[1]);
    EXPECT_EQ((*next)[0].draft, plan == &with ? argmax(last + 1) : -1);
    trunk.push_back(std::move(logits));
  }
  EXPECT_EQ(trunk[0], trunk[1]) << "the MTP head changed the trunk's logits";
}

TEST_F(MtpHead, TwoRanksGuessWhatOneGuesses) {
  // The head partitioned as the trunk is (its attention by heads, its experts by rank, the shared
  // lm_head by columns): rank 0's draws and guesses over a prompt and 12 greedy steps are TP 1's.
  const std::vector<int32_t> prompt = ints("input_ids");
  SamplingParams params;
  params.temperature = 0.0f;
  const RowSampling row{&params, static_cast<int64_t>(prompt.size())};
  auto run = [&](CpuEngine &engine, std::vector<SampledToken> &out) -> Status {
    const int slot = *engine.newSequence();
    GLM_ASSIGN_OR_RETURN(SampledToken token, engine.prefillSample(slot, prompt, row));
    out.push_back(token);
    for (int step = 0; step < 12; ++step) {
      const int slots[] = {slot};
      GLM_ASSIGN_OR_RETURN(std::vector<SampledToken> next,
                           engine.decodeSample(slots, std::span<const int32_t>(&out.back().id, 1),
                                               std::span<const RowSampling>(&row, 1)));
      out.push_back(next[0]);
    }
    return Status::success();
  };
  const std::string programs = "--prefill 64 --decode 1x1";
  std::vector<SampledToken> one;
  {
    const TinyPlan plan = planWith(programs);
    std::unique_ptr<CpuEngine> engine = plan.engine();
    ASSERT_NE(engine, nullptr);
    const Status s = run(*engine, one);
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  const TinyPlan plan = planWith(programs + " --tp 2");
  LoopbackGroup group(2);
  std::vector<std::vector<SampledToken>> ranks(2);
  std::vector<Status> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<LoopbackComm> comm = group.comm(rank);
      Expected<std::unique_ptr<PlanFile>> file = PlanFile::open(plan.path());
      if (!file.ok()) {
        errors[rank] = file.status();
        group.end(errors[rank].toString());
        return;
      }
      Expected<std::unique_ptr<CpuEngine>> engine =
          CpuEngine::create(std::move(file).value(), plan.checkpoint(), {.comm = comm.get()});
      errors[rank] = engine.ok() ? run(**engine, ranks[rank]) : engine.status();
      if (!errors[rank].ok()) {
        group.end(errors[rank].toString());
      }
    });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(errors[rank].ok()) << "rank " << rank << ": " << errors[rank].toString();
  }
  ASSERT_EQ(ranks[0].size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(ranks[0][i].id, one[i].id) << "token " << i;
    EXPECT_GE(ranks[0][i].draft, 0) << "token " << i;
    EXPECT_EQ(ranks[0][i].draft, one[i].draft) << "the guess after token " << i;
  }
}

TEST_F(MtpHead, DraftingWithItChangesNoReply) {
  // The head's guesses on random weights are rarely right, so the windows are rolled back
  // often: the replies must still be the serial ones, token for token, greedy and sampled, alone
  // and batched.
  const TinyPlan plan = TinyPlan(
      "--tp 1 --max-seqs 2 --max-context 256 --prefill 32 --decode 1x1,2x1,1x4,2x2", checkpoint());
  std::vector<SequenceRequest> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = testing::promptOf(20 + 17 * i, static_cast<int32_t>(i));
    requests[i].maxTokens = 30;
    requests[i].ignoreEos = true;
    requests[i].sampling.temperature = i == 0 ? 0.0f : 0.8f;
    requests[i].sampling.seed = 5 + i;
  }
  auto serve = [&](std::vector<SequenceRequest> batch, bool draft, SchedulerStats *stats) {
    for (SequenceRequest &r : batch) {
      r.draft = draft;
    }
    return testing::serveAtOnce(plan.engine(), std::move(batch), {}, stats);
  };
  const int64_t window = plan.engine()->maxWindow(1);
  SchedulerStats stats;
  const std::vector<testing::Reply> serial = serve(requests, false, &stats);
  EXPECT_EQ(stats.specDraftTokens, 0);
  ASSERT_EQ(serial.size(), requests.size());
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_EQ(serial[i].tokens.size(), 30u);
    const std::vector<testing::Reply> alone = serve({requests[i]}, true, &stats);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0].tokens, serial[i].tokens) << "request " << i << " alone";
    EXPECT_TRUE(testing::draftedEveryRoundItCould(stats, serial[i].tokens.size(), window))
        << "request " << i;
  }
  const std::vector<testing::Reply> batched = serve(requests, true, &stats);
  ASSERT_EQ(batched.size(), serial.size());
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_EQ(batched[i].tokens, serial[i].tokens) << "request " << i << " batched";
  }
  EXPECT_GT(stats.specDraftTokens, 0);
}

} // namespace
} // namespace glm::runtime
