// The tiny fixture's plans and greedy runs for the engine tests.
#include "tests/gpu/support/TinyModel.h"

#include "tests/gpu/support/GpuTest.h"

#include <cstdlib>
#include <span>
#include <unistd.h>

namespace glm::testing {

std::filesystem::path fixturesDir() {
  const char *env = std::getenv("GLM_FIXTURES_DIR");
  return env != nullptr ? env : GLM_FIXTURES_DIR;
}

std::filesystem::path tinyFixture() { return fixturesDir() / "glm53-tiny"; }

std::string glmcPath() {
  const char *env = std::getenv("GLM_GLMC");
  return env != nullptr ? env : GLM_GLMC_PATH;
}

Expected<std::unique_ptr<runtime::PlanFile>> compileTiny(const std::string &name,
                                                         const std::string &options,
                                                         const std::filesystem::path &model) {
  if (const char *dir = std::getenv("GLM_TEST_PLANS")) {
    return runtime::PlanFile::open(std::filesystem::path(dir) / (name + ".glmp"));
  }
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("tiny_plan_" + std::to_string(::getpid()) + "_" + name + ".glmp");
  const std::string command = glmcPath() + " compile " +
                              (model.empty() ? tinyFixture() : model).string() + " -o " +
                              out.string() + " --max-seqs 2 --max-context 2048 " + options;
  if (std::system(command.c_str()) != 0) {
    return internalError("failed: ", command);
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(out);
  std::filesystem::remove(out);
  return plan;
}

int32_t argmax(const float *row, int64_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) {
      best = i;
    }
  }
  return best;
}

double rowError(const float *a, const float *b, int64_t n) {
  return relativeError(std::vector<float>(a, a + n), std::vector<float>(b, b + n));
}

Expected<GreedyRun> greedyRun(runtime::Engine &engine, const std::vector<int32_t> &ids,
                              size_t steps, std::vector<size_t> chunkEnds) {
  GLM_ASSIGN_OR_RETURN(int slot, engine.newSequence());
  if (chunkEnds.empty()) {
    chunkEnds = {ids.size()};
  }
  GreedyRun run;
  auto finish = [&](Status s) {
    engine.endSequence(slot);
    return s;
  };
  size_t start = 0;
  for (size_t end : chunkEnds) {
    Expected<std::vector<float>> part =
        engine.prefill(slot, std::span(ids).subspan(start, end - start));
    if (!part.ok()) {
      return finish(part.status());
    }
    run.logits.insert(run.logits.end(), part->begin(), part->end());
    start = end;
  }
  const int64_t vocab = engine.vocabSize();
  run.tokens.push_back(argmax(run.logits.data() + (ids.size() - 1) * vocab, vocab));
  for (size_t i = 0; i < steps; ++i) {
    const int slots[] = {slot};
    Expected<std::vector<float>> row = engine.decode(slots, std::span(&run.tokens.back(), 1));
    if (!row.ok()) {
      return finish(row.status());
    }
    run.logits.insert(run.logits.end(), row->begin(), row->end());
    run.tokens.push_back(argmax(row->data(), vocab));
  }
  GLM_RETURN_IF_ERROR(finish(Status::success()));
  return run;
}

} // namespace glm::testing
