// Grammar building, layout and the checks that refuse grammars the recognizer cannot run.
#include "server/grammar/Grammar.h"

#include <algorithm>

namespace glm::grammar {
namespace {

// A "character rule": a few alternatives of a few terminals each, none empty (a UTF-8 character,
// a JSON string's char with its escapes, an enum of literals). Bigger or nullable rules stay
// rules: splicing them would multiply their callers' alternatives (and the stack tops of a state)
// for no gain.
constexpr size_t kInlineAlternatives = 16;
constexpr size_t kInlineLength = 8;
// The most alternatives a caller may grow to by inlining, and the most other elements an
// alternative may have for a rule of several alternatives to be spliced into it (they are copied
// once per alternative: a long sequence, such as a date-time regex with its groups spliced, would
// multiply into as many alternatives, each its own stack top with its own table).
constexpr size_t kInlinedCallerAlternatives = 64;
constexpr size_t kInlineContext = 4;

bool isCharacterRule(const std::vector<GrammarBuilder::Seq> &alts) {
  if (alts.empty() || alts.size() > kInlineAlternatives) {
    return false;
  }
  return std::all_of(alts.begin(), alts.end(), [](const GrammarBuilder::Seq &alt) {
    return !alt.empty() && alt.size() <= kInlineLength &&
           std::none_of(alt.begin(), alt.end(),
                        [](const Element &e) { return e.kind == ElementKind::Rule; });
  });
}

/// Splices references to character rules into their callers, to a fixpoint (a char rule made of
/// utf8 becomes a character rule once utf8 is spliced into it). Why: a position's token table
/// (TokenMask.h) is computed relative to the frames of the stack's top, and a token that leaves
/// them is "uncertain", re-run against the real stack at every step. A terminal inside a
/// one-character rule leaves its frame after one character, so inside a JSON string nearly every
/// multi-byte token was uncertain (~100k of 155k). Spliced, the character's bytes sit in the
/// string's repetition (chars ::= char chars | ε, recursing in tail position), whose frame a token
/// leaves only at the closing quote. The language is unchanged; the rules keep their ids (an
/// unreferenced one just has no caller). Growth past maxElements skips the splice (it is an
/// optimisation, never an error).
void inlineCharacterRules(std::vector<std::vector<GrammarBuilder::Seq>> &rules, int64_t elements,
                          int64_t maxElements) {
  using Seq = GrammarBuilder::Seq;
  std::vector<char> character(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      character[r] = isCharacterRule(rules[r]) ? 1 : 0;
    }
    for (size_t r = 0; r < rules.size(); ++r) {
      auto splices = [&](const Seq &alt, const Element &e) {
        return e.kind == ElementKind::Rule && character[e.value] &&
               (rules[e.value].size() == 1 || alt.size() <= kInlineContext + 1);
      };
      const bool calls = std::any_of(rules[r].begin(), rules[r].end(), [&](const Seq &alt) {
        return std::any_of(alt.begin(), alt.end(),
                           [&](const Element &e) { return splices(alt, e); });
      });
      if (character[r] || !calls) {
        continue;
      }
      std::vector<Seq> out;
      int64_t grown = 0;
      bool spliced = false;
      for (const Seq &alt : rules[r]) {
        auto at =
            std::find_if(alt.begin(), alt.end(), [&](const Element &e) { return splices(alt, e); });
        if (at == alt.end()) {
          out.push_back(alt);
          continue;
        }
        const size_t i = static_cast<size_t>(at - alt.begin());
        for (const Seq &x : rules[at->value]) {
          Seq s(alt.begin(), alt.begin() + static_cast<std::ptrdiff_t>(i));
          s.insert(s.end(), x.begin(), x.end());
          s.insert(s.end(), alt.begin() + static_cast<std::ptrdiff_t>(i) + 1, alt.end());
          grown += static_cast<int64_t>(s.size()) + 1;
          out.push_back(std::move(s));
        }
        grown -= static_cast<int64_t>(alt.size()) + 1;
        spliced = true;
      }
      if (spliced && out.size() <= kInlinedCallerAlternatives && elements + grown <= maxElements) {
        rules[r] = std::move(out);
        elements += grown;
        changed = true;
      }
    }
  }
}

} // namespace

uint32_t GrammarBuilder::newRule(std::string name) {
  if (static_cast<int64_t>(rules_.size()) >= bounds_.maxRules && !failed_) {
    fail("", strCat("the grammar needs more than ", bounds_.maxRules,
                    " rules (bound grammar.maxRules)"));
  }
  names_.push_back(std::move(name));
  rules_.emplace_back();
  return static_cast<uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::addAlternative(uint32_t rule, Seq seq) {
  elements_ += static_cast<int64_t>(seq.size()) + 1;
  if (elements_ > bounds_.maxElements && !failed_) {
    fail("", strCat("the grammar needs more than ", bounds_.maxElements,
                    " positions (bound grammar.maxElements)"));
  }
  rules_[rule].push_back(std::move(seq));
}

uint32_t GrammarBuilder::ruleOf(std::string name, std::vector<Seq> alternatives) {
  uint32_t rule = newRule(std::move(name));
  for (Seq &alt : alternatives) {
    addAlternative(rule, std::move(alt));
  }
  return rule;
}

uint32_t GrammarBuilder::byteSet(const ByteSet &set) {
  auto at = std::find(sets_.begin(), sets_.end(), set);
  if (at != sets_.end()) {
    return static_cast<uint32_t>(at - sets_.begin());
  }
  sets_.push_back(set);
  return static_cast<uint32_t>(sets_.size() - 1);
}

GrammarBuilder::Seq GrammarBuilder::literal(std::string_view text) {
  Seq seq;
  for (char c : text) {
    seq.push_back(bytes(ByteSet::of(static_cast<uint8_t>(c))));
  }
  return seq;
}

Element GrammarBuilder::star(const Seq &x, const std::string &name) {
  // R ::= x R | ε: the recursion is in tail position, so the recognizer's stack does not grow.
  uint32_t r = newRule(name + "*");
  Seq loop = x;
  loop.push_back(Element::rule(r));
  addAlternative(r, std::move(loop));
  addAlternative(r, {});
  return Element::rule(r);
}

Element GrammarBuilder::repeat(const Seq &x, int64_t min, int64_t max, const std::string &name,
                               const std::string &path) {
  if (min < 0 || (max >= 0 && max < min)) {
    fail(path, strCat("the repetition {", min, ",", max, "} is empty"));
    return Element::rule(newRule(name));
  }
  const int64_t counted = max >= 0 ? max : min;
  if (counted > bounds_.maxRepeat) {
    fail(path, strCat("the repetition count ", counted, " exceeds ", bounds_.maxRepeat,
                      " (bound grammar.maxRepeat)"));
    return Element::rule(newRule(name));
  }
  // x{min} then either x* (unbounded) or max-min nested optionals: O_k ::= x O_{k-1} | ε.
  Seq tail;
  if (max < 0) {
    tail.push_back(star(x, name));
  } else {
    uint32_t previous = 0;
    bool have = false;
    for (int64_t k = 0; k < max - min; ++k) {
      uint32_t r = newRule(strCat(name, "{", k + 1, "}"));
      Seq more = x;
      if (have) {
        more.push_back(Element::rule(previous));
      }
      addAlternative(r, std::move(more));
      addAlternative(r, {});
      previous = r;
      have = true;
    }
    if (have) {
      tail.push_back(Element::rule(previous));
    }
  }
  Seq all;
  for (int64_t i = 0; i < min; ++i) {
    all.insert(all.end(), x.begin(), x.end());
  }
  all.insert(all.end(), tail.begin(), tail.end());
  return Element::rule(ruleOf(strCat(name, "{", min, ",", max, "}"), {std::move(all)}));
}

Element GrammarBuilder::utf8Char(const ByteSet &excludedAscii) {
  ByteSet ascii = ByteSet::range(0x00, 0x7F);
  ascii.remove(excludedAscii);
  const Element cont = bytes(ByteSet::range(0x80, 0xBF));
  std::vector<Seq> alts;
  if (!ascii.empty()) {
    alts.push_back({bytes(ascii)});
  }
  alts.push_back({bytes(ByteSet::range(0xC2, 0xDF)), cont});
  alts.push_back({bytes(ByteSet::of(0xE0)), bytes(ByteSet::range(0xA0, 0xBF)), cont});
  ByteSet e1 = ByteSet::range(0xE1, 0xEC);
  e1.setRange(0xEE, 0xEF);
  alts.push_back({bytes(e1), cont, cont});
  alts.push_back({bytes(ByteSet::of(0xED)), bytes(ByteSet::range(0x80, 0x9F)), cont});
  alts.push_back({bytes(ByteSet::of(0xF0)), bytes(ByteSet::range(0x90, 0xBF)), cont, cont});
  alts.push_back({bytes(ByteSet::range(0xF1, 0xF3)), cont, cont, cont});
  alts.push_back({bytes(ByteSet::of(0xF4)), bytes(ByteSet::range(0x80, 0x8F)), cont, cont});
  return Element::rule(ruleOf("utf8", std::move(alts)));
}

void GrammarBuilder::fail(std::string path, std::string message) {
  if (failed_) {
    return;
  }
  failed_ = true;
  error_ = {std::move(path), std::move(message)};
}

bool GrammarBuilder::finish(uint32_t root, Grammar &out, GrammarError &error,
                            const std::string &path) {
  if (failed_) {
    error = error_;
    return false;
  }
  const size_t n = rules_.size();
  // Nullable rules, to a fixpoint.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) {
        continue;
      }
      for (const Seq &alt : rules_[r]) {
        bool all = std::all_of(alt.begin(), alt.end(), [&](const Element &e) {
          return e.kind == ElementKind::Rule && nullable[e.value];
        });
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule that reaches itself without consuming would expand forever.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq &alt : rules_[r]) {
      for (const Element &e : alt) {
        if (e.kind != ElementKind::Rule) {
          break;
        }
        left[r].push_back(e.value);
        if (!nullable[e.value]) {
          break;
        }
      }
    }
  }
  std::vector<char> state(n, 0); // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> work;
  for (size_t start = 0; start < n; ++start) {
    if (state[start]) {
      continue;
    }
    work.push_back({static_cast<uint32_t>(start), 0});
    state[start] = 1;
    while (!work.empty()) {
      auto &[r, next] = work.back();
      if (next == left[r].size()) {
        state[r] = 2;
        work.pop_back();
        continue;
      }
      uint32_t to = left[r][next++];
      if (state[to] == 1) {
        error = {path, strCat("the rule '", names_[to],
                              "' is left-recursive (it can reach itself without consuming "
                              "input), which the recognizer cannot run")};
        return false;
      }
      if (state[to] == 0) {
        state[to] = 1;
        work.push_back({to, 0});
      }
    }
  }
  std::vector<std::vector<Seq>> rules = rules_;
  inlineCharacterRules(rules, elements_, bounds_.maxElements);
  Grammar g;
  g.sets_ = sets_;
  g.names_ = names_;
  g.root_ = root;
  g.ruleAlts_.push_back(0);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq &alt : rules[r]) {
      g.altStarts_.push_back(static_cast<uint32_t>(g.elements_.size()));
      g.elements_.insert(g.elements_.end(), alt.begin(), alt.end());
      g.elements_.push_back(Element{});
    }
    g.ruleAlts_.push_back(static_cast<uint32_t>(g.altStarts_.size()));
  }
  out = std::move(g);
  return true;
}

Expected<Grammar> GrammarBuilder::finish(uint32_t root) {
  Grammar g;
  GrammarError error;
  if (!finish(root, g, error, "")) {
    return invalidArgument(error.path.empty() ? "" : error.path + ": ", error.message);
  }
  return g;
}

} // namespace glm::grammar
