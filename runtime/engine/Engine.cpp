// Sequence bookkeeping and the plan facts every backend shares.
#include "runtime/engine/Engine.h"

#include <algorithm>
#include <cstring>

namespace glm::runtime {

void SequenceTable::init(int64_t maxSequences, const plan::StatePool *pool) {
  sequences_.assign(static_cast<size_t>(std::max<int64_t>(maxSequences, 1)), Sequence{});
  kept_.clear();
  freePages_.clear();
  holders_.clear();
  // A model without sparse MLA layers has no paged state: its sequences hold no pages.
  paged_ = pool != nullptr && pool->page_bytes() > 0;
  if (pool != nullptr) {
    pageTokens_ = pool->page_tokens();
    maxContext_ = static_cast<int64_t>(pool->max_context());
    // Pages are handed out lowest first.
    for (int32_t page = static_cast<int32_t>(pool->page_count()) - 1; page >= 0; --page) {
      freePages_.push_back(page);
    }
    holders_.assign(pool->page_count(), 0);
  }
}

void SequenceTable::take(std::vector<int32_t> &pages) {
  for (int32_t page : pages) {
    ++holders_[static_cast<size_t>(page)];
  }
}

void SequenceTable::release(std::vector<int32_t> &pages) {
  // Freed in reverse, so that a sequence's pages are handed out again lowest first.
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    if (--holders_[static_cast<size_t>(*it)] == 0) {
      freePages_.push_back(*it);
    }
  }
  pages.clear();
}

Expected<int> SequenceTable::open() {
  for (size_t slot = 0; slot < sequences_.size(); ++slot) {
    if (!sequences_[slot].active) {
      sequences_[slot] = Sequence{true, 0, {}};
      return static_cast<int>(slot);
    }
  }
  return Status(StatusCode::Unavailable,
                strCat("all ", sequences_.size(), " sequence slots are in use"));
}

void SequenceTable::close(int slot) {
  if (active(slot)) {
    Sequence &s = sequences_[static_cast<size_t>(slot)];
    release(s.pages);
    s = Sequence{};
  }
}

void SequenceTable::empty(int slot) {
  if (active(slot)) {
    release(sequences_[static_cast<size_t>(slot)].pages);
    sequences_[static_cast<size_t>(slot)].length = 0;
  }
}

bool SequenceTable::active(int slot) const {
  return slot >= 0 && static_cast<size_t>(slot) < sequences_.size() &&
         sequences_[static_cast<size_t>(slot)].active;
}

int64_t SequenceTable::length(int slot) const {
  return active(slot) ? sequences_[static_cast<size_t>(slot)].length : 0;
}

void SequenceTable::advance(int slot, int64_t tokens) {
  if (active(slot)) {
    sequences_[static_cast<size_t>(slot)].length += tokens;
  }
}

void SequenceTable::rewind(int slot, int64_t length) {
  if (active(slot)) {
    Sequence &s = sequences_[static_cast<size_t>(slot)];
    s.length = std::clamp<int64_t>(length, 0, s.length);
  }
}

const std::vector<int32_t> &SequenceTable::pages(int slot) const {
  static const std::vector<int32_t> none;
  return active(slot) ? sequences_[static_cast<size_t>(slot)].pages : none;
}

Status SequenceTable::reserve(int slot, int64_t tokens) {
  if (!paged_) {
    return Status::success();
  }
  std::vector<int32_t> &pages = sequences_[static_cast<size_t>(slot)].pages;
  const size_t needed = static_cast<size_t>((tokens + pageTokens_ - 1) / pageTokens_);
  while (pages.size() < needed) {
    if (freePages_.empty()) {
      return Status(StatusCode::Unavailable,
                    strCat("the state pool is full: a sequence of ", tokens,
                           " tokens needs more pages than are free (the plan holds ", maxContext_,
                           " tokens of context)"));
    }
    pages.push_back(freePages_.back());
    freePages_.pop_back();
    holders_[static_cast<size_t>(pages.back())] = 1;
  }
  return Status::success();
}

int64_t SequenceTable::pagesNeeded(int slot, int64_t more) const {
  if (!paged_) {
    return 0;
  }
  const int64_t held = static_cast<int64_t>(pages(slot).size());
  const int64_t needed = (length(slot) + more + pageTokens_ - 1) / pageTokens_;
  return std::max<int64_t>(needed - held, 0);
}

int SequenceTable::keep(int slot) {
  const Sequence &s = sequences_[static_cast<size_t>(slot)];
  Sequence k{true, s.length, {}};
  if (paged_) {
    const size_t held = static_cast<size_t>((s.length + pageTokens_ - 1) / pageTokens_);
    k.pages.assign(s.pages.begin(), s.pages.begin() + static_cast<std::ptrdiff_t>(held));
    take(k.pages);
  }
  for (size_t id = 0; id < kept_.size(); ++id) {
    if (!kept_[id].active) {
      kept_[id] = std::move(k);
      return static_cast<int>(id);
    }
  }
  kept_.push_back(std::move(k));
  return static_cast<int>(kept_.size() - 1);
}

void SequenceTable::drop(int id) {
  if (kept(id)) {
    Sequence &k = kept_[static_cast<size_t>(id)];
    release(k.pages);
    k = Sequence{};
  }
}

bool SequenceTable::kept(int id) const {
  return id >= 0 && static_cast<size_t>(id) < kept_.size() && kept_[static_cast<size_t>(id)].active;
}

int64_t SequenceTable::keptLength(int id) const {
  return kept(id) ? kept_[static_cast<size_t>(id)].length : 0;
}

int64_t SequenceTable::pagesOnlyKept() const {
  std::vector<int32_t> byKept(holders_.size(), 0);
  for (const Sequence &k : kept_) {
    for (int32_t page : k.pages) {
      ++byKept[static_cast<size_t>(page)];
    }
  }
  int64_t only = 0;
  for (size_t page = 0; page < holders_.size(); ++page) {
    only += byKept[page] > 0 && byKept[page] == holders_[page];
  }
  return only;
}

Expected<SequenceTable::PageCopy> SequenceTable::resume(int id, int slot) {
  const Sequence &k = kept_[static_cast<size_t>(id)];
  Sequence &s = sequences_[static_cast<size_t>(slot)];
  PageCopy copy;
  std::vector<int32_t> pages = k.pages;
  if (paged_ && k.length % pageTokens_ != 0) {
    if (freePages_.empty()) {
      return Status(StatusCode::Unavailable, "the state pool has no free page to resume into");
    }
    copy.from = pages.back();
    copy.to = freePages_.back();
    freePages_.pop_back();
    pages.back() = copy.to;
    pages.pop_back();
    take(pages);
    pages.push_back(copy.to);
    holders_[static_cast<size_t>(copy.to)] = 1;
  } else {
    take(pages);
  }
  s.pages = std::move(pages);
  s.length = k.length;
  return copy;
}

Expected<int> Engine::newSequence() {
  GLM_ASSIGN_OR_RETURN(int slot, sequences_.open());
  if (Status s = clearSlots(slot); !s.ok()) {
    sequences_.close(slot);
    return s;
  }
  return slot;
}

Status Engine::initCommon(const plan::Plan &p, std::string source) {
  source_ = std::move(source);
  sequences_.init(p.state_pool() ? p.state_pool()->max_sequences() : 1, p.state_pool());
  for (const plan::Program *program : *p.programs()) {
    if (program->kind() == plan::ProgramKind::Prefill &&
        (!prefill_ || program->rows() > prefill_->rows())) {
      prefill_ = program;
    }
    for (const plan::IoSlot *io : *program->io()) {
      if (io->kind() == plan::IoKind::Logits) {
        vocab_ = io->tensor()->shape()->Get(1);
      }
    }
  }
  if (vocab_ <= 0) {
    return invalidArgument("the plan has no logits io slot");
  }
  return Status::success();
}

Expected<Engine::RunOutput> Engine::prefillChunks(int slot, std::span<const int32_t> tokens,
                                                  LogitRows rows, bool logits,
                                                  std::span<const RowSampling> sampling) {
  if (!sequences_.active(slot)) {
    return invalidArgument("sequence slot ", slot, " is not in use");
  }
  GLM_RETURN_IF_ERROR(checkTokens(tokens));
  if (prefill_ == nullptr) {
    return invalidArgument(source_, ": the plan has no prefill program");
  }
  if (logits && rows == LogitRows::All && prefill_->last_row_logits()) {
    return invalidArgument(source_,
                           ": its prefill programs compute each chunk's last row's logits only "
                           "(compile with --prefill-logits all for every row's)");
  }
  RunOutput out;
  for (size_t start = 0; start < tokens.size(); start += prefill_->rows()) {
    const size_t n = std::min<size_t>(prefill_->rows(), tokens.size() - start);
    const bool last = start + n == tokens.size();
    // Every chunk but the last only appends state; with LogitRows::Last only the final row
    // comes back.
    const LogitsBack back = !logits                  ? LogitsBack::None
                            : rows == LogitRows::All ? LogitsBack::All
                            : last                   ? LogitsBack::Last
                                                     : LogitsBack::None;
    // The MTP head embeds the token after each row: after a chunk's last, the next chunk's first.
    const std::span<const int32_t> following =
        last ? std::span<const int32_t>() : tokens.subspan(start + n, 1);
    GLM_ASSIGN_OR_RETURN(
        RunOutput chunk,
        run(*prefill_, tokens.subspan(start, n), {{slot, 0, static_cast<int64_t>(n)}}, back,
            {.rows = sampling, .readBack = !sampling.empty() && last, .following = following}));
    out.logits.insert(out.logits.end(), chunk.logits.begin(), chunk.logits.end());
    out.sampled = std::move(chunk.sampled);
  }
  return out;
}

Expected<std::vector<float>> Engine::prefill(int slot, std::span<const int32_t> tokens,
                                             LogitRows rows) {
  GLM_ASSIGN_OR_RETURN(RunOutput out, prefillChunks(slot, tokens, rows, true, {}));
  return std::move(out.logits);
}

Expected<SampledToken> Engine::prefillSample(int slot, std::span<const int32_t> tokens,
                                             const RowSampling &sampling,
                                             std::vector<float> *logits, LogitRows rows) {
  GLM_RETURN_IF_ERROR(checkSampling(*sampling.params));
  if (tokens.empty()) {
    return invalidArgument("a prefill that samples needs at least one token");
  }
  GLM_ASSIGN_OR_RETURN(RunOutput out, prefillChunks(slot, tokens, rows, logits != nullptr,
                                                    std::span<const RowSampling>(&sampling, 1)));
  if (out.sampled.size() != 1) {
    return internalError("a prefill sampled ", out.sampled.size(), " tokens, not 1");
  }
  if (logits != nullptr) {
    *logits = std::move(out.logits);
  }
  return std::move(out.sampled.front());
}

Expected<Engine::RunOutput> Engine::decodeStep(std::span<const int> slots,
                                               std::span<const int32_t> tokens, LogitsBack back,
                                               RunSampling sampling) {
  GLM_RETURN_IF_ERROR(checkDecode(slots, tokens));
  const plan::Program *program = decodeProgramFor(slots.size());
  if (program == nullptr) {
    return invalidArgument(source_, ": no decode program takes ", slots.size(), " sequences");
  }
  std::vector<RowGroup> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    groups.push_back({slots[i], static_cast<int64_t>(i), 1});
  }
  return run(*program, tokens, groups, back, sampling);
}

Expected<std::vector<float>> Engine::decode(std::span<const int> slots,
                                            std::span<const int32_t> tokens) {
  GLM_ASSIGN_OR_RETURN(RunOutput out, decodeStep(slots, tokens, LogitsBack::All, {}));
  return std::move(out.logits);
}

Expected<std::vector<SampledToken>> Engine::decodeSample(std::span<const int> slots,
                                                         std::span<const int32_t> tokens,
                                                         std::span<const RowSampling> sampling,
                                                         std::vector<float> *logits) {
  if (sampling.size() != slots.size()) {
    return invalidArgument("decode needs one sampling per sequence");
  }
  for (const RowSampling &row : sampling) {
    GLM_RETURN_IF_ERROR(checkSampling(*row.params));
  }
  GLM_ASSIGN_OR_RETURN(RunOutput out,
                       decodeStep(slots, tokens,
                                  logits != nullptr ? LogitsBack::All : LogitsBack::None,
                                  {sampling, true}));
  if (logits != nullptr) {
    *logits = std::move(out.logits);
  }
  return std::move(out.sampled);
}

int64_t Engine::maxWindow(size_t sequences) const { return maxWindowOf(plan(), sequences); }

int64_t Engine::maxWindowOf(const plan::Plan &plan, size_t sequences,
                            std::vector<std::string> *programs) {
  int64_t rows = 1;
  for (const plan::Program *p : *plan.programs()) {
    if (p->kind() != plan::ProgramKind::Decode || p->last_row_logits()) {
      continue;
    }
    if (p->batch() >= sequences) {
      rows = std::max<int64_t>(rows, p->rows());
    }
    if (programs != nullptr && p->rows() > 1) {
      programs->push_back(strCat(p->batch(), "x", p->rows()));
    }
  }
  return rows;
}

bool Engine::guessesAhead(const plan::Plan &plan) {
  for (const plan::Program *p : *plan.programs()) {
    for (const plan::IoSlot *io : *p->io()) {
      if (io->kind() == plan::IoKind::DraftIds) {
        return true;
      }
    }
  }
  return false;
}

const plan::Program *Engine::windowProgramFor(size_t sequences, int64_t rows) const {
  const plan::Program *program = nullptr;
  auto size = [](const plan::Program *p) { return uint64_t{p->batch()} * p->rows(); };
  for (const plan::Program *p : *plan().programs()) {
    if (p->kind() == plan::ProgramKind::Decode && !p->last_row_logits() &&
        p->batch() >= sequences && p->rows() >= rows && (!program || size(p) < size(program))) {
      program = p;
    }
  }
  return program;
}

Expected<std::vector<std::vector<SampledToken>>>
Engine::runWindows(std::span<const VerifyWindow> windows) {
  if (windows.empty()) {
    return invalidArgument("a verify step needs at least one window");
  }
  std::vector<int32_t> tokens;
  std::vector<RowGroup> groups;
  std::vector<RowSampling> sampling;
  int64_t rows = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    const VerifyWindow &w = windows[i];
    if (!sequences_.active(w.slot)) {
      return invalidArgument("sequence slot ", w.slot, " is not in use");
    }
    for (size_t j = 0; j < i; ++j) {
      if (windows[j].slot == w.slot) {
        return invalidArgument("sequence slot ", w.slot, " appears twice in one verify step");
      }
    }
    if (w.known.empty()) {
      return invalidArgument("a verify window needs the token its next one follows");
    }
    if (w.sampling.params == nullptr) {
      return invalidArgument("a verify window needs its sampling");
    }
    GLM_RETURN_IF_ERROR(checkSampling(*w.sampling.params));
    const int64_t count = static_cast<int64_t>(w.known.size() + w.drafts.size());
    groups.push_back({w.slot, static_cast<int64_t>(tokens.size()), count});
    tokens.insert(tokens.end(), w.known.begin(), w.known.end());
    tokens.insert(tokens.end(), w.drafts.begin(), w.drafts.end());
    sampling.push_back(w.sampling);
    rows = std::max(rows, count);
  }
  GLM_RETURN_IF_ERROR(checkTokens(tokens));
  const plan::Program *program = windowProgramFor(windows.size(), rows);
  if (program == nullptr) {
    return invalidArgument(source_, ": no decode program takes ", windows.size(),
                           " verify windows of ", rows,
                           " rows (the largest window for that many "
                           "is ",
                           maxWindow(windows.size()), ")");
  }
  for (const VerifyWindow &w : windows) {
    if (!w.drafts.empty()) {
      GLM_RETURN_IF_ERROR(checkpointSlots(w.slot));
    }
  }
  GLM_ASSIGN_OR_RETURN(RunOutput out,
                       run(*program, tokens, groups, LogitsBack::None, {sampling, true, true}));
  if (out.sampled.size() != tokens.size()) {
    return internalError("a verify step drew ", out.sampled.size(), " tokens for ", tokens.size(),
                         " rows");
  }
  std::vector<std::vector<SampledToken>> drawn;
  for (const RowGroup &g : groups) {
    const auto first = out.sampled.begin() + g.first;
    drawn.emplace_back(std::make_move_iterator(first), std::make_move_iterator(first + g.count));
  }
  return drawn;
}

Status Engine::rollbackWindow(int slot, int64_t length) {
  if (!sequences_.active(slot) || length > sequences_.length(slot)) {
    return invalidArgument("sequence slot ", slot, " cannot be rolled back to ", length, " tokens");
  }
  GLM_RETURN_IF_ERROR(restoreSlots(slot));
  sequences_.rewind(slot, length);
  return Status::success();
}

Expected<std::vector<VerifiedWindow>> Engine::verifySample(std::span<const VerifyWindow> windows) {
  std::vector<int64_t> lengths;
  for (const VerifyWindow &w : windows) {
    lengths.push_back(length(w.slot));
  }
  GLM_ASSIGN_OR_RETURN(std::vector<std::vector<SampledToken>> drawn, runWindows(windows));
  std::vector<VerifiedWindow> verified(windows.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    const VerifyWindow &w = windows[i];
    const size_t last = w.known.size() - 1; // the row whose draw is the first new token
    std::vector<SampledToken> &rows = drawn[i];
    size_t accepted = 0;
    while (accepted < w.drafts.size() && w.drafts[accepted] == rows[last + accepted].id) {
      ++accepted;
    }
    verified[i].tokens.assign(std::make_move_iterator(rows.begin() + last),
                              std::make_move_iterator(rows.begin() + last + accepted + 1));
    verified[i].fed = accepted == w.drafts.size();
    if (!verified[i].fed) {
      GLM_RETURN_IF_ERROR(rollbackWindow(w.slot, lengths[i]));
    }
  }
  return verified;
}

Status Engine::checkpointSlots(int) {
  return internalError("this engine does not checkpoint verify windows");
}

Status Engine::restoreSlots(int) {
  return internalError("this engine does not checkpoint verify windows");
}

Expected<int> Engine::forkSequence(int from) {
  if (!sequences_.active(from)) {
    return invalidArgument("sequence slot ", from, " is not in use");
  }
  const int64_t length = sequences_.length(from);
  GLM_ASSIGN_OR_RETURN(int to, sequences_.open());
  if (Status s = sequences_.reserve(to, length); !s.ok()) {
    sequences_.close(to);
    return s;
  }
  if (Status s = copyState(from, to); !s.ok()) {
    sequences_.close(to);
    return s;
  }
  sequences_.advance(to, length);
  return to;
}

Expected<int> Engine::keepState(int slot) {
  if (!sequences_.active(slot)) {
    return invalidArgument("sequence slot ", slot, " is not in use");
  }
  const int kept = sequences_.keep(slot);
  if (Status s = saveKept(slot, kept); !s.ok()) {
    dropState(kept);
    return s;
  }
  return kept;
}

Status Engine::resumeState(int kept, int slot) {
  if (!sequences_.kept(kept)) {
    return invalidArgument("kept state ", kept, " does not exist");
  }
  if (!sequences_.active(slot) || sequences_.length(slot) != 0 || !sequences_.pages(slot).empty()) {
    return invalidArgument("sequence slot ", slot, " is not a new sequence");
  }
  GLM_ASSIGN_OR_RETURN(SequenceTable::PageCopy copy, sequences_.resume(kept, slot));
  Status s = copy.from >= 0 ? copyPage(copy.from, copy.to) : Status::success();
  if (s.ok()) {
    s = loadKept(kept, slot);
  }
  if (!s.ok()) {
    // Back to a new sequence: its pages let go, its slots cleared.
    sequences_.empty(slot);
    (void)clearSlots(slot);
  }
  return s;
}

void Engine::dropState(int kept) {
  if (sequences_.kept(kept)) {
    freeKept(kept);
    sequences_.drop(kept);
  }
}

int64_t Engine::keptStateBytes() const {
  int64_t bytes = 0;
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      bytes += static_cast<int64_t>(s->unit_bytes());
    }
  }
  return bytes;
}

Status Engine::saveKept(int, int) {
  return internalError("this engine does not keep states itself");
}

Status Engine::loadKept(int, int) {
  return internalError("this engine does not keep states itself");
}

Status Engine::copyPage(int32_t, int32_t) {
  return internalError("this engine does not copy pages itself");
}

void Engine::countsAsPrompt(std::span<uint32_t> counts) {
  for (uint32_t &c : counts) {
    c = c != 0 ? kernels::kPromptSeenBit : 0;
  }
}

Status Engine::checkSampling(const SamplingParams &p) const {
  if (p.logitBias.size() > static_cast<size_t>(kernels::kSampleBiasEntries)) {
    return invalidArgument("logit_bias has ", p.logitBias.size(), " entries; at most ",
                           kernels::kSampleBiasEntries, " are allowed");
  }
  for (const auto &[id, bias] : p.logitBias) {
    if (id < 0 || id >= vocab_) {
      return invalidArgument("logit_bias names token ", id, ", outside the vocabulary [0, ", vocab_,
                             ")");
    }
  }
  if (p.logprobs > kernels::kSampleTopLogprobs) {
    return invalidArgument("top_logprobs is ", p.logprobs, "; at most ",
                           kernels::kSampleTopLogprobs, " are allowed");
  }
  if (!p.allowedTokens.empty() &&
      static_cast<int64_t>(p.allowedTokens.size()) != kernels::maskWords(vocab_)) {
    return invalidArgument("a token mask of ", p.allowedTokens.size(),
                           " words for a vocabulary of ", vocab_, " tokens (",
                           kernels::maskWords(vocab_), " words)");
  }
  return Status::success();
}

Engine::SamplingWords Engine::samplingWords(std::span<const RowSampling> rows, size_t batch,
                                            std::span<const int32_t> following) const {
  static_assert(sizeof(kernels::SampleWords) == kernels::kSampleParamWords * 4);
  static_assert(kMaxTopLogprobs == kernels::kSampleTopLogprobs &&
                    kMaxLogitBias == kernels::kSampleBiasEntries,
                "the API's limits are the sampler's");
  SamplingWords w;
  w.params.assign(batch, kernels::SampleWords{});
  for (size_t b = 0; b < following.size() && b < batch; ++b) {
    w.params[b].following = following[b] + 1;
  }
  const size_t words = static_cast<size_t>(kernels::maskWords(vocab_));
  for (size_t b = 0; b < rows.size() && b < batch; ++b) {
    const SamplingParams &p = *rows[b].params;
    kernels::SampleWords &k = w.params[b];
    k.temperature = p.temperature;
    k.topP = p.topP;
    k.minP = p.minP;
    k.topK = p.topK;
    k.seedLo = static_cast<uint32_t>(p.seed);
    k.seedHi = static_cast<uint32_t>(p.seed >> 32);
    k.presence = p.presencePenalty;
    k.frequency = p.frequencyPenalty;
    k.repetition = p.repetitionPenalty;
    k.promptTokens = static_cast<int32_t>(rows[b].promptTokens);
    k.logprobs = p.logprobs;
    // The bias and mask slots are filled only when a sequence has them (a decode step of 64
    // sequences would otherwise build 1.4 MB of zeros); the sampler reads a sequence's rows of
    // them only when its words say so.
    if (!p.logitBias.empty()) {
      if (w.bias.empty()) {
        w.bias.assign(batch * 2 * kernels::kSampleBiasEntries, 0);
      }
      // Sorted by id: the kernel's blocks find their slice's entries in order.
      std::vector<std::pair<int32_t, float>> bias = p.logitBias;
      std::sort(bias.begin(), bias.end());
      k.biasCount = static_cast<int32_t>(bias.size());
      for (size_t e = 0; e < bias.size(); ++e) {
        int32_t *entry = &w.bias[b * 2 * kernels::kSampleBiasEntries + 2 * e];
        entry[0] = bias[e].first;
        std::memcpy(&entry[1], &bias[e].second, sizeof(float));
      }
    }
    if (!p.allowedTokens.empty()) {
      if (w.mask.empty()) {
        w.mask.assign(batch * words, 0);
      }
      k.hasMask = 1;
      std::copy(p.allowedTokens.begin(), p.allowedTokens.end(), w.mask.begin() + b * words);
    }
  }
  return w;
}

SampledToken Engine::sampledToken(const int32_t *ids, const float *logprobs,
                                  const int32_t *draftIds, const RowSampling *sampling) {
  SampledToken t;
  t.id = ids[0];
  t.draft = draftIds != nullptr ? draftIds[0] : -1;
  const int32_t k = sampling != nullptr ? sampling->params->logprobs : -1;
  if (k >= 0) {
    t.logprob = logprobs[0];
    for (int32_t j = 1; j <= k && ids[j] >= 0; ++j) {
      t.top.push_back({ids[j], logprobs[j]});
    }
  }
  return t;
}

Expected<Engine::RunOutput> Engine::run(const plan::Program &program, std::span<const int32_t>,
                                        const std::vector<RowGroup> &, LogitsBack, RunSampling) {
  return internalError("this engine does not run program ", program.name()->str(), " itself");
}

const plan::Program *Engine::decodeProgramFor(size_t sequences) const {
  const plan::Program *program = nullptr;
  for (const plan::Program *p : *plan().programs()) {
    if (p->kind() == plan::ProgramKind::Decode && p->rows() == 1 && p->batch() >= sequences &&
        (!program || p->batch() < program->batch())) {
      program = p;
    }
  }
  return program;
}

Status Engine::checkTokens(std::span<const int32_t> tokens) const {
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocab_) {
      return invalidArgument("token id ", id, " is outside the vocabulary [0, ", vocab_, ")");
    }
  }
  return Status::success();
}

Status Engine::checkDecode(std::span<const int> slots, std::span<const int32_t> tokens) const {
  if (slots.size() != tokens.size() || slots.empty()) {
    return invalidArgument("decode needs one token per sequence");
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!sequences_.active(slots[i])) {
      return invalidArgument("sequence slot ", slots[i], " is not in use");
    }
    for (size_t j = 0; j < i; ++j) {
      if (slots[j] == slots[i]) {
        return invalidArgument("sequence slot ", slots[i], " appears twice in one decode step");
      }
    }
  }
  return checkTokens(tokens);
}

} // namespace glm::runtime
