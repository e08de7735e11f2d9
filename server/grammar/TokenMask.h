// Allowed-token masks over a byte-level vocabulary: the vocabulary sorted by bytes (a trie in
// effect: neighbours share prefixes, and the walk reuses a shared prefix's states), per-position
// token tables computed once per compiled grammar, and the per-sequence matcher that fills a row's
// mask and advances on the sampled token.
#pragma once

#include "server/grammar/Grammar.h"
#include "server/grammar/Recognizer.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm::grammar {

/// Every token's bytes, decoded once when the server starts.
class TokenVocabulary {
public:
  /// bytes[i]: the bytes token i decodes to; `special`: ids never spelled in bytes (added and
  /// special tokens; they match only a grammar's Token element).
  TokenVocabulary(std::vector<std::string> bytes, const std::vector<int32_t> &special);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  /// The words of a mask over this vocabulary.
  size_t words() const { return (bytes_.size() + 31) / 32; }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool spelled(int32_t id) const { return spelled_[static_cast<size_t>(id)] != 0; }
  /// The spelled ids in byte order.
  const std::vector<int32_t> &sorted() const { return sorted_; }

private:
  std::vector<std::string> bytes_;
  std::vector<char> spelled_;
  std::vector<int32_t> sorted_;
};

/// What the tokens do from one terminal position, whatever stack lies below its frame: accepted
/// (all their bytes match inside the frame), or uncertain (they leave the frame mid-token, so the
/// stack below decides). The rest are rejected.
struct PositionTokens {
  std::vector<uint32_t> acceptedMask; // a mask, when many are accepted
  std::vector<int32_t> acceptedIds;   // else the ids
  std::vector<int32_t> uncertain;     // in byte order
};

/// A grammar bound to a vocabulary, shared by every request that uses the same constraint text.
/// The per-position tables fill lazily (the first mask that reaches a position pays for it) under
/// a lock, so any thread may use one.
class CompiledGrammar {
public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  const Grammar &grammar() const { return grammar_; }
  const TokenVocabulary &vocabulary() const { return *vocabulary_; }
  /// The table of terminal position `pos` (computed on first use).
  const PositionTokens &position(uint32_t pos) const;
  /// How many positions have a table so far.
  size_t positionsComputed() const;

private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<PositionTokens>> tables_;
  mutable size_t computed_ = 0;
};

/// One sequence's place in a grammar.
class Matcher {
public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  Matcher(const Matcher &other);

  /// Sets the bits of the tokens that may come next (the mask is not cleared first; ids past the
  /// vocabulary are left alone). `eosIds` are set when the input may end here.
  void fillMask(std::span<uint32_t> mask, std::span<const int32_t> eosIds);
  /// Whether `id` may come next: its bytes (or, for a special token, the token) run the state.
  bool allows(int32_t id);
  /// Advances on `id`; false (state unchanged) when it is not allowed.
  bool advance(int32_t id);
  /// The input may end here.
  bool accepting() const { return state_.accepting; }
  /// Nothing may follow: the structure is complete.
  bool finished() const { return state_.tops.empty(); }
  const CompiledGrammar &compiled() const { return *grammar_; }

private:
  bool step(int32_t id, StackSet &out);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  StackSet state_;
};

/// Walks the tokens `ids` (in byte order) from `start`, reusing shared prefixes: for each, calls
/// visit(id, alive, escapedBeforeEnd) where alive says its bytes all matched (with the state then
/// non-empty, accepting or escaped) and escapedBeforeEnd that a path left a kFrame frame with
/// bytes still to match. Exposed for the tables and the brute-force tests' counterpart.
template <typename Visit>
void walkTokens(Recognizer &recognizer, const StackSet &start, const TokenVocabulary &vocabulary,
                std::span<const int32_t> ids, Visit &&visit);

} // namespace glm::grammar

#include "server/grammar/TokenMaskWalk.h"
