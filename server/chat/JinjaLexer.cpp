// The Jinja lexer: jinja2's tokenizing rules, so that whitespace comes out byte for byte the same.
#include "server/chat/JinjaLexer.h"

#include "server/chat/JinjaValue.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>

namespace glm::server::jinja {

std::string locatedMessage(std::string_view name, SourceLoc loc, std::string_view message) {
  return strCat(name, ":", loc.line, ":", loc.column, ": ", message);
}

namespace {

/// jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline (keep_trailing_newline
/// is off).
std::string normalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') {
        ++i;
      }
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') {
    out.pop_back();
  }
  return out;
}

/// Python's `\s` in a str pattern, for the code point starting at s[i]; sets `width` to its
/// UTF-8 length. Non-ASCII whitespace matters: Python strips U+3000 as readily as a space.
bool spaceAt(std::string_view s, size_t i, size_t &width) {
  size_t next = i;
  const char32_t c = decodeUtf8(s, next);
  width = next - i;
  return isPySpace(c);
}

/// The position after the whitespace run starting at i (Python's `\s*`).
size_t skipSpaces(std::string_view s, size_t i) {
  size_t width = 0;
  while (i < s.size() && spaceAt(s, i, width)) {
    i += width;
  }
  return i;
}

/// Python's str.rstrip(): the length of s without its trailing whitespace.
size_t rstripLength(std::string_view s) { return pyStrip(s, std::nullopt, false, true).size(); }

bool startsWith(std::string_view s, size_t pos, std::string_view prefix) {
  return s.substr(pos, prefix.size()) == prefix;
}

bool isNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Whitespace control as transformers configures jinja2: `{%-`/`-%}` strip all whitespace on that
// side, trim_blocks drops the first newline after a block or comment tag, lstrip_blocks drops the
// whitespace before a block or comment tag that starts a line, and `+` turns either off for a tag.
class Lexer {
public:
  Lexer(std::string_view source, std::string_view name)
      : source_(normalizeNewlines(source)), name_(name) {
    lineStarts_.push_back(0);
    for (size_t i = 0; i < source_.size(); ++i) {
      if (source_[i] == '\n') {
        lineStarts_.push_back(i + 1);
      }
    }
  }

  Expected<std::vector<Token>> run();

private:
  /// Tokens come in source order, so the column is counted on from the last one asked for on
  /// the same line (counting from the line's start each time is quadratic on a long line).
  SourceLoc locAt(size_t offset) const {
    const auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), offset);
    const size_t lineIndex = static_cast<size_t>(it - lineStarts_.begin()) - 1;
    size_t start = lineStarts_[lineIndex];
    size_t column = 1;
    if (lastLine_ == lineIndex && lastOffset_ <= offset) {
      start = lastOffset_;
      column = lastColumn_;
    }
    column += utf8Length(std::string_view(source_).substr(start, offset - start));
    lastLine_ = lineIndex;
    lastOffset_ = offset;
    lastColumn_ = column;
    SourceLoc loc;
    loc.line = static_cast<int>(lineIndex) + 1;
    loc.column = static_cast<int>(std::min<size_t>(column, INT32_MAX));
    return loc;
  }

  Status error(size_t offset, std::string_view message) const {
    return formatError(locatedMessage(name_, locAt(offset), message));
  }

  void emit(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.loc = locAt(offset);
    tokens_.push_back(std::move(t));
  }

  /// Emits the text before a tag, applying the tag's left whitespace control. `sign` is the
  /// character after the tag opener ('-', '+' or 0) and `lstrippable` says whether
  /// lstrip_blocks applies to this kind of tag (not to `{{`).
  void emitData(size_t begin, size_t end, char sign, bool lstrippable) {
    std::string_view text = std::string_view(source_).substr(begin, end - begin);
    if (sign == '-') {
      text = text.substr(0, rstripLength(text));
    } else if (sign != '+' && lstrippable) {
      const size_t lastNewline = text.rfind('\n');
      const size_t lineStart = lastNewline == std::string_view::npos ? 0 : lastNewline + 1;
      if (lineStart > 0 || lineStarting_) {
        const std::string_view tail = text.substr(lineStart);
        if (!tail.empty() && skipSpaces(tail, 0) == tail.size()) {
          text = text.substr(0, lineStart);
        }
      }
    }
    if (!text.empty()) {
      emit(TokenKind::Data, begin, std::string(text));
    }
  }

  /// Matches a block end at pos (`+%}`, `-%}` plus whitespace, or `%}` plus one newline);
  /// returns the end of the match or npos.
  size_t matchBlockEnd(size_t pos) const {
    if (startsWith(source_, pos, "+%}")) {
      return pos + 3;
    }
    if (startsWith(source_, pos, "-%}")) {
      return skipSpaces(source_, pos + 3);
    }
    if (startsWith(source_, pos, "%}")) {
      return pos + 2 + (startsWith(source_, pos + 2, "\n") ? 1 : 0);
    }
    return std::string::npos;
  }

  /// Matches `{%[-+]? raw [-]?%}` at pos (no trim_blocks on the raw opener, as in jinja2);
  /// returns the end of the match or npos.
  size_t matchRawBegin(size_t pos) const {
    size_t p = pos + 2;
    if (p < source_.size() && (source_[p] == '-' || source_[p] == '+')) {
      ++p;
    }
    p = skipSpaces(source_, p);
    if (!startsWith(source_, p, "raw") || (p + 3 < source_.size() && isNameChar(source_[p + 3]))) {
      return std::string::npos;
    }
    p = skipSpaces(source_, p + 3);
    if (startsWith(source_, p, "-%}")) {
      return skipSpaces(source_, p + 3);
    }
    if (startsWith(source_, p, "%}")) {
      return p + 2;
    }
    return std::string::npos;
  }

  Status lexComment(size_t openerPos, size_t &pos);
  Status lexRaw(size_t openerPos, size_t &pos);
  Status lexTag(size_t openerPos, size_t &pos, bool isBlock);
  Status lexString(size_t &pos);
  bool lexNumber(size_t &pos);

  std::string source_;
  std::string_view name_;
  std::vector<size_t> lineStarts_;
  // The last place locAt() counted to.
  mutable size_t lastLine_ = SIZE_MAX;
  mutable size_t lastOffset_ = 0;
  mutable size_t lastColumn_ = 1;
  std::vector<Token> tokens_;
  // jinja2's line_starting: the last match ended with a newline, so the next text starts a line.
  bool lineStarting_ = true;
};

Expected<std::vector<Token>> Lexer::run() {
  size_t pos = 0;
  while (pos < source_.size()) {
    // The earliest tag opener; everything before it is text.
    size_t open = pos;
    char kind = 0;
    while ((open = source_.find('{', open)) != std::string::npos) {
      if (open + 1 < source_.size() &&
          (source_[open + 1] == '{' || source_[open + 1] == '%' || source_[open + 1] == '#')) {
        kind = source_[open + 1];
        break;
      }
      ++open;
    }
    if (open == std::string::npos) {
      emit(TokenKind::Data, pos, source_.substr(pos));
      break;
    }
    const char sign =
        open + 2 < source_.size() && (source_[open + 2] == '-' || source_[open + 2] == '+')
            ? source_[open + 2]
            : 0;
    if (kind == '%') {
      const size_t rawEnd = matchRawBegin(open);
      if (rawEnd != std::string::npos) {
        emitData(pos, open, sign, true);
        lineStarting_ = source_[rawEnd - 1] == '\n';
        pos = rawEnd;
        GLM_RETURN_IF_ERROR(lexRaw(open, pos));
        continue;
      }
    }
    emitData(pos, open, sign, kind != '{');
    // The opener itself ends in '{', '%', '#', '-' or '+': never a newline.
    lineStarting_ = false;
    pos = open + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      GLM_RETURN_IF_ERROR(lexComment(open, pos));
    } else {
      GLM_RETURN_IF_ERROR(lexTag(open, pos, kind == '%'));
    }
  }
  Token end;
  end.kind = TokenKind::End;
  end.loc = locAt(source_.size());
  tokens_.push_back(std::move(end));
  return std::move(tokens_);
}

Status Lexer::lexComment(size_t openerPos, size_t &pos) {
  for (size_t p = pos; p < source_.size(); ++p) {
    size_t end = std::string::npos;
    if (startsWith(source_, p, "+#}")) {
      end = p + 3;
    } else if (startsWith(source_, p, "-#}")) {
      end = skipSpaces(source_, p + 3);
    } else if (startsWith(source_, p, "#}")) {
      end = p + 2 + (startsWith(source_, p + 2, "\n") ? 1 : 0);
    }
    if (end != std::string::npos) {
      lineStarting_ = source_[end - 1] == '\n';
      pos = end;
      return Status::success();
    }
  }
  return error(openerPos, "missing end of comment tag");
}

Status Lexer::lexRaw(size_t openerPos, size_t &pos) {
  // The text up to `{%[-+]? endraw [-+]?%}` is data, with the endraw tag's whitespace control.
  for (size_t p = source_.find("{%", pos); p != std::string::npos; p = source_.find("{%", p + 1)) {
    size_t q = p + 2;
    const char sign =
        q < source_.size() && (source_[q] == '-' || source_[q] == '+') ? source_[q] : 0;
    if (sign) {
      ++q;
    }
    q = skipSpaces(source_, q);
    if (!startsWith(source_, q, "endraw")) {
      continue;
    }
    q = skipSpaces(source_, q + 6);
    const size_t end = matchBlockEnd(q);
    if (end == std::string::npos) {
      continue;
    }
    emitData(pos, p, sign, true);
    lineStarting_ = source_[end - 1] == '\n';
    pos = end;
    return Status::success();
  }
  return error(openerPos, "missing end of raw directive");
}

Status Lexer::lexString(size_t &pos) {
  const size_t start = pos;
  const char quote = source_[pos++];
  std::string value;
  while (pos < source_.size() && source_[pos] != quote) {
    const char c = source_[pos];
    if (c != '\\') {
      value += c;
      ++pos;
      continue;
    }
    if (pos + 1 >= source_.size()) {
      break;
    }
    // Python's unicode-escape decoding, which jinja2 applies to string literals.
    const char e = source_[pos + 1];
    pos += 2;
    const auto hexEscape = [&](size_t digits) -> Status {
      if (pos + digits > source_.size()) {
        return error(start, "truncated escape in string literal");
      }
      uint32_t code = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = source_[pos + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          return error(start, "truncated escape in string literal");
        }
        code = code * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
      }
      if (code > 0x10FFFF) {
        return error(start, "illegal Unicode character in string literal");
      }
      pos += digits;
      appendUtf8(value, code);
      return Status::success();
    };
    switch (e) {
    case '\n':
      break; // a backslash-newline continues the line
    case '\\':
      value += '\\';
      break;
    case '\'':
      value += '\'';
      break;
    case '"':
      value += '"';
      break;
    case 'a':
      value += '\a';
      break;
    case 'b':
      value += '\b';
      break;
    case 'f':
      value += '\f';
      break;
    case 'n':
      value += '\n';
      break;
    case 'r':
      value += '\r';
      break;
    case 't':
      value += '\t';
      break;
    case 'v':
      value += '\v';
      break;
    case 'x':
      GLM_RETURN_IF_ERROR(hexEscape(2));
      break;
    case 'u':
      GLM_RETURN_IF_ERROR(hexEscape(4));
      break;
    case 'U':
      GLM_RETURN_IF_ERROR(hexEscape(8));
      break;
    case 'N':
      return error(start, "unsupported \\N{...} escape in string literal");
    default:
      if (e >= '0' && e <= '7') {
        uint32_t code = static_cast<uint32_t>(e - '0');
        for (int k = 0; k < 2 && pos < source_.size() && source_[pos] >= '0' && source_[pos] <= '7';
             ++k) {
          code = code * 8 + static_cast<uint32_t>(source_[pos++] - '0');
        }
        appendUtf8(value, code);
      } else {
        // Python keeps an unknown escape as written.
        value += '\\';
        value += e;
      }
    }
  }
  if (pos >= source_.size()) {
    return error(start, "unterminated string literal");
  }
  ++pos; // the closing quote
  emit(TokenKind::String, start, std::move(value));
  return Status::success();
}

/// Matches jinja2's float and integer literals (digits may be separated by single '_').
bool Lexer::lexNumber(size_t &pos) {
  const size_t start = pos;
  const auto digitsAt = [&](size_t p, auto isValid) {
    // (\d+_)*\d+ : returns the end or npos.
    if (p >= source_.size() || !isValid(source_[p])) {
      return std::string::npos;
    }
    while (p < source_.size()) {
      if (isValid(source_[p])) {
        ++p;
      } else if (source_[p] == '_' && p + 1 < source_.size() && isValid(source_[p + 1])) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  };
  const auto dec = [](char c) { return isDigit(c); };
  const auto clean = [&](size_t from, size_t to) {
    std::string text;
    for (size_t i = from; i < to; ++i) {
      if (source_[i] != '_') {
        text += source_[i];
      }
    }
    return text;
  };
  // Float: digits, then a fraction and/or an exponent; not right after a '.'.
  if (start == 0 || source_[start - 1] != '.') {
    const size_t intEnd = digitsAt(start, dec);
    if (intEnd != std::string::npos) {
      size_t p = intEnd;
      bool isFloat = false;
      if (p < source_.size() && source_[p] == '.') {
        const size_t fracEnd = digitsAt(p + 1, dec);
        if (fracEnd != std::string::npos) {
          p = fracEnd;
          isFloat = true;
        }
      }
      if (p < source_.size() && (source_[p] == 'e' || source_[p] == 'E')) {
        size_t q = p + 1;
        if (q < source_.size() && (source_[q] == '+' || source_[q] == '-')) {
          ++q;
        }
        const size_t expEnd = digitsAt(q, dec);
        if (expEnd != std::string::npos) {
          p = expEnd;
          isFloat = true;
        }
      }
      if (isFloat) {
        const std::string text = clean(start, p);
        Token t;
        t.kind = TokenKind::Float;
        t.floatValue = std::strtod(text.c_str(), nullptr);
        t.loc = locAt(start);
        tokens_.push_back(std::move(t));
        pos = p;
        return true;
      }
    }
  }
  // Integer: 0b / 0o / 0x prefixes, decimal without leading zeros, or zeros.
  int base = 10;
  size_t digitsStart = start;
  size_t end = std::string::npos;
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  if (source_[start] == '0' && start + 1 < source_.size() &&
      (lower(source_[start + 1]) == 'b' || lower(source_[start + 1]) == 'o' ||
       lower(source_[start + 1]) == 'x')) {
    const char prefix = lower(source_[start + 1]);
    base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : 16);
    const auto valid = [base](char c) {
      if (base == 2) {
        return c == '0' || c == '1';
      }
      if (base == 8) {
        return c >= '0' && c <= '7';
      }
      return std::isxdigit(static_cast<unsigned char>(c)) != 0;
    };
    // 0x(_?[\da-f])+ : an underscore may also follow the prefix.
    size_t p = start + 2;
    if (p < source_.size() && source_[p] == '_') {
      ++p;
    }
    end = digitsAt(p, valid);
    digitsStart = start + 2;
  } else if (source_[start] == '0') {
    size_t p = start + 1;
    while (p < source_.size()) {
      if (source_[p] == '0') {
        ++p;
      } else if (source_[p] == '_' && p + 1 < source_.size() && source_[p + 1] == '0') {
        ++p;
      } else {
        break;
      }
    }
    end = p;
  } else if (isDigit(source_[start])) {
    end = digitsAt(start, dec);
  }
  if (end == std::string::npos) {
    return false;
  }
  const std::string text = clean(digitsStart, end);
  Token t;
  t.kind = TokenKind::Integer;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), t.intValue, base);
  if (result.ec != std::errc()) {
    // Python's integers are unbounded; ours are 64-bit.
    t.kind = TokenKind::Float;
    t.floatValue = std::strtod(text.c_str(), nullptr);
  }
  t.loc = locAt(start);
  tokens_.push_back(std::move(t));
  pos = end;
  return true;
}

Status Lexer::lexTag(size_t openerPos, size_t &pos, bool isBlock) {
  emit(isBlock ? TokenKind::BlockBegin : TokenKind::VariableBegin, openerPos);
  // Brackets must balance before a closing `}}` or `%}` counts as the end of the tag.
  std::vector<char> open;
  static const std::array<std::string_view, 26> kOperators = {
      "//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[",
      "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
  while (pos < source_.size()) {
    if (open.empty()) {
      size_t end = std::string::npos;
      if (isBlock) {
        end = matchBlockEnd(pos);
      } else if (startsWith(source_, pos, "-}}")) {
        end = skipSpaces(source_, pos + 3);
      } else if (startsWith(source_, pos, "}}")) {
        end = pos + 2;
      }
      if (end != std::string::npos) {
        emit(isBlock ? TokenKind::BlockEnd : TokenKind::VariableEnd, pos);
        lineStarting_ = source_[end - 1] == '\n';
        pos = end;
        return Status::success();
      }
    }
    const char c = source_[pos];
    size_t width = 0;
    if (spaceAt(source_, pos, width)) {
      pos += width;
      continue;
    }
    if (isDigit(c) && lexNumber(pos)) {
      continue;
    }
    if (isNameStart(c)) {
      const size_t start = pos;
      while (pos < source_.size() && isNameChar(source_[pos])) {
        ++pos;
      }
      emit(TokenKind::Name, start, source_.substr(start, pos - start));
      continue;
    }
    if (c == '\'' || c == '"') {
      GLM_RETURN_IF_ERROR(lexString(pos));
      continue;
    }
    bool matched = false;
    for (std::string_view op : kOperators) {
      if (!startsWith(source_, pos, op)) {
        continue;
      }
      if (op == "(" || op == "[" || op == "{") {
        open.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
      } else if (op == ")" || op == "]" || op == "}") {
        if (open.empty()) {
          return error(pos, strCat("unexpected '", op, "'"));
        }
        if (open.back() != op[0]) {
          return error(pos, strCat("unexpected '", op, "', expected '", open.back(), "'"));
        }
        open.pop_back();
      }
      emit(TokenKind::Operator, pos, std::string(op));
      pos += op.size();
      matched = true;
      break;
    }
    if (!matched) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        return error(pos, "unexpected character (only ASCII names are supported)");
      }
      return error(pos, strCat("unexpected character '", c, "'"));
    }
  }
  return error(openerPos, isBlock ? "tag '{%' is never closed with '%}'"
                                  : "tag '{{' is never closed with '}}'");
}

} // namespace

Expected<std::vector<Token>> tokenizeTemplate(std::string_view source, std::string_view name) {
  Lexer lexer(source, name);
  return lexer.run();
}

} // namespace glm::server::jinja
