// The tiny fixture's plans, greedy runs and the kept-state contract for the engine tests.
#include "tests/gpu/support/TinyModel.h"

#include "tests/gpu/support/GpuTest.h"

#include <cstdlib>
#include <cstring>
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

Status resumedEqualsCold(runtime::Engine &engine, const std::vector<int32_t> &ids,
                         runtime::LogitRows rows, const std::vector<int64_t> &keptAt,
                         size_t steps) {
  const int64_t vocab = engine.vocabSize();
  // The prefill's rows of `tokens`, then `steps` greedy decode steps' rows, on `slot`.
  auto run = [&](int slot, std::span<const int32_t> tokens) -> Expected<std::vector<float>> {
    GLM_ASSIGN_OR_RETURN(std::vector<float> out, engine.prefill(slot, tokens, rows));
    std::vector<float> last(out.end() - vocab, out.end());
    for (size_t step = 0; step < steps; ++step) {
      const int32_t next = argmax(last.data(), vocab);
      const int slots[] = {slot};
      GLM_ASSIGN_OR_RETURN(last, engine.decode(slots, std::span(&next, 1)));
      out.insert(out.end(), last.begin(), last.end());
    }
    return out;
  };
  GLM_ASSIGN_OR_RETURN(const int cold, engine.newSequence());
  Expected<std::vector<float>> want = run(cold, ids);
  engine.endSequence(cold);
  GLM_RETURN_IF_ERROR(want.status().withContext("the cold run"));
  for (const int64_t kept : keptAt) {
    const std::string where = strCat("kept at ", kept, " of ", ids.size());
    GLM_ASSIGN_OR_RETURN(const int source, engine.newSequence());
    const auto head = std::span(ids).first(static_cast<size_t>(kept));
    Expected<std::vector<float>> first = engine.prefill(source, head, rows);
    Expected<int> id = first.ok() ? engine.keepState(source) : Expected<int>(first.status());
    engine.endSequence(source); // the kept state outlives its sequence
    GLM_RETURN_IF_ERROR(id.status().withContext(where));
    Expected<std::vector<float>> got =
        Expected<std::vector<float>>(internalError("no sequence to resume into"));
    if (Expected<int> resumed = engine.newSequence(); resumed.ok()) {
      const Status s = engine.resumeState(*id, *resumed);
      got = s.ok() ? run(*resumed, std::span(ids).subspan(static_cast<size_t>(kept)))
                   : Expected<std::vector<float>>(s);
      engine.endSequence(*resumed);
    }
    engine.dropState(*id);
    GLM_RETURN_IF_ERROR(got.status().withContext(where));
    // All rows: the cold prefill's rows from `kept` on; the last row only: the same row.
    const size_t skip =
        rows == runtime::LogitRows::All ? static_cast<size_t>(kept * vocab) : size_t{0};
    if (got->size() + skip != want->size()) {
      return internalError(where, ": ", got->size(), " logits, the cold run has ",
                           want->size() - skip);
    }
    const float *cold = want->data() + skip;
    for (size_t i = 0; i < got->size(); ++i) {
      if (std::memcmp(&(*got)[i], &cold[i], sizeof(float)) != 0) {
        return internalError(where, ": row ", i / static_cast<size_t>(vocab), " (of ",
                             got->size() / static_cast<size_t>(vocab), ") id ",
                             i % static_cast<size_t>(vocab), " is ", (*got)[i], ", cold ", cold[i]);
      }
    }
  }
  return Status::success();
}

} // namespace glm::testing
