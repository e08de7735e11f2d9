// Fuzzes ToolCallParser, the streaming parser of GLM's <tool_call> blocks: model output fed in
// pieces whose cuts come from the input, with a fixed tools array (or one the input gives).
//
// Input: one byte of flags, then (flag 1) a JSON tools array up to the first NUL, then the model's
// text; cut points are drawn from a hash of the input so that the same text is also fed whole.
// Beyond not crashing: every call's arguments are a JSON object, ids are distinct, and the
// streamed result equals the one-piece result (content and calls), as streaming promises.
#include "base/InputFile.h"
#include "server/openai/ToolCallParser.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kTools = R"([
 {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
   "units": {"type": "array", "items": {"type": "string"}}, "verbose": {"type": "boolean"},
   "ratio": {"type": ["number", "null"]}, "mode": {"enum": ["a", 1, null]},
   "opts": {"anyOf": [{"type": "object"}, {"type": "string"}]}}}}},
 {"type": "function", "function": {"name": "search_docs",
  "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
])";

struct Result {
  std::string content;
  std::vector<glm::server::ToolCall> calls;
};

Result run(const Json &tools, std::string_view text, uint64_t cutSeed) {
  glm::server::ToolCallParser parser(tools, 7);
  Result total;
  auto add = [&](glm::server::ToolCallParser::Delta d) {
    total.content += d.content;
    for (glm::server::ToolCall &c : d.calls) {
      total.calls.push_back(std::move(c));
    }
  };
  uint64_t state = cutSeed;
  size_t at = 0;
  while (at < text.size()) {
    size_t piece = text.size() - at;
    if (cutSeed != 0) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      piece = std::min<size_t>(piece, 1 + (state >> 33) % 12);
    }
    add(parser.feed(text.substr(at, piece)));
    at += piece;
  }
  add(parser.finish());
  return total;
}

std::string describe(const Result &r) {
  std::string out = "content[" + std::to_string(r.content.size()) + "]=" + r.content + " calls:";
  for (const glm::server::ToolCall &c : r.calls) {
    out += " " + c.id + " [" + std::to_string(c.name.size()) + "]" + c.name + " " + c.argumentsJson;
  }
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const Json kFixedTools = Json::parse(kTools);
  if (size == 0) {
    return 0;
  }
  const uint8_t flags = data[0];
  std::string_view rest(reinterpret_cast<const char *>(data + 1), size - 1);
  Json tools = kFixedTools;
  if (flags & 1) {
    const size_t nul = rest.find('\0');
    const std::string_view toolsText = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
    // As the server has it: parsed by the request's depth-limited parse.
    glm::Expected<Json> parsed = glm::parseUntrustedJson<Json>(toolsText, "tools", 64);
    if (!parsed.ok()) {
      return 0;
    }
    tools = std::move(parsed).value();
  } else if (flags & 2) {
    tools = nullptr;
  }
  uint64_t cutSeed = 1469598103934665603ull;
  for (char c : rest) {
    cutSeed = (cutSeed ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  }
  cutSeed |= 1;

  const Result whole = run(tools, rest, 0);
  const Result streamed = run(tools, rest, cutSeed);
  std::set<std::string> ids;
  for (const glm::server::ToolCall &c : whole.calls) {
    const Json args = Json::parse(c.argumentsJson, nullptr, /*allow_exceptions=*/false);
    GLM_FUZZ_CHECK(args.is_object(), "arguments are not a JSON object: " + c.argumentsJson);
    GLM_FUZZ_CHECK(ids.insert(c.id).second, "call id repeated: " + c.id);
  }
  GLM_FUZZ_CHECK(describe(whole) == describe(streamed),
                 "streamed result differs from the whole one:\n whole:    " + describe(whole) +
                     "\n streamed: " + describe(streamed));
  return 0;
}
