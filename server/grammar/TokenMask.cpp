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

size_t CompiledGrammar::contextsComputed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contexts_;
}

void TokenWalk::reset(const StackSet &start) {
  states_.clear();
  byHash_.clear();
  next_.clear();
  out_ = start;
  intern();
}

uint32_t TokenWalk::intern() {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (out_.accepting ? 1 : 0) ^ (out_.escaped ? 2 : 0);
  for (int32_t top : out_.tops) {
    h = (h ^ static_cast<uint32_t>(top)) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (;; ++h) {
    auto [it, added] = byHash_.try_emplace(h, static_cast<uint32_t>(states_.size()));
    if (added) {
      states_.push_back(std::move(out_));
      next_.resize(states_.size() * 256, -1);
      out_ = StackSet{};
      return it->second;
    }
    const StackSet &s = states_[it->second];
    if (s.tops == out_.tops && s.accepting == out_.accepting && s.escaped == out_.escaped) {
      return it->second;
    }
  }
}

uint32_t TokenWalk::step(Recognizer &recognizer, uint32_t state, uint8_t b) {
  const size_t key = static_cast<size_t>(state) * 256 + b;
  if (next_[key] >= 0) {
    return static_cast<uint32_t>(next_[key]);
  }
  recognizer.advance(states_[state], b, out_);
  const uint32_t to = intern();
  next_[key] = static_cast<int32_t>(to);
  return to;
}

size_t CompiledGrammar::tableBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto bytes = [](auto &&self, const ContextTable &t) -> size_t {
    size_t n = 4 * (t.tokens.acceptedMask.size() + t.tokens.acceptedIds.size() +
                    t.tokens.uncertainMask.size() + t.tokens.uncertainIds.size());
    for (const auto &child : t.deeper) {
      n += self(self, *child.second);
    }
    return n;
  };
  size_t total = 0;
  for (const auto &t : tables_) {
    total += t ? bytes(bytes, *t) : 0;
  }
  return total;
}

void PositionTokens::uncertain(const TokenVocabulary &vocabulary, std::vector<int32_t> &out) const {
  if (uncertainMask.empty()) {
    out.assign(uncertainIds.begin(), uncertainIds.end());
    return;
  }
  out.clear();
  out.reserve(uncertainCount);
  for (int32_t id : vocabulary.sorted()) {
    if ((uncertainMask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) {
      out.push_back(id);
    }
  }
}

namespace {

/// Sorts the walk's verdicts into `table`: accepted ids (a mask when many), uncertain ids.
struct TableFill {
  const TokenVocabulary &vocabulary;
  PositionTokens &table;
  std::vector<int32_t> accepted;

  void operator()(int32_t id, bool alive, bool escapedBeforeEnd) {
    if (alive) {
      accepted.push_back(id);
    } else if (escapedBeforeEnd) {
      table.uncertainIds.push_back(id);
    }
  }
  void finish() {
    table.uncertainCount = table.uncertainIds.size();
    if (table.uncertainIds.size() > vocabulary.words()) {
      table.uncertainMask.assign(vocabulary.words(), 0);
      for (int32_t id : table.uncertainIds) {
        table.uncertainMask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      }
      table.uncertainIds = {};
    }
    if (accepted.size() > vocabulary.words()) {
      table.acceptedMask.assign(vocabulary.words(), 0);
      for (int32_t id : accepted) {
        table.acceptedMask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      }
    } else {
      table.acceptedIds = std::move(accepted);
    }
  }
};

} // namespace

ContextTable &CompiledGrammar::rootTable(uint32_t pos) const {
  if (tables_[pos]) {
    return *tables_[pos];
  }
  auto table = std::make_unique<ContextTable>();
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
  TableFill fill{*vocabulary_, table->tokens, {}};
  walkTokens(recognizer, start, *vocabulary_, candidates, fill);
  fill.finish();
  tables_[pos] = std::move(table);
  ++computed_;
  return *tables_[pos];
}

std::unique_ptr<ContextTable> CompiledGrammar::deeperTable(const std::vector<int64_t> &frames,
                                                           const PositionTokens &shallower) const {
  auto table = std::make_unique<ContextTable>();
  StackArena arena;
  Recognizer recognizer(grammar_, arena);
  // The stack of these frames, bottom up, over an unknown caller (or none: kBottomFrame).
  int32_t below = frames.back() == kBottomFrame ? kBottom : kFrame;
  const size_t n = frames.back() == kBottomFrame ? frames.size() - 1 : frames.size();
  for (size_t i = n; i-- > 0;) {
    below = arena.intern(static_cast<uint32_t>(frames[i]), below);
  }
  StackSet start;
  start.tops.push_back(below);
  TableFill fill{*vocabulary_, table->tokens, {}};
  std::vector<int32_t> ids;
  shallower.uncertain(*vocabulary_, ids);
  walkTokens(recognizer, start, *vocabulary_, ids, fill);
  fill.finish();
  ++contexts_;
  return table;
}

const PositionTokens &CompiledGrammar::position(uint32_t pos) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rootTable(pos).tokens;
}

void CompiledGrammar::contextTables(const StackArena &arena, int32_t top,
                                    std::vector<const PositionTokens *> &out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const StackNode &node = arena.node(top);
  ContextTable *table = &rootTable(node.pos);
  out.push_back(&table->tokens);
  int32_t below = node.parent;
  std::vector<int64_t> frames; // filled only when a deeper table must be built
  size_t depth = 1;
  while (table->tokens.uncertainCount > 0 && depth < kMaxContextDepth) {
    const int64_t key = below == kBottom ? kBottomFrame : arena.node(below).pos;
    auto it = std::find_if(table->deeper.begin(), table->deeper.end(),
                           [&](const auto &child) { return child.first == key; });
    if (it == table->deeper.end()) {
      if (contexts_ >= kMaxContextTables) {
        break;
      }
      frames.clear();
      frames.push_back(node.pos);
      for (int32_t at = node.parent; frames.size() < depth; at = arena.node(at).parent) {
        frames.push_back(arena.node(at).pos);
      }
      frames.push_back(key);
      table->deeper.emplace_back(key, deeperTable(frames, table->tokens));
      it = table->deeper.end() - 1;
    }
    table = it->second.get();
    out.push_back(&table->tokens);
    if (below == kBottom) {
      break;
    }
    below = arena.node(below).parent;
    ++depth;
  }
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), recognizer_(grammar_->grammar(), arena_) {
  recognizer_.start(state_);
}

Matcher::Matcher(const Matcher &other)
    : grammar_(other.grammar_), recognizer_(grammar_->grammar(), arena_) {
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
  // Per top: the accepted tokens of its context tables; the tops whose deepest table still has
  // uncertain tokens are walked after, against their real stacks.
  open_.clear();
  stats_ = {state_.tops.size(), 0, 0};
  for (const int32_t top : state_.tops) {
    const Element &e = g.at(arena_.node(top).pos);
    if (e.kind == ElementKind::Token) {
      set(static_cast<int32_t>(e.value));
      continue;
    }
    chain_.clear();
    grammar_->contextTables(arena_, top, chain_);
    stats_.topUncertain += chain_.front()->uncertainCount;
    for (const PositionTokens *t : chain_) {
      if (!t->acceptedMask.empty()) {
        uint32_t *__restrict out = mask.data();
        const uint32_t *__restrict in = t->acceptedMask.data();
        for (size_t w = 0; w < words; ++w) {
          out[w] |= in[w];
        }
      } else {
        for (int32_t id : t->acceptedIds) {
          set(id);
        }
      }
    }
    if (chain_.back()->uncertainCount > 0) {
      open_.push_back(top);
    }
  }
  // Rarely anything: the tokens still undecided kMaxContextDepth frames down (or past
  // kMaxContextTables), walked against the real stack.
  for (const int32_t top : open_) {
    chain_.clear();
    grammar_->contextTables(arena_, top, chain_);
    chain_.back()->uncertain(vocabulary, ids_);
    std::erase_if(ids_, isSet);
    stats_.walked += ids_.size();
    single_.reset();
    single_.tops.push_back(top);
    walkTokens(
        recognizer_, single_, vocabulary, ids_,
        [&](int32_t id, bool alive, bool) {
          if (alive) {
            set(id);
          }
        },
        walk_);
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
