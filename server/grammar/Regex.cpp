// The regex parser: a recursive descent over the pattern, emitting rules as it goes.
#include "server/grammar/Regex.h"

#include "base/Utf8.h"

namespace glm::grammar {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/// The length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t utf8Length(uint8_t lead) {
  if (lead >= 0xF0 && lead <= 0xF4) {
    return 4;
  }
  if (lead >= 0xE0) {
    return lead <= 0xEF ? 3 : 1;
  }
  if (lead >= 0xC2 && lead <= 0xDF) {
    return 2;
  }
  return 1;
}

/// \d \D \w \W \s \S as a class; false for other letters.
bool shorthandClass(char c, CharClass &out) {
  ByteSet s;
  switch (c) {
  case 'd':
  case 'D':
    s = ByteSet::range('0', '9');
    break;
  case 'w':
  case 'W':
    s = ByteSet::range('0', '9');
    s.setRange('a', 'z');
    s.setRange('A', 'Z');
    s.set('_');
    break;
  case 's':
  case 'S':
    for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) {
      s.set(static_cast<uint8_t>(w));
    }
    break;
  default:
    return false;
  }
  out.ascii = s;
  out.wide.clear();
  out.negated = c >= 'A' && c <= 'Z';
  return true;
}

/// The JSON escape of an ASCII byte that a JSON string cannot hold raw ('"', '\\', controls).
bool needsJsonEscape(uint8_t b) { return b == '"' || b == '\\' || b < 0x20; }

GrammarBuilder::Seq jsonEscape(GrammarBuilder &builder, uint8_t b) {
  switch (b) {
  case '"':
    return builder.literal("\\\"");
  case '\\':
    return builder.literal("\\\\");
  case '\n':
    return builder.literal("\\n");
  case '\t':
    return builder.literal("\\t");
  case '\r':
    return builder.literal("\\r");
  case '\b':
    return builder.literal("\\b");
  case '\f':
    return builder.literal("\\f");
  default: {
    static constexpr char kHex[] = "0123456789abcdef";
    GrammarBuilder::Seq seq = builder.literal("\\u00");
    seq.push_back(builder.bytes(ByteSet::of(static_cast<uint8_t>(kHex[b >> 4]))));
    ByteSet low = ByteSet::of(static_cast<uint8_t>(kHex[b & 15]));
    if ((b & 15) >= 10) {
      low.set(static_cast<uint8_t>(kHex[b & 15] - 'a' + 'A'));
    }
    seq.push_back(builder.bytes(low));
    return seq;
  }
  }
}

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
      const size_t n = std::min(utf8Length(static_cast<uint8_t>(c)), text_.size() - at_);
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

bool parseEscape(std::string_view text, size_t &at, std::string &out, std::string &error) {
  const char c = text[at++];
  switch (c) {
  case 'n':
    out = "\n";
    return true;
  case 't':
    out = "\t";
    return true;
  case 'r':
    out = "\r";
    return true;
  case 'f':
    out = "\f";
    return true;
  case 'v':
    out = "\v";
    return true;
  case '0':
    out = std::string(1, '\0');
    return true;
  case 'x':
  case 'u':
  case 'U': {
    const size_t digits = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
    uint32_t cp = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (at >= text.size() || hexValue(text[at]) < 0) {
        error = strCat("\\", c, " needs ", digits, " hex digits");
        return false;
      }
      cp = cp * 16 + static_cast<uint32_t>(hexValue(text[at++]));
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      error = "an escape names no Unicode scalar value";
      return false;
    }
    out.clear();
    glm::appendUtf8(out, cp);
    return true;
  }
  default:
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      error = strCat("unknown escape \\", c);
      return false;
    }
    out = std::string(1, c); // escaped punctuation stands for itself
    return true;
  }
}

bool parseCharClass(std::string_view text, size_t &at, CharClass &out, std::string &error) {
  out = CharClass{};
  if (at < text.size() && text[at] == '^') {
    out.negated = true;
    ++at;
  }
  bool first = true;
  // One member: a character (as UTF-8) or a shorthand class merged in directly.
  auto member = [&](std::string &bytes) -> int { // 1 char, 0 merged class, -1 error
    if (text[at] == '\\') {
      ++at;
      if (at >= text.size()) {
        error = "a trailing backslash";
        return -1;
      }
      CharClass shorthand;
      if (shorthandClass(text[at], shorthand)) {
        ++at;
        if (shorthand.negated) {
          error = "negated shorthands (\\D \\W \\S) inside a class are not supported";
          return -1;
        }
        out.ascii.add(shorthand.ascii);
        return 0;
      }
      if (text[at] == 'b') {
        ++at;
        bytes = "\b";
        return 1;
      }
      return parseEscape(text, at, bytes, error) ? 1 : -1;
    }
    const size_t n = std::min(utf8Length(static_cast<uint8_t>(text[at])), text.size() - at);
    bytes = std::string(text.substr(at, n));
    at += n;
    return 1;
  };
  while (true) {
    if (at >= text.size()) {
      error = "missing ']'";
      return false;
    }
    if (text[at] == ']' && !first) {
      ++at;
      break;
    }
    first = false;
    std::string lo;
    int kind = member(lo);
    if (kind < 0) {
      return false;
    }
    if (kind == 0) {
      continue;
    }
    if (at + 1 < text.size() && text[at] == '-' && text[at + 1] != ']') {
      ++at;
      std::string hi;
      int hiKind = member(hi);
      if (hiKind < 0) {
        return false;
      }
      if (hiKind == 0 || lo.size() != 1 || hi.size() != 1 || static_cast<uint8_t>(lo[0]) > 0x7F ||
          static_cast<uint8_t>(hi[0]) > 0x7F) {
        error = "only ASCII ranges are supported in a class";
        return false;
      }
      if (lo[0] > hi[0]) {
        error = "a range out of order";
        return false;
      }
      out.ascii.setRange(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0]));
      continue;
    }
    if (lo.size() == 1 && static_cast<uint8_t>(lo[0]) <= 0x7F) {
      out.ascii.set(static_cast<uint8_t>(lo[0]));
    } else {
      out.wide.push_back(lo);
    }
  }
  if (out.negated && !out.wide.empty()) {
    error = "a negated class may list only ASCII characters";
    return false;
  }
  return true;
}

GrammarBuilder::Seq spelledLiteral(GrammarBuilder &builder, std::string_view bytes,
                                   Spelling spelling) {
  GrammarBuilder::Seq seq;
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (spelling == Spelling::JsonString && needsJsonEscape(b)) {
      GrammarBuilder::Seq escape = jsonEscape(builder, b);
      seq.insert(seq.end(), escape.begin(), escape.end());
    } else {
      seq.push_back(builder.bytes(ByteSet::of(b)));
    }
  }
  return seq;
}

Element classElement(GrammarBuilder &builder, const CharClass &cls, Spelling spelling) {
  ByteSet ascii = cls.ascii;
  if (cls.negated) {
    ByteSet all = ByteSet::range(0x00, 0x7F);
    all.remove(cls.ascii);
    ascii = all;
  }
  std::vector<GrammarBuilder::Seq> alts;
  ByteSet plain = ascii;
  if (spelling == Spelling::JsonString) {
    for (unsigned b = 0; b < 0x80; ++b) {
      if (ascii.test(static_cast<uint8_t>(b)) && needsJsonEscape(static_cast<uint8_t>(b))) {
        plain.remove(ByteSet::of(static_cast<uint8_t>(b)));
        alts.push_back(jsonEscape(builder, static_cast<uint8_t>(b)));
      }
    }
  }
  if (!plain.empty()) {
    alts.push_back({builder.bytes(plain)});
  }
  if (cls.negated) {
    alts.push_back({builder.utf8Char(ByteSet::range(0x00, 0x7F))}); // every non-ASCII character
  }
  for (const std::string &w : cls.wide) {
    alts.push_back(builder.literal(w));
  }
  if (alts.size() == 1 && alts[0].size() == 1) {
    return alts[0][0];
  }
  return Element::rule(builder.ruleOf("class", std::move(alts)));
}

Element compileRegex(GrammarBuilder &builder, std::string_view pattern, Spelling spelling,
                     const std::string &path) {
  return RegexParser(builder, pattern, spelling, path).run();
}

} // namespace glm::grammar
