// The on-device sampler against the reference's sampleRef (kernels/sample/sample.h): the same
// token for every row, greedy and sampled, and the same logprobs, over many seeds, positions and
// parameter mixes, with and without a mask, logit_bias and penalties, on random logits with and
// without exact ties, at GLM-5.3-Flash's vocabulary (154,880), the tiny model's (1024) and odd
// sizes.
#include "kernels/sample/sample.h"
#include "kernels/sample/sample_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <bit>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

namespace glm::testing {
namespace {

using kernels::SampleWords;

const char *kSource = R"(#include "kernels/sample/sample.cuh")";
constexpr int64_t kOut = 1 + kernels::kSampleTopLogprobs;

SampleWords params(float temperature, float topP, int32_t topK, float minP) {
  SampleWords p{};
  p.temperature = temperature;
  p.topP = topP;
  p.topK = topK;
  p.minP = minP;
  p.logprobs = -1;
  return p;
}

// Parameter mixes: pure temperature (every token kept), top-k alone (small, one chunk, more than a
// chunk), top-p alone (cuts early and late), min-p alone, all three, and degenerate ones.
const SampleWords kMixes[] = {
    params(1.0f, 1.0f, 0, 0.0f),     params(0.7f, 0.9f, 50, 0.0f),    params(1.0f, 0.95f, 0, 0.0f),
    params(1.3f, 1.0f, 0, 0.05f),    params(0.5f, 0.5f, 5, 0.1f),     params(1.0f, 1.0f, 1, 0.0f),
    params(1.0f, 0.99f, 4096, 0.0f), params(1.0f, 1.0f, 5000, 0.0f),  params(2.0f, 0.8f, 0, 0.01f),
    params(0.9f, 1.0f, 10, 0.0f),    params(1.0f, 1e-6f, 0, 0.0f),    params(1.0f, 1.0f, 0, 1.0f),
    params(0.6f, 0.3f, 0, 0.0f),     params(1.1f, 0.999f, 300, 0.02f)};

/// What a sequence brings besides its mix: penalties over tokens it has seen, a logit_bias, a
/// mask, logprobs.
enum Extra : int {
  kPlain = 0,
  kPenalties = 1,
  kBias = 2,
  kMask = 4,
  kLogprobs = 8,
  kAll = 15,
};

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
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, {"glm::kernels::sampleProcessKernel",
                                                              "glm::kernels::sampleKernel"}));
  }

  /// One step's sampler inputs: `rows` rows of `vocab` logits, rowsPerSequence rows a sequence,
  /// sequence b in slot b.
  struct Step {
    int64_t vocab = 0;
    int32_t rowsPerSequence = 1;
    std::vector<float> logits;
    std::vector<int32_t> positions;
    std::vector<SampleWords> params;
    std::vector<int32_t> bias;    // [batch, 600]
    std::vector<uint32_t> mask;   // [batch, maskWords]
    std::vector<uint32_t> counts; // [batch, vocab]
    bool greedy = false;
    int64_t rows() const { return static_cast<int64_t>(positions.size()); }
    int64_t batch() const { return static_cast<int64_t>(params.size()); }
  };

  /// Runs `step` on the device (both kernels, as the plan launches them) and returns ids and
  /// logprobs, [rows, 21] each.
  void run(const Step &step, std::vector<int32_t> &ids, std::vector<float> &logprobs) {
    const int64_t rows = step.rows();
    std::vector<int32_t> slots(static_cast<size_t>(step.batch()));
    std::iota(slots.begin(), slots.end(), 0);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dl, toDevice(step.logits));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dpos, toDevice(step.positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dslots, toDevice(slots));
    std::vector<int32_t> words(step.params.size() * kernels::kSampleParamWords);
    std::memcpy(words.data(), step.params.data(), words.size() * 4);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dparams, toDevice(words));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dbias, toDevice(step.bias));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dmask, toDevice(step.mask));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dcounts, toDevice(step.counts));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory processed, poisoned(rows * step.vocab * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, poisoned(rows * kOut * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dlogprobs, poisoned(rows * kOut * 4));
    kernels::SampleGpuArgs args{};
    args.logits = reinterpret_cast<const float *>(dl.ptr());
    args.ctx.positions = reinterpret_cast<const int32_t *>(dpos.ptr());
    args.ctx.slots = reinterpret_cast<const int32_t *>(dslots.ptr());
    args.ctx.rowsPerSequence = step.rowsPerSequence;
    args.params = reinterpret_cast<const SampleWords *>(dparams.ptr());
    args.bias = reinterpret_cast<const int32_t *>(dbias.ptr());
    args.mask = reinterpret_cast<const uint32_t *>(dmask.ptr());
    args.counts = reinterpret_cast<const uint32_t *>(dcounts.ptr());
    args.processed = reinterpret_cast<float *>(processed.ptr());
    args.ids = reinterpret_cast<int32_t *>(dids.ptr());
    args.logprobs = reinterpret_cast<float *>(dlogprobs.ptr());
    args.vocab = step.vocab;
    args.greedy = step.greedy ? 1 : 0;
    GLM_ASSERT_OK(
        launchAndWait(module_->function(0), kernels::sampleProcessLaunch(rows, step.vocab), args));
    GLM_ASSERT_OK(launchAndWait(module_->function(1), kernels::sampleLaunch(rows), args));
    GLM_ASSERT_OK_AND_ASSIGN(ids, fromDevice<int32_t>(dids, rows * kOut));
    GLM_ASSERT_OK_AND_ASSIGN(logprobs, fromDevice<float>(dlogprobs, rows * kOut));
  }

  /// The reference's ids and logprobs for `step`.
  static void reference(const Step &step, std::vector<int32_t> &ids, std::vector<float> &logprobs) {
    std::vector<int32_t> slots(static_cast<size_t>(step.batch()));
    std::iota(slots.begin(), slots.end(), 0);
    ids.assign(static_cast<size_t>(step.rows() * kOut), 0);
    logprobs.assign(ids.size(), 0.0f);
    ASSERT_TRUE(kernels::sampleRef({.logits = step.logits.data(),
                                    .positions = step.positions.data(),
                                    .slots = slots.data(),
                                    .params = step.params.data(),
                                    .bias = step.bias.data(),
                                    .mask = step.mask.data(),
                                    .counts = step.counts.data(),
                                    .ids = ids.data(),
                                    .logprobs = logprobs.data(),
                                    .rows = step.rows(),
                                    .vocab = step.vocab,
                                    .rowsPerSequence = step.rowsPerSequence,
                                    .greedy = step.greedy})
                    .ok());
  }

  /// Runs `step` on both and expects the same ids and logprobs (within an f32 ulp or two: the
  /// log-sum-exp's order differs, sample.h). Returns how many rows were compared.
  int compare(const Step &step, const std::string &what) {
    std::vector<int32_t> ids, refIds;
    std::vector<float> logprobs, refLogprobs;
    run(step, ids, logprobs);
    reference(step, refIds, refLogprobs);
    if (ids.size() != refIds.size()) {
      ADD_FAILURE() << "no output";
      return 0;
    }
    for (int64_t r = 0; r < step.rows(); ++r) {
      for (int64_t j = 0; j < kOut; ++j) {
        const size_t at = static_cast<size_t>(r * kOut + j);
        EXPECT_EQ(ids[at], refIds[at]) << what << " row " << r << " entry " << j << " position "
                                       << step.positions[static_cast<size_t>(r)];
        // Equal (the infinities of masked tokens), or within the double log's last bits.
        if (logprobs[at] != refLogprobs[at]) {
          EXPECT_NEAR(logprobs[at], refLogprobs[at],
                      2e-6f * std::max(1.0f, std::abs(refLogprobs[at])))
              << what << " row " << r << " entry " << j;
        }
      }
    }
    return static_cast<int>(step.rows());
  }

  /// `sequences` x `rowsPerSequence` rows of `kind` logits under `mix` with `extra` (each sequence
  /// its own seed, each row its own position; with `padding`, the last row of the batch is
  /// padding), compared against the reference.
  int check(SplitMix64 &rng, const LogitKind &kind, int64_t vocab, const SampleWords &mix,
            int sequences, int rowsPerSequence, bool padding, int extra = kPlain,
            bool greedy = false) {
    Step step;
    step.vocab = vocab;
    step.rowsPerSequence = rowsPerSequence;
    step.greedy = greedy;
    const int64_t rows = static_cast<int64_t>(sequences) * rowsPerSequence;
    step.logits.resize(static_cast<size_t>(rows * vocab));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < vocab; ++i) {
        step.logits[static_cast<size_t>(r * vocab + i)] = kind.make(rng, i);
      }
    }
    const int64_t words = kernels::maskWords(vocab);
    step.params.assign(static_cast<size_t>(sequences), mix);
    step.bias.assign(static_cast<size_t>(sequences) * 2 * kernels::kSampleBiasEntries, 0);
    step.mask.assign(static_cast<size_t>(sequences * words), 0);
    step.counts.assign(static_cast<size_t>(sequences * vocab), 0);
    for (int b = 0; b < sequences; ++b) {
      SampleWords &p = step.params[static_cast<size_t>(b)];
      const uint64_t seed = rng.next();
      p.seedLo = static_cast<uint32_t>(seed);
      p.seedHi = static_cast<uint32_t>(seed >> 32);
      if (extra & kPenalties) {
        p.presence = 0.7f;
        p.frequency = 0.4f;
        p.repetition = 1.25f;
        for (int k = 0; k < 300; ++k) {
          uint32_t &c = step.counts[static_cast<size_t>(b * vocab) + rng.below(vocab)];
          c = k % 3 == 0 ? (c | kernels::kPromptSeenBit) : c + 1;
        }
      }
      if (extra & kBias) {
        // Distinct ids, ascending, some raising a token to the top, some burying one.
        const int entries = static_cast<int>(std::min<int64_t>(vocab, kernels::kSampleBiasEntries));
        p.biasCount = entries;
        for (int e = 0; e < entries; ++e) {
          int32_t *entry =
              &step.bias[static_cast<size_t>(b) * 2 * kernels::kSampleBiasEntries + 2 * e];
          entry[0] = static_cast<int32_t>(e * vocab / entries);
          entry[1] = std::bit_cast<int32_t>(e % 5 == 0 ? 8.0f : (e % 5 == 1 ? -100.0f : 0.5f));
        }
      }
      if (extra & kMask) {
        p.hasMask = 1;
        for (int64_t i = 0; i < vocab; ++i) {
          if (rng.below(4) != 0) {
            step.mask[static_cast<size_t>(b * words + i / 32)] |= 1u << (i % 32);
          }
        }
      }
      if (extra & kLogprobs) {
        p.logprobs = static_cast<int32_t>(rng.below(kernels::kSampleTopLogprobs + 1));
      }
    }
    step.positions.resize(static_cast<size_t>(rows));
    for (int b = 0; b < sequences; ++b) {
      const int32_t start = static_cast<int32_t>(rng.below(100000));
      for (int j = 0; j < rowsPerSequence; ++j) {
        step.positions[static_cast<size_t>(b * rowsPerSequence + j)] = start + j;
      }
    }
    if (padding) {
      step.positions[static_cast<size_t>(rows - 1)] = -1;
    }
    return compare(step, std::string(kind.name) + " vocab " + std::to_string(vocab) + " T " +
                             std::to_string(mix.temperature) + " top_p " +
                             std::to_string(mix.topP) + " top_k " + std::to_string(mix.topK) +
                             " min_p " + std::to_string(mix.minP) + " extra " +
                             std::to_string(extra));
  }

  std::unique_ptr<cuda::Module> module_;
};

// Flash's vocabulary: every logit kind under every mix, 3 sequences x 2 rows, the last padding;
// plain, and with everything applied.
TEST_F(SampleGpu, FlashVocabularyMatchesTheReference) {
  SplitMix64 rng(701);
  for (const LogitKind &kind : kKinds) {
    for (const SampleWords &mix : kMixes) {
      check(rng, kind, 154880, mix, 3, 2, true);
      check(rng, kind, 154880, mix, 3, 2, true, kAll);
    }
  }
}

// Each extra on its own and together, greedy and sampled, at Flash's vocabulary.
TEST_F(SampleGpu, MasksBiasesPenaltiesAndLogprobsMatchTheReference) {
  SplitMix64 rng(706);
  for (int extra = 1; extra <= kAll; ++extra) {
    for (const SampleWords &mix : {params(0.0f, 1.0f, 0, 0.0f), params(1.0f, 0.95f, 0, 0.0f),
                                   params(0.7f, 0.9f, 50, 0.0f)}) {
      check(rng, kKinds[0], 154880, mix, 4, 1, false, extra);
      check(rng, kKinds[2], 1024, mix, 4, 1, false, extra);
    }
  }
}

// Small and odd vocabularies (1024: the tiny model; 1001 and 4099: no 16-byte rows, and just over
// one chunk; 5: fewer tokens than top_k), many seeds and positions.
TEST_F(SampleGpu, SmallVocabulariesMatchTheReference) {
  SplitMix64 rng(702);
  for (int64_t vocab : {1024, 1001, 4099, 5}) {
    for (const LogitKind &kind : kKinds) {
      for (const SampleWords &mix : kMixes) {
        check(rng, kind, vocab, mix, 8, 4, true);
        check(rng, kind, vocab, mix, 2, 4, true, kAll);
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
      check(rng, kind, vocab, params(1.0f, 0.9f, 40, 0.0f), 4, 1, false, kPlain, /*greedy=*/true);
    }
  }
  // NaN logits never win, at id 0 either (argmax's rule).
  Step step;
  step.vocab = 5;
  step.rowsPerSequence = 2;
  step.logits = {1.0f, NAN, 3.0f, 3.0f, NAN, NAN, 2.0f, 0.5f, 9.0f, 1.0f};
  step.positions = {0, 0};
  step.params = {params(0.0f, 1.0f, 0, 0.0f)};
  step.bias.assign(2 * kernels::kSampleBiasEntries, 0);
  step.mask.assign(1, 0);
  step.counts.assign(5, 0);
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  run(step, ids, logprobs);
  ASSERT_EQ(ids.size(), static_cast<size_t>(2 * kOut));
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[kOut], 3);
}

// Exact boundaries: uniform rows put the top-p cut exactly on a partial sum (mass 0.5 after 4 of 8
// equal tokens stops the walk there) and min_p 1 keeps exactly the tokens equal to the maximum.
TEST_F(SampleGpu, ExactBoundariesResolveAsTheReference) {
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

// Many draws on one row: each position is its own draw, and the picks follow the reference's
// distribution token for token.
TEST_F(SampleGpu, EveryPositionIsItsOwnDraw) {
  SplitMix64 rng(705);
  Step step;
  step.vocab = 1024;
  const int64_t rows = 512;
  std::vector<float> row(static_cast<size_t>(step.vocab));
  for (float &v : row) {
    v = rng.normal() * 1.5f;
  }
  for (int64_t r = 0; r < rows; ++r) {
    step.logits.insert(step.logits.end(), row.begin(), row.end());
  }
  step.positions.resize(rows);
  std::iota(step.positions.begin(), step.positions.end(), 0);
  step.rowsPerSequence = static_cast<int32_t>(rows);
  SampleWords p = params(1.0f, 0.9f, 0, 0.0f);
  p.seedLo = 0x89ABCDEFu;
  p.seedHi = 0x01234567u;
  step.params = {p};
  step.bias.assign(2 * kernels::kSampleBiasEntries, 0);
  step.mask.assign(static_cast<size_t>(kernels::maskWords(step.vocab)), 0);
  step.counts.assign(static_cast<size_t>(step.vocab), 0);
  compare(step, "one row, 512 positions");
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  run(step, ids, logprobs);
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < rows; ++r) {
    distinct.insert(ids[static_cast<size_t>(r * kOut)]);
  }
  EXPECT_GT(distinct.size(), 10u);
}

} // namespace
} // namespace glm::testing
