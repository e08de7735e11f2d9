// Vocabulary order, per-position token tables and per-sequence masks.
#include "server/grammar/TokenMask.h"

#include <algorithm>
#include <numeric>

namespace glm::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes,
                                 const std::vector<int32_t> &special)
    : bytes_(std::move(bytes)), spelled_(bytes_.size(), 0) {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    spelled_[i] = bytes_[i].empty() ? 0 : 1;
  }
  for (int32_t id : special) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) {
      spelled_[static_cast<size_t>(id)] = 0;
    }
  }
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (spelled_[i]) {
      sorted_.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)] ||
           (bytes_[static_cast<size_t>(a)] == bytes_[static_cast<size_t>(b)] && a < b);
  });
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)),
      tables_(grammar_.elements().size()) {}

size_t CompiledGrammar::positionsComputed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return computed_;
}

const PositionTokens &CompiledGrammar::position(uint32_t pos) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tables_[pos]) {
    return *tables_[pos];
  }
  auto table = std::make_unique<PositionTokens>();
  StackArena arena;
  Recognizer recognizer(grammar_, arena);
  StackSet start;
  recognizer.frame(pos, start);
  // Only tokens whose first byte the terminal takes can do anything from here.
  const ByteSet &first = grammar_.byteSet(grammar_.at(pos).value);
  const std::vector<int32_t> &sorted = vocabulary_->sorted();
  std::vector<int32_t> candidates;
  for (unsigned b = 0; b < 256; ++b) {
    if (!first.test(static_cast<uint8_t>(b))) {
      continue;
    }
    const char c = static_cast<char>(b);
    auto lo = std::lower_bound(sorted.begin(), sorted.end(), c, [&](int32_t id, char v) {
      return static_cast<uint8_t>(vocabulary_->bytes(id)[0]) < static_cast<uint8_t>(v);
    });
    auto hi = std::upper_bound(lo, sorted.end(), c, [&](char v, int32_t id) {
      return static_cast<uint8_t>(v) < static_cast<uint8_t>(vocabulary_->bytes(id)[0]);
    });
    candidates.insert(candidates.end(), lo, hi);
  }
  std::vector<int32_t> accepted;
  walkTokens(recognizer, start, *vocabulary_, candidates,
             [&](int32_t id, bool alive, bool escapedBeforeEnd) {
               if (alive) {
                 accepted.push_back(id);
               } else if (escapedBeforeEnd) {
                 table->uncertain.push_back(id);
               }
             });
  if (accepted.size() > vocabulary_->words()) {
    table->acceptedMask.assign(vocabulary_->words(), 0);
    for (int32_t id : accepted) {
      table->acceptedMask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    }
  } else {
    table->acceptedIds = std::move(accepted);
  }
  tables_[pos] = std::move(table);
  ++computed_;
  return *tables_[pos];
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  Recognizer recognizer(grammar_->grammar(), arena_);
  recognizer.start(state_);
}

Matcher::Matcher(const Matcher &other) : grammar_(other.grammar_) {
  compact(other.arena_, other.state_, arena_, state_);
}

void Matcher::fillMask(std::span<uint32_t> mask, std::span<const int32_t> eosIds) {
  const Grammar &g = grammar_->grammar();
  const TokenVocabulary &vocabulary = grammar_->vocabulary();
  const size_t words = std::min(mask.size(), vocabulary.words());
  auto set = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) / 32 < mask.size()) {
      mask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    }
  };
  auto isSet = [&](int32_t id) {
    return static_cast<size_t>(id) / 32 < mask.size() &&
           ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) != 0;
  };
  std::vector<const PositionTokens *> tables(state_.tops.size(), nullptr);
  for (size_t i = 0; i < state_.tops.size(); ++i) {
    const Element &e = g.at(arena_.node(state_.tops[i]).pos);
    if (e.kind == ElementKind::Token) {
      set(static_cast<int32_t>(e.value));
      continue;
    }
    const PositionTokens &t = grammar_->position(arena_.node(state_.tops[i]).pos);
    tables[i] = &t;
    if (!t.acceptedMask.empty()) {
      for (size_t w = 0; w < words; ++w) {
        mask[w] |= t.acceptedMask[w];
      }
    } else {
      for (int32_t id : t.acceptedIds) {
        set(id);
      }
    }
  }
  // The uncertain tokens of each stack, run with that stack's real frames below.
  Recognizer recognizer(g, arena_);
  std::vector<int32_t> open;
  for (size_t i = 0; i < state_.tops.size(); ++i) {
    if (!tables[i] || tables[i]->uncertain.empty()) {
      continue;
    }
    open.clear();
    for (int32_t id : tables[i]->uncertain) {
      if (!isSet(id)) {
        open.push_back(id);
      }
    }
    StackSet start;
    start.tops.push_back(state_.tops[i]);
    walkTokens(recognizer, start, vocabulary, open, [&](int32_t id, bool alive, bool) {
      if (alive) {
        set(id);
      }
    });
  }
  if (state_.accepting) {
    for (int32_t id : eosIds) {
      set(id);
    }
  }
}

bool Matcher::step(int32_t id, StackSet &out) {
  const TokenVocabulary &vocabulary = grammar_->vocabulary();
  Recognizer recognizer(grammar_->grammar(), arena_);
  if (id < 0 || id >= vocabulary.size() || !vocabulary.spelled(id)) {
    recognizer.advanceToken(state_, id, out);
    return !out.tops.empty() || out.accepting;
  }
  return recognizer.advanceBytes(state_, vocabulary.bytes(id), out) &&
         (!out.tops.empty() || out.accepting);
}

bool Matcher::allows(int32_t id) {
  StackSet out;
  return step(id, out);
}

bool Matcher::advance(int32_t id) {
  StackSet out;
  if (!step(id, out)) {
    return false;
  }
  StackArena fresh;
  StackSet moved;
  compact(arena_, out, fresh, moved);
  arena_ = std::move(fresh);
  state_ = std::move(moved);
  return true;
}

} // namespace glm::grammar
