// Fuzzes plan files through PlanFile::fromBytes (the flatbuffers verifier, then the semantic
// validator) with a structure-aware mutator (PlanMutator.h) over valid plans of the tiny fixture.
// An accepted plan is then walked as `glmc inspect` walks it.
#include "runtime/plan/PlanFile.h"
#include "tests/fuzz/PlanMutator.h"

#include <cstdint>
#include <span>

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned seed) {
  return glm::fuzz::mutatePlan(data, size, maxSize, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  glm::Expected<std::unique_ptr<glm::runtime::PlanFile>> plan =
      glm::runtime::PlanFile::fromBytes(std::span(data, size), "fuzz.glmp");
  if (!plan.ok()) {
    return 0;
  }
  const glm::plan::Plan &root = (*plan)->root();
  (void)(*plan)->checkRunnableOn(root.target()->arch());
  // Reading every step's tensors, as inspect's byte counts do.
  uint64_t bytes = 0;
  if (!root.programs()) {
    return 0;
  }
  for (const glm::plan::Program *program : *root.programs()) {
    if (!program->steps()) {
      continue;
    }
    for (const glm::plan::Step *step : *program->steps()) {
      for (const auto *list : {step->operands(), step->results()}) {
        if (!list) {
          continue;
        }
        for (const glm::plan::TensorRef *t : *list) {
          bytes += glm::runtime::elementSize(t->element()) + (t->slice() ? t->slice()->size() : 0);
        }
      }
    }
  }
  return bytes == 1 ? 1 : 0;
}
