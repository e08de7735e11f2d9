// Fuzzes plan files past the validator: a plan that PlanFile::fromBytes accepts is bound to the
// tiny fixture's weights by the CPU engine and runs one sampled prefill and one decode step, as
// `glmc generate` does. This is what proves the validator sufficient: whatever it accepts must
// run without a crash (a refusal at any point is fine). Same mutator and seeds as plan_file.
#include "runtime/engine/CpuEngine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"
#include "tests/fuzz/FuzzSupport.h"
#include "tests/fuzz/PlanMutator.h"

#include <cstdint>
#include <cstdlib>
#include <span>

namespace {

const glm::Checkpoint &checkpoint() {
  static const glm::Checkpoint *const c = [] {
    // One thread: the engine's parallel loops would only make each run slower here.
    ::setenv("GLM_CPU_THREADS", "1", /*overwrite=*/0);
    const std::filesystem::path dir = glm::fuzz::fixturesDir() / "glm53-tiny";
    glm::Expected<std::unique_ptr<glm::Checkpoint>> opened = glm::Checkpoint::open(dir);
    if (!opened.ok()) {
      glm::fuzz::contractBroken("the glm53-tiny checkpoint opens", opened.status().toString());
    }
    return std::move(opened).value().release();
  }();
  return *c;
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned seed) {
  return glm::fuzz::mutatePlan(data, size, maxSize, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const glm::Checkpoint &weights = checkpoint();
  glm::Expected<std::unique_ptr<glm::runtime::PlanFile>> plan =
      glm::runtime::PlanFile::fromBytes(std::span(data, size), "fuzz.glmp");
  if (!plan.ok()) {
    return 0;
  }
  // TP > 1 plans need a rank per thread in lockstep; one rank's refusal would leave the other
  // waiting in a collective, so only single-rank plans run here (TP 2 ones are validated by
  // plan_file). GPU plans need a GPU.
  const glm::plan::Plan &root = (*plan)->root();
  if (root.tp() != 1 || root.target()->arch() != glm::plan::Arch::Cpu) {
    return 0;
  }
  glm::Expected<std::unique_ptr<glm::runtime::CpuEngine>> engine =
      glm::runtime::CpuEngine::create(std::move(plan).value(), weights);
  if (!engine.ok()) {
    return 0;
  }
  glm::runtime::CpuEngine &e = **engine;
  glm::Expected<int> slot = e.newSequence();
  if (!slot.ok()) {
    return 0;
  }
  // A short chat-shaped prompt of ids inside the fixture's vocabulary.
  static constexpr int32_t kPrompt[] = {990, 992, 994, 701, 349, 264, 304, 456, 646, 419, 25};
  const glm::runtime::SamplingParams greedy;
  const glm::runtime::RowSampling sampling{&greedy, static_cast<int64_t>(std::size(kPrompt))};
  glm::Expected<glm::runtime::SampledToken> first = e.prefillSample(*slot, kPrompt, sampling);
  if (!first.ok()) {
    return 0;
  }
  const int slots[] = {*slot};
  const int32_t next[] = {first->id};
  glm::Expected<std::vector<glm::runtime::SampledToken>> second =
      e.decodeSample(slots, next, std::span<const glm::runtime::RowSampling>(&sampling, 1));
  (void)second;
  e.endSequence(*slot);
  return 0;
}
