// What the engine tests on the tiny fixture share: its directory, its compiled plans, a greedy run
// through any Engine, and row comparisons.
#pragma once

#include "runtime/api/SamplingParams.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace glm::testing {

/// GLM_FIXTURES_DIR: the environment's, else the build's.
std::filesystem::path fixturesDir();
/// The tiny fixture: fixturesDir() / glm53-tiny.
std::filesystem::path tinyFixture();
/// The glmc the tests run: GLM_GLMC, else the build's.
std::string glmcPath();

/// Compiles the tiny fixture (or `model`, a checkpoint of it) with glmc `options` (--target, --tp,
/// --precision, programs) and --max-seqs 2 --max-context 2048 where `options` gives neither, and
/// opens the plan. Where glmc cannot run (the compiler links LLVM, which a GPU machine may lack),
/// GLM_TEST_PLANS names a directory of plans compiled elsewhere with the same options,
/// `name`.glmp each (scripts/gpu-bundle.sh makes them).
Expected<std::unique_ptr<runtime::PlanFile>> compileTiny(const std::string &name,
                                                         const std::string &options,
                                                         const std::filesystem::path &model = {});

int32_t argmax(const float *row, int64_t vocab);
/// ‖a − b‖₂ / ‖b‖₂ over n values.
double rowError(const float *a, const float *b, int64_t n);

struct GreedyRun {
  std::vector<float> logits;   // every prefill row, then every decode step's row
  std::vector<int32_t> tokens; // the greedy tokens: the last prefill row's, then each step's
};
/// Prefills `ids` into a new sequence of `engine` (in calls ending at `chunkEnds`, one call when
/// empty), then decodes `steps` greedy tokens, and ends the sequence.
Expected<GreedyRun> greedyRun(runtime::Engine &engine, const std::vector<int32_t> &ids,
                              size_t steps, std::vector<size_t> chunkEnds = {});

/// Issue 21's exactness contract on any engine: `ids` prefilled cold (in one call, `rows` of
/// logits) and then `steps` greedy decode steps; then, for each length in `keptAt`, a sequence
/// prefilled with the first that many tokens, its state kept and the sequence ended, a new one
/// resumed from the kept state and prefilled with the rest, and the same steps. An error names the
/// first kept length whose rows (the prefill's after it, then the steps') differ from the cold ones
/// in any bit, and where.
Status resumedEqualsCold(runtime::Engine &engine, const std::vector<int32_t> &ids,
                         runtime::LogitRows rows, const std::vector<int64_t> &keptAt,
                         size_t steps = 3);

/// Issue 19's exactness contract on any engine: each of `prompts` prefilled alone and decoded
/// serially (one row a step, `rounds * rows + 1` steps) is the reference. Then all of them are
/// prefilled again and decoded in `rounds` verify steps, one window of `rows` rows per sequence
/// each step, its drafts the reference's tokens (on odd rounds one of them wrong, so that the
/// window is rolled back and its tokens lead the next), and last in one serial step. An error
/// names the first token drawn in a window that differs from the reference's in id or in any
/// bit of its logprobs, or the first logit of that last step that differs from the reference's
/// at the same position.
Status windowsEqualSerial(runtime::Engine &engine, const std::vector<std::vector<int32_t>> &prompts,
                          int64_t rows, const runtime::SamplingParams &sampling, size_t rounds);

} // namespace glm::testing
