// An Engine that forwards every call the scheduler and the lockstep group make to another engine:
// what the tests derive from to watch or break one call (a gated decode, a failing prefill, a
// prefill that must never see a reply's tokens) and leave the rest as they are.
#pragma once

#include "runtime/engine/Engine.h"

#include <memory>

namespace glm::runtime::testing {

class ForwardingEngine : public Engine {
public:
  explicit ForwardingEngine(std::unique_ptr<Engine> inner) : inner_(std::move(inner)) {
    (void)initCommon(inner_->plan(), "forwarding test engine");
  }

  Expected<int> newSequence() override { return inner_->newSequence(); }
  void endSequence(int slot) override { inner_->endSequence(slot); }
  Expected<int> forkSequence(int from) override { return inner_->forkSequence(from); }
  int64_t length(int slot) const override { return inner_->length(slot); }
  Expected<int> keepState(int slot) override { return inner_->keepState(slot); }
  Status resumeState(int kept, int slot) override { return inner_->resumeState(kept, slot); }
  void dropState(int kept) override { inner_->dropState(kept); }
  int64_t keptLength(int kept) const override { return inner_->keptLength(kept); }
  int64_t pagesOnlyKept() const override { return inner_->pagesOnlyKept(); }
  int64_t pagesNeeded(int slot, int64_t more) const override {
    return inner_->pagesNeeded(slot, more);
  }
  int64_t freePages() const override { return inner_->freePages(); }
  int64_t pageTokens() const override { return inner_->pageTokens(); }
  Status health() const override { return inner_->health(); }
  Expected<std::vector<float>> prefill(int slot, std::span<const int32_t> tokens,
                                       LogitRows rows) override {
    return inner_->prefill(slot, tokens, rows);
  }
  Expected<std::vector<float>> decode(std::span<const int> slots,
                                      std::span<const int32_t> tokens) override {
    return inner_->decode(slots, tokens);
  }
  Expected<SampledToken> prefillSample(int slot, std::span<const int32_t> tokens,
                                       const RowSampling &sampling, std::vector<float> *logits,
                                       LogitRows rows) override {
    return inner_->prefillSample(slot, tokens, sampling, logits, rows);
  }
  Expected<std::vector<SampledToken>> decodeSample(std::span<const int> slots,
                                                   std::span<const int32_t> tokens,
                                                   std::span<const RowSampling> sampling,
                                                   std::vector<float> *logits) override {
    return inner_->decodeSample(slots, tokens, sampling, logits);
  }
  int64_t maxWindow(size_t sequences) const override { return inner_->maxWindow(sequences); }
  Expected<std::vector<std::vector<SampledToken>>>
  runWindows(std::span<const VerifyWindow> windows) override {
    return inner_->runWindows(windows);
  }
  Status rollbackWindow(int slot, int64_t length) override {
    return inner_->rollbackWindow(slot, length);
  }
  const plan::Plan &plan() const override { return inner_->plan(); }

private:
  // Only the forwarded calls reach these, on the inner engine.
  Status clearSlots(int) override { return Status::success(); }
  Status copyState(int, int) override { return Status::success(); }
  std::unique_ptr<Engine> inner_;
};

} // namespace glm::runtime::testing
