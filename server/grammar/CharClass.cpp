// Character classes and escapes, shared by the regex and GBNF parsers: the text of a class or an
// escape parsed into bytes, and a class or literal emitted as grammar elements.
#include "server/grammar/CharClass.h"

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

} // namespace

size_t utf8SequenceLength(uint8_t lead) {
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
    const size_t n = std::min(utf8SequenceLength(static_cast<uint8_t>(text[at])), text.size() - at);
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

} // namespace glm::grammar
