// The scheduler loop: admit waiting requests into free slots, prefill at most one prefill
// program's worth of prompt tokens, then advance every prefilled sequence by one token in a
// single decode step. Bounding the prefill per step bounds how long a long prompt stalls the
// streams already decoding (chunked prefill).
#include "runtime/engine/Scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace glm::runtime {

struct Scheduler::Active {
  SequenceRequest request;
  std::shared_ptr<TokenSink> sink;
  int slot = -1;
  int64_t prefilled = 0; // prompt tokens in the engine so far
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
  if (request.prompt.empty()) {
    return invalidArgument("a request needs at least one prompt token");
  }
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
  // 1. Admit: each waiting request that gets a slot joins the running set, not yet prefilled. One
  // whose client already left is dropped before it costs anything.
  while (true) {
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
    auto a = std::make_unique<Active>();
    a->request = std::move(waiting_.front().first);
    a->sink = std::move(waiting_.front().second);
    a->slot = *slot;
    waiting_.pop_front();
    --stats_.waiting;
    ++stats_.running;
    running.push_back(std::move(a));
  }

  // 2. Prefill, oldest first, at most one prefill program's worth of tokens in all. A prompt is
  // split only at multiples of that size, where the engine splits it anyway, so a reply does not
  // depend on what else was running.
  // (A plan without prefill programs gets the whole prompt, so that the engine's error names it.)
  const int64_t chunk =
      engine_->prefillChunk() > 0 ? engine_->prefillChunk() : std::numeric_limits<int64_t>::max();
  const int64_t vocab = engine_->vocabSize();
  int64_t budget = chunk;
  for (size_t i = 0; i < running.size() && budget > 0;) {
    Active &a = *running[i];
    const int64_t promptSize = static_cast<int64_t>(a.request.prompt.size());
    if (a.prefilled == promptSize) {
      ++i;
      continue;
    }
    if (a.sink->cancelled()) {
      a.sink->onFinish(FinishReason::Cancelled, Status::success());
      finish(i);
      continue;
    }
    const int64_t n = std::min(promptSize - a.prefilled, chunk);
    if (n > budget) {
      break;
    }
    budget -= n;
    Expected<std::vector<float>> logits = engine_->prefill(
        a.slot, std::span<const int32_t>(a.request.prompt).subspan(a.prefilled, n));
    if (!logits.ok()) {
      a.sink->onFinish(FinishReason::Error, logits.status());
      finish(i);
      continue;
    }
    a.prefilled += n;
    if (a.prefilled == promptSize) {
      // The prompt is in: its last row gives the first token.
      a.position = promptSize;
      std::vector<float> last(logits->end() - vocab, logits->end());
      if (!deliver(a, pick(a, std::move(last)))) {
        finish(i);
        continue;
      }
    }
    ++i;
  }

  // 3. One decode step for every sequence whose prompt is in.
  std::vector<size_t> decoding;
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i]->prefilled == static_cast<int64_t>(running[i]->request.prompt.size())) {
      decoding.push_back(i);
      slots.push_back(running[i]->slot);
      tokens.push_back(running[i]->last);
    }
  }
  if (decoding.empty()) {
    return;
  }
  Expected<std::vector<float>> logits = engine_->decode(slots, tokens);
  // Backwards, so that finishing one does not move the indices still to come.
  for (size_t k = decoding.size(); k-- > 0;) {
    const size_t i = decoding[k];
    if (!logits.ok()) {
      running[i]->sink->onFinish(FinishReason::Error, logits.status());
      finish(i);
      continue;
    }
    std::vector<float> row(logits->begin() + static_cast<std::ptrdiff_t>(k * vocab),
                           logits->begin() + static_cast<std::ptrdiff_t>((k + 1) * vocab));
    if (!deliver(*running[i], pick(*running[i], std::move(row)))) {
      finish(i);
    }
  }
}

} // namespace glm::runtime
