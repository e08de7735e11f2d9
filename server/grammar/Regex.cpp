// The regex parser: a recursive descent over the pattern, emitting rules as it goes.
#include "server/grammar/Regex.h"

namespace glm::grammar {
namespace {

class RegexParser {
public:
  RegexParser(GrammarBuilder &b, std::string_view text, Spelling spelling, const std::string &path)
      : b_(b), text_(text), spelling_(spelling), path_(path) {}

  Element run() {
    if (!text_.empty() && text_[0] == '^') {
      at_ = 1;
    }
    GrammarBuilder::Seq seq = alternation(0);
    if (!b_.failed() && at_ < text_.size()) {
      error(text_[at_] == ')' ? "unbalanced ')'" : "unexpected character");
    }
    return Element::rule(b_.ruleOf("regex", {std::move(seq)}));
  }

private:
  void error(const std::string &message) {
    b_.fail(path_, strCat("invalid regular expression at offset ", at_, ": ", message));
  }
  bool done() const { return at_ >= text_.size() || b_.failed(); }

  GrammarBuilder::Seq alternation(int depth) {
    if (depth > b_.bounds().maxNesting) {
      error(strCat("groups nest deeper than ", b_.bounds().maxNesting,
                   " (bound grammar.maxNesting)"));
      return {};
    }
    std::vector<GrammarBuilder::Seq> alts;
    alts.push_back(sequence(depth));
    while (!done() && text_[at_] == '|') {
      ++at_;
      alts.push_back(sequence(depth));
    }
    if (alts.size() == 1) {
      return std::move(alts[0]);
    }
    return {Element::rule(b_.ruleOf("alt", std::move(alts)))};
  }

  GrammarBuilder::Seq sequence(int depth) {
    GrammarBuilder::Seq seq;
    while (!done() && text_[at_] != '|' && text_[at_] != ')') {
      if (text_[at_] == '$' && at_ + 1 == text_.size()) {
        ++at_;
        break;
      }
      GrammarBuilder::Seq atom = this->atom(depth);
      if (b_.failed()) {
        return {};
      }
      quantified(atom, seq);
    }
    return seq;
  }

  bool number(int64_t &out) {
    size_t start = at_;
    out = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      out = std::min<int64_t>(out * 10 + (text_[at_] - '0'), int64_t(1) << 40);
      ++at_;
    }
    return at_ > start;
  }

  void quantified(GrammarBuilder::Seq &atom, GrammarBuilder::Seq &seq) {
    if (done()) {
      seq.insert(seq.end(), atom.begin(), atom.end());
      return;
    }
    const char q = text_[at_];
    int64_t min = 1, max = 1;
    if (q == '*' || q == '+' || q == '?') {
      ++at_;
      min = q == '+' ? 1 : 0;
      max = q == '?' ? 1 : -1;
    } else if (q == '{') {
      const size_t open = at_;
      ++at_;
      int64_t m = 0, n = 0;
      bool ok = number(m);
      n = m;
      if (ok && at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        if (!number(n)) {
          n = -1;
        }
      }
      if (!ok || at_ >= text_.size() || text_[at_] != '}') {
        at_ = open; // not a quantifier: '{' is a literal
        seq.insert(seq.end(), atom.begin(), atom.end());
        return;
      }
      ++at_;
      min = m;
      max = n;
    } else {
      seq.insert(seq.end(), atom.begin(), atom.end());
      return;
    }
    if (!done() && text_[at_] == '?') {
      ++at_; // lazy: the language is the same
    }
    if (!done() && (text_[at_] == '*' || text_[at_] == '+' || text_[at_] == '{')) {
      if (text_[at_] != '{') {
        error("nothing to repeat (possessive or doubled quantifiers are not supported)");
        return;
      }
    }
    if (min == 0 && max == 1) {
      seq.push_back(Element::rule(b_.ruleOf("opt", {atom, {}})));
    } else if (min == 0 && max < 0) {
      seq.push_back(b_.star(atom, "re"));
    } else if (min == 1 && max < 0) {
      seq.insert(seq.end(), atom.begin(), atom.end());
      seq.push_back(b_.star(atom, "re"));
    } else {
      seq.push_back(b_.repeat(atom, min, max, "re", strCat(path_, " (offset ", at_, ")")));
    }
  }

  GrammarBuilder::Seq atom(int depth) {
    const char c = text_[at_];
    switch (c) {
    case '(': {
      ++at_;
      if (text_.substr(at_).starts_with("?:")) {
        at_ += 2;
      } else if (text_.substr(at_).starts_with("?<") && !text_.substr(at_).starts_with("?<=") &&
                 !text_.substr(at_).starts_with("?<!")) {
        size_t close = text_.find('>', at_);
        if (close == std::string_view::npos) {
          error("unterminated group name");
          return {};
        }
        at_ = close + 1;
      } else if (at_ < text_.size() && text_[at_] == '?') {
        error("lookaround and other (?...) groups are not supported");
        return {};
      }
      GrammarBuilder::Seq inner = alternation(depth + 1);
      if (b_.failed()) {
        return {};
      }
      if (at_ >= text_.size() || text_[at_] != ')') {
        error("missing ')'");
        return {};
      }
      ++at_;
      return {Element::rule(b_.ruleOf("group", {std::move(inner)}))};
    }
    case '[': {
      ++at_;
      CharClass cls;
      std::string message;
      if (!parseCharClass(text_, at_, cls, message)) {
        error(message);
        return {};
      }
      return {classElement(b_, cls, spelling_)};
    }
    case '.': {
      ++at_;
      CharClass dot;
      dot.negated = true;
      dot.ascii.set('\n');
      dot.ascii.set('\r');
      return {classElement(b_, dot, spelling_)};
    }
    case '*':
    case '+':
    case '?':
      error("nothing to repeat");
      return {};
    case '{':
    case '}':
    case ']':
      ++at_;
      return spelledLiteral(b_, std::string(1, c), spelling_);
    case '^':
    case '$':
      error("anchors are only accepted at the ends (the match is always whole)");
      return {};
    case '\\': {
      ++at_;
      if (at_ >= text_.size()) {
        error("a trailing backslash");
        return {};
      }
      CharClass cls;
      if (shorthandClass(text_[at_], cls)) {
        ++at_;
        return {classElement(b_, cls, spelling_)};
      }
      if (text_[at_] == 'b' || text_[at_] == 'B') {
        error("word boundaries are not supported");
        return {};
      }
      if (text_[at_] >= '1' && text_[at_] <= '9') {
        error("backreferences are not supported");
        return {};
      }
      std::string bytes, message;
      if (!parseEscape(text_, at_, bytes, message)) {
        error(message);
        return {};
      }
      return spelledLiteral(b_, bytes, spelling_);
    }
    default: {
      const size_t n = std::min(utf8SequenceLength(static_cast<uint8_t>(c)), text_.size() - at_);
      std::string bytes(text_.substr(at_, n));
      at_ += n;
      return spelledLiteral(b_, bytes, spelling_);
    }
    }
  }

  GrammarBuilder &b_;
  std::string_view text_;
  Spelling spelling_;
  const std::string &path_;
  size_t at_ = 0;
};

} // namespace

Element compileRegex(GrammarBuilder &builder, std::string_view pattern, Spelling spelling,
                     const std::string &path) {
  return RegexParser(builder, pattern, spelling, path).run();
}

} // namespace glm::grammar
