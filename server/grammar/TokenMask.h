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
#include <unordered_map>
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

/// What the tokens do from the top frames of a stack, whatever lies below them: accepted (all
/// their bytes match inside those frames), or uncertain (they leave them mid-token, so the frames
/// below decide). The rest are rejected. A table one frame deeper (ContextTable::deeper) re-runs
/// only the shallower table's uncertain tokens: its accepted ones add to the shallower table's,
/// its uncertain ones are a subset.
struct PositionTokens {
  std::vector<uint32_t> acceptedMask; // a mask, when many are accepted
  std::vector<int32_t> acceptedIds;   // else the ids
  // The uncertain ones likewise: a mask when many (a bounded string's last characters leave
  // most of the vocabulary uncertain, and those tables are many), else the ids in byte order.
  std::vector<uint32_t> uncertainMask;
  std::vector<int32_t> uncertainIds;
  size_t uncertainCount = 0;

  /// The uncertain ids in byte order.
  void uncertain(const TokenVocabulary &vocabulary, std::vector<int32_t> &out) const;
};

/// The tables of one terminal position as a tree over the frames below it: the root holds the
/// table of the position's own frame; a child, keyed by the position of the next frame down (or
/// kBottomFrame where the stack ends), the table of one frame more. Why a tree: no fixed depth
/// fits every grammar. Inside a JSON string the top frame already decides all but the tokens
/// holding a byte no string character has (`"`, `\`, a control byte); the string's frame then
/// decides `abc"`, its caller's `abc",`, and so on.
/// Children exist only under tables with uncertain tokens, and each costs a walk of those tokens
/// alone, so deepening is cheap and the uncertain set a mask still walks at run time shrinks to
/// nothing (or to what is left at kMaxContextDepth).
struct ContextTable {
  PositionTokens tokens;
  std::vector<std::pair<int64_t, std::unique_ptr<ContextTable>>> deeper;
};

/// The key of the frame below the bottom one (the stack ends there: the input may end).
inline constexpr int64_t kBottomFrame = -1;
/// How many frames a context table covers at most, and how many deeper tables one grammar builds
/// at most (a bound on memory when recursion meets ever new stacks); tokens still uncertain there
/// are walked against the real stack.
inline constexpr size_t kMaxContextDepth = 12;
inline constexpr size_t kMaxContextTables = 1 << 16;

/// A grammar bound to a vocabulary, shared by every request that uses the same constraint text.
/// The tables fill lazily (the first mask that reaches a position, or a context of it, pays for
/// it) under a lock, so any thread may use one.
class CompiledGrammar {
public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  const Grammar &grammar() const { return grammar_; }
  const TokenVocabulary &vocabulary() const { return *vocabulary_; }
  /// The table of terminal position `pos` over its own frame (computed on first use).
  const PositionTokens &position(uint32_t pos) const;
  /// The tables for the stack whose top is node `top` of `arena` (a Bytes position), appended to
  /// `out` from its own frame down: each adds accepted tokens; the last one's uncertain tokens
  /// (none unless kMaxContextDepth frames or kMaxContextTables were not enough) still need the
  /// real stack.
  void contextTables(const StackArena &arena, int32_t top,
                     std::vector<const PositionTokens *> &out) const;
  /// How many positions have a table so far.
  size_t positionsComputed() const;
  /// How many deeper tables (ContextTable children) exist so far.
  size_t contextsComputed() const;
  /// The bytes the tables hold so far (their masks and id lists).
  size_t tableBytes() const;

private:
  ContextTable &rootTable(uint32_t pos) const;
  std::unique_ptr<ContextTable> deeperTable(const std::vector<int64_t> &frames,
                                            const PositionTokens &shallower) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<ContextTable>> tables_;
  mutable size_t computed_ = 0;
  mutable size_t contexts_ = 0;
};

/// Reusable state of walkTokens (one per thread of use): the stack sets one walk meets, interned,
/// and their byte transitions, a lazy DFA over stack sets. Inside a string the state after every
/// whole character is the same set, so most bytes of most tokens are a lookup rather than a
/// recognizer step (which interns and expands a node per alternative of the repetition).
class TokenWalk {
public:
  /// Forgets the last walk (its node ids may be gone); state 0 is `start`.
  void reset(const StackSet &start);
  /// The state `state` advanced by byte `b`.
  uint32_t step(Recognizer &recognizer, uint32_t state, uint8_t b);
  const StackSet &state(uint32_t id) const { return states_[id]; }

  // walkTokens' per-byte levels: the state after the first j bytes of the previous token, and
  // whether a path left the frame within them.
  std::vector<uint32_t> levels;
  std::vector<char> escaped;

private:
  uint32_t intern();

  std::vector<StackSet> states_;
  std::unordered_map<uint64_t, uint32_t> byHash_; // a state's hash (probed on) -> its id
  std::vector<int32_t> next_;                     // [state * 256 + byte] -> state, -1 not yet run
  StackSet out_;
};

/// What the last fillMask did (for benchmarks): the stack tops, the uncertain tokens of their top
/// frames' tables (what a mask would walk without deeper tables), and the tokens it walked against
/// the real stacks.
struct MaskStats {
  size_t tops = 0;
  size_t topUncertain = 0;
  size_t walked = 0;
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
  const MaskStats &lastMask() const { return stats_; }
  const CompiledGrammar &compiled() const { return *grammar_; }

private:
  bool step(int32_t id, StackSet &out);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  StackSet state_;
  // fillMask's scratch, kept so that a mask allocates nothing once warm.
  Recognizer recognizer_;
  TokenWalk walk_;
  std::vector<const PositionTokens *> chain_;
  std::vector<int32_t> open_, ids_;
  StackSet single_;
  MaskStats stats_;
};

/// Walks the tokens `ids` (in byte order) from `start`, reusing shared prefixes: for each, calls
/// visit(id, alive, escapedBeforeEnd) where alive says its bytes all matched (with the state then
/// non-empty, accepting or escaped) and escapedBeforeEnd that a path left a kFrame frame with
/// bytes still to match. Exposed for the tables and the brute-force tests' counterpart.
template <typename Visit>
void walkTokens(Recognizer &recognizer, const StackSet &start, const TokenVocabulary &vocabulary,
                std::span<const int32_t> ids, Visit &&visit, TokenWalk &scratch);
template <typename Visit>
void walkTokens(Recognizer &recognizer, const StackSet &start, const TokenVocabulary &vocabulary,
                std::span<const int32_t> ids, Visit &&visit) {
  TokenWalk scratch;
  walkTokens(recognizer, start, vocabulary, ids, visit, scratch);
}

} // namespace glm::grammar

#include "server/grammar/TokenMaskWalk.h"
