// The on-device sampler against runtime/engine/Sampler.cpp's sampleToken: the same token for every
// row, greedy and sampled, over many seeds, positions and parameter mixes, on random logits with
// and without exact ties, at GLM-5.3-Flash's vocabulary (154,880), the tiny model's (1024) and
// odd sizes.
#include "kernels/sample/sample.h"
#include "kernels/sample/sample_gpu.h"
#include "runtime/engine/Sampler.h"
#include "tests/gpu/support/GpuTest.h"

#include <bit>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

namespace glm::testing {
namespace {

using runtime::SamplingParams;

const char *kSource = R"(#include "kernels/sample/sample.cuh")";

/// The SamplingParams io slot's 8 words for one sequence.
void pack(const SamplingParams &p, int32_t *words) {
  words[0] = std::bit_cast<int32_t>(p.temperature);
  words[1] = std::bit_cast<int32_t>(p.topP);
  words[2] = std::bit_cast<int32_t>(p.minP);
  words[3] = p.topK;
  words[4] = static_cast<int32_t>(static_cast<uint32_t>(p.seed));
  words[5] = static_cast<int32_t>(static_cast<uint32_t>(p.seed >> 32));
  words[6] = 0;
  words[7] = 0;
}

SamplingParams params(float temperature, float topP, int32_t topK, float minP) {
  SamplingParams p;
  p.temperature = temperature;
  p.topP = topP;
  p.topK = topK;
  p.minP = minP;
  return p;
}

// Parameter mixes: pure temperature (every token kept), top-k alone (small, one chunk, more than a
// chunk), top-p alone (cuts early and late), min-p alone, all three, and degenerate ones.
const SamplingParams kMixes[] = {
    params(1.0f, 1.0f, 0, 0.0f),     params(0.7f, 0.9f, 50, 0.0f),    params(1.0f, 0.95f, 0, 0.0f),
    params(1.3f, 1.0f, 0, 0.05f),    params(0.5f, 0.5f, 5, 0.1f),     params(1.0f, 1.0f, 1, 0.0f),
    params(1.0f, 0.99f, 4096, 0.0f), params(1.0f, 1.0f, 5000, 0.0f),  params(2.0f, 0.8f, 0, 0.01f),
    params(0.9f, 1.0f, 10, 0.0f),    params(1.0f, 1e-6f, 0, 0.0f),    params(1.0f, 1.0f, 0, 1.0f),
    params(0.6f, 0.3f, 0, 0.0f),     params(1.1f, 0.999f, 300, 0.02f)};

using Generator = std::function<float(SplitMix64 &, int64_t)>;

struct LogitKind {
  const char *name;
  Generator make;
};
// Continuous logits at several spreads; quantised ones (steps of 0.5: many exact ties at every
// cut); one dominant token; nearly flat ones (the walk goes deep into the order); signed zeros.
const LogitKind kKinds[] = {
    {"normal", [](SplitMix64 &rng, int64_t) { return rng.normal() * 2.0f; }},
    {"wide", [](SplitMix64 &rng, int64_t) { return rng.normal() * 6.0f; }},
    {"quantised", [](SplitMix64 &rng, int64_t) { return std::round(rng.normal() * 3.0f) * 0.5f; }},
    {"peaked",
     [](SplitMix64 &rng, int64_t i) { return rng.normal() + (i % 7919 == 17 ? 12.0f : 0.0f); }},
    {"flat", [](SplitMix64 &rng, int64_t) { return rng.normal() * 0.05f; }},
    {"zeros", [](SplitMix64 &rng, int64_t) {
       const uint64_t r = rng.below(3);
       return r == 0 ? 0.0f : (r == 1 ? -0.0f : -1.0f);
     }}};

class SampleGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, {"glm::kernels::sampleKernel"}));
  }

  /// Samples `rows` rows of `logits` (rowsPerSequence rows per sequence, sequence b's parameters
  /// perSequence[b]) on the device.
  void run(const std::vector<float> &logits, int64_t vocab, const std::vector<int32_t> &positions,
           const std::vector<SamplingParams> &perSequence, int32_t rowsPerSequence, bool greedy,
           std::vector<int32_t> &out) {
    const int64_t rows = static_cast<int64_t>(positions.size());
    std::vector<int32_t> words(perSequence.size() * 8);
    for (size_t b = 0; b < perSequence.size(); ++b) {
      pack(perSequence[b], words.data() + b * 8);
    }
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dl, toDevice(logits));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dp, toDevice(positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, toDevice(words));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(rows * 4));
    kernels::StepContext ctx{};
    ctx.positions = reinterpret_cast<const int32_t *>(dp.ptr());
    ctx.rowsPerSequence = rowsPerSequence;
    const kernels::SampleGpuArgs args{reinterpret_cast<const float *>(dl.ptr()),
                                      reinterpret_cast<const int32_t *>(dw.ptr()),
                                      ctx,
                                      reinterpret_cast<int32_t *>(dout.ptr()),
                                      rows,
                                      vocab,
                                      greedy ? 1 : 0};
    GLM_ASSERT_OK(launchAndWait(module_->function(0), kernels::sampleLaunch(rows), args));
    GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<int32_t>(dout, rows));
  }

  /// Runs `sequences` x `rowsPerSequence` rows of `kind` logits under `mix` (each sequence its own
  /// seed, each row its own position; with `padding`, the last row of the batch is padding) and
  /// checks every row against sampleToken. Returns how many rows were compared.
  int check(SplitMix64 &rng, const LogitKind &kind, int64_t vocab, const SamplingParams &mix,
            int sequences, int rowsPerSequence, bool padding, bool greedy = false) {
    const int64_t rows = static_cast<int64_t>(sequences) * rowsPerSequence;
    std::vector<float> logits(rows * vocab);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < vocab; ++i) {
        logits[r * vocab + i] = kind.make(rng, i);
      }
    }
    std::vector<SamplingParams> perSequence(sequences, mix);
    for (SamplingParams &p : perSequence) {
      p.seed = rng.next();
    }
    std::vector<int32_t> positions(rows);
    for (int b = 0; b < sequences; ++b) {
      const int32_t start = static_cast<int32_t>(rng.below(100000));
      for (int j = 0; j < rowsPerSequence; ++j) {
        positions[b * rowsPerSequence + j] = start + j;
      }
    }
    if (padding) {
      positions[rows - 1] = -1;
    }
    std::vector<int32_t> out;
    run(logits, vocab, positions, perSequence, rowsPerSequence, greedy, out);
    if (out.size() != static_cast<size_t>(rows)) {
      ADD_FAILURE() << "no output";
      return 0;
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (positions[r] < 0) {
        EXPECT_EQ(out[r], 0) << "padding row " << r;
        continue;
      }
      SamplingParams p = perSequence[r / rowsPerSequence];
      if (greedy) {
        p.temperature = 0.0f;
      }
      const int32_t expected = runtime::sampleToken(
          std::span<const float>(logits.data() + r * vocab, vocab), p, positions[r]);
      EXPECT_EQ(out[r], expected) << kind.name << " vocab " << vocab << " row " << r << " T "
                                  << p.temperature << " top_p " << p.topP << " top_k " << p.topK
                                  << " min_p " << p.minP << " seed " << p.seed << " position "
                                  << positions[r];
    }
    return static_cast<int>(rows);
  }

  std::unique_ptr<cuda::Module> module_;
};

// Flash's vocabulary: every logit kind under every mix, 3 sequences x 2 rows, the last padding.
TEST_F(SampleGpu, FlashVocabularyMatchesSampleToken) {
  SplitMix64 rng(701);
  for (const LogitKind &kind : kKinds) {
    for (const SamplingParams &mix : kMixes) {
      check(rng, kind, 154880, mix, 3, 2, true);
    }
  }
}

// Small and odd vocabularies (1024: the tiny model; 1001 and 4099: no 16-byte rows, and just over
// one chunk; 5: fewer tokens than top_k), many seeds and positions.
TEST_F(SampleGpu, SmallVocabulariesMatchSampleToken) {
  SplitMix64 rng(702);
  for (int64_t vocab : {1024, 1001, 4099, 5}) {
    for (const LogitKind &kind : kKinds) {
      for (const SamplingParams &mix : kMixes) {
        check(rng, kind, vocab, mix, 8, 4, true);
      }
    }
  }
}

// Greedy: the op's greedy attribute and temperature 0 both take the lowest id of the maximum,
// including across exact ties.
TEST_F(SampleGpu, GreedyTakesTheLowestIdOfTheMaximum) {
  SplitMix64 rng(703);
  for (int64_t vocab : {154880, 1024, 1001}) {
    for (const LogitKind &kind : kKinds) {
      check(rng, kind, vocab, params(0.0f, 1.0f, 0, 0.0f), 4, 1, false);
      check(rng, kind, vocab, params(1.0f, 0.9f, 40, 0.0f), 4, 1, false, /*greedy=*/true);
    }
  }
  // NaN logits never win; a NaN at id 0 keeps 0, as sampleToken's loop does.
  std::vector<float> logits = {1.0f, NAN, 3.0f, 3.0f, NAN, NAN, 2.0f, 0.5f, 9.0f, 1.0f};
  std::vector<int32_t> out;
  run(logits, 5, {0, 0}, {params(0.0f, 1.0f, 0, 0.0f)}, 2, false, out);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 0}));
}

// Exact boundaries: uniform rows put the top-p cut exactly on a partial sum (mass 0.5 after 4 of 8
// equal tokens stops the walk there) and min_p 1 keeps exactly the tokens equal to the maximum.
TEST_F(SampleGpu, ExactBoundariesResolveAsSampleToken) {
  SplitMix64 rng(704);
  const LogitKind uniform{"uniform", [](SplitMix64 &, int64_t) { return 0.25f; }};
  const LogitKind twoLevels{
      "two levels", [](SplitMix64 &rng, int64_t) { return rng.below(4) == 0 ? 1.0f : 0.0f; }};
  for (int64_t vocab : {8, 64, 1024, 154880}) {
    for (float topP : {0.5f, 0.25f, 0.75f, 1.0f}) {
      check(rng, uniform, vocab, params(1.0f, topP, 0, 0.0f), 16, 1, false);
      check(rng, twoLevels, vocab, params(1.0f, topP, 0, 0.0f), 16, 1, false);
    }
    check(rng, twoLevels, vocab, params(0.8f, 1.0f, 0, 1.0f), 16, 1, false);
    check(rng, twoLevels, vocab, params(0.8f, 1.0f, 3, 0.0f), 16, 1, false);
  }
}

// Many draws on one row: each position is its own draw, and the picks follow sampleToken's
// distribution token for token.
TEST_F(SampleGpu, EveryPositionIsItsOwnDraw) {
  SplitMix64 rng(705);
  const int64_t vocab = 1024, rows = 512;
  std::vector<float> row(vocab);
  for (float &v : row) {
    v = rng.normal() * 1.5f;
  }
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<int32_t> positions(rows);
  std::iota(positions.begin(), positions.end(), 0);
  SamplingParams p = params(1.0f, 0.9f, 0, 0.0f);
  p.seed = 0x0123456789ABCDEFull;
  std::vector<int32_t> out;
  run(logits, vocab, positions, {p}, static_cast<int32_t>(rows), false, out);
  ASSERT_EQ(out.size(), static_cast<size_t>(rows));
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(out[r], runtime::sampleToken(row, p, r)) << "position " << r;
    distinct.insert(out[r]);
  }
  EXPECT_GT(distinct.size(), 10u);
}

} // namespace
} // namespace glm::testing
