// The scheduler loop: admit waiting requests into free slots (prefilling each), then advance every
// running sequence by one token in a single decode step.
#include "runtime/engine/Scheduler.h"

#include <algorithm>
#include <cmath>

namespace glm::runtime {

struct Scheduler::Active {
  SequenceRequest request;
  std::shared_ptr<TokenSink> sink;
  int slot = -1;
  int64_t position = 0;  // absolute position of the next token
  int64_t generated = 0; // tokens delivered
  int32_t last = 0;      // the token to feed next
};

Scheduler::Scheduler(std::unique_ptr<CpuEngine> engine, int64_t maxWaiting)
    : engine_(std::move(engine)), maxWaiting_(maxWaiting) {
  worker_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stopping_ = true;
  wake_.notify_all();
  worker_.join();
}

Status Scheduler::submit(SequenceRequest request, std::shared_ptr<TokenSink> sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) {
    return Status(StatusCode::Unavailable, "the server is shutting down");
  }
  if (static_cast<int64_t>(waiting_.size()) >= maxWaiting_) {
    return Status(StatusCode::Unavailable,
                  strCat("the waiting queue is full (", maxWaiting_, " requests)"));
  }
  waiting_.emplace_back(std::move(request), std::move(sink));
  ++stats_.waiting;
  wake_.notify_all();
  return Status::success();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int32_t Scheduler::pick(Active &a, std::vector<float> row) {
  // End-of-sequence tokens are masked until min_tokens, and always under ignore_eos.
  if (a.request.ignoreEos || a.generated < a.request.minTokens) {
    for (int32_t id : a.request.eosIds) {
      if (id >= 0 && id < static_cast<int32_t>(row.size())) {
        row[static_cast<size_t>(id)] = -INFINITY;
      }
    }
  }
  return sampleToken(row, a.request.sampling, a.position);
}

bool Scheduler::deliver(Active &a, int32_t token) {
  const bool eos =
      !a.request.ignoreEos &&
      std::find(a.request.eosIds.begin(), a.request.eosIds.end(), token) != a.request.eosIds.end();
  if (eos) {
    a.sink->onFinish(FinishReason::Stop, Status::success());
    return false;
  }
  ++a.generated;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.generatedTokens;
  }
  if (!a.sink->onToken(token)) {
    a.sink->onFinish(FinishReason::Cancelled, Status::success());
    return false;
  }
  if (a.generated >= a.request.maxTokens) {
    a.sink->onFinish(FinishReason::Length, Status::success());
    return false;
  }
  a.last = token;
  ++a.position;
  return true;
}

void Scheduler::loop() {
  std::vector<std::unique_ptr<Active>> running;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running.empty(); });
      if (stopping_) {
        break;
      }
    }
    step(running);
  }
  for (auto &a : running) {
    a->sink->onFinish(FinishReason::Cancelled, Status::success());
    engine_->endSequence(a->slot);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[request, sink] : waiting_) {
    sink->onFinish(FinishReason::Cancelled, Status::success());
  }
  waiting_.clear();
}

void Scheduler::step(std::vector<std::unique_ptr<Active>> &running) {
  auto finish = [&](size_t i) {
    engine_->endSequence(running[i]->slot);
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    std::lock_guard<std::mutex> lock(mutex_);
    --stats_.running;
    ++stats_.finished;
  };
  // 1. Admit: each waiting request that gets a slot is prefilled and yields its first token.
  while (true) {
    std::unique_ptr<Active> a;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (waiting_.empty()) {
        break;
      }
      if (waiting_.front().second->cancelled()) {
        waiting_.front().second->onFinish(FinishReason::Cancelled, Status::success());
        waiting_.pop_front();
        --stats_.waiting;
        continue;
      }
      Expected<int> slot = engine_->newSequence();
      if (!slot.ok()) {
        break; // no free slot: it waits for a running request to end
      }
      a = std::make_unique<Active>();
      a->request = std::move(waiting_.front().first);
      a->sink = std::move(waiting_.front().second);
      a->slot = *slot;
      waiting_.pop_front();
      --stats_.waiting;
      ++stats_.running;
    }
    Expected<std::vector<float>> logits = engine_->prefill(a->slot, a->request.prompt);
    running.push_back(std::move(a));
    Active &admitted = *running.back();
    if (!logits.ok()) {
      admitted.sink->onFinish(FinishReason::Error, logits.status());
      finish(running.size() - 1);
      continue;
    }
    const int64_t vocab = engine_->vocabSize();
    admitted.position = static_cast<int64_t>(admitted.request.prompt.size());
    std::vector<float> last(logits->end() - vocab, logits->end());
    if (!deliver(admitted, pick(admitted, std::move(last)))) {
      finish(running.size() - 1);
    }
  }
  if (running.empty()) {
    return;
  }
  // 2. One decode step for every running sequence.
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  for (const auto &a : running) {
    slots.push_back(a->slot);
    tokens.push_back(a->last);
  }
  Expected<std::vector<float>> logits = engine_->decode(slots, tokens);
  if (!logits.ok()) {
    for (size_t i = running.size(); i-- > 0;) {
      running[i]->sink->onFinish(FinishReason::Error, logits.status());
      finish(i);
    }
    return;
  }
  const int64_t vocab = engine_->vocabSize();
  for (size_t i = running.size(); i-- > 0;) {
    std::vector<float> row(logits->begin() + static_cast<std::ptrdiff_t>(i * vocab),
                           logits->begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    if (!deliver(*running[i], pick(*running[i], std::move(row)))) {
      finish(i);
    }
  }
}

} // namespace glm::runtime
