// The GBNF parser: tokens skipped over whitespace and comments, rules resolved by name at the end.
#include "server/grammar/Gbnf.h"

#include "server/grammar/CharClass.h"

#include <map>

namespace glm::grammar {
namespace {

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class GbnfParser {
public:
  GbnfParser(GrammarBuilder &b, std::string_view text, const std::string &path)
      : b_(b), text_(text), path_(path) {}

  uint32_t run() {
    skip();
    while (!done()) {
      const size_t start = at_;
      std::string name = readName();
      skip();
      if (name.empty() || !text_.substr(at_).starts_with("::=")) {
        at_ = start;
        error("expected a rule: name ::= ...");
        break;
      }
      at_ += 3;
      uint32_t rule = ruleFor(name);
      if (defined_.count(name)) {
        error(strCat("the rule '", name, "' is defined twice"));
        break;
      }
      defined_[name] = true;
      for (GrammarBuilder::Seq &alt : alternatives(0)) {
        b_.addAlternative(rule, std::move(alt));
      }
      skip();
    }
    if (b_.failed()) {
      return 0;
    }
    for (const auto &[name, rule] : rules_) {
      if (!defined_.count(name)) {
        b_.fail(path_, strCat("invalid grammar: the rule '", name, "' is used but not defined"));
        return 0;
      }
    }
    if (!rules_.count("root")) {
      b_.fail(path_, "invalid grammar: no 'root' rule");
      return 0;
    }
    return rules_["root"];
  }

private:
  bool done() const { return at_ >= text_.size() || b_.failed(); }
  void error(const std::string &message) {
    size_t line = 1;
    for (size_t i = 0; i < at_ && i < text_.size(); ++i) {
      line += text_[i] == '\n';
    }
    b_.fail(path_, strCat("invalid grammar at line ", line, ": ", message));
  }
  void skip() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++at_;
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') {
          ++at_;
        }
      } else {
        break;
      }
    }
  }
  std::string readName() {
    size_t start = at_;
    while (at_ < text_.size() && isNameChar(text_[at_])) {
      ++at_;
    }
    return std::string(text_.substr(start, at_ - start));
  }
  uint32_t ruleFor(const std::string &name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) {
      return it->second;
    }
    uint32_t rule = b_.newRule(name);
    rules_[name] = rule;
    return rule;
  }
  /// Whether the text at the cursor starts the next rule (`name ::=`).
  bool atRuleStart() {
    size_t save = at_;
    std::string name = readName();
    skip();
    bool start = !name.empty() && text_.substr(at_).starts_with("::=");
    at_ = save;
    return start;
  }

  std::vector<GrammarBuilder::Seq> alternatives(int depth) {
    if (depth > b_.bounds().maxNesting) {
      error(strCat("groups nest deeper than ", b_.bounds().maxNesting,
                   " (bound grammar.maxNesting)"));
      return {};
    }
    std::vector<GrammarBuilder::Seq> alts;
    alts.push_back(sequence(depth));
    skip();
    while (!done() && text_[at_] == '|') {
      ++at_;
      alts.push_back(sequence(depth));
      skip();
    }
    return alts;
  }

  GrammarBuilder::Seq sequence(int depth) {
    GrammarBuilder::Seq seq;
    while (true) {
      skip();
      if (done() || text_[at_] == '|' || text_[at_] == ')' || atRuleStart()) {
        return seq;
      }
      GrammarBuilder::Seq atom = this->atom(depth);
      if (b_.failed()) {
        return {};
      }
      quantified(atom, seq);
    }
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
    if (q == '*') {
      ++at_;
      seq.push_back(b_.star(atom, "gbnf"));
    } else if (q == '+') {
      ++at_;
      seq.insert(seq.end(), atom.begin(), atom.end());
      seq.push_back(b_.star(atom, "gbnf"));
    } else if (q == '?') {
      ++at_;
      seq.push_back(Element::rule(b_.ruleOf("opt", {atom, {}})));
    } else if (q == '{') {
      ++at_;
      skip();
      int64_t m = 0, n = 0;
      if (!number(m)) {
        error("a repetition needs a count: {m}, {m,}, {m,n}");
        return;
      }
      n = m;
      skip();
      if (at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        skip();
        if (!number(n)) {
          n = -1;
        }
        skip();
      }
      if (at_ >= text_.size() || text_[at_] != '}') {
        error("missing '}'");
        return;
      }
      ++at_;
      seq.push_back(b_.repeat(atom, m, n, "gbnf", path_));
    } else {
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
  }

  GrammarBuilder::Seq atom(int depth) {
    const char c = text_[at_];
    if (c == '"') {
      ++at_;
      std::string bytes;
      while (true) {
        if (at_ >= text_.size()) {
          error("unterminated literal");
          return {};
        }
        if (text_[at_] == '"') {
          ++at_;
          break;
        }
        if (text_[at_] == '\\') {
          ++at_;
          std::string one, message;
          if (at_ >= text_.size() || !parseEscape(text_, at_, one, message)) {
            error(message.empty() ? "a trailing backslash" : message);
            return {};
          }
          bytes += one;
        } else {
          bytes += text_[at_++];
        }
      }
      return b_.literal(bytes);
    }
    if (c == '[') {
      ++at_;
      CharClass cls;
      std::string message;
      if (!parseCharClass(text_, at_, cls, message)) {
        error(message);
        return {};
      }
      return {classElement(b_, cls, Spelling::Raw)};
    }
    if (c == '.') {
      ++at_;
      return {b_.utf8Char(ByteSet{})};
    }
    if (c == '(') {
      ++at_;
      std::vector<GrammarBuilder::Seq> alts = alternatives(depth + 1);
      skip();
      if (b_.failed()) {
        return {};
      }
      if (at_ >= text_.size() || text_[at_] != ')') {
        error("missing ')'");
        return {};
      }
      ++at_;
      return {Element::rule(b_.ruleOf("group", std::move(alts)))};
    }
    if (isNameChar(c)) {
      return {Element::rule(ruleFor(readName()))};
    }
    error(strCat("unexpected character '", std::string(1, c), "'"));
    return {};
  }

  GrammarBuilder &b_;
  std::string_view text_;
  const std::string &path_;
  size_t at_ = 0;
  std::map<std::string, uint32_t> rules_;
  std::map<std::string, bool> defined_;
};

} // namespace

uint32_t compileGbnf(GrammarBuilder &builder, std::string_view text, const std::string &path) {
  return GbnfParser(builder, text, path).run();
}

} // namespace glm::grammar
