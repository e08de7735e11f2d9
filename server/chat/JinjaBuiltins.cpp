// The Jinja builtins, each with the semantics of jinja2 and Python that transformers' env has.
#include "server/chat/JinjaBuiltins.h"

#include "server/chat/JinjaLimits.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <unordered_map>

namespace glm::server::jinja {
namespace {

Value str(std::string s) { return Value::string(std::move(s)); }

// --- arguments -------------------------------------------------------------------------------

using Params = std::vector<std::optional<Value>>;

/// Binds positional then keyword arguments to a builtin's parameter names, as Python does.
Expected<Params> bindArgs(std::string_view function, const CallArgs &args,
                          std::initializer_list<std::string_view> names) {
  const std::vector<std::string_view> params(names);
  Params bound(params.size());
  if (args.positional.size() > params.size()) {
    return invalidArgument(function, "() takes at most ", params.size(), " argument(s) (",
                           args.positional.size(), " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
  }
  for (const auto &[key, value] : args.keywords) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return invalidArgument(function, "() got an unexpected keyword argument '", key, "'");
    }
    const size_t index = static_cast<size_t>(it - params.begin());
    if (bound[index]) {
      return invalidArgument(function, "() got multiple values for argument '", key, "'");
    }
    bound[index] = value;
  }
  return bound;
}

Expected<int64_t> intParam(std::string_view function, const std::optional<Value> &v,
                           int64_t fallback, std::string_view what) {
  if (!v || v->isNone()) {
    return fallback;
  }
  if (!v->isIntegral()) {
    return invalidArgument(function, "(): '", what, "' must be an integer, not ", typeName(*v));
  }
  return v->asInt();
}

bool boolParam(const std::optional<Value> &v, bool fallback) { return v ? truthy(*v) : fallback; }

std::optional<std::string> optionalStrParam(const std::optional<Value> &v) {
  if (!v || v->isNone()) {
    return std::nullopt;
  }
  return pyStr(*v);
}

Status undefinedError(const Value &v) { return invalidArgument(v.undefinedHint()); }

// --- case mapping ----------------------------------------------------------------------------
// Python maps case over all of Unicode; these tables cover ASCII, Latin-1, Latin Extended-A,
// Greek and Cyrillic, which is what role names and prompts use in practice.

char32_t toLowerCp(char32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
      (c >= 0x391 && c <= 0x3AB && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) {
    return c + 0x20;
  }
  if (c >= 0x400 && c <= 0x40F) {
    return c + 0x50;
  }
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) {
    return c | 1;
  }
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) {
    return (c & 1) ? c + 1 : c;
  }
  return c;
}

char32_t toUpperCp(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) ||
      (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) || (c >= 0x430 && c <= 0x44F)) {
    return c - 0x20;
  }
  if (c == 0x3C2) {
    return 0x3A3; // final sigma
  }
  if (c >= 0x450 && c <= 0x45F) {
    return c - 0x50;
  }
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) {
    return c & ~char32_t(1);
  }
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) {
    return (c & 1) ? c : c - 1;
  }
  return c;
}

bool isUpperCp(char32_t c) { return toLowerCp(c) != c; }
bool isLowerCp(char32_t c) { return toUpperCp(c) != c || c == 0xDF; }
bool isCasedCp(char32_t c) { return isUpperCp(c) || isLowerCp(c); }

template <typename F> std::string mapChars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    appendUtf8(out, f(decodeUtf8(s, i)));
  }
  return out;
}

std::string pyLower(std::string_view s) { return mapChars(s, toLowerCp); }
std::string pyUpper(std::string_view s) { return mapChars(s, toUpperCp); }

std::string pyCapitalize(std::string_view s) {
  bool first = true;
  return mapChars(s, [&](char32_t c) {
    const char32_t mapped = first ? toUpperCp(c) : toLowerCp(c);
    first = false;
    return mapped;
  });
}

/// str.title(): a cased character after an uncased one starts a word.
std::string pyTitle(std::string_view s) {
  bool previousCased = false;
  return mapChars(s, [&](char32_t c) {
    const char32_t mapped = previousCased ? toLowerCp(c) : toUpperCp(c);
    previousCased = isCasedCp(c);
    return mapped;
  });
}

/// jinja2's title filter: words start after '-', whitespace or an opening bracket.
std::string jinjaTitle(std::string_view s) {
  bool wordStart = true;
  return mapChars(s, [&](char32_t c) {
    const bool separator = isPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    char32_t mapped = c;
    if (separator) {
      wordStart = true;
    } else {
      mapped = wordStart ? toUpperCp(c) : toLowerCp(c);
      wordStart = false;
    }
    return mapped;
  });
}

/// str.islower() / str.isupper(): some cased character and none of the other case.
bool pyIsLower(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decodeUtf8(s, i);
    if (isUpperCp(c)) {
      return false;
    }
    cased = cased || isLowerCp(c);
  }
  return cased;
}

bool pyIsUpper(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decodeUtf8(s, i);
    if (isLowerCp(c) && !isUpperCp(c)) {
      return false;
    }
    cased = cased || isUpperCp(c);
  }
  return cased;
}

// --- string helpers --------------------------------------------------------------------------

bool isLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

/// str.splitlines(): calls `f` with each line (a view into `s`) at Python's line boundaries,
/// "\r\n" counting as one, without building a list.
template <typename F> void forEachLine(std::string_view s, bool keepEnds, F f) {
  size_t lineStart = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = decodeUtf8(s, i);
    if (!isLineBreak(c)) {
      continue;
    }
    if (c == '\r' && i < s.size() && s[i] == '\n') {
      ++i;
    }
    f(s.substr(lineStart, (keepEnds ? i : start) - lineStart));
    lineStart = i;
  }
  if (lineStart < s.size()) {
    f(s.substr(lineStart));
  }
}

/// str.replace(old, new, count); count < 0 replaces all. The result's size is worked out first,
/// so a replacement that would pass kMaxStringBytes is refused before it is built.
Expected<std::string> pyReplace(std::string_view s, std::string_view from, std::string_view to,
                                int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    const uint64_t slots = utf8Length(s) + 1;
    const uint64_t inserts = count < 0 ? slots : std::min<uint64_t>(slots, count);
    if (!to.empty() &&
        inserts > (kMaxStringBytes - std::min<uint64_t>(s.size(), kMaxStringBytes)) / to.size()) {
      return stringTooLong("replace()", s.size() + inserts * to.size());
    }
    out.reserve(s.size() + inserts * to.size());
    int64_t done = 0;
    for (size_t i = 0; i < s.size();) {
      const size_t start = i;
      decodeUtf8(s, i);
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out.append(s, start, i - start);
    }
    if (count < 0 || done < count) {
      out += to;
    }
    return out;
  }
  if (to.size() > from.size()) {
    uint64_t hits = 0;
    for (size_t pos = s.find(from);
         pos != std::string_view::npos && (count < 0 || hits < uint64_t(count));
         pos = s.find(from, pos + from.size())) {
      ++hits;
    }
    const uint64_t growth = to.size() - from.size();
    if (hits > (kMaxStringBytes - std::min<uint64_t>(s.size(), kMaxStringBytes)) / growth) {
      return stringTooLong("replace()", s.size() + hits * growth);
    }
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) {
      break;
    }
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos);
  return out;
}

/// str.split(sep, maxsplit) and str.rsplit: with no separator, splits on whitespace runs. No
/// more than kMaxListItems parts.
Expected<std::vector<Value>> pySplit(std::string_view s, const std::optional<std::string> &sep,
                                     int64_t maxSplit, bool fromRight) {
  std::vector<std::string> parts;
  if (sep) {
    if (!fromRight) {
      size_t pos = 0;
      while (maxSplit < 0 || static_cast<int64_t>(parts.size()) < maxSplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) {
          break;
        }
        GLM_RETURN_IF_ERROR(checkListSize("split()", parts.size() + 2));
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> reversed;
      while (maxSplit < 0 || static_cast<int64_t>(reversed.size()) < maxSplit) {
        if (end < sep->size()) {
          break;
        }
        const size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) {
          break;
        }
        GLM_RETURN_IF_ERROR(checkListSize("rsplit()", reversed.size() + 2));
        reversed.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      reversed.emplace_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  } else {
    // Whitespace runs separate words; leading and trailing whitespace yields nothing.
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      size_t j = i;
      if (isPySpace(decodeUtf8(s, j))) {
        i = j;
        continue;
      }
      const size_t start = i;
      i = j;
      while (i < s.size()) {
        size_t k = i;
        if (isPySpace(decodeUtf8(s, k))) {
          break;
        }
        i = k;
      }
      words.emplace_back(start, i);
      GLM_RETURN_IF_ERROR(checkListSize("split()", words.size()));
    }
    if (maxSplit >= 0 && static_cast<int64_t>(words.size()) > maxSplit) {
      const size_t keep = static_cast<size_t>(maxSplit);
      if (!fromRight) {
        std::vector<std::pair<size_t, size_t>> merged(words.begin(), words.begin() + keep);
        // Python keeps the remainder's trailing whitespace.
        merged.emplace_back(words[keep].first, s.size());
        words = merged;
      } else {
        std::vector<std::pair<size_t, size_t>> merged;
        const size_t firstKept = words.size() - keep;
        // From the right, the remainder keeps its leading whitespace.
        merged.emplace_back(0, words[firstKept - 1].second);
        merged.insert(merged.end(), words.begin() + firstKept, words.end());
        words = merged;
      }
    }
    for (auto [b, e] : words) {
      parts.emplace_back(s.substr(b, e - b));
    }
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string &p : parts) {
    out.push_back(str(std::move(p)));
  }
  return out;
}

Expected<std::string> htmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (out.size() > kMaxStringBytes) {
      return stringTooLong("escape()", out.size());
    }
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&#34;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// Removes '_' between digits, as Python's numeric parsing allows; nullopt if an underscore is
/// anywhere else.
std::optional<std::string> withoutDigitUnderscores(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out += s[i];
      continue;
    }
    if (i == 0 || i + 1 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i - 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 1]))) {
      return std::nullopt;
    }
  }
  return out;
}

/// Python's int(text, base) for 64-bit results.
std::optional<int64_t> parsePyInt(std::string_view text, int base) {
  std::string_view s = pyStrip(text, std::nullopt, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  const auto hasPrefix = [&](char p) {
    return s.size() > 2 && s[0] == '0' && std::tolower(static_cast<unsigned char>(s[1])) == p;
  };
  if (base == 0) {
    if (hasPrefix('x')) {
      base = 16;
    } else if (hasPrefix('o')) {
      base = 8;
    } else if (hasPrefix('b')) {
      base = 2;
    } else {
      base = 10;
      // Base 0 refuses leading zeros on a non-zero decimal.
      if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos) {
        return std::nullopt;
      }
    }
  }
  if ((base == 16 && hasPrefix('x')) || (base == 8 && hasPrefix('o')) ||
      (base == 2 && hasPrefix('b'))) {
    s.remove_prefix(2);
    if (!s.empty() && s[0] == '_') {
      s.remove_prefix(1);
    }
  }
  if (s.empty() || base < 2 || base > 36) {
    return std::nullopt;
  }
  const std::optional<std::string> digits = withoutDigitUnderscores(s);
  if (!digits || digits->empty()) {
    return std::nullopt;
  }
  uint64_t magnitude = 0;
  const auto result =
      std::from_chars(digits->data(), digits->data() + digits->size(), magnitude, base);
  if (result.ec != std::errc() || result.ptr != digits->data() + digits->size()) {
    return std::nullopt;
  }
  const uint64_t limit =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1u : 0u);
  if (magnitude > limit) {
    return std::nullopt;
  }
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

/// Python's float(text).
std::optional<double> parsePyFloat(std::string_view text) {
  std::string_view s = pyStrip(text, std::nullopt, true, true);
  std::string lowered;
  for (char c : s) {
    lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string_view body = lowered;
  double sign = 1.0;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") {
    return sign * std::numeric_limits<double>::infinity();
  }
  if (body == "nan") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const std::optional<std::string> clean = withoutDigitUnderscores(body);
  if (!clean) {
    return std::nullopt;
  }
  // digits [. digits] [e [sign] digits], with at least one mantissa digit.
  size_t i = 0;
  size_t mantissaDigits = 0;
  const std::string &c = *clean;
  while (i < c.size() && std::isdigit(static_cast<unsigned char>(c[i]))) {
    ++i;
    ++mantissaDigits;
  }
  if (i < c.size() && c[i] == '.') {
    ++i;
    while (i < c.size() && std::isdigit(static_cast<unsigned char>(c[i]))) {
      ++i;
      ++mantissaDigits;
    }
  }
  if (mantissaDigits == 0) {
    return std::nullopt;
  }
  if (i < c.size() && c[i] == 'e') {
    ++i;
    if (i < c.size() && (c[i] == '+' || c[i] == '-')) {
      ++i;
    }
    const size_t expStart = i;
    while (i < c.size() && std::isdigit(static_cast<unsigned char>(c[i]))) {
      ++i;
    }
    if (i == expStart) {
      return std::nullopt;
    }
  }
  if (i != c.size()) {
    return std::nullopt;
  }
  return sign * std::strtod(c.c_str(), nullptr);
}

/// Python's round(x, ndigits) for a float: correctly rounded, ties to even.
double pyRoundFloat(double x, int64_t digits) {
  if (!std::isfinite(x)) {
    return x;
  }
  if (digits == 0) {
    return std::nearbyint(x);
  }
  if (digits > 0) {
    if (digits > 320) {
      return x;
    }
    // printf rounds the exact binary value to nearest, ties to even: Python's algorithm.
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, "%.*f", static_cast<int>(digits), x);
    return std::strtod(buffer, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

// --- numbers ---------------------------------------------------------------------------------

Expected<Value> numberArg(std::string_view function, const Value &v) {
  if (v.isUndefined()) {
    return undefinedError(v);
  }
  if (!v.isNumber()) {
    return invalidArgument(function, ": expected a number, not ", typeName(v));
  }
  return v;
}

/// Python's int + int with overflow reported instead of wrapping.
Expected<Value> addInts(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    return invalidArgument("integer overflow (this interpreter's integers are 64-bit)");
  }
  return Value::integer(r);
}

Expected<Value> addNumbers(const Value &a, const Value &b) {
  if (a.isIntegral() && b.isIntegral()) {
    return addInts(a.asInt(), b.asInt());
  }
  return Value::real(a.asDouble() + b.asDouble());
}

// --- attribute paths -------------------------------------------------------------------------

/// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attributePath(const Value &item, std::string_view path) {
  Value current = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string_view part = path.substr(pos, dot == std::string_view::npos ? dot : dot - pos);
    if (current.isUndefined()) {
      return current;
    }
    int64_t index = 0;
    const auto result = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && result.ec == std::errc() && result.ptr == part.data() + part.size()) {
      current = getItem(current, Value::integer(index));
    } else {
      current = getItem(current, str(std::string(part)));
    }
    if (dot == std::string_view::npos) {
      return current;
    }
    pos = dot + 1;
  }
}

/// A sort/min/max key: the attribute (if any), lowercased when comparing case-insensitively.
Value sortKey(const Value &item, const std::optional<std::string> &attribute, bool caseSensitive) {
  Value key = attribute ? attributePath(item, *attribute) : item;
  if (!caseSensitive && key.isString()) {
    return str(pyLower(key.asString()));
  }
  return key;
}

// --- filters ---------------------------------------------------------------------------------

using FilterFn = Expected<Value> (*)(const Value &, const CallArgs &);

Expected<Value> filterAbs(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("abs", args, {}));
  GLM_ASSIGN_OR_RETURN(Value n, numberArg("abs", v));
  if (n.kind() == ValueKind::Float) {
    return Value::real(std::fabs(n.asDouble()));
  }
  if (n.asInt() == std::numeric_limits<int64_t>::min()) {
    return invalidArgument("integer overflow (this interpreter's integers are 64-bit)");
  }
  return Value::integer(n.asInt() < 0 ? -n.asInt() : n.asInt());
}

Expected<Value> filterAttr(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("attr", args, {"name"}));
  const std::string name = p[0] ? pyStr(*p[0]) : "";
  // Attributes only: a dict's keys are items, not attributes.
  if (v.isDict()) {
    Value attribute = getAttribute(v, name);
    if (attribute.kind() == ValueKind::Callable) {
      return attribute;
    }
    return Value::undefined(strCat("'dict object' has no attribute '", name, "'"));
  }
  if (v.isUndefined()) {
    return undefinedError(v);
  }
  return getAttribute(v, name);
}

Expected<Value> filterCapitalize(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("capitalize", args, {}));
  return str(pyCapitalize(pyStr(v)));
}

Expected<Value> filterLength(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("length", args, {}));
  switch (v.kind()) {
  case ValueKind::Undefined:
    return Value::integer(0);
  case ValueKind::String:
    return Value::integer(static_cast<int64_t>(utf8Length(v.asString())));
  case ValueKind::List:
    return Value::integer(static_cast<int64_t>(v.asList().items.size()));
  case ValueKind::Dict:
    return Value::integer(static_cast<int64_t>(v.asDict().entries.size()));
  case ValueKind::Loop:
    return Value::integer(v.asDict().find("length")->asInt());
  default:
    return invalidArgument("object of type '", typeName(v), "' has no len()");
  }
}

Expected<Value> filterDefault(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("default", args, {"default_value", "boolean"}));
  const bool boolean = boolParam(p[1], false);
  if (v.isUndefined() || (boolean && !truthy(v))) {
    return p[0] ? *p[0] : str("");
  }
  return v;
}

Expected<Value> filterDictsort(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.isDict()) {
    return invalidArgument("dictsort: expected a mapping, not ", typeName(v));
  }
  const bool caseSensitive = boolParam(p[0], false);
  const std::string by = p[1] ? pyStr(*p[1]) : "key";
  const bool reverse = boolParam(p[2], false);
  if (by != "key" && by != "value") {
    return invalidArgument("dictsort: you can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items;
  for (const auto &[key, value] : v.asDict().entries) {
    items.push_back(Value::list({str(key), value}, ListStyle::Tuple));
  }
  Status failure;
  const size_t index = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value &a, const Value &b) {
    if (!failure.ok() || !spendSteps(1)) {
      return false;
    }
    const Value ka = sortKey(a.asList().items[index], std::nullopt, caseSensitive);
    const Value kb = sortKey(b.asList().items[index], std::nullopt, caseSensitive);
    Expected<int> c = compareValues(ka, kb);
    if (!c.ok()) {
      failure = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  GLM_RETURN_IF_ERROR(failure);
  return Value::list(std::move(items));
}

Expected<Value> filterEscape(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("escape", args, {}));
  GLM_ASSIGN_OR_RETURN(std::string out, htmlEscape(pyStr(v)));
  return str(std::move(out));
}

Expected<Value> filterFirst(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("first", args, {}));
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  if (items.empty()) {
    return Value::undefined("No first item, sequence was empty.");
  }
  return items.front();
}

Expected<Value> filterLast(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("last", args, {}));
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  if (items.empty()) {
    return Value::undefined("No last item, sequence was empty.");
  }
  return items.back();
}

Expected<Value> filterFloat(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("float", args, {"default"}));
  const Value fallback = p[0] ? *p[0] : Value::real(0.0);
  if (v.isUndefined()) {
    return undefinedError(v); // Undefined.__float__ raises
  }
  if (v.isNumber()) {
    return Value::real(v.asDouble());
  }
  if (v.isString()) {
    if (std::optional<double> f = parsePyFloat(v.asString())) {
      return Value::real(*f);
    }
  }
  return fallback;
}

Expected<Value> filterIndent(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("indent", args, {"width", "first", "blank"}));
  std::string indentation(4, ' ');
  if (p[0]) {
    if (p[0]->isString()) {
      indentation = p[0]->asString();
    } else {
      GLM_ASSIGN_OR_RETURN(int64_t width, intParam("indent", p[0], 4, "width"));
      GLM_RETURN_IF_ERROR(
          checkStringSize("indent()", static_cast<uint64_t>(std::max<int64_t>(0, width))));
      indentation.assign(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    }
  }
  const bool first = boolParam(p[1], false);
  const bool blank = boolParam(p[2], false);
  // jinja2 appends a newline before splitlines so that a trailing newline survives.
  const std::string text = pyStr(v) + "\n";
  // The size first: every line but the first (and the first too with first=true) that is not
  // blank (or every one with blank=true) gains an indentation.
  uint64_t indented = first ? 1 : 0;
  bool firstLine = true;
  forEachLine(text, false, [&](std::string_view line) {
    if (!firstLine && (blank || !line.empty())) {
      ++indented;
    }
    firstLine = false;
  });
  if (!indentation.empty() &&
      indented > (kMaxStringBytes - std::min(text.size(), kMaxStringBytes)) / indentation.size()) {
    return stringTooLong("indent()", text.size() + indented * indentation.size());
  }
  std::string out;
  out.reserve(text.size() + indented * indentation.size());
  if (first) {
    out += indentation;
  }
  firstLine = true;
  forEachLine(text, false, [&](std::string_view line) {
    if (!firstLine) {
      out += '\n';
      if (blank || !line.empty()) {
        out += indentation;
      }
    }
    out += line;
    firstLine = false;
  });
  return str(std::move(out));
}

Expected<Value> filterInt(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("int", args, {"default", "base"}));
  const Value fallback = p[0] ? *p[0] : Value::integer(0);
  GLM_ASSIGN_OR_RETURN(int64_t base, intParam("int", p[1], 10, "base"));
  if (v.isUndefined()) {
    return undefinedError(v); // Undefined.__int__ raises
  }
  if (v.isIntegral()) {
    return Value::integer(v.asInt());
  }
  if (v.kind() == ValueKind::Float) {
    const double f = v.asDouble();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) {
      return fallback;
    }
    return Value::integer(static_cast<int64_t>(std::trunc(f)));
  }
  if (v.isString()) {
    if (std::optional<int64_t> i = parsePyInt(v.asString(), static_cast<int>(base))) {
      return Value::integer(*i);
    }
    // jinja2 then tries int(float(value)), so "42.23" gives 42.
    if (std::optional<double> f = parsePyFloat(v.asString())) {
      if (std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(std::trunc(*f)));
      }
    }
  }
  return fallback;
}

Expected<Value> filterItems(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("items", args, {}));
  if (v.isUndefined()) {
    return Value::list({});
  }
  if (!v.isDict()) {
    return invalidArgument("Can only get item pairs from a mapping.");
  }
  std::vector<Value> items;
  for (const auto &[key, value] : v.asDict().entries) {
    items.push_back(Value::list({str(key), value}, ListStyle::Tuple));
  }
  return Value::list(std::move(items));
}

Expected<Value> filterJoin(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("join", args, {"d", "attribute"}));
  const std::string separator = p[0] ? pyStr(*p[0]) : "";
  const std::optional<std::string> attribute = optionalStrParam(p[1]);
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value item = attribute ? attributePath(items[i], *attribute) : items[i];
    const size_t next =
        (i != 0 ? separator.size() : 0) + (item.isString() ? item.asString().size() : 0);
    GLM_RETURN_IF_ERROR(checkStringSize("join()", out.size() + next));
    if (i != 0) {
      out += separator;
    }
    appendPyStr(out, item); // a non-string stops at the limit and reports it
    if (renderFailed()) {
      break;
    }
  }
  return str(std::move(out));
}

Expected<Value> filterList(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("list", args, {}));
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  return Value::list(std::move(items));
}

Expected<Value> filterLower(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("lower", args, {}));
  return str(pyLower(pyStr(v)));
}

Expected<Value> filterUpper(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("upper", args, {}));
  return str(pyUpper(pyStr(v)));
}

Expected<Value> filterTitle(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("title", args, {}));
  return str(jinjaTitle(pyStr(v)));
}

/// The items map and select visit: jinja2 checks `if value:` first, so a falsy value (0, None,
/// False) gives nothing instead of a not-iterable error.
Expected<std::vector<Value>> itemsIfTruthy(const Value &v) {
  if (!truthy(v)) {
    return std::vector<Value>{};
  }
  return iterateValue(v);
}

Expected<Value> filterMap(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, itemsIfTruthy(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs("map", args, {"attribute", "default"}));
    if (!p[0]) {
      return invalidArgument("map: give a filter name or attribute=");
    }
    const std::string attribute = pyStr(*p[0]);
    for (const Value &item : items) {
      Value mapped = attributePath(item, attribute);
      if (mapped.isUndefined() && p[1]) {
        mapped = *p[1];
      }
      out.push_back(std::move(mapped));
    }
    return Value::list(std::move(out));
  }
  const std::string name = pyStr(args.positional[0]);
  if (filterSupport(name) != BuiltinSupport::Supported) {
    return invalidArgument("map: no filter named '", name, "'");
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keywords = args.keywords;
  for (const Value &item : items) {
    GLM_ASSIGN_OR_RETURN(Value mapped, applyFilter(name, item, rest));
    out.push_back(std::move(mapped));
  }
  return Value::list(std::move(out));
}

Expected<Value> minMax(const Value &v, const CallArgs &args, bool wantMax) {
  const char *name = wantMax ? "max" : "min";
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs(name, args, {"case_sensitive", "attribute"}));
  const bool caseSensitive = boolParam(p[0], false);
  const std::optional<std::string> attribute = optionalStrParam(p[1]);
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  if (items.empty()) {
    return Value::undefined("No aggregated item, sequence was empty.");
  }
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    GLM_ASSIGN_OR_RETURN(int c, compareValues(sortKey(items[i], attribute, caseSensitive),
                                              sortKey(items[best], attribute, caseSensitive)));
    if (wantMax ? c > 0 : c < 0) {
      best = i;
    }
  }
  return items[best];
}

Expected<Value> filterMax(const Value &v, const CallArgs &args) { return minMax(v, args, true); }
Expected<Value> filterMin(const Value &v, const CallArgs &args) { return minMax(v, args, false); }

/// select / reject / selectattr / rejectattr.
Expected<Value> selectItems(const Value &v, const CallArgs &args, bool byAttribute, bool keep) {
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, itemsIfTruthy(v));
  size_t next = 0;
  std::optional<std::string> attribute;
  if (byAttribute) {
    if (args.positional.empty()) {
      return invalidArgument("selectattr: missing the attribute name");
    }
    attribute = pyStr(args.positional[next++]);
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) {
    test = pyStr(args.positional[next++]);
    if (testSupport(*test) != BuiltinSupport::Supported) {
      return invalidArgument("no test named '", *test, "'");
    }
  }
  CallArgs testArgs;
  testArgs.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                             args.positional.end());
  testArgs.keywords = args.keywords;
  std::vector<Value> out;
  for (const Value &item : items) {
    const Value subject = attribute ? attributePath(item, *attribute) : item;
    bool passed = false;
    if (test) {
      GLM_ASSIGN_OR_RETURN(passed, applyTest(*test, subject, testArgs));
    } else {
      passed = truthy(subject);
    }
    if (passed == keep) {
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Expected<Value> filterSelect(const Value &v, const CallArgs &a) {
  return selectItems(v, a, false, true);
}
Expected<Value> filterReject(const Value &v, const CallArgs &a) {
  return selectItems(v, a, false, false);
}
Expected<Value> filterSelectattr(const Value &v, const CallArgs &a) {
  return selectItems(v, a, true, true);
}
Expected<Value> filterRejectattr(const Value &v, const CallArgs &a) {
  return selectItems(v, a, true, false);
}

Expected<Value> filterReplace(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("replace", args, {"old", "new", "count"}));
  if (!p[0] || !p[1]) {
    return invalidArgument("replace() needs 'old' and 'new'");
  }
  GLM_ASSIGN_OR_RETURN(int64_t count, intParam("replace", p[2], -1, "count"));
  GLM_ASSIGN_OR_RETURN(std::string out, pyReplace(pyStr(v), pyStr(*p[0]), pyStr(*p[1]), count));
  return str(std::move(out));
}

Expected<Value> filterReverse(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("reverse", args, {}));
  if (v.isString()) {
    // Each character's bytes go to the mirror place, without a list of the characters.
    const std::string &text = v.asString();
    std::string out(text.size(), '\0');
    size_t end = text.size();
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      decodeUtf8(text, i);
      end -= i - start;
      text.copy(out.data() + end, i - start, start);
    }
    return str(std::move(out));
  }
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Expected<Value> filterRound(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("round", args, {"precision", "method"}));
  GLM_ASSIGN_OR_RETURN(int64_t precision, intParam("round", p[0], 0, "precision"));
  const std::string method = p[1] ? pyStr(*p[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalidArgument("method must be common, ceil or floor");
  }
  GLM_ASSIGN_OR_RETURN(Value n, numberArg("round", v));
  if (method == "common") {
    if (n.isIntegral()) {
      if (precision >= 0) {
        return Value::integer(n.asInt());
      }
      return Value::integer(static_cast<int64_t>(pyRoundFloat(n.asDouble(), precision)));
    }
    return Value::real(pyRoundFloat(n.asDouble(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = n.asDouble() * scale;
  return Value::real((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Expected<Value> filterSafe(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("safe", args, {}));
  // Nothing is autoescaped in transformers' environment, so marking safe only stringifies.
  return str(pyStr(v));
}

Expected<Value> filterSort(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p,
                       bindArgs("sort", args, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = boolParam(p[0], false);
  const bool caseSensitive = boolParam(p[1], false);
  std::vector<std::string> attributes;
  if (std::optional<std::string> attribute = optionalStrParam(p[2])) {
    GLM_ASSIGN_OR_RETURN(std::vector<Value> parts,
                         pySplit(*attribute, std::string(","), -1, false));
    for (Value &part : parts) {
      attributes.push_back(part.asString());
    }
  }
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  Status failure;
  const auto keyOf = [&](const Value &item) {
    if (attributes.empty()) {
      return sortKey(item, std::nullopt, caseSensitive);
    }
    std::vector<Value> keys;
    for (const std::string &a : attributes) {
      keys.push_back(sortKey(item, a, caseSensitive));
    }
    return keys.size() == 1 ? keys.front() : Value::list(std::move(keys), ListStyle::Tuple);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value &a, const Value &b) {
    if (!failure.ok() || !spendSteps(1)) {
      return false; // the render fails at its next step
    }
    Expected<int> c = compareValues(keyOf(a), keyOf(b));
    if (!c.ok()) {
      failure = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  GLM_RETURN_IF_ERROR(failure);
  return Value::list(std::move(items));
}

Expected<Value> filterString(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("string", args, {}));
  return str(pyStr(v));
}

Expected<Value> filterSum(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("sum", args, {"attribute", "start"}));
  const std::optional<std::string> attribute = optionalStrParam(p[0]);
  Value total = p[1] ? *p[1] : Value::integer(0);
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  for (const Value &item : items) {
    const Value term = attribute ? attributePath(item, *attribute) : item;
    if (!term.isNumber() || !total.isNumber()) {
      return invalidArgument("unsupported operand type(s) for +: '", typeName(total), "' and '",
                             typeName(term), "'");
    }
    GLM_ASSIGN_OR_RETURN(total, addNumbers(total, term));
  }
  return total;
}

Expected<Value> filterTojson(const Value &v, const CallArgs &args) {
  // transformers' own tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False), with no HTML escaping.
  GLM_ASSIGN_OR_RETURN(
      Params p, bindArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensureAscii = boolParam(p[0], false);
  if (p[1] && !p[1]->isNone()) {
    if (p[1]->isString()) {
      options.indent = p[1]->asString();
    } else {
      GLM_ASSIGN_OR_RETURN(int64_t width, intParam("tojson", p[1], 0, "indent"));
      GLM_RETURN_IF_ERROR(
          checkStringSize("tojson()", static_cast<uint64_t>(std::max<int64_t>(0, width))));
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    }
    options.itemSeparator.assign(1, ',');
  }
  if (p[2] && !p[2]->isNone()) {
    if (!p[2]->isList() || p[2]->asList().items.size() != 2 ||
        !p[2]->asList().items[0].isString() || !p[2]->asList().items[1].isString()) {
      return invalidArgument("tojson: separators must be a pair of strings");
    }
    options.itemSeparator = p[2]->asList().items[0].asString();
    options.keySeparator = p[2]->asList().items[1].asString();
  }
  options.sortKeys = boolParam(p[3], false);
  GLM_ASSIGN_OR_RETURN(std::string text, dumpJson(v, options));
  return str(std::move(text));
}

Expected<Value> filterTrim(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("trim", args, {"chars"}));
  const std::string text = pyStr(v);
  return str(std::string(pyStrip(text, optionalStrParam(p[0]), true, true)));
}

Expected<Value> filterUnique(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("unique", args, {"case_sensitive", "attribute"}));
  const bool caseSensitive = boolParam(p[0], false);
  const std::optional<std::string> attribute = optionalStrParam(p[1]);
  GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(v));
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value &item : items) {
    // Quadratic: every item is compared with those kept.
    if (!spendSteps(1 + seen.size())) {
      break; // the render fails at its next step
    }
    const Value key = sortKey(item, attribute, caseSensitive);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value &s) { return valuesEqual(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Expected<Value> filterWordcount(const Value &v, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs("wordcount", args, {}));
  const std::string text = pyStr(v);
  int64_t words = 0;
  bool inWord = false;
  for (size_t i = 0; i < text.size();) {
    const char32_t c = decodeUtf8(text, i);
    // Python's \w: letters, digits and '_'; any non-ASCII non-space counts as a letter here.
    const bool wordChar =
        c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !isPySpace(c));
    if (wordChar && !inWord) {
      ++words;
    }
    inWord = wordChar;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFn> &filterTable() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", filterAbs},           {"attr", filterAttr},       {"capitalize", filterCapitalize},
      {"count", filterLength},      {"d", filterDefault},       {"default", filterDefault},
      {"dictsort", filterDictsort}, {"e", filterEscape},        {"escape", filterEscape},
      {"first", filterFirst},       {"float", filterFloat},     {"indent", filterIndent},
      {"int", filterInt},           {"items", filterItems},     {"join", filterJoin},
      {"last", filterLast},         {"length", filterLength},   {"list", filterList},
      {"lower", filterLower},       {"map", filterMap},         {"max", filterMax},
      {"min", filterMin},           {"reject", filterReject},   {"rejectattr", filterRejectattr},
      {"replace", filterReplace},   {"reverse", filterReverse}, {"round", filterRound},
      {"safe", filterSafe},         {"select", filterSelect},   {"selectattr", filterSelectattr},
      {"sort", filterSort},         {"string", filterString},   {"sum", filterSum},
      {"title", filterTitle},       {"tojson", filterTojson},   {"trim", filterTrim},
      {"unique", filterUnique},     {"upper", filterUpper},     {"wordcount", filterWordcount},
  };
  return table;
}

// jinja2's builtin filters that this interpreter does not implement.
constexpr std::string_view kUnsupportedFilters[] = {
    "batch",    "center",    "filesizeformat", "forceescape", "format",
    "groupby",  "pprint",    "random",         "slice",       "striptags",
    "truncate", "urlencode", "urlize",         "wordwrap",    "xmlattr",
};

// --- tests -----------------------------------------------------------------------------------

using TestFn = Expected<bool> (*)(const Value &, const CallArgs &);

Expected<Value> oneTestArg(std::string_view name, const CallArgs &args) {
  GLM_ASSIGN_OR_RETURN(Params p, bindArgs(name, args, {"other"}));
  if (!p[0]) {
    return invalidArgument(name, "() missing 1 required positional argument");
  }
  return *p[0];
}

Expected<bool> compareTest(std::string_view name, const Value &v, const CallArgs &args,
                           bool (*accept)(int)) {
  GLM_ASSIGN_OR_RETURN(Value other, oneTestArg(name, args));
  if (v.isUndefined()) {
    return undefinedError(v);
  }
  GLM_ASSIGN_OR_RETURN(int c, compareValues(v, other));
  return accept(c);
}

/// jinja2's odd/even/divisibleby: `value % divisor == remainder`, with Python's % on ints and
/// floats.
Expected<bool> moduloTest(std::string_view name, const Value &v, const Value &divisor,
                          int64_t remainder) {
  if (v.isUndefined()) {
    return undefinedError(v);
  }
  if (!v.isNumber() || !divisor.isNumber()) {
    return invalidArgument(name, ": unsupported operand type(s) for %: '", typeName(v), "' and '",
                           typeName(divisor), "'");
  }
  if (divisor.asDouble() == 0.0) {
    return invalidArgument("integer division or modulo by zero");
  }
  if (v.isIntegral() && divisor.isIntegral()) {
    const int64_t d = divisor.asInt();
    int64_t r = d == -1 ? 0 : v.asInt() % d;
    if (r != 0 && ((r < 0) != (d < 0))) {
      r += d;
    }
    return r == remainder;
  }
  const double d = divisor.asDouble();
  double r = std::fmod(v.asDouble(), d);
  if (r != 0.0 && ((r < 0) != (d < 0))) {
    r += d;
  }
  return r == static_cast<double>(remainder);
}

const std::unordered_map<std::string_view, TestFn> &testTable() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined",
       [](const Value &v, const CallArgs &) -> Expected<bool> { return !v.isUndefined(); }},
      {"undefined",
       [](const Value &v, const CallArgs &) -> Expected<bool> { return v.isUndefined(); }},
      {"none", [](const Value &v, const CallArgs &) -> Expected<bool> { return v.isNone(); }},
      {"boolean",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.kind() == ValueKind::Bool;
       }},
      {"true",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.kind() == ValueKind::Bool && v.asBool();
       }},
      {"false",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.kind() == ValueKind::Bool && !v.asBool();
       }},
      {"integer",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.kind() == ValueKind::Int;
       }},
      {"float",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.kind() == ValueKind::Float;
       }},
      {"number", [](const Value &v, const CallArgs &) -> Expected<bool> { return v.isNumber(); }},
      {"string", [](const Value &v, const CallArgs &) -> Expected<bool> { return v.isString(); }},
      {"mapping", [](const Value &v, const CallArgs &) -> Expected<bool> { return v.isDict(); }},
      {"sequence",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         // jinja2 asks for len() and __getitem__, which Undefined has too.
         return v.isString() || v.isList() || v.isDict() || v.isUndefined();
       }},
      {"iterable",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.isString() || v.isList() || v.isDict() || v.isUndefined() ||
                v.kind() == ValueKind::Loop;
       }},
      {"callable",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         // Undefined is callable in jinja2 (calling it raises).
         return v.kind() == ValueKind::Callable || v.isUndefined();
       }},
      {"lower",
       [](const Value &v, const CallArgs &) -> Expected<bool> { return pyIsLower(pyStr(v)); }},
      {"upper",
       [](const Value &v, const CallArgs &) -> Expected<bool> { return pyIsUpper(pyStr(v)); }},
      {"escaped", [](const Value &, const CallArgs &) -> Expected<bool> { return false; }},
      {"odd",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return moduloTest("odd", v, Value::integer(2), 1);
       }},
      {"even",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return moduloTest("even", v, Value::integer(2), 0);
       }},
      {"divisibleby",
       [](const Value &v, const CallArgs &args) -> Expected<bool> {
         GLM_ASSIGN_OR_RETURN(Value other, oneTestArg("divisibleby", args));
         return moduloTest("divisibleby", v, other, 0);
       }},
      {"sameas",
       [](const Value &v, const CallArgs &args) -> Expected<bool> {
         GLM_ASSIGN_OR_RETURN(Value other, oneTestArg("sameas", args));
         if (v.kind() != other.kind()) {
           return false;
         }
         if (v.isList()) {
           return &v.asList() == &other.asList();
         }
         return valuesEqual(v, other);
       }},
      {"filter",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.isString() && filterSupport(v.asString()) == BuiltinSupport::Supported;
       }},
      {"test",
       [](const Value &v, const CallArgs &) -> Expected<bool> {
         return v.isString() && testSupport(v.asString()) == BuiltinSupport::Supported;
       }},
      {"in",
       [](const Value &v, const CallArgs &args) -> Expected<bool> {
         GLM_ASSIGN_OR_RETURN(Value seq, oneTestArg("in", args));
         return containsValue(seq, v);
       }},
      {"eq",
       [](const Value &v, const CallArgs &args) -> Expected<bool> {
         GLM_ASSIGN_OR_RETURN(Value other, oneTestArg("eq", args));
         return valuesEqual(v, other);
       }},
      {"ne",
       [](const Value &v, const CallArgs &args) -> Expected<bool> {
         GLM_ASSIGN_OR_RETURN(Value other, oneTestArg("ne", args));
         return !valuesEqual(v, other);
       }},
      {"lt",
       [](const Value &v, const CallArgs &a) -> Expected<bool> {
         return compareTest("lt", v, a, [](int c) { return c < 0; });
       }},
      {"le",
       [](const Value &v, const CallArgs &a) -> Expected<bool> {
         return compareTest("le", v, a, [](int c) { return c <= 0; });
       }},
      {"gt",
       [](const Value &v, const CallArgs &a) -> Expected<bool> {
         return compareTest("gt", v, a, [](int c) { return c > 0; });
       }},
      {"ge",
       [](const Value &v, const CallArgs &a) -> Expected<bool> {
         return compareTest("ge", v, a, [](int c) { return c >= 0; });
       }},
  };
  return table;
}

/// jinja2's test aliases.
std::string_view canonicalTest(std::string_view name) {
  if (name == "==" || name == "equalto") {
    return "eq";
  }
  if (name == "!=") {
    return "ne";
  }
  if (name == "<" || name == "lessthan") {
    return "lt";
  }
  if (name == "<=") {
    return "le";
  }
  if (name == ">" || name == "greaterthan") {
    return "gt";
  }
  if (name == ">=") {
    return "ge";
  }
  return name;
}

// --- methods ---------------------------------------------------------------------------------

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::string_view kDictMethods[] = {"clear",      "copy",   "fromkeys", "get",
                                             "items",      "keys",   "pop",      "popitem",
                                             "setdefault", "update", "values"};
constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                             "extend", "index",   "insert", "pop",
                                             "remove", "reverse", "sort"};
// Methods jinja2's ImmutableSandboxedEnvironment refuses because they mutate.
constexpr std::string_view kMutatingMethods[] = {"append",     "clear",   "extend", "insert",
                                                 "pop",        "popitem", "remove", "reverse",
                                                 "setdefault", "sort",    "update"};

template <size_t N> bool contains(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

Value boundMethod(const Value &receiver, std::string_view name) {
  auto data = std::make_shared<CallableData>();
  data->kind = CallableData::Kind::Method;
  data->name = std::string(name);
  data->receiver = std::make_shared<const Value>(receiver);
  return Value::callable(std::move(data));
}

/// The argument of startswith/endswith: a string or a tuple of strings.
Expected<std::vector<std::string>> affixes(std::string_view method, const Value &v) {
  std::vector<std::string> out;
  if (v.isString()) {
    out.push_back(v.asString());
    return out;
  }
  if (v.isList()) {
    for (const Value &item : v.asList().items) {
      if (!item.isString()) {
        return invalidArgument(method, ": tuple for ", method, " must only contain str, not ",
                               typeName(item));
      }
      out.push_back(item.asString());
    }
    return out;
  }
  return invalidArgument(method, " first arg must be str or a tuple of str, not ", typeName(v));
}

Expected<Value> callStrMethod(const std::string &s, std::string_view name, const CallArgs &args) {
  const std::string fn = strCat("str.", name);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {}));
    if (name == "upper") {
      return str(pyUpper(s));
    }
    if (name == "lower") {
      return str(pyLower(s));
    }
    return str(name == "title" ? pyTitle(s) : pyCapitalize(s));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"chars"}));
    return str(std::string(pyStrip(s, optionalStrParam(p[0]), name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"sep", "maxsplit"}));
    const std::optional<std::string> sep = optionalStrParam(p[0]);
    if (sep && sep->empty()) {
      return invalidArgument("empty separator");
    }
    GLM_ASSIGN_OR_RETURN(int64_t maxSplit, intParam(fn, p[1], -1, "maxsplit"));
    GLM_ASSIGN_OR_RETURN(std::vector<Value> parts, pySplit(s, sep, maxSplit, name == "rsplit"));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"prefix"}));
    if (!p[0]) {
      return invalidArgument(fn, "() takes at least 1 argument (0 given)");
    }
    GLM_ASSIGN_OR_RETURN(std::vector<std::string> options, affixes(fn, *p[0]));
    for (const std::string &a : options) {
      const bool hit = name == "startswith" ? s.compare(0, a.size(), a) == 0
                                            : s.size() >= a.size() &&
                                                  s.compare(s.size() - a.size(), a.size(), a) == 0;
      if (hit) {
        return Value::boolean(true);
      }
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"old", "new", "count"}));
    if (!p[0] || !p[1] || !p[0]->isString() || !p[1]->isString()) {
      return invalidArgument("str.replace() needs two strings");
    }
    GLM_ASSIGN_OR_RETURN(int64_t count, intParam(fn, p[2], -1, "count"));
    GLM_ASSIGN_OR_RETURN(std::string out, pyReplace(s, p[0]->asString(), p[1]->asString(), count));
    return str(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"sub"}));
    if (!p[0] || !p[0]->isString()) {
      return invalidArgument(fn, "() needs a string argument");
    }
    const std::string &sub = p[0]->asString();
    if (name == "count") {
      if (sub.empty()) {
        return Value::integer(static_cast<int64_t>(utf8Length(s)) + 1);
      }
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos;
           pos = s.find(sub, pos + sub.size())) {
        ++n;
      }
      return Value::integer(n);
    }
    const size_t hit = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") {
        return invalidArgument("substring not found");
      }
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8Length(std::string_view(s).substr(0, hit))));
  }
  if (name == "join") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"iterable"}));
    if (!p[0]) {
      return invalidArgument("str.join() takes exactly one argument (0 given)");
    }
    GLM_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(*p[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].isString()) {
        return invalidArgument("sequence item ", i, ": expected str instance, ", typeName(items[i]),
                               " found");
      }
      GLM_RETURN_IF_ERROR(checkStringSize("str.join()", out.size() + (i != 0 ? s.size() : 0) +
                                                            items[i].asString().size()));
      if (i != 0) {
        out += s;
      }
      out += items[i].asString();
    }
    return str(std::move(out));
  }
  if (name == "splitlines") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"keepends"}));
    std::vector<Value> lines;
    Status tooMany;
    forEachLine(s, boolParam(p[0], false), [&](std::string_view line) {
      if (lines.size() >= kMaxListItems) {
        tooMany = listTooLong("str.splitlines()", lines.size() + 1);
        return;
      }
      lines.push_back(str(std::string(line)));
    });
    GLM_RETURN_IF_ERROR(tooMany);
    return Value::list(std::move(lines));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"affix"}));
    if (!p[0] || !p[0]->isString()) {
      return invalidArgument(fn, "() needs a string argument");
    }
    const std::string &a = p[0]->asString();
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) {
      return str(s.substr(a.size()));
    }
    if (name == "removesuffix" && !a.empty() && s.size() >= a.size() &&
        s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return str(s.substr(0, s.size() - a.size()));
    }
    return str(s);
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalpha" ||
      name == "isalnum" || name == "isspace" || name == "islower" || name == "isupper") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {}));
    if (name == "islower") {
      return Value::boolean(pyIsLower(s));
    }
    if (name == "isupper") {
      return Value::boolean(pyIsUpper(s));
    }
    if (s.empty()) {
      return Value::boolean(false);
    }
    for (size_t i = 0; i < s.size();) {
      const char32_t c = decodeUtf8(s, i);
      const bool digit = c >= '0' && c <= '9';
      const bool alpha = c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0 : isCasedCp(c);
      bool ok = false;
      if (name == "isspace") {
        ok = isPySpace(c);
      } else if (name == "isalpha") {
        ok = alpha;
      } else if (name == "isalnum") {
        ok = alpha || digit;
      } else {
        ok = digit;
      }
      if (!ok) {
        return Value::boolean(false);
      }
    }
    return Value::boolean(true);
  }
  return unimplemented("str.", name, "() is not supported by this template interpreter");
}

Expected<Value> callDictMethod(const Value &receiver, std::string_view name, const CallArgs &args) {
  const DictData &d = receiver.asDict();
  const std::string fn = strCat("dict.", name);
  if (name == "items" || name == "keys" || name == "values") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {}));
    std::vector<Value> out;
    out.reserve(d.entries.size());
    for (const auto &[key, value] : d.entries) {
      if (name == "items") {
        out.push_back(Value::list({str(key), value}, ListStyle::Tuple));
      } else {
        out.push_back(name == "keys" ? str(key) : value);
      }
    }
    const ListStyle style = name == "items"  ? ListStyle::DictItems
                            : name == "keys" ? ListStyle::DictKeys
                                             : ListStyle::DictValues;
    return Value::list(std::move(out), style);
  }
  if (name == "get") {
    // dict.get takes positional arguments only.
    if (!args.keywords.empty() || args.positional.empty() || args.positional.size() > 2) {
      return invalidArgument("dict.get() takes 1 or 2 positional arguments");
    }
    const Value &key = args.positional[0];
    if (key.isString()) {
      if (const Value *found = d.find(key.asString())) {
        return *found;
      }
    }
    return args.positional.size() == 2 ? args.positional[1] : Value::none();
  }
  if (name == "copy") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {}));
    return Value::dict(DictData(d));
  }
  return unimplemented("dict.", name, "() is not supported by this template interpreter");
}

Expected<Value> callListMethod(const ListData &list, std::string_view name, const CallArgs &args) {
  const std::string fn = strCat(list.style == ListStyle::Tuple ? "tuple." : "list.", name);
  if (name == "index" || name == "count") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {"value"}));
    if (!p[0]) {
      return invalidArgument(fn, "() takes exactly one argument (0 given)");
    }
    int64_t count = 0;
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (valuesEqual(list.items[i], *p[0])) {
        if (name == "index") {
          return Value::integer(static_cast<int64_t>(i));
        }
        ++count;
      }
    }
    if (name == "index") {
      return invalidArgument(pyRepr(*p[0]), " is not in list");
    }
    return Value::integer(count);
  }
  if (name == "copy") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs(fn, args, {}));
    return Value::list(list.items, list.style);
  }
  return unimplemented(fn, "() is not supported by this template interpreter");
}

// --- globals ---------------------------------------------------------------------------------

/// The sandbox's MAX_RANGE: a template cannot build a larger range.
constexpr int64_t kMaxRange = 100000;

Expected<Value> globalRange(const CallArgs &args) {
  if (!args.keywords.empty() || args.positional.empty() || args.positional.size() > 3) {
    return invalidArgument("range expected 1 to 3 integer arguments");
  }
  for (const Value &a : args.positional) {
    if (!a.isIntegral()) {
      return invalidArgument("'", typeName(a), "' object cannot be interpreted as an integer");
    }
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].asInt();
  } else {
    start = args.positional[0].asInt();
    stop = args.positional[1].asInt();
    if (args.positional.size() == 3) {
      step = args.positional[2].asInt();
    }
  }
  if (step == 0) {
    return invalidArgument("range() arg 3 must not be zero");
  }
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      return invalidArgument("Range too big. The sandbox blocks ranges larger than MAX_RANGE (",
                             kMaxRange, ").");
    }
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

/// dict(...) and namespace(...): an optional mapping, then keyword arguments.
Expected<std::shared_ptr<DictData>> dictFromArgs(std::string_view fn, const CallArgs &args) {
  auto data = std::make_shared<DictData>();
  if (args.positional.size() > 1) {
    return invalidArgument(fn, " expected at most 1 positional argument");
  }
  if (args.positional.size() == 1) {
    const Value &init = args.positional[0];
    if (init.hasDictData()) {
      data->entries = init.asDict().entries;
    } else if (init.isList()) {
      // An index of the keys: DictData::set scans, which is quadratic over a long list.
      std::unordered_map<std::string_view, size_t> index;
      for (const Value &pair : init.asList().items) {
        if (!pair.isList() || pair.asList().items.size() != 2 ||
            !pair.asList().items[0].isString()) {
          return invalidArgument(fn, ": each item must be a (str, value) pair");
        }
        const std::string &key = pair.asList().items[0].asString();
        const auto [it, added] = index.emplace(key, data->entries.size());
        if (added) {
          data->entries.emplace_back(key, pair.asList().items[1]);
        } else {
          data->entries[it->second].second = pair.asList().items[1];
        }
      }
    } else {
      return invalidArgument(fn, ": '", typeName(init), "' object is not a mapping");
    }
  }
  for (const auto &[key, value] : args.keywords) {
    data->set(key, value);
  }
  data->measure();
  return data;
}

/// The longest strftime_now() format: real ones are a dozen bytes ("%d %b %Y").
constexpr size_t kMaxTimeFormatBytes = 256;

std::string strftimeNow(const std::string &format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(256 + format.size() * 4, '\0');
  const size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &local);
  buffer.resize(n);
  return buffer;
}

} // namespace

// --- public entry points ---------------------------------------------------------------------

BuiltinSupport filterSupport(std::string_view name) {
  if (filterTable().count(name) != 0) {
    return BuiltinSupport::Supported;
  }
  return contains(kUnsupportedFilters, name) ? BuiltinSupport::Unsupported
                                             : BuiltinSupport::Unknown;
}

BuiltinSupport testSupport(std::string_view name) {
  return testTable().count(canonicalTest(name)) != 0 ? BuiltinSupport::Supported
                                                     : BuiltinSupport::Unknown;
}

/// The failure of this thread's render, for a builtin that finds the render already failed (a
/// filter mapped over a list, say): its own work would be thrown away.
static Status failedRender() { return invalidArgument("the render has failed"); }

Expected<Value> applyFilter(std::string_view name, const Value &input, const CallArgs &args) {
  if (renderFailed()) {
    return failedRender();
  }
  const auto &table = filterTable();
  const auto it = table.find(name);
  if (it == table.end()) {
    return unimplemented("no filter named '", name, "'");
  }
  return it->second(input, args);
}

Expected<bool> applyTest(std::string_view name, const Value &input, const CallArgs &args) {
  if (renderFailed()) {
    return failedRender();
  }
  const auto &table = testTable();
  const auto it = table.find(canonicalTest(name));
  if (it == table.end()) {
    return unimplemented("no test named '", name, "'");
  }
  return it->second(input, args);
}

bool isGlobalFunction(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now" || name == "cycler" || name == "joiner" || name == "lipsum";
}

Expected<Value> callGlobal(std::string_view name, const CallArgs &args) {
  if (name == "range") {
    return globalRange(args);
  }
  if (name == "namespace" || name == "dict") {
    GLM_ASSIGN_OR_RETURN(std::shared_ptr<DictData> data, dictFromArgs(name, args));
    if (name == "namespace" && data->holdsNamespace) {
      return invalidArgument("a namespace attribute cannot hold a namespace (this interpreter "
                             "refuses the cycles that would allow)");
    }
    return name == "dict" ? Value::dict(std::move(data)) : Value::namespaceObject(std::move(data));
  }
  if (name == "raise_exception") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs("raise_exception", args, {"message"}));
    return invalidArgument(p[0] ? pyStr(*p[0]) : std::string("raise_exception() called"));
  }
  if (name == "strftime_now") {
    GLM_ASSIGN_OR_RETURN(Params p, bindArgs("strftime_now", args, {"format"}));
    if (!p[0] || !p[0]->isString()) {
      return invalidArgument("strftime_now() needs a format string");
    }
    if (p[0]->asString().size() > kMaxTimeFormatBytes) {
      return invalidArgument("strftime_now(): a format of ", p[0]->asString().size(),
                             " bytes is longer than the ", kMaxTimeFormatBytes, " allowed");
    }
    return str(strftimeNow(p[0]->asString()));
  }
  return unimplemented("the global '", name, "' is not supported by this template interpreter");
}

Expected<Value> callMethod(const Value &receiver, std::string_view name, const CallArgs &args) {
  if ((receiver.isList() || receiver.isDict()) && contains(kMutatingMethods, name)) {
    return invalidArgument("access to attribute '", name, "' of '", typeName(receiver),
                           "' object is unsafe.");
  }
  switch (receiver.kind()) {
  case ValueKind::String:
    return callStrMethod(receiver.asString(), name, args);
  case ValueKind::Dict:
    return callDictMethod(receiver, name, args);
  case ValueKind::List:
    return callListMethod(receiver.asList(), name, args);
  case ValueKind::Loop:
    if (name == "cycle") {
      if (!args.keywords.empty()) {
        return invalidArgument("loop.cycle() takes no keyword arguments");
      }
      if (args.positional.empty()) {
        return invalidArgument("no items for cycling given");
      }
      const int64_t index = receiver.asDict().find("index0")->asInt();
      return args.positional[static_cast<size_t>(index) % args.positional.size()];
    }
    break;
  default:
    break;
  }
  return unimplemented(typeName(receiver), ".", name,
                       "() is not supported by this template interpreter");
}

Value getAttribute(const Value &object, std::string_view name) {
  const auto missing = [&]() {
    return Value::undefined(
        strCat("'", object.isNone() ? std::string("None") : strCat(typeName(object), " object"),
               "' has no attribute '", name, "'"));
  };
  switch (object.kind()) {
  case ValueKind::Dict:
    if (contains(kDictMethods, name)) {
      return boundMethod(object, name);
    }
    if (const Value *v = object.asDict().find(name)) {
      return *v;
    }
    return missing();
  case ValueKind::Namespace:
    if (const Value *v = object.asDict().find(name)) {
      return *v;
    }
    return missing();
  case ValueKind::Loop:
    if (name == "cycle") {
      return boundMethod(object, name);
    }
    if (const Value *v = object.asDict().find(name)) {
      return *v;
    }
    return missing();
  case ValueKind::String:
    if (contains(kStrMethods, name)) {
      return boundMethod(object, name);
    }
    return missing();
  case ValueKind::List:
    if (contains(kListMethods, name) &&
        (object.asList().style != ListStyle::Tuple || name == "index" || name == "count")) {
      return boundMethod(object, name);
    }
    return missing();
  default:
    return missing();
  }
}

Value getItem(const Value &object, const Value &key) {
  const auto missing = [&]() {
    return Value::undefined(
        strCat("'", object.isNone() ? std::string("None") : strCat(typeName(object), " object"),
               "' has no attribute ", pyRepr(key)));
  };
  switch (object.kind()) {
  case ValueKind::Dict:
    if (key.isString()) {
      if (const Value *v = object.asDict().find(key.asString())) {
        return *v;
      }
      return getAttribute(object, key.asString());
    }
    return missing();
  case ValueKind::List: {
    if (key.isIntegral()) {
      const auto &items = object.asList().items;
      int64_t index = key.asInt();
      const int64_t size = static_cast<int64_t>(items.size());
      if (index < 0) {
        index += size;
      }
      if (index < 0 || index >= size) {
        return Value::undefined(
            strCat("'", typeName(object), " object' has no element ", key.asInt()));
      }
      return items[static_cast<size_t>(index)];
    }
    if (key.isString()) {
      return getAttribute(object, key.asString());
    }
    return missing();
  }
  case ValueKind::String: {
    if (key.isIntegral()) {
      // Walks to the character (no list of them: the string may be long).
      const std::string &text = object.asString();
      int64_t index = key.asInt();
      if (index < 0) {
        index += static_cast<int64_t>(utf8Length(text));
      }
      int64_t at = 0;
      for (size_t i = 0; index >= 0 && i < text.size(); ++at) {
        const size_t start = i;
        decodeUtf8(text, i);
        if (at == index) {
          return str(text.substr(start, i - start));
        }
      }
      return Value::undefined(strCat("'str object' has no element ", key.asInt()));
    }
    if (key.isString()) {
      return getAttribute(object, key.asString());
    }
    return missing();
  }
  case ValueKind::Namespace:
  case ValueKind::Loop:
    if (key.isString()) {
      return getAttribute(object, key.asString());
    }
    return missing();
  default:
    return missing();
  }
}

Expected<Value> sliceValue(const Value &object, std::optional<int64_t> start,
                           std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t s = step.value_or(1);
  if (s == 0) {
    return invalidArgument("slice step cannot be zero");
  }
  int64_t length = 0;
  if (object.isString()) {
    length = static_cast<int64_t>(utf8Length(object.asString()));
  } else if (object.isList()) {
    length = static_cast<int64_t>(object.asList().items.size());
  } else if (object.isUndefined()) {
    return undefinedError(object);
  } else if (object.isDict()) {
    return invalidArgument("unhashable type: 'slice'");
  } else {
    // jinja2 compiles a slice to a plain Python subscript, so this is an error, not Undefined.
    return invalidArgument("'", typeName(object), "' object is not subscriptable");
  }
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) {
      return fallback;
    }
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) {
        x = s < 0 ? -1 : 0;
      }
    } else if (x >= length) {
      x = s < 0 ? length - 1 : length;
    }
    return x;
  };
  const int64_t first = adjust(start, s < 0 ? length - 1 : 0);
  const int64_t last = adjust(stop, s < 0 ? -1 : length);
  const auto selected = [&](int64_t i) {
    return s > 0 ? i >= first && i < last && (i - first) % s == 0
                 : i <= first && i > last && (first - i) % -s == 0;
  };
  if (object.isString()) {
    // One walk over the characters (a list of them could be 16x the text); a negative step
    // writes each chosen character from the end.
    const std::string &text = object.asString();
    std::string out;
    if (s > 0) {
      int64_t at = 0;
      for (size_t i = 0; i < text.size() && at < last; ++at) {
        const size_t begin = i;
        decodeUtf8(text, i);
        if (selected(at)) {
          out.append(text, begin, i - begin);
        }
      }
      return str(std::move(out));
    }
    size_t bytes = 0;
    int64_t at = 0;
    for (size_t i = 0; i < text.size() && at <= first; ++at) {
      const size_t begin = i;
      decodeUtf8(text, i);
      bytes += selected(at) ? i - begin : 0;
    }
    out.assign(bytes, '\0');
    at = 0;
    for (size_t i = 0; i < text.size() && at <= first; ++at) {
      const size_t begin = i;
      decodeUtf8(text, i);
      if (selected(at)) {
        bytes -= i - begin;
        text.copy(out.data() + bytes, i - begin, begin);
      }
    }
    return str(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = first; s > 0 ? i < last : i > last; i += s) {
    items.push_back(object.asList().items[static_cast<size_t>(i)]);
  }
  const ListStyle style =
      object.asList().style == ListStyle::Tuple ? ListStyle::Tuple : ListStyle::List;
  return Value::list(std::move(items), style);
}

Expected<std::vector<Value>> iterateValue(const Value &v) {
  switch (v.kind()) {
  case ValueKind::Undefined:
    return std::vector<Value>{};
  case ValueKind::String: {
    const std::string &text = v.asString();
    GLM_RETURN_IF_ERROR(checkListSize("iterating a string", utf8Length(text)));
    std::vector<Value> chars;
    for (size_t i = 0; i < text.size();) {
      const size_t start = i;
      decodeUtf8(text, i);
      chars.push_back(str(text.substr(start, i - start)));
    }
    return chars;
  }
  case ValueKind::List:
    return v.asList().items;
  case ValueKind::Dict: {
    std::vector<Value> keys;
    keys.reserve(v.asDict().entries.size());
    for (const auto &entry : v.asDict().entries) {
      keys.push_back(str(entry.first));
    }
    return keys;
  }
  default:
    return invalidArgument("'", typeName(v), "' object is not iterable");
  }
}

Expected<bool> containsValue(const Value &haystack, const Value &needle) {
  switch (haystack.kind()) {
  case ValueKind::Undefined:
    return false;
  case ValueKind::String:
    if (!needle.isString()) {
      return invalidArgument("'in <string>' requires string as left operand, not ",
                             typeName(needle));
    }
    return haystack.asString().find(needle.asString()) != std::string::npos;
  case ValueKind::List:
    for (const Value &item : haystack.asList().items) {
      if (!spendSteps(0) || valuesEqual(item, needle)) {
        return true;
      }
    }
    return false;
  case ValueKind::Dict:
    return needle.isString() && haystack.asDict().find(needle.asString()) != nullptr;
  default:
    return invalidArgument("argument of type '", typeName(haystack), "' is not iterable");
  }
}

} // namespace glm::server::jinja
