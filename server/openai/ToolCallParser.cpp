// Parsing GLM tool calls out of streamed content into OpenAI tool_calls.
#include "server/openai/ToolCallParser.h"

#include "base/Random.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";
constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string_view trimLeft(std::string_view s) {
  size_t first = s.find_first_not_of(kSpace);
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}

std::string_view trim(std::string_view s) {
  s = trimLeft(s);
  return s.substr(0, s.find_last_not_of(kSpace) + 1);
}

/// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partialTagLength(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) {
      return n;
    }
  }
  return 0;
}

/// JSON Schema's type names as bits, so a schema can allow several.
enum TypeBits : unsigned {
  kString = 1,
  kInteger = 2,
  kNumber = 4,
  kBoolean = 8,
  kObject = 16,
  kArray = 32,
  kNull = 64,
};

unsigned typeBit(const Json &name) {
  if (!name.is_string()) {
    return 0;
  }
  const std::string &s = name.get_ref<const std::string &>();
  if (s == "string") {
    return kString;
  }
  if (s == "integer") {
    return kInteger;
  }
  if (s == "number") {
    return kNumber;
  }
  if (s == "boolean") {
    return kBoolean;
  }
  if (s == "object") {
    return kObject;
  }
  if (s == "array") {
    return kArray;
  }
  if (s == "null") {
    return kNull;
  }
  return 0;
}

/// The type of a JSON value, as the schema type that admits it most narrowly.
unsigned typeOfValue(const Json &v) {
  switch (v.type()) {
  case Json::value_t::string:
    return kString;
  case Json::value_t::number_integer:
  case Json::value_t::number_unsigned:
    return kInteger;
  case Json::value_t::number_float:
    return kNumber;
  case Json::value_t::boolean:
    return kBoolean;
  case Json::value_t::object:
    return kObject;
  case Json::value_t::array:
    return kArray;
  case Json::value_t::null:
    return kNull;
  default:
    return 0;
  }
}

/// The types a property schema allows; 0 when it names none we know (then the value is untyped).
/// Clients write `type` mostly, but Pydantic-made schemas use `anyOf` for optionals and `enum`
/// without a type for literals, and those must not turn a string "1" into a number.
unsigned allowedTypes(const Json &schema, int depth = 0) {
  if (!schema.is_object() || depth > 8) {
    return 0;
  }
  if (auto it = schema.find("type"); it != schema.end()) {
    unsigned bits = typeBit(*it);
    if (it->is_array()) {
      for (const Json &name : *it) {
        bits |= typeBit(name);
      }
    }
    return bits;
  }
  unsigned bits = 0;
  if (auto it = schema.find("const"); it != schema.end()) {
    bits |= typeOfValue(*it);
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    for (const Json &v : *it) {
      bits |= typeOfValue(v);
    }
  }
  for (const char *key : {"anyOf", "oneOf"}) {
    if (auto it = schema.find(key); it != schema.end() && it->is_array()) {
      for (const Json &branch : *it) {
        bits |= allowedTypes(branch, depth + 1);
      }
    }
  }
  return bits;
}

/// The schema of parameter `key` of tool `name`, or null if the tools do not describe it. Tools are
/// OpenAI's {"type": "function", "function": {...}}; a bare function object is accepted too, as
/// the chat template accepts it. Nothing is assumed about their shape: they are client input.
const Json *parameterSchema(const Json &tools, std::string_view name, std::string_view key) {
  if (!tools.is_array()) {
    return nullptr;
  }
  for (const Json &tool : tools) {
    if (!tool.is_object()) {
      continue;
    }
    const Json *function = &tool;
    if (auto it = tool.find("function"); it != tool.end() && it->is_object()) {
      function = &*it;
    }
    auto nameIt = function->find("name");
    if (nameIt == function->end() || !nameIt->is_string() ||
        nameIt->get_ref<const std::string &>() != name) {
      continue;
    }
    auto params = function->find("parameters");
    if (params == function->end() || !params->is_object()) {
      return nullptr;
    }
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) {
      return nullptr;
    }
    auto prop = props->find(std::string(key));
    return prop == props->end() ? nullptr : &*prop;
  }
  return nullptr;
}

/// `parsed` if it is a value of one of the non-string types in `types`, normalised (an integral
/// float where an integer is wanted becomes an integer); else null.
std::optional<Json> matchType(Json parsed, unsigned types) {
  if (parsed.is_discarded()) {
    return std::nullopt;
  }
  unsigned type = typeOfValue(parsed);
  if (type == kString) {
    // The raw text was a JSON string literal ("\"x\""); as a string parameter the quotes are part
    // of the text, and no other type takes a string.
    return std::nullopt;
  }
  if ((type & types) || (type == kInteger && (types & kNumber))) {
    return parsed;
  }
  if (type == kNumber && (types & kInteger)) {
    double d = parsed.get<double>();
    if (std::isfinite(d) && d == std::trunc(d)) {
      // 2^63 is exact as a double; integral values below it in magnitude fit in int64.
      if (std::fabs(d) < 9223372036854775808.0) {
        return Json(static_cast<int64_t>(d));
      }
      return parsed;
    }
  }
  return std::nullopt;
}

/// Argument value `raw` typed by the schema of its parameter (null: no schema).
Json typedValue(std::string_view raw, const Json *schema) {
  unsigned types = schema ? allowedTypes(*schema) : 0;
  if (types == kString) {
    return Json(std::string(raw));
  }
  Json parsed = Json::parse(raw.begin(), raw.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (types == 0) {
    // Untyped: the template renders non-strings with tojson, so valid JSON was meant as JSON.
    return parsed.is_discarded() ? Json(std::string(raw)) : std::move(parsed);
  }
  if (std::optional<Json> match = matchType(std::move(parsed), types)) {
    return std::move(*match);
  }
  return Json(std::string(raw));
}

bool validName(std::string_view name) {
  return !name.empty() && name.find_first_of(kSpace) == std::string_view::npos &&
         name.find_first_of("<>") == std::string_view::npos;
}

/// A call's name and arguments from the text between its tags; nullopt if it is malformed.
std::optional<ToolCall> parseCall(std::string_view body, const Json &tools) {
  size_t nameEnd = std::min(body.find(kKeyOpen), body.size());
  std::string_view name = trim(body.substr(0, nameEnd));
  if (!validName(name)) {
    return std::nullopt;
  }
  Json args = Json::object();
  std::string_view rest = body.substr(nameEnd);
  while (!(rest = trimLeft(rest)).empty()) {
    if (!rest.starts_with(kKeyOpen)) {
      return std::nullopt;
    }
    rest.remove_prefix(kKeyOpen.size());
    size_t keyEnd = rest.find(kKeyClose);
    if (keyEnd == std::string_view::npos) {
      return std::nullopt;
    }
    std::string_view key = trim(rest.substr(0, keyEnd));
    if (key.empty() || key.find_first_of("<>") != std::string_view::npos) {
      return std::nullopt;
    }
    rest = trimLeft(rest.substr(keyEnd + kKeyClose.size()));
    if (!rest.starts_with(kValueOpen)) {
      return std::nullopt;
    }
    rest.remove_prefix(kValueOpen.size());
    // The value ends at the first `</arg_value>` that the next pair or the call's end follows:
    // a raw string value may hold the tag's text itself (code, markup), which the chat template
    // renders as is and the model then writes back.
    size_t valueEnd = rest.find(kValueClose);
    while (valueEnd != std::string_view::npos) {
      const std::string_view after = trimLeft(rest.substr(valueEnd + kValueClose.size()));
      if (after.empty() || after.starts_with(kKeyOpen)) {
        break;
      }
      valueEnd = rest.find(kValueClose, valueEnd + 1);
    }
    if (valueEnd == std::string_view::npos) {
      return std::nullopt;
    }
    // A repeated key is assigned in place: first position, last value.
    args[std::string(key)] =
        typedValue(rest.substr(0, valueEnd), parameterSchema(tools, name, key));
    rest.remove_prefix(valueEnd + kValueClose.size());
  }
  ToolCall call;
  call.name = std::string(name);
  // replace: invalid UTF-8 in a value must not make dump() throw.
  call.argumentsJson = args.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  return call;
}

} // namespace

ToolCallParser::ToolCallParser(const nlohmann::ordered_json &tools, uint64_t idSeed)
    : tools_(tools), idSeed_(idSeed) {}

std::string ToolCallParser::nextCallId() {
  // SplitMix64 outputs are a bijection of its state, and the first output of a generator started
  // at base + 2n*gamma is the state base + (2n+1)*gamma, distinct for every n: so the first 64
  // bits, and the id, are distinct within a parser. The seed is mixed first so that nearby seeds
  // (request counters) start far apart.
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  uint64_t base = SplitMix64(idSeed_).next();
  SplitMix64 gen(base + 2 * nextId_ * kGamma);
  ++nextId_;
  uint64_t hi = gen.next();
  uint64_t lo = gen.next() >> 32;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int shift = 60; shift >= 0; shift -= 4) {
    id += kHex[(hi >> shift) & 0xF];
  }
  for (int shift = 28; shift >= 0; shift -= 4) {
    id += kHex[(lo >> shift) & 0xF];
  }
  return id;
}

void ToolCallParser::finishCall(std::string_view body, Delta &out) {
  if (std::optional<ToolCall> call = parseCall(body, tools_)) {
    call->id = nextCallId();
    out.calls.push_back(std::move(*call));
    return;
  }
  out.content.append(kCallOpen);
  out.content.append(body);
  out.content.append(kCallClose);
}

ToolCallParser::Delta ToolCallParser::feed(std::string_view text) {
  Delta out;
  pending_.append(text);
  size_t start = 0; // pending_ before this is consumed
  while (true) {
    if (!inCall_) {
      size_t at = pending_.find(kCallOpen, start);
      if (at == std::string::npos) {
        std::string_view rest = std::string_view(pending_).substr(start);
        size_t keep = partialTagLength(rest, kCallOpen);
        out.content.append(rest.substr(0, rest.size() - keep));
        start = pending_.size() - keep;
        break;
      }
      out.content.append(pending_, start, at - start);
      start = at + kCallOpen.size();
      inCall_ = true;
      scannedUpTo_ = start;
      continue;
    }
    size_t at = pending_.find(kCallClose, scannedUpTo_);
    if (at == std::string::npos) {
      // Long calls arrive a token at a time; rescanning only the tail keeps that linear.
      scannedUpTo_ =
          std::max(start, pending_.size() - std::min(pending_.size(), kCallClose.size()));
      break;
    }
    finishCall(std::string_view(pending_).substr(start, at - start), out);
    start = at + kCallClose.size();
    inCall_ = false;
  }
  pending_.erase(0, start);
  scannedUpTo_ = inCall_ ? scannedUpTo_ - start : 0;
  return out;
}

ToolCallParser::Delta ToolCallParser::finish() {
  Delta out;
  if (!inCall_) {
    out.content = std::move(pending_);
  }
  pending_.clear();
  inCall_ = false;
  scannedUpTo_ = 0;
  return out;
}

} // namespace glm::server
