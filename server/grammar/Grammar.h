// The one automaton form every structured-output constraint compiles to: rules of alternatives,
// each a sequence of byte-class terminals, single-token terminals and rule references, run by a
// pushdown recognizer over stacks of grammar positions (server/grammar/Recognizer.h).
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm::grammar {

/// A set of bytes, bit b of word b / 64.
struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void setRange(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) {
      set(static_cast<uint8_t>(b));
    }
  }
  void add(const ByteSet &o) {
    for (int i = 0; i < 4; ++i) {
      bits[i] |= o.bits[i];
    }
  }
  void remove(const ByteSet &o) {
    for (int i = 0; i < 4; ++i) {
      bits[i] &= ~o.bits[i];
    }
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet &) const = default;
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.set(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.setRange(lo, hi);
    return s;
  }
};

enum class ElementKind : uint8_t {
  Bytes, // one byte of the set classes()[value]
  Token, // the token with id value (a special token: tool-call markers), never spelled in bytes
  Rule,  // rule value
  End,   // the end of an alternative
};

struct Element {
  ElementKind kind = ElementKind::End;
  uint32_t value = 0;
  static Element bytes(uint32_t set) { return {ElementKind::Bytes, set}; }
  static Element token(int32_t id) { return {ElementKind::Token, static_cast<uint32_t>(id)}; }
  static Element rule(uint32_t id) { return {ElementKind::Rule, id}; }
};

/// What a grammar may grow to before it is refused: the bound's name appears in the error.
struct GrammarBounds {
  int64_t maxRules = 50000;       // grammar.maxRules
  int64_t maxElements = 1000000;  // grammar.maxElements (positions of the automaton)
  int64_t maxRepeat = 1024;       // grammar.maxRepeat: the largest count of {m,n}, maxItems...
  int64_t maxNesting = 64;        // grammar.maxNesting: schema / regex / GBNF nesting
  int64_t maxAlternatives = 4096; // grammar.maxAlternatives: enum or choice entries
};

/// A compile error: the path of the input at fault (e.g. `properties.a.type`, relative to the
/// schema; a regex offset `[12]`) and what is wrong.
struct GrammarError {
  std::string path;
  std::string message;
};

/// An immutable grammar: elements laid out flat, each rule's alternatives as start positions,
/// every alternative closed by an End element. Position p names "the next element to match is
/// elements()[p]".
class Grammar {
public:
  const std::vector<Element> &elements() const { return elements_; }
  const Element &at(uint32_t pos) const { return elements_[pos]; }
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return std::span<const uint32_t>(altStarts_)
        .subspan(ruleAlts_[rule], ruleAlts_[rule + 1] - ruleAlts_[rule]);
  }
  const ByteSet &byteSet(uint32_t id) const { return sets_[id]; }
  uint32_t root() const { return root_; }
  size_t ruleCount() const { return ruleAlts_.size() - 1; }
  const std::string &ruleName(uint32_t rule) const { return names_[rule]; }

private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<uint32_t> altStarts_;
  std::vector<uint32_t> ruleAlts_; // rule r's alternatives: altStarts_[ruleAlts_[r] .. [r+1])
  std::vector<ByteSet> sets_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

/// Builds a grammar rule by rule; the front ends (JSON Schema, regex, GBNF, choices, tool calls)
/// share its helpers. Every helper that grows the grammar checks the bounds and reports through
/// fail(), so a front end stops at the first error.
class GrammarBuilder {
public:
  using Seq = std::vector<Element>;
  explicit GrammarBuilder(GrammarBounds bounds = {}) : bounds_(bounds) {}

  const GrammarBounds &bounds() const { return bounds_; }
  /// A new rule with no alternatives yet.
  uint32_t newRule(std::string name);
  void addAlternative(uint32_t rule, Seq seq);
  /// A rule with these alternatives.
  uint32_t ruleOf(std::string name, std::vector<Seq> alternatives);
  uint32_t byteSet(const ByteSet &set);
  Element bytes(const ByteSet &set) { return Element::bytes(byteSet(set)); }
  /// The bytes of `text`, one element each.
  Seq literal(std::string_view text);
  /// x*, x+, x?, x{min,max} (max -1: unbounded) as helper rules; false (and fail()) past maxRepeat.
  Element star(const Seq &x, const std::string &name);
  Element repeat(const Seq &x, int64_t min, int64_t max, const std::string &name,
                 const std::string &path);
  /// One UTF-8 encoded character (any code point but surrogates), excluding the ASCII bytes in
  /// `excludedAscii`.
  Element utf8Char(const ByteSet &excludedAscii);

  void fail(std::string path, std::string message);
  bool failed() const { return failed_; }
  const GrammarError &error() const { return error_; }

  /// Lays the grammar out with `root` as its start; refuses left recursion and grammars past the
  /// bounds, naming the rule.
  Expected<Grammar> finish(uint32_t root);
  /// The same, as a GrammarError (the path of a bound error is `path`).
  bool finish(uint32_t root, Grammar &out, GrammarError &error, const std::string &path);

private:
  GrammarBounds bounds_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<ByteSet> sets_;
  int64_t elements_ = 0;
  bool failed_ = false;
  GrammarError error_;
};

} // namespace glm::grammar
