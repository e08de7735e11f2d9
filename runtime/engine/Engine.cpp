// Sequence bookkeeping and the plan facts every backend shares.
#include "runtime/engine/Engine.h"

#include <algorithm>

namespace glm::runtime {

void SequenceTable::init(int64_t maxSequences, const plan::StatePool *pool) {
  sequences_.assign(static_cast<size_t>(std::max<int64_t>(maxSequences, 1)), Sequence{});
  freePages_.clear();
  paged_ = pool != nullptr;
  if (pool != nullptr) {
    pageTokens_ = pool->page_tokens();
    maxContext_ = static_cast<int64_t>(pool->max_context());
    // Pages are handed out lowest first.
    for (int32_t page = static_cast<int32_t>(pool->page_count()) - 1; page >= 0; --page) {
      freePages_.push_back(page);
    }
  }
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
    freePages_.insert(freePages_.end(), s.pages.begin(), s.pages.end());
    s = Sequence{};
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

Expected<std::vector<float>> Engine::prefill(int slot, std::span<const int32_t> tokens,
                                             LogitRows rows) {
  if (!sequences_.active(slot)) {
    return invalidArgument("sequence slot ", slot, " is not in use");
  }
  GLM_RETURN_IF_ERROR(checkTokens(tokens));
  if (prefill_ == nullptr) {
    return invalidArgument(source_, ": the plan has no prefill program");
  }
  if (rows == LogitRows::All && prefill_->last_row_logits()) {
    return invalidArgument(source_,
                           ": its prefill programs compute each chunk's last row's logits only "
                           "(compile with --prefill-logits all for every row's)");
  }
  std::vector<float> logits;
  for (size_t start = 0; start < tokens.size(); start += prefill_->rows()) {
    const size_t n = std::min<size_t>(prefill_->rows(), tokens.size() - start);
    // Every chunk but the last only appends state; with LogitRows::Last only the final row
    // comes back.
    const LogitsBack back = rows == LogitRows::All       ? LogitsBack::All
                            : start + n == tokens.size() ? LogitsBack::Last
                                                         : LogitsBack::None;
    GLM_ASSIGN_OR_RETURN(std::vector<float> chunk, run(*prefill_, tokens.subspan(start, n),
                                                       {{slot, 0, static_cast<int64_t>(n)}}, back));
    logits.insert(logits.end(), chunk.begin(), chunk.end());
  }
  return logits;
}

Expected<std::vector<float>> Engine::decode(std::span<const int> slots,
                                            std::span<const int32_t> tokens) {
  GLM_RETURN_IF_ERROR(checkDecode(slots, tokens));
  const plan::Program *program = decodeProgramFor(slots.size());
  if (program == nullptr) {
    return invalidArgument(source_, ": no decode program takes ", slots.size(), " sequences");
  }
  std::vector<RowGroup> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    groups.push_back({slots[i], static_cast<int64_t>(i), 1});
  }
  return run(*program, tokens, groups, LogitsBack::All);
}

Expected<std::vector<float>> Engine::run(const plan::Program &program, std::span<const int32_t>,
                                         const std::vector<RowGroup> &, LogitsBack) {
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
