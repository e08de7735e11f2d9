// count_tokens on the device against countTokensRef: the same counts after steps that repeat
// tokens within a sequence (the atomic updates), mix prompt and generated rows, and hold padding.
#include "kernels/count_tokens/count_tokens.h"
#include "kernels/count_tokens/count_tokens_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <numeric>

namespace glm::testing {
namespace {

TEST(CountTokensGpu, MatchesTheReference) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<cuda::Module> module,
                           compileForGpu(R"(#include "kernels/count_tokens/count_tokens.cuh")",
                                         {"glm::kernels::countTokensKernel"}));
  SplitMix64 rng(811);
  const int64_t vocab = 154880, batch = 4, perSequence = 512;
  for (int step = 0; step < 3; ++step) {
    const int64_t rows = batch * perSequence;
    std::vector<int32_t> tokens(rows), positions(rows), slots = {3, 0, 2, -1};
    std::vector<kernels::SampleWords> params(batch, kernels::SampleWords{});
    for (int64_t b = 0; b < batch; ++b) {
      params[b].promptTokens = static_cast<int32_t>(rng.below(2 * perSequence));
      for (int64_t j = 0; j < perSequence; ++j) {
        // Few distinct tokens, so that rows of a sequence collide; every 50th row padding.
        tokens[b * perSequence + j] = static_cast<int32_t>(rng.below(64) * 997 % vocab);
        positions[b * perSequence + j] = j % 50 == 49 ? -1 : static_cast<int32_t>(j);
      }
    }
    std::vector<uint32_t> counts(batch * vocab, 0);
    for (uint32_t &c : counts) {
      c = rng.below(8) == 0 ? static_cast<uint32_t>(rng.below(3)) : 0u;
    }
    std::vector<uint32_t> expected = counts;
    ASSERT_TRUE(kernels::countTokensRef({.tokens = tokens.data(),
                                         .positions = positions.data(),
                                         .slots = slots.data(),
                                         .params = params.data(),
                                         .counts = expected.data(),
                                         .rows = rows,
                                         .rowsPerSequence = perSequence,
                                         .vocab = vocab})
                    .ok());
    std::vector<int32_t> words(params.size() * kernels::kSampleParamWords);
    std::memcpy(words.data(), params.data(), words.size() * 4);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dtokens, toDevice(tokens));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dpositions, toDevice(positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dslots, toDevice(slots));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dparams, toDevice(words));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dcounts, toDevice(counts));
    kernels::CountTokensGpuArgs args{};
    args.tokens = reinterpret_cast<const int32_t *>(dtokens.ptr());
    args.ctx.positions = reinterpret_cast<const int32_t *>(dpositions.ptr());
    args.ctx.slots = reinterpret_cast<const int32_t *>(dslots.ptr());
    args.ctx.rowsPerSequence = static_cast<int32_t>(perSequence);
    args.params = reinterpret_cast<const kernels::SampleWords *>(dparams.ptr());
    args.counts = reinterpret_cast<uint32_t *>(dcounts.ptr());
    args.rows = rows;
    args.vocab = vocab;
    GLM_ASSERT_OK(launchAndWait(module->function(0), kernels::countTokensLaunch(rows), args));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint32_t> got,
                             fromDevice<uint32_t>(dcounts, counts.size()));
    EXPECT_EQ(got, expected) << "step " << step;
  }
}

} // namespace
} // namespace glm::testing
