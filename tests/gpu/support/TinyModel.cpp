// The tiny fixture's plans, greedy runs and the kept-state and verify-window contracts for the
// engine tests.
#include "tests/gpu/support/TinyModel.h"

#include "tests/gpu/support/GpuTest.h"

#include <algorithm>
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
  // --max-seqs 2 --max-context 2048 unless `options` says otherwise.
  std::string defaults;
  for (const char *option : {"--max-seqs 2", "--max-context 2048"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find(' '));
    if (options.find(name + " ") == std::string::npos) {
      defaults += std::string(option) + " ";
    }
  }
  const std::string command = glmcPath() + " compile " +
                              (model.empty() ? tinyFixture() : model).string() + " -o " +
                              out.string() + " " + defaults + options;
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

namespace {

using runtime::SampledToken;

bool sameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

/// Where a window's draw differs from the serial one's in any bit: its id, its logprob, its top
/// alternatives, the MTP head's guess after it. Empty when they are the same.
std::string drawDifference(const SampledToken &got, const SampledToken &want) {
  if (got.draft != want.draft) {
    return strCat("drew ", got.id, " guessing ", got.draft, " next, serially ", want.draft);
  }
  if (got.id != want.id || !sameBits(got.logprob, want.logprob)) {
    return strCat("drew ", got.id, " (logprob ", got.logprob, "), serially ", want.id, " (logprob ",
                  want.logprob, ")");
  }
  if (got.top.size() != want.top.size()) {
    return strCat(got.top.size(), " top logprobs, serially ", want.top.size());
  }
  for (size_t k = 0; k < got.top.size(); ++k) {
    if (got.top[k].id != want.top[k].id || !sameBits(got.top[k].logprob, want.top[k].logprob)) {
      return strCat("top logprob ", k, " is ", got.top[k].id, " at ", got.top[k].logprob,
                    ", serially ", want.top[k].id, " at ", want.top[k].logprob);
    }
  }
  return {};
}

/// A sequence's serial reference: every token it draws after its prompt (the prefill's, then one
/// a step) and the logits of every step.
struct SerialRun {
  std::vector<SampledToken> drawn;
  std::vector<std::vector<float>> logits; // logits[s]: the step that drew drawn[s + 1]
};

} // namespace

Status windowsEqualSerial(runtime::Engine &engine, const std::vector<std::vector<int32_t>> &prompts,
                          int64_t rows, const runtime::SamplingParams &sampling, size_t rounds) {
  using runtime::RowSampling;
  using runtime::VerifyWindow;
  const size_t steps = rounds * static_cast<size_t>(rows) + 1;
  std::vector<SerialRun> serial(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const RowSampling row{&sampling, static_cast<int64_t>(prompts[i].size())};
    GLM_ASSIGN_OR_RETURN(const int slot, engine.newSequence());
    Expected<SampledToken> first = engine.prefillSample(slot, prompts[i], row);
    Status s = first.status();
    if (s.ok()) {
      serial[i].drawn.push_back(std::move(first).value());
    }
    for (size_t step = 0; s.ok() && step < steps; ++step) {
      const int slots[] = {slot};
      std::vector<float> logits;
      Expected<std::vector<SampledToken>> next = engine.decodeSample(
          slots, std::span(&serial[i].drawn.back().id, 1), std::span(&row, 1), &logits);
      s = next.status();
      if (s.ok()) {
        serial[i].drawn.push_back(std::move((*next)[0]));
        serial[i].logits.push_back(std::move(logits));
      }
    }
    engine.endSequence(slot);
    GLM_RETURN_IF_ERROR(s.withContext(strCat("the serial run of prompt ", i)));
  }

  // Per sequence: its slot, the reply tokens drawn so far, and how many of them its state holds.
  struct Windowed {
    int slot = -1;
    std::vector<int32_t> reply;
    size_t held = 0;
  };
  std::vector<Windowed> seqs(prompts.size());
  std::vector<RowSampling> rowSampling;
  auto endAll = [&] {
    for (const Windowed &w : seqs) {
      if (w.slot >= 0) {
        engine.endSequence(w.slot);
      }
    }
  };
  auto fail = [&](Status s) {
    endAll();
    return s;
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    rowSampling.push_back({&sampling, static_cast<int64_t>(prompts[i].size())});
    Expected<int> slot = engine.newSequence();
    if (!slot.ok()) {
      return fail(slot.status());
    }
    seqs[i].slot = *slot;
    Expected<SampledToken> first = engine.prefillSample(*slot, prompts[i], rowSampling[i]);
    if (!first.ok()) {
      return fail(first.status());
    }
    if (std::string d = drawDifference(*first, serial[i].drawn[0]); !d.empty()) {
      return fail(internalError("prompt ", i, "'s prefill ", d));
    }
    seqs[i].reply.push_back(first->id);
  }
  for (size_t round = 0; round < rounds; ++round) {
    std::vector<VerifyWindow> windows;
    std::vector<std::vector<int32_t>> drafts(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      Windowed &w = seqs[i];
      const std::span<const int32_t> known = std::span(w.reply).subspan(w.held);
      const size_t n = static_cast<size_t>(rows) - std::min(known.size(), size_t(rows));
      const std::vector<SampledToken> &ref = serial[i].drawn;
      for (size_t j = 0; j < n && w.reply.size() + j < ref.size(); ++j) {
        drafts[i].push_back(ref[w.reply.size() + j].id);
      }
      if (round % 2 == 1 && !drafts[i].empty()) {
        int32_t &wrong = drafts[i][(round + i) % drafts[i].size()];
        wrong = (wrong + 1) % static_cast<int32_t>(engine.vocabSize());
      }
      windows.push_back({w.slot, known, drafts[i], rowSampling[i]});
    }
    Expected<std::vector<runtime::VerifiedWindow>> verified = engine.verifySample(windows);
    if (!verified.ok()) {
      return fail(verified.status().withContext(strCat("verify round ", round)));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      Windowed &w = seqs[i];
      const runtime::VerifiedWindow &v = (*verified)[i];
      for (const SampledToken &t : v.tokens) {
        const size_t at = w.reply.size();
        if (at >= serial[i].drawn.size()) {
          return fail(internalError("prompt ", i, ": round ", round, " drew past the reference"));
        }
        if (std::string d = drawDifference(t, serial[i].drawn[at]); !d.empty()) {
          return fail(internalError("prompt ", i, " of ", seqs.size(), ", windows of ", rows,
                                    " rows, round ", round, ": reply token ", at, " ", d));
        }
        w.reply.push_back(t.id);
      }
      // A window taken whole holds all but the token drawn after its last row; a rolled-back one
      // holds none of its rows.
      if (v.fed) {
        w.held = w.reply.size() - 1;
      }
    }
  }
  // The state after the windows: what is not held goes in as windows without drafts, then one
  // serial step, whose logits must be the reference's at the same position bit for bit.
  for (size_t i = 0; i < seqs.size(); ++i) {
    Windowed &w = seqs[i];
    while (w.reply.size() - w.held > 1) {
      const size_t n = std::min<size_t>(w.reply.size() - 1 - w.held, static_cast<size_t>(rows));
      const VerifyWindow window{w.slot, std::span(w.reply).subspan(w.held, n), {}, rowSampling[i]};
      Expected<std::vector<runtime::VerifiedWindow>> fed =
          engine.verifySample(std::span(&window, 1));
      if (!fed.ok()) {
        return fail(fed.status());
      }
      w.held += n;
    }
    const size_t at = w.reply.size(); // the step feeding reply[at - 1] draws reply[at]
    if (at > serial[i].logits.size()) {
      return fail(internalError("prompt ", i, ": the windows ran past the reference"));
    }
    const int slots[] = {w.slot};
    std::vector<float> logits;
    Expected<std::vector<SampledToken>> next = engine.decodeSample(
        slots, std::span(&w.reply.back(), 1), std::span(&rowSampling[i], 1), &logits);
    if (!next.ok()) {
      return fail(next.status());
    }
    const std::vector<float> &want = serial[i].logits[at - 1];
    if (logits.size() != want.size()) {
      return fail(
          internalError("prompt ", i, ": ", logits.size(), " logits, serially ", want.size()));
    }
    for (size_t k = 0; k < want.size(); ++k) {
      if (!sameBits(logits[k], want[k])) {
        return fail(internalError("prompt ", i, " of ", seqs.size(), ", windows of ", rows,
                                  " rows: after the windows, logit ", k,
                                  " of the step drawing reply token ", at, " is ", logits[k],
                                  ", serially ", want[k]));
      }
    }
  }
  endAll();
  return Status::success();
}

} // namespace glm::testing
