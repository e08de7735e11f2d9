// The scheduler loop: admit waiting requests into free slots, prefill at most one prefill
// program's worth of prompt tokens, then advance every prefilled sequence by one token in a
// single decode step. Bounding the prefill per step bounds how long a long prompt stalls the
// streams already decoding (chunked prefill). The state pool is shared: a sequence takes pages
// as it grows, and when they run out the newest sequence gives its pages back and is later
// prefilled again from its tokens (preemption by recomputation, as vLLM does).
#include "runtime/engine/Scheduler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <system_error>
#include <thread>

namespace glm::runtime {

struct Scheduler::Active {
  SequenceRequest request;
  std::shared_ptr<TokenSink> sink;
  int slot = -1;               // -1 while preempted
  std::vector<int32_t> tokens; // the prompt, then every token delivered
  int64_t inEngine = 0;        // tokens[0, inEngine) are in the engine's state
  int64_t generated = 0;       // tokens delivered

  /// Tokens the engine must hold before this sequence decodes: the prompt at first; after a
  /// preemption, everything but the last token, which the next decode step feeds.
  int64_t prefillTarget() const {
    return static_cast<int64_t>(tokens.size()) - (generated > 0 ? 1 : 0);
  }
  bool decoding() const {
    return slot >= 0 && generated > 0 && inEngine == static_cast<int64_t>(tokens.size()) - 1;
  }
};

Scheduler::Scheduler(std::unique_ptr<Engine> engine, int64_t maxWaiting)
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
  // An engine that cannot run now (a tensor-parallel rank is missing) takes no new work.
  if (Status health = engine_->health(); !health.ok()) {
    return health;
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

int32_t Scheduler::pick(const Active &a, std::span<float> row) const {
  // End-of-sequence tokens are masked until min_tokens, and always under ignore_eos.
  if (a.request.ignoreEos || a.generated < a.request.minTokens) {
    for (int32_t id : a.request.eosIds) {
      if (id >= 0 && id < static_cast<int32_t>(row.size())) {
        row[static_cast<size_t>(id)] = -INFINITY;
      }
    }
  }
  return sampleToken(row, a.request.sampling, static_cast<int64_t>(a.tokens.size()));
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
  a.tokens.push_back(token);
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
    if (a->slot >= 0) {
      engine_->endSequence(a->slot);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[request, sink] : waiting_) {
    sink->onFinish(FinishReason::Cancelled, Status::success());
  }
  waiting_.clear();
}

void Scheduler::step(std::vector<std::unique_ptr<Active>> &running) {
  auto finish = [&](size_t i) {
    if (running[i]->slot >= 0) {
      engine_->endSequence(running[i]->slot);
    }
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    std::lock_guard<std::mutex> lock(mutex_);
    --stats_.running;
    ++stats_.finished;
  };
  // Frees the newest sequence's state, except `keep`'s; it will be prefilled again from its
  // tokens (preemption by recomputation). False when there is nothing to free.
  auto preemptNewest = [&](const Active *keep) {
    for (size_t i = running.size(); i-- > 0;) {
      if (running[i]->slot >= 0 && running[i].get() != keep) {
        engine_->endSequence(running[i]->slot);
        running[i]->slot = -1;
        running[i]->inEngine = 0;
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.preemptions;
        return true;
      }
    }
    return false;
  };

  // 0. An engine that lost part of itself (a tensor-parallel rank) has lost the sequences'
  // state too: every request fails with its error rather than waiting for a recovery that
  // could not resume them anyway.
  if (Status health = engine_->health(); !health.ok()) {
    while (!running.empty()) {
      running.back()->sink->onFinish(FinishReason::Error, health);
      finish(running.size() - 1);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &[request, sink] : waiting_) {
      sink->onFinish(FinishReason::Error, health);
      ++stats_.finished;
    }
    stats_.waiting -= static_cast<int64_t>(waiting_.size());
    waiting_.clear();
    return;
  }

  // 1. Slots: preempted sequences first (they are older), then waiting requests, not yet
  // prefilled. A waiting request whose client already left is dropped before it costs anything.
  bool slotless = false;
  for (auto &a : running) {
    if (a->slot < 0) {
      Expected<int> slot = engine_->newSequence();
      if (!slot.ok()) {
        slotless = true;
        break;
      }
      a->slot = *slot;
    }
  }
  while (!slotless) {
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
    a->tokens = std::move(a->request.prompt);
    a->sink = std::move(waiting_.front().second);
    a->slot = *slot;
    waiting_.pop_front();
    --stats_.waiting;
    ++stats_.running;
    running.push_back(std::move(a));
  }

  // 2. Prefill, oldest first, at most one prefill program's worth of tokens in all. A prompt is
  // split only at multiples of that size, where the engine splits it anyway, so a reply does not
  // depend on what else was running. Pages the decoding sequences need next are kept for them.
  // (A plan without prefill programs gets the whole prompt, so that the engine's error names it.)
  const int64_t programRows = engine_->prefillChunk();
  const int64_t chunk = programRows > 0 ? programRows : std::numeric_limits<int64_t>::max();
  const int64_t vocab = engine_->vocabSize();
  int64_t reserved = 0;
  for (const auto &a : running) {
    reserved += a->decoding() ? engine_->pagesNeeded(a->slot, 1) : 0;
  }
  int64_t budget = chunk;
  const Active *blocked = nullptr; // the oldest prefill that waits for pages
  bool prefilled = false;
  for (size_t i = 0; i < running.size() && budget > 0;) {
    Active &a = *running[i];
    const int64_t target = a.prefillTarget();
    if (a.slot < 0 || a.inEngine >= target) {
      ++i;
      continue;
    }
    if (a.sink->cancelled()) {
      a.sink->onFinish(FinishReason::Cancelled, Status::success());
      finish(i);
      continue;
    }
    const int64_t n = std::min(target - a.inEngine, chunk);
    if (n > budget) {
      break;
    }
    if (engine_->pagesNeeded(a.slot, n) > engine_->freePages() - reserved) {
      blocked = &a;
      break;
    }
    budget -= n;
    Expected<std::vector<float>> logits =
        engine_->prefill(a.slot,
                         std::span<const int32_t>(a.tokens).subspan(static_cast<size_t>(a.inEngine),
                                                                    static_cast<size_t>(n)),
                         LogitRows::Last); // the last row gives the first token
    if (!logits.ok()) {
      a.sink->onFinish(FinishReason::Error, logits.status());
      finish(i);
      continue;
    }
    prefilled = true;
    a.inEngine += n;
    if (a.inEngine == target && a.generated == 0) {
      // The prompt is in: its last row gives the first token.
      if (!deliver(a, pick(a, std::span<float>(logits->end() - vocab, logits->end())))) {
        finish(i);
        continue;
      }
    }
    ++i;
  }

  // 3. One decode step for every sequence whose tokens are in. When the pool cannot give each
  // its next page, the newest sequences give theirs back until it can.
  std::vector<size_t> decoding;
  while (true) {
    decoding.clear();
    int64_t needed = 0;
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i]->decoding()) {
        decoding.push_back(i);
        needed += engine_->pagesNeeded(running[i]->slot, 1);
      }
    }
    if (needed <= engine_->freePages() || !preemptNewest(nullptr)) {
      break;
    }
  }
  if (decoding.empty()) {
    // Nothing decodes and the oldest prefill waits for pages that newer prefills hold: free
    // theirs. A request that cannot fit even alone has to fail.
    if (blocked != nullptr && !prefilled && !preemptNewest(blocked)) {
      for (size_t i = 0; i < running.size(); ++i) {
        if (running[i].get() == blocked) {
          blocked->sink->onFinish(
              FinishReason::Error,
              Status(StatusCode::Unavailable,
                     strCat("a sequence of ", blocked->prefillTarget(),
                            " tokens needs more state pages than the plan's pool holds")));
          finish(i);
          break;
        }
      }
    }
    return;
  }
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  for (size_t i : decoding) {
    slots.push_back(running[i]->slot);
    tokens.push_back(running[i]->tokens.back());
  }
  Expected<std::vector<float>> logits = engine_->decode(slots, tokens);
  const std::vector<int32_t> picked =
      logits.ok() ? pickRows(running, decoding, *logits, vocab) : std::vector<int32_t>();
  // Backwards, so that finishing one does not move the indices still to come.
  for (size_t k = decoding.size(); k-- > 0;) {
    const size_t i = decoding[k];
    if (!logits.ok()) {
      running[i]->sink->onFinish(FinishReason::Error, logits.status());
      finish(i);
      continue;
    }
    ++running[i]->inEngine;
    if (!deliver(*running[i], picked[k])) {
      finish(i);
    }
  }
}

std::vector<int32_t> Scheduler::pickRows(const std::vector<std::unique_ptr<Active>> &running,
                                         const std::vector<size_t> &decoding,
                                         std::vector<float> &logits, size_t vocab) const {
  const size_t rows = decoding.size();
  std::vector<int32_t> picked(rows);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next.fetch_add(1); k < rows; k = next.fetch_add(1)) {
      picked[k] = pick(*running[decoding[k]], std::span<float>(logits.data() + k * vocab, vocab));
    }
  };
  // A sampled row costs milliseconds of host work (Sampler.cpp: 5.5 ms at GLM-5.3's vocabulary
  // on the H200 machine's host), a greedy one a tenth of one: with two or more sampled rows the
  // rows are picked on several threads. Each row's draw is keyed by its own seed and position,
  // so the tokens are the same either way.
  size_t sampled = 0;
  for (size_t i : decoding) {
    sampled += running[i]->request.sampling.temperature > 0.0f ? 1 : 0;
  }
  std::vector<std::thread> helpers;
  if (sampled >= 2) {
    const size_t threads =
        std::min<size_t>(rows, std::max(1u, std::thread::hardware_concurrency()));
    try {
      while (helpers.size() + 1 < threads) {
        helpers.emplace_back(work);
      }
    } catch (const std::system_error &) {
      // No more threads to be had: this one and those started share the rows.
    }
  }
  work();
  for (std::thread &t : helpers) {
    t.join();
  }
  return picked;
}

} // namespace glm::runtime
