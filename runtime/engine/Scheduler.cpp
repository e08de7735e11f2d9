// The scheduler loop: admit waiting requests into free slots, prefill at most one prefill
// program's worth of prompt tokens, then advance every prefilled sequence by one token in a
// single decode step. Bounding the prefill per step bounds how long a long prompt stalls the
// streams already decoding (chunked prefill). The state pool is shared: a sequence takes pages
// as it grows, and when they run out the newest sequence gives its pages back and is later
// prefilled again from its tokens (preemption by recomputation, as vLLM does).
//
// The engine samples: a step returns tokens, never logits. A request of n > 1 choices prefills its
// prompt but the last token once, in choice 0's sequence; the other choices then fork that state
// and all n decode the last prompt token together, each drawing with its own key (seed + choice).
//
// Prefix reuse: the engine keeps a sequence's state (Engine::keepState) where a later request is
// likely to begin with the same tokens, and a sequence given a slot resumes from the longest kept
// state that begins its tokens. The kept tokens' state is exactly what a prefill of them leaves,
// and every prefill chunk runs the same program row by row, so a resumed prompt's logits equal a
// cold prefill's bit for bit. States are kept where the prefill leaves them, at no cost but a copy
// of the per-sequence slots (pages are shared): at the end of each prompt (the next turn of a
// conversation extends it), at the end of each reply (an agent's next request holds the reply),
// and at the prompt's last two chunk boundaries before its end (the same prompt sent again, or
// another conversation sharing its opening, resumes there; a KDA state exists only where the
// prefill stopped, so no other position can be resumed). Kept states are evicted least recently
// used, when the cache is full and before any running sequence would give its pages back.
//
// Speculative decoding (docs/speculative-decoding.md): where the plan verifies windows, each
// decoding sequence that may draft asks its drafter for guesses, and the step becomes a verify
// step (Engine::verifySample) whose windows yield 1 + the accepted guesses. A window with a
// rejected guess is rolled back; the tokens it yielded lead that sequence's next window.
#include "runtime/engine/Scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace glm::runtime {

namespace {

/// Drafts a sequence's first window carries, and every window after a rejected draft: a 4-row
/// window (copy drafts; the MTP head guesses one token a round, and a chain of 3 is not built).
constexpr int64_t kFirstDrafts = 3;

/// `sampling` with the end-of-sequence tokens biased to -inf (min_tokens, as vLLM has it: none
/// before it, whatever their bias), through the same logit_bias the request may set.
SamplingParams withEndTokensBanned(const SamplingParams &sampling,
                                   const std::vector<int32_t> &eosIds) {
  SamplingParams banned = sampling;
  for (int32_t id : eosIds) {
    auto at = std::find_if(banned.logitBias.begin(), banned.logitBias.end(),
                           [&](const auto &e) { return e.first == id; });
    if (at != banned.logitBias.end()) {
      at->second = -INFINITY;
    } else {
      banned.logitBias.emplace_back(id, -INFINITY);
    }
  }
  return banned;
}

} // namespace

/// What the choices of one request share.
struct Scheduler::Request {
  SequenceRequest request;
  std::shared_ptr<TokenSink> sink;
};

struct Scheduler::Active {
  std::shared_ptr<Request> shared;
  int choice = 0;
  SamplingParams sampling;     // the request's, keyed seed + choice
  SamplingParams banned;       // the same with end-of-sequence tokens banned, with min_tokens
  int slot = -1;               // -1 while preempted, or while waiting for its fork
  bool awaitingFork = false;   // a choice > 0 whose prompt choice 0 is prefilling
  std::vector<int32_t> tokens; // the prompt, then every token delivered
  int64_t promptTokens = 0;
  int64_t inEngine = 0; // tokens[0, inEngine) are in the engine's state
  // Tokens before the last that a rolled-back verify window or a preemption left outside the
  // state: they lead its next windows (tokens.size() - 1 == inEngine + behind while it decodes).
  int64_t behind = 0;
  std::unique_ptr<Drafter> drafter;  // null: this sequence decodes one token a step
  int64_t draftLimit = kFirstDrafts; // drafts its next window may carry (see verify())
  int32_t headGuess = -1;            // the MTP head's guess of the token after the last
  int64_t generated = 0;             // tokens delivered
  std::vector<uint64_t> boundaries;  // cache entries at its prompt's chunk boundaries, oldest first
  bool lookedUp = false;             // its prompt was looked up among the kept states

  const SequenceRequest &request() const { return shared->request; }
  TokenSink &sink() const { return *shared->sink; }
  bool forks() const { return shared->request.n > 1; }
  /// Tokens the engine must hold before this sequence decodes: the prompt at first (but its last
  /// token when the request forks: every choice decodes that one); after a preemption, all but the
  /// last token, which the next decode step feeds.
  int64_t prefillTarget() const {
    return static_cast<int64_t>(tokens.size()) - (generated > 0 || forks() ? 1 : 0) - behind;
  }
  /// Tokens before the last that decode steps fed: the reply's but its last (and the prompt's
  /// last, which every choice of a forking request decodes).
  int64_t decodedTokens() const {
    return std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - 1 - promptTokens +
                                    (forks() ? 1 : 0));
  }
  bool decoding() const {
    return slot >= 0 && (generated > 0 || forks()) &&
           inEngine + behind == static_cast<int64_t>(tokens.size()) - 1;
  }
  /// Whether this step may draft: a verify window draws every row with the sequence's settings
  /// and its token counts as they stand after the whole window, so the penalties, the
  /// structured-output mask and min_tokens' ban, which change from one token to the next, keep a
  /// sequence serial (its reply is the same either way).
  bool mayDraft() const {
    const SamplingParams &p = sampling;
    return drafter && !constraint && generated >= request().minTokens &&
           p.presencePenalty == 0.0f && p.frequencyPenalty == 0.0f && p.repetitionPenalty == 1.0f;
  }
  /// How this sequence samples its next token.
  RowSampling rowSampling() const {
    return {generated < request().minTokens ? &banned : &sampling, promptTokens};
  }
  /// rowSampling() with the structured-output constraint's mask for the next token, when it has
  /// one this step (only constrained rows pay for a mask).
  RowSampling stepSampling(int64_t vocab) {
    RowSampling row = rowSampling();
    if (!constraint) {
      return row;
    }
    masked = *row.params;
    masked.allowedTokens.assign(static_cast<size_t>((vocab + 31) / 32), 0u);
    if (!constraint->fillAllowed(masked.allowedTokens)) {
      return row;
    }
    row.params = &masked;
    return row;
  }
  std::unique_ptr<TokenConstraint> constraint; // this choice's clone of the request's, or null
  SamplingParams masked;                       // rowSampling()'s with the constraint's mask
};

namespace {
/// Kept states at one prompt's chunk boundaries (besides its end): see the file's header.
constexpr size_t kKeptBoundaries = 2;
} // namespace

Scheduler::Scheduler(std::unique_ptr<Engine> engine, int64_t maxWaiting, size_t keptStates,
                     DraftOptions drafts)
    : engine_(std::move(engine)), maxWaiting_(maxWaiting), cache_(keptStates),
      drafters_(std::move(drafts.drafters)), maxDrafts_(drafts.maxTokens),
      widestWindow_(engine_->maxWindow(1)) {
  if (!drafters_) {
    drafters_ = [] { return std::make_unique<CopyOrHeadDrafter>(); };
  }
  // Nothing holds a page yet: every page of the pool is free.
  totalPages_ = engine_->freePages();
  stats_.poolTokens = totalPages_ * engine_->pageTokens();
  stats_.poolFreeTokens = stats_.poolTokens;
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
  const int64_t slots =
      engine_->plan().state_pool() != nullptr ? engine_->plan().state_pool()->max_sequences() : 1;
  if (request.n < 1 || request.n > slots) {
    return invalidArgument("n is ", request.n, "; this server runs at most ", slots,
                           " sequences at once");
  }
  GLM_RETURN_IF_ERROR(engine_->checkSampling(request.sampling));
  if (request.minTokens > 0) {
    // The ban rides on the bias entries: refused here when they do not fit, never dropped.
    GLM_RETURN_IF_ERROR(
        engine_->checkSampling(withEndTokensBanned(request.sampling, request.eosIds))
            .withContext("min_tokens bans the end-of-sequence tokens through logit_bias"));
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

bool Scheduler::deliver(Active &a, const SampledToken &token) {
  const SequenceRequest &r = a.request();
  const bool eos =
      !r.ignoreEos && std::find(r.eosIds.begin(), r.eosIds.end(), token.id) != r.eosIds.end();
  if (eos) {
    a.sink().onFinish(a.choice, FinishReason::Stop, Status::success());
    return false;
  }
  ++a.generated;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.generatedTokens;
  }
  if (a.constraint && !a.constraint->advance(token.id)) {
    a.sink().onFinish(
        a.choice, FinishReason::Error,
        Status(StatusCode::Internal, strCat("the sampled token ", token.id,
                                            " breaks the request's structured-output constraint")));
    return false;
  }
  if (!a.sink().onToken(a.choice, token)) {
    a.sink().onFinish(a.choice, FinishReason::Cancelled, Status::success());
    return false;
  }
  if (a.constraint && a.constraint->complete()) {
    a.sink().onFinish(a.choice, FinishReason::Stop, Status::success()); // nothing may follow
    return false;
  }
  if (a.generated >= r.maxTokens) {
    a.sink().onFinish(a.choice, FinishReason::Length, Status::success());
    return false;
  }
  a.tokens.push_back(token.id);
  a.headGuess = token.draft;
  return true;
}

void Scheduler::resume(Active &a) {
  if (cache_.capacity() == 0) {
    return;
  }
  // A prompt's first token comes from its last prefilled row: at least one row is prefilled.
  const bool firstTokenFromPrefill = a.generated == 0 && !a.forks();
  const int64_t longest = a.prefillTarget() - (firstTokenFromPrefill ? 1 : 0);
  std::optional<PrefixCache::Hit> hit = cache_.find(a.tokens, longest);
  // Counted once per request, as vLLM counts its queries (a preempted prompt looks again).
  const bool fresh = a.generated == 0 && a.choice == 0 && !a.lookedUp;
  a.lookedUp = true;
  if (hit && !engine_->resumeState(hit->kept, a.slot).ok()) {
    hit.reset(); // no page for its last one: prefilled cold
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (fresh) {
    stats_.prefixQueryTokens += a.promptTokens;
    stats_.prefixHitTokens += hit ? hit->length : 0;
  }
  if (hit) {
    a.inEngine = hit->length;
    if (fresh) {
      a.sink().onPromptCached(hit->length);
    }
  }
}

std::optional<uint64_t> Scheduler::keep(const Active &a) {
  // A reply that ended inside a verify window taken whole leaves the state past its tokens.
  if (cache_.capacity() == 0 || a.slot < 0 || a.inEngine == 0 ||
      a.inEngine > static_cast<int64_t>(a.tokens.size())) {
    return std::nullopt;
  }
  const auto tokens = std::span<const int32_t>(a.tokens).first(static_cast<size_t>(a.inEngine));
  if (cache_.contains(tokens)) {
    return std::nullopt;
  }
  if (cache_.full() && !evictKept()) {
    return std::nullopt;
  }
  Expected<int> kept = engine_->keepState(a.slot);
  if (!kept.ok()) {
    return std::nullopt; // reuse is an optimisation: a state that cannot be kept is not
  }
  const uint64_t serial = cache_.insert(std::vector<int32_t>(tokens.begin(), tokens.end()), *kept);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.keptStates = static_cast<int64_t>(cache_.size());
  return serial;
}

bool Scheduler::evictKept() {
  std::optional<int> kept = cache_.evict();
  if (!kept) {
    return false;
  }
  engine_->dropState(*kept);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.keptStates = static_cast<int64_t>(cache_.size());
  return true;
}

void Scheduler::fork(std::vector<std::unique_ptr<Active>> &running, Active &source) {
  for (auto &a : running) {
    if (!a->awaitingFork || a->shared != source.shared) {
      continue;
    }
    a->awaitingFork = false;
    Expected<int> slot = engine_->forkSequence(source.slot);
    if (slot.ok()) {
      a->slot = *slot;
      a->inEngine = source.inEngine;
    } // else it is prefilled from its own tokens once a slot and pages are free
  }
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
    if (totalPages_ > 0) {
      // Read on the scheduler's thread, which alone changes the pages.
      const int64_t free = engine_->freePages() + engine_->pagesOnlyKept();
      const double used =
          static_cast<double>(totalPages_ - free) / static_cast<double>(totalPages_);
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.kvCacheUsage = std::clamp(used, 0.0, 1.0);
      stats_.poolFreeTokens = std::clamp<int64_t>(free, 0, totalPages_) * engine_->pageTokens();
    }
  }
  for (auto &a : running) {
    a->sink().onFinish(a->choice, FinishReason::Cancelled, Status::success());
    if (a->slot >= 0) {
      engine_->endSequence(a->slot);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[request, sink] : waiting_) {
    for (int choice = 0; choice < request.n; ++choice) {
      sink->onFinish(choice, FinishReason::Cancelled, Status::success());
    }
  }
  waiting_.clear();
}

void Scheduler::step(std::vector<std::unique_ptr<Active>> &running) {
  // Ends running[i]. With `keepState`, after a reply that ended as asked, its state is kept: the
  // prompt and the reply but the last token, which never entered the engine.
  auto finish = [&](size_t i, bool keepState = false) {
    for (auto &other : running) {
      if (other->awaitingFork && other->shared == running[i]->shared) {
        other->awaitingFork = false; // no prompt to fork: it is prefilled from its own tokens
      }
    }
    if (running[i]->slot >= 0) {
      if (keepState) {
        keep(*running[i]);
      }
      engine_->endSequence(running[i]->slot);
    }
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    std::lock_guard<std::mutex> lock(mutex_);
    --stats_.running;
    ++stats_.finished;
  };
  // Frees the newest sequence's state, except `keep`'s, to be recomputed (False when there is
  // nothing to free): its prompt is prefilled again, and the tokens decode steps fed go back in
  // through decode steps, in catch-up windows (step 3), so that its state has the bits serial
  // decoding gave it; a prefill would give its reply's rows other bits on a GPU.
  auto preemptNewest = [&](const Active *keep) {
    for (size_t i = running.size(); i-- > 0;) {
      if (running[i]->slot >= 0 && running[i].get() != keep) {
        engine_->endSequence(running[i]->slot);
        running[i]->slot = -1;
        running[i]->inEngine = 0;
        running[i]->behind = running[i]->decodedTokens();
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
      running.back()->sink().onFinish(running.back()->choice, FinishReason::Error, health);
      finish(running.size() - 1);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &[request, sink] : waiting_) {
      for (int choice = 0; choice < request.n; ++choice) {
        sink->onFinish(choice, FinishReason::Error, health);
      }
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
    if (a->slot < 0 && !a->awaitingFork) {
      Expected<int> slot = engine_->newSequence();
      if (!slot.ok()) {
        slotless = true;
        break;
      }
      a->slot = *slot;
      resume(*a);
    }
  }
  const size_t admitted = running.size();
  while (!slotless) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (waiting_.empty()) {
      break;
    }
    if (waiting_.front().second->cancelled()) {
      for (int choice = 0; choice < waiting_.front().first.n; ++choice) {
        waiting_.front().second->onFinish(choice, FinishReason::Cancelled, Status::success());
      }
      waiting_.pop_front();
      --stats_.waiting;
      continue;
    }
    Expected<int> slot = engine_->newSequence();
    if (!slot.ok()) {
      break; // no free slot: it waits for a running request to end
    }
    auto shared = std::make_shared<Request>();
    shared->request = std::move(waiting_.front().first);
    shared->sink = std::move(waiting_.front().second);
    waiting_.pop_front();
    --stats_.waiting;
    shared->sink->onScheduled();
    const SequenceRequest &r = shared->request;
    for (int choice = 0; choice < r.n; ++choice) {
      auto a = std::make_unique<Active>();
      a->shared = shared;
      a->choice = choice;
      a->sampling = r.sampling;
      a->sampling.seed = r.sampling.seed + static_cast<uint64_t>(choice);
      if (r.minTokens > 0) {
        a->banned = withEndTokensBanned(a->sampling, r.eosIds);
      }
      if (r.constraint) {
        a->constraint = r.constraint->clone();
      }
      if (r.draft && maxDrafts_ > 0 && widestWindow_ > 1) {
        a->drafter = drafters_();
      }
      a->tokens = r.prompt;
      a->promptTokens = static_cast<int64_t>(r.prompt.size());
      a->slot = choice == 0 ? *slot : -1;
      a->awaitingFork = choice > 0;
      ++stats_.running;
      running.push_back(std::move(a));
    }
  }
  // Choice 0 of each request just admitted resumes what is kept of its prompt (outside the
  // queue's lock: resume takes it for the statistics).
  for (size_t i = admitted; i < running.size(); ++i) {
    if (running[i]->slot >= 0) {
      resume(*running[i]);
    }
  }

  // 2. Prefill, oldest first, at most one prefill program's worth of tokens in all. A prompt is
  // split only at multiples of that size, where the engine splits it anyway, so a reply does not
  // depend on what else was running. Pages the decoding sequences need next are kept for them.
  // (A plan without prefill programs gets the whole prompt, so that the engine's error names it.)
  const int64_t programRows = engine_->prefillChunk();
  const int64_t chunk = programRows > 0 ? programRows : std::numeric_limits<int64_t>::max();
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
    if (a.sink().cancelled()) {
      a.sink().onFinish(a.choice, FinishReason::Cancelled, Status::success());
      finish(i);
      continue;
    }
    const int64_t n = std::min(target - a.inEngine, chunk);
    if (n > budget) {
      break;
    }
    // Kept states give their pages up before a prefill waits for them.
    while (engine_->pagesNeeded(a.slot, n) > engine_->freePages() - reserved && evictKept()) {
    }
    if (engine_->pagesNeeded(a.slot, n) > engine_->freePages() - reserved) {
      blocked = &a;
      break;
    }
    budget -= n;
    Expected<SampledToken> token =
        engine_->prefillSample(a.slot,
                               std::span<const int32_t>(a.tokens).subspan(
                                   static_cast<size_t>(a.inEngine), static_cast<size_t>(n)),
                               a.stepSampling(engine_->vocabSize()));
    if (!token.ok()) {
      a.sink().onFinish(a.choice, FinishReason::Error, token.status());
      finish(i);
      continue;
    }
    prefilled = true;
    a.inEngine += n;
    if (a.generated == 0 && a.inEngine < target) {
      // A chunk boundary inside the prompt: kept, the one kept kKeptBoundaries chunks ago let go.
      if (std::optional<uint64_t> serial = keep(a)) {
        a.boundaries.push_back(*serial);
        if (a.boundaries.size() > kKeptBoundaries) {
          if (std::optional<int> old = cache_.remove(a.boundaries.front())) {
            engine_->dropState(*old);
            std::lock_guard<std::mutex> lock(mutex_);
            stats_.keptStates = static_cast<int64_t>(cache_.size());
          }
          a.boundaries.erase(a.boundaries.begin());
        }
      }
    } else if (a.generated == 0) {
      keep(a); // the prompt's end
    }
    if (a.inEngine == target && a.generated == 0 && !a.forks()) {
      // The prompt is in: its last row gives the first token.
      if (!deliver(a, *token)) {
        finish(i, true);
        continue;
      }
    }
  }

  // The choices waiting for a prompt that is now in fork it, so that they decode its last token
  // in the same step as choice 0.
  for (size_t i = 0; i < running.size(); ++i) {
    Active &a = *running[i];
    if (a.choice == 0 && a.forks() && a.generated == 0 && a.slot >= 0 &&
        a.inEngine == a.prefillTarget()) {
      fork(running, a);
    }
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
        // This step's window at most: a sequence far behind catches up a window at a time.
        needed +=
            engine_->pagesNeeded(running[i]->slot, std::min(1 + running[i]->behind, widestWindow_));
      }
    }
    // Kept states give their pages up first; then the newest running sequence.
    if (needed <= engine_->freePages() || (!evictKept() && !preemptNewest(nullptr))) {
      break;
    }
  }
  if (decoding.empty()) {
    // Nothing decodes and the oldest prefill waits for pages that newer prefills hold: free
    // theirs. A request that cannot fit even alone has to fail.
    if (blocked != nullptr && !prefilled && !preemptNewest(blocked)) {
      for (size_t i = 0; i < running.size(); ++i) {
        if (running[i].get() == blocked) {
          blocked->sink().onFinish(
              blocked->choice, FinishReason::Error,
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
  // Drafts, where the plan verifies windows this wide for this many sequences and the pool has
  // the pages. A sequence further behind than a window holds (after a preemption, or when the
  // batch grew) catches up in windows of its known tokens; where the plan has no window of more
  // than one row, the next prefill feeds them instead (the reply's rows then get the prefill
  // kernels' bits).
  const int64_t window = engine_->maxWindow(decoding.size());
  std::vector<Round> rounds;
  bool windows = false;
  int64_t spare = engine_->freePages();
  for (size_t i : decoding) {
    Active &a = *running[i];
    const int64_t known = 1 + a.behind;
    spare -= engine_->pagesNeeded(a.slot, std::min(known, window));
    if (known > window) {
      if (window == 1) {
        a.behind = 0; // no longer decoding: a prefill chunk catches it up next step
      } else {
        rounds.push_back({i, {}, window});
        windows = true;
      }
      continue;
    }
    rounds.push_back({i, {}});
    windows |= a.behind > 0;
    if (!a.mayDraft()) {
      continue;
    }
    // Never past max_tokens: every accepted draft is a token of the reply.
    const int64_t most = std::min(
        {window - known, maxDrafts_, a.draftLimit, a.request().maxTokens - a.generated - 1});
    std::vector<int32_t> guess = a.drafter->draft(a.tokens, a.headGuess, most);
    const int64_t pages = engine_->pagesNeeded(a.slot, known + static_cast<int64_t>(guess.size())) -
                          engine_->pagesNeeded(a.slot, known);
    if (!guess.empty() && pages <= spare) {
      spare -= pages;
      rounds.back().drafts = std::move(guess);
      windows = true;
    }
  }
  if (windows) {
    verify(running, rounds, finish);
    return;
  }
  decoding.clear();
  for (const Round &round : rounds) {
    decoding.push_back(round.index);
  }
  if (decoding.empty()) {
    return;
  }
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  std::vector<RowSampling> sampling;
  for (size_t i : decoding) {
    slots.push_back(running[i]->slot);
    tokens.push_back(running[i]->tokens.back());
    sampling.push_back(running[i]->stepSampling(engine_->vocabSize()));
  }
  Expected<std::vector<SampledToken>> picked = engine_->decodeSample(slots, tokens, sampling);
  // Backwards, so that finishing one does not move the indices still to come.
  for (size_t k = decoding.size(); k-- > 0;) {
    const size_t i = decoding[k];
    if (!picked.ok()) {
      running[i]->sink().onFinish(running[i]->choice, FinishReason::Error, picked.status());
      finish(i);
      continue;
    }
    ++running[i]->inEngine;
    if (!deliver(*running[i], (*picked)[k])) {
      finish(i, true);
    }
  }
}

void Scheduler::verify(std::vector<std::unique_ptr<Active>> &running,
                       const std::vector<Round> &rounds,
                       const std::function<void(size_t, bool)> &finish) {
  std::vector<VerifyWindow> windows;
  for (const Round &round : rounds) {
    Active &a = *running[round.index];
    const auto lacking =
        std::span<const int32_t>(a.tokens).subspan(static_cast<size_t>(a.inEngine));
    const auto known = round.feed > 0 ? lacking.first(static_cast<size_t>(round.feed)) : lacking;
    windows.push_back({a.slot, known, round.drafts, a.stepSampling(engine_->vocabSize())});
  }
  Expected<std::vector<VerifiedWindow>> verified = engine_->verifySample(windows);
  // Backwards, so that finishing one does not move the indices still to come.
  for (size_t k = rounds.size(); k-- > 0;) {
    const size_t i = rounds[k].index;
    Active &a = *running[i];
    if (!verified.ok()) {
      a.sink().onFinish(a.choice, FinishReason::Error, verified.status());
      finish(i, false);
      continue;
    }
    if (rounds[k].feed > 0) {
      a.inEngine += rounds[k].feed;
      a.behind -= rounds[k].feed;
      continue;
    }
    const VerifiedWindow &v = (*verified)[k];
    const int64_t drafted = static_cast<int64_t>(rounds[k].drafts.size());
    if (drafted > 0) {
      const int64_t accepted = static_cast<int64_t>(v.tokens.size()) - 1;
      // A window costs its rows' bytes (each row reads its own experts: on a GB10 a 16-row window
      // of GLM-5.3-Flash reads ~7.7x a one-row step's, docs/speculative-decoding.md), so a
      // sequence drafts long only while its drafts keep being right: the limit doubles (3, 7, 15)
      // with every window taken whole and falls back to the first with a rejection.
      a.draftLimit = accepted == drafted
                         ? std::min({2 * a.draftLimit + 1, maxDrafts_, widestWindow_ - 1})
                         : kFirstDrafts;
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.specDrafts;
      stats_.specDraftTokens += drafted;
      stats_.specAcceptedTokens += accepted;
      if (static_cast<int64_t>(stats_.specAcceptedPerPosition.size()) < drafted) {
        stats_.specAcceptedPerPosition.resize(static_cast<size_t>(drafted), 0);
      }
      for (int64_t j = 0; j < accepted; ++j) {
        ++stats_.specAcceptedPerPosition[static_cast<size_t>(j)];
      }
    }
    if (v.fed) {
      a.inEngine += static_cast<int64_t>(windows[k].known.size()) + drafted;
    }
    bool going = true;
    for (const SampledToken &token : v.tokens) {
      if (!deliver(a, token)) {
        going = false;
        break;
      }
    }
    if (!going) {
      finish(i, true);
      continue;
    }
    a.behind = static_cast<int64_t>(a.tokens.size()) - 1 - a.inEngine;
  }
}

} // namespace glm::runtime
