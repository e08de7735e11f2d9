// Values of the Jinja-subset interpreter: printing, comparison and JSON as Python does them.
#include "server/chat/JinjaValue.h"

#include "base/Utf8.h"
#include "server/chat/JinjaLimits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace glm::server::jinja {

const Value *DictData::find(std::string_view key) const {
  for (const auto &[k, v] : entries) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  holdsNamespace = holdsNamespace || value.holdsNamespace();
  for (auto &[k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

void DictData::measure() {
  depth = 1;
  holdsNamespace = false;
  for (const auto &[key, value] : entries) {
    depth = std::max(depth, value.depth() + 1);
    holdsNamespace = holdsNamespace || value.holdsNamespace();
  }
}

const std::string &Value::emptyString() {
  static const std::string empty;
  return empty;
}

size_t Value::depth() const {
  switch (kind_) {
  case ValueKind::List:
    return list_->depth;
  case ValueKind::Dict:
  case ValueKind::Namespace:
  case ValueKind::Loop:
    return dict_->depth;
  case ValueKind::Callable:
    return callable_->receiver ? callable_->receiver->depth() + 1 : 0;
  default:
    return 0;
  }
}

bool Value::holdsNamespace() const {
  switch (kind_) {
  case ValueKind::Namespace:
    return true;
  case ValueKind::List:
    return list_->holdsNamespace;
  case ValueKind::Dict:
  case ValueKind::Loop:
    return dict_->holdsNamespace;
  case ValueKind::Callable:
    return callable_->receiver && callable_->receiver->holdsNamespace();
  default:
    return false;
  }
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) {
    v.string_ = std::make_shared<const std::string>(std::move(hint));
  }
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::Bool;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::Int;
  v.int_ = i;
  return v;
}

Value Value::real(double f) {
  Value v;
  v.kind_ = ValueKind::Float;
  v.float_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::String;
  spendSteps(stepsForBytes(s.size())); // building text is work (see kMaxRenderSteps)
  if (!s.empty()) {
    v.string_ = std::make_shared<const std::string>(std::move(s));
  }
  return v;
}

Value Value::list(std::vector<Value> items, ListStyle style) {
  Value v;
  v.kind_ = ValueKind::List;
  auto data = std::make_shared<ListData>();
  spendSteps(stepsForItems(items.size()));
  data->items = std::move(items);
  data->style = style;
  for (const Value &item : data->items) {
    data->depth = std::max(data->depth, item.depth() + 1);
    data->holdsNamespace = data->holdsNamespace || item.holdsNamespace();
  }
  v.list_ = std::move(data);
  return v;
}

Value Value::dict(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = ValueKind::Dict;
  data->measure();
  v.dict_ = std::move(data);
  return v;
}

Value Value::namespaceObject(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = ValueKind::Namespace;
  data->measure();
  v.dict_ = std::move(data);
  return v;
}

Value Value::loop(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = ValueKind::Loop;
  data->measure();
  v.dict_ = std::move(data);
  return v;
}

Value Value::callable(std::shared_ptr<const CallableData> data) {
  Value v;
  v.kind_ = ValueKind::Callable;
  v.callable_ = std::move(data);
  return v;
}

bool truthy(const Value &v) {
  switch (v.kind()) {
  case ValueKind::Undefined:
  case ValueKind::None:
    return false;
  case ValueKind::Bool:
  case ValueKind::Int:
    return v.asInt() != 0;
  case ValueKind::Float:
    return v.asDouble() != 0.0;
  case ValueKind::String:
    return !v.asString().empty();
  case ValueKind::List:
    return !v.asList().items.empty();
  case ValueKind::Dict:
    return !v.asDict().entries.empty();
  case ValueKind::Namespace:
  case ValueKind::Loop:
  case ValueKind::Callable:
    return true;
  }
  return false;
}

std::string_view typeName(const Value &v) {
  switch (v.kind()) {
  case ValueKind::Undefined:
    return "Undefined";
  case ValueKind::None:
    return "NoneType";
  case ValueKind::Bool:
    return "bool";
  case ValueKind::Int:
    return "int";
  case ValueKind::Float:
    return "float";
  case ValueKind::String:
    return "str";
  case ValueKind::List:
    switch (v.asList().style) {
    case ListStyle::List:
      return "list";
    case ListStyle::Tuple:
      return "tuple";
    case ListStyle::DictKeys:
      return "dict_keys";
    case ListStyle::DictValues:
      return "dict_values";
    case ListStyle::DictItems:
      return "dict_items";
    }
    return "list";
  case ValueKind::Dict:
    return "dict";
  case ValueKind::Namespace:
    return "Namespace";
  case ValueKind::Loop:
    return "LoopContext";
  case ValueKind::Callable:
    return v.asCallable().kind == CallableData::Kind::Macro ? "Macro"
                                                            : "builtin_function_or_method";
  }
  return "object";
}

// --- UTF-8 -----------------------------------------------------------------------------------

char32_t decodeUtf8(std::string_view s, size_t &i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  size_t length = 1;
  char32_t c = b0;
  if (b0 >= 0xF0 && b0 < 0xF8) {
    length = 4;
    c = b0 & 0x07;
  } else if (b0 >= 0xE0) {
    length = b0 < 0xF0 ? 3 : 1;
    c = b0 & 0x0F;
  } else if (b0 >= 0xC0) {
    length = 2;
    c = b0 & 0x1F;
  }
  if (length == 1 || i + length > s.size()) {
    ++i;
    return b0;
  }
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return b0;
    }
    c = (c << 6) | (byte(i + k) & 0x3F);
  }
  i += length;
  return c;
}

size_t utf8Length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    decodeUtf8(s, i);
    ++n;
  }
  return n;
}

std::vector<std::string_view> utf8Chars(std::string_view s) {
  std::vector<std::string_view> chars;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    decodeUtf8(s, i);
    chars.push_back(s.substr(start, i - start));
  }
  return chars;
}

bool isPySpace(char32_t c) {
  // The code points for which Python's str.isspace() is true.
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string_view pyStrip(std::string_view s, const std::optional<std::string> &chars, bool left,
                         bool right) {
  std::vector<char32_t> set;
  if (chars) {
    for (size_t i = 0; i < chars->size();) {
      set.push_back(decodeUtf8(*chars, i));
    }
  }
  const auto strippable = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : isPySpace(c);
  };
  // Code point boundaries, so the right end can be walked backwards.
  std::vector<size_t> starts;
  std::vector<char32_t> points;
  for (size_t i = 0; i < s.size();) {
    starts.push_back(i);
    points.push_back(decodeUtf8(s, i));
  }
  size_t first = 0;
  size_t last = points.size();
  if (left) {
    while (first < last && strippable(points[first])) {
      ++first;
    }
  }
  if (right) {
    while (last > first && strippable(points[last - 1])) {
      --last;
    }
  }
  const size_t begin = first < starts.size() ? starts[first] : s.size();
  const size_t end = last < starts.size() ? starts[last] : s.size();
  return s.substr(begin, end - begin);
}

// --- printing --------------------------------------------------------------------------------

std::string formatPyFloat(double f) {
  if (std::isnan(f)) {
    return "nan";
  }
  if (std::isinf(f)) {
    return f < 0 ? "-inf" : "inf";
  }
  // The shortest round-trip digits, then Python's layout: positional for exponents -5 < e < 16,
  // scientific otherwise, and always a ".0" on an integral positional value.
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, f, std::chars_format::scientific);
  std::string_view sci(buffer, result.ptr - buffer);
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t ePos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, ePos)) {
    if (c != '.') {
      digits += c;
    }
  }
  int exponent = 0;
  std::string_view expText = sci.substr(ePos + 1);
  if (!expText.empty() && expText.front() == '+') {
    expText.remove_prefix(1);
  }
  std::from_chars(expText.data(), expText.data() + expText.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') {
    digits.pop_back();
  }
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char expBuffer[16];
    std::snprintf(expBuffer, sizeof expBuffer, "e%c%02d", exponent < 0 ? '-' : '+',
                  exponent < 0 ? -exponent : exponent);
    out += expBuffer;
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t intDigits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= intDigits) {
    out += digits;
    out.append(intDigits - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, intDigits);
    out += '.';
    out.append(digits, intDigits);
  }
  return out;
}

namespace {

/// Python's str.isprintable() for one code point, closely enough for repr: control characters,
/// separators other than the space, format characters and surrogates are not printable.
bool isPyPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
    return false;
  }
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF) ||
      (c >= 0xFFF9 && c <= 0xFFFB)) {
    return false;
  }
  return true;
}

/// Whether `more` bytes fit after `out` within kMaxStringBytes; if not, the render fails with the
/// string limit (printing cannot return an error).
bool room(const std::string &out, size_t more) {
  if (out.size() + more <= kMaxStringBytes) {
    return true;
  }
  reportLimit(stringTooLong("printing a value", out.size() + more));
  return false;
}

/// Whether printing should stop: the text passed the limit or the render failed.
bool full(const std::string &out) { return !room(out, 0) || renderFailed(); }

void appendStringRepr(std::string &out, std::string_view s) {
  if (!room(out, s.size() + 2)) {
    return;
  }
  const bool hasSingle = s.find('\'') != std::string_view::npos;
  const bool hasDouble = s.find('"') != std::string_view::npos;
  const char quote = hasSingle && !hasDouble ? '"' : '\'';
  out += quote;
  for (size_t i = 0; i < s.size();) {
    if (!room(out, 0)) {
      return; // escapes grow the text up to 10x
    }
    const size_t start = i;
    const char32_t c = decodeUtf8(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!isPyPrintable(c)) {
      char buffer[16];
      if (c < 0x100) {
        std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buffer, sizeof buffer, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buffer;
    } else {
      out.append(s, start, i - start);
    }
  }
  out += quote;
}

void appendSequenceRepr(std::string &out, const ListData &list) {
  const char *open = "[";
  const char *close = "]";
  switch (list.style) {
  case ListStyle::List:
    break;
  case ListStyle::Tuple:
    open = "(";
    close = list.items.size() == 1 ? ",)" : ")";
    break;
  case ListStyle::DictKeys:
    open = "dict_keys([";
    close = "])";
    break;
  case ListStyle::DictValues:
    open = "dict_values([";
    close = "])";
    break;
  case ListStyle::DictItems:
    open = "dict_items([";
    close = "])";
    break;
  }
  out += open;
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (full(out)) {
      return;
    }
    if (i != 0) {
      out += ", ";
    }
    appendPyRepr(out, list.items[i]);
  }
  out += close;
}

void appendDictRepr(std::string &out, const DictData &dict) {
  out += '{';
  bool first = true;
  for (const auto &[key, value] : dict.entries) {
    if (full(out)) {
      return;
    }
    if (!first) {
      out += ", ";
    }
    first = false;
    appendStringRepr(out, key);
    out += ": ";
    appendPyRepr(out, value);
  }
  out += '}';
}

} // namespace

void appendPyRepr(std::string &out, const Value &v) {
  switch (v.kind()) {
  case ValueKind::String:
    appendStringRepr(out, v.asString());
    return;
  case ValueKind::Undefined:
    // jinja2's Undefined has no repr of its own worth copying; Python shows "Undefined".
    out += "Undefined";
    return;
  default:
    appendPyStr(out, v);
  }
}

void appendPyStr(std::string &out, const Value &v) {
  switch (v.kind()) {
  case ValueKind::Undefined:
    return;
  case ValueKind::None:
    out += "None";
    return;
  case ValueKind::Bool:
    out += v.asBool() ? "True" : "False";
    return;
  case ValueKind::Int:
    out += std::to_string(v.asInt());
    return;
  case ValueKind::Float:
    out += formatPyFloat(v.asDouble());
    return;
  case ValueKind::String:
    if (room(out, v.asString().size())) {
      out += v.asString();
    }
    return;
  case ValueKind::List:
    appendSequenceRepr(out, v.asList());
    return;
  case ValueKind::Dict:
    appendDictRepr(out, v.asDict());
    return;
  case ValueKind::Namespace:
    out += "<Namespace ";
    appendDictRepr(out, v.asDict());
    out += '>';
    return;
  case ValueKind::Loop: {
    const Value *index = v.asDict().find("index");
    const Value *length = v.asDict().find("length");
    out += "<LoopContext ";
    out += index ? std::to_string(index->asInt()) : "?";
    out += '/';
    out += length ? std::to_string(length->asInt()) : "?";
    out += '>';
    return;
  }
  case ValueKind::Callable: {
    const CallableData &c = v.asCallable();
    if (c.kind == CallableData::Kind::Macro) {
      out += "<Macro '" + c.name + "'>";
    } else if (c.kind == CallableData::Kind::Method) {
      out +=
          "<built-in method " + c.name + " of " + std::string(typeName(*c.receiver)) + " object>";
    } else {
      out += "<built-in function " + c.name + ">";
    }
    return;
  }
  }
}

std::string pyStr(const Value &v) {
  std::string out;
  appendPyStr(out, v);
  return out;
}

std::string pyRepr(const Value &v) {
  std::string out;
  appendPyRepr(out, v);
  return out;
}

// --- comparison ------------------------------------------------------------------------------

bool valuesEqual(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.isIntegral() && b.isIntegral()) {
      return a.asInt() == b.asInt();
    }
    return a.asDouble() == b.asDouble();
  }
  if (a.kind() != b.kind()) {
    return false;
  }
  switch (a.kind()) {
  case ValueKind::Undefined:
  case ValueKind::None:
    return true;
  case ValueKind::String:
    return a.asString() == b.asString();
  case ValueKind::List: {
    const ListData &x = a.asList();
    const ListData &y = b.asList();
    // A list never equals a tuple in Python.
    if ((x.style == ListStyle::Tuple) != (y.style == ListStyle::Tuple) ||
        x.items.size() != y.items.size()) {
      return false;
    }
    for (size_t i = 0; i < x.items.size(); ++i) {
      // Nested lists that share items compare in time exponential in their depth.
      if (!spendSteps(1) || !valuesEqual(x.items[i], y.items[i])) {
        return false;
      }
    }
    return true;
  }
  case ValueKind::Dict: {
    const DictData &x = a.asDict();
    const DictData &y = b.asDict();
    if (x.entries.size() != y.entries.size()) {
      return false;
    }
    for (const auto &[key, value] : x.entries) {
      const Value *other = y.find(key);
      if (!spendSteps(1 + x.entries.size() / 16) || !other || !valuesEqual(value, *other)) {
        return false;
      }
    }
    return true;
  }
  case ValueKind::Namespace:
  case ValueKind::Loop:
    return a.dictPtr() == b.dictPtr();
  case ValueKind::Callable:
    return &a.asCallable() == &b.asCallable();
  default:
    return false;
  }
}

Expected<int> compareValues(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.isIntegral() && b.isIntegral()) {
      return a.asInt() < b.asInt() ? -1 : (a.asInt() > b.asInt() ? 1 : 0);
    }
    const double x = a.asDouble();
    const double y = b.asDouble();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.isString() && b.isString()) {
    // Byte order of UTF-8 is code point order, which is Python's string order.
    const int c = a.asString().compare(b.asString());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  // Python orders a list against a list and a tuple against a tuple, never one against the other.
  if (a.isList() && b.isList() &&
      (a.asList().style == ListStyle::Tuple) == (b.asList().style == ListStyle::Tuple)) {
    const auto &x = a.asList().items;
    const auto &y = b.asList().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!spendSteps(1)) {
        return 0; // the render fails at its next step
      }
      if (valuesEqual(x[i], y[i])) {
        continue;
      }
      return compareValues(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return invalidArgument("'<' not supported between instances of '", typeName(a), "' and '",
                         typeName(b), "'");
}

// --- JSON ------------------------------------------------------------------------------------

namespace {

void appendJsonString(std::string &out, std::string_view s, bool ensureAscii) {
  out += '"';
  char buffer[16];
  for (size_t i = 0; i < s.size();) {
    if (out.size() > kMaxStringBytes) {
      return; // dumpJsonInto reports it
    }
    const size_t start = i;
    const char32_t c = decodeUtf8(s, i);
    switch (c) {
    case '"':
      out += "\\\"";
      continue;
    case '\\':
      out += "\\\\";
      continue;
    case '\n':
      out += "\\n";
      continue;
    case '\r':
      out += "\\r";
      continue;
    case '\t':
      out += "\\t";
      continue;
    case '\b':
      out += "\\b";
      continue;
    case '\f':
      out += "\\f";
      continue;
    default:
      break;
    }
    if (c < 0x20 || (ensureAscii && c > 0x7E)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buffer, sizeof buffer, "\\u%04x\\u%04x",
                      static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buffer;
    } else {
      out.append(s, start, i - start);
    }
  }
  out += '"';
}

Status dumpJsonInto(std::string &out, const Value &v, const JsonDumpOptions &options,
                    size_t depth) {
  if (depth > 512) {
    return invalidArgument("tojson: value nests too deeply");
  }
  if (out.size() > kMaxStringBytes || !spendSteps(1)) {
    return out.size() > kMaxStringBytes ? stringTooLong("tojson", out.size()) : Status::success();
  }
  // A line break and `level` indents, if they fit (checked before they are built).
  const auto newline = [&](size_t level) -> Status {
    if (options.indent) {
      GLM_RETURN_IF_ERROR(
          checkStringSize("tojson", out.size() + 1 + level * options.indent->size()));
      out += '\n';
      for (size_t i = 0; i < level; ++i) {
        out += *options.indent;
      }
    }
    return Status::success();
  };
  switch (v.kind()) {
  case ValueKind::None:
    out += "null";
    return Status::success();
  case ValueKind::Bool:
    out += v.asBool() ? "true" : "false";
    return Status::success();
  case ValueKind::Int:
    out += std::to_string(v.asInt());
    return Status::success();
  case ValueKind::Float: {
    const double f = v.asDouble();
    if (std::isnan(f)) {
      out += "NaN";
    } else if (std::isinf(f)) {
      out += f < 0 ? "-Infinity" : "Infinity";
    } else {
      out += formatPyFloat(f);
    }
    return Status::success();
  }
  case ValueKind::String:
    appendJsonString(out, v.asString(), options.ensureAscii);
    return Status::success();
  case ValueKind::List: {
    const auto &items = v.asList().items;
    if (items.empty()) {
      out += "[]";
      return Status::success();
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i != 0) {
        out += options.itemSeparator;
      }
      GLM_RETURN_IF_ERROR(newline(depth + 1));
      GLM_RETURN_IF_ERROR(dumpJsonInto(out, items[i], options, depth + 1));
    }
    GLM_RETURN_IF_ERROR(newline(depth));
    out += ']';
    return Status::success();
  }
  case ValueKind::Dict: {
    const auto &entries = v.asDict().entries;
    if (entries.empty()) {
      out += "{}";
      return Status::success();
    }
    std::vector<const std::pair<std::string, Value> *> order;
    for (const auto &entry : entries) {
      order.push_back(&entry);
    }
    if (options.sortKeys) {
      std::stable_sort(order.begin(), order.end(),
                       [](const auto *x, const auto *y) { return x->first < y->first; });
    }
    out += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i != 0) {
        out += options.itemSeparator;
      }
      GLM_RETURN_IF_ERROR(newline(depth + 1));
      appendJsonString(out, order[i]->first, options.ensureAscii);
      out += options.keySeparator;
      GLM_RETURN_IF_ERROR(dumpJsonInto(out, order[i]->second, options, depth + 1));
    }
    GLM_RETURN_IF_ERROR(newline(depth));
    out += '}';
    return Status::success();
  }
  default:
    return invalidArgument("Object of type ", typeName(v), " is not JSON serializable");
  }
}

} // namespace

Expected<std::string> dumpJson(const Value &v, const JsonDumpOptions &options) {
  std::string out;
  GLM_RETURN_IF_ERROR(dumpJsonInto(out, v, options, 0));
  GLM_RETURN_IF_ERROR(checkStringSize("tojson", out.size()));
  return out;
}

Value valueFromJson(const nlohmann::ordered_json &json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
  case Type::null:
    return Value::none();
  case Type::boolean:
    return Value::boolean(json.get<bool>());
  case Type::number_integer:
    return Value::integer(json.get<int64_t>());
  case Type::number_unsigned: {
    const uint64_t u = json.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Value::integer(static_cast<int64_t>(u));
    }
    return Value::real(static_cast<double>(u));
  }
  case Type::number_float:
    return Value::real(json.get<double>());
  case Type::string:
    return Value::string(json.get<std::string>());
  case Type::array: {
    std::vector<Value> items;
    items.reserve(json.size());
    for (const auto &item : json) {
      items.push_back(valueFromJson(item));
    }
    return Value::list(std::move(items));
  }
  case Type::object: {
    auto data = std::make_shared<DictData>();
    data->entries.reserve(json.size());
    for (const auto &[key, item] : json.items()) {
      data->entries.emplace_back(key, valueFromJson(item));
    }
    return Value::dict(std::move(data));
  }
  default:
    return Value::undefined("a JSON value of an unsupported type");
  }
}

} // namespace glm::server::jinja
