// Parsing GLM tool calls out of streamed content into OpenAI tool_calls.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

/// One complete call, as OpenAI's message.tool_calls[i] carries it.
struct ToolCall {
  std::string id; // "call_" + 24 lowercase hex digits, unique per parser
  std::string name;
  std::string argumentsJson; // a JSON object, serialised compactly, keys in the model's order
};

/// GLM writes calls as `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`
/// (reference/glm53_arch.md §5.2, server.md §2). Text outside calls passes through as content;
/// each call is emitted whole once its `</tool_call>` arrives, never a call cut off by the end of
/// the reply. Argument values are typed by the tool's JSON schema (`parameters.properties.K.type`):
/// string parameters keep the raw text; integer / number / boolean / object / array / null
/// parameters parse the text as JSON when it is valid JSON of that type, else stay strings; keys
/// not in the schema are parsed as JSON when valid, else kept as strings.
///
/// Details:
/// - A call runs from `<tool_call>` to the first `</tool_call>`. NAME is trimmed of whitespace;
///   whitespace may surround the `<arg_key>` / `<arg_value>` pairs; keys are trimmed; values are
///   verbatim (no newline stripping: the chat template renders string values raw, so a value
///   round-trips byte for byte). A value ends at the first `</arg_value>` followed (past
///   whitespace) by `<arg_key>` or the call's end, so a raw string holding `</arg_value>` itself
///   (markup, code) stays one value; one holding `</arg_value><arg_key>` or `</tool_call>` cannot
///   be told from the call's structure. The name is not checked against the tools array.
/// - A call whose name is empty or holds whitespace or '<' / '>', or whose pairs are not
///   well-formed (a missing tag, an empty key, other text between pairs), is not a call: its raw
///   text, tags included, is returned as content, so nothing is lost.
/// - A type list (`["integer", "null"]`), an `enum` / `const`, or `anyOf` / `oneOf` branches give
///   several allowed types: the value is its JSON when that matches one of the non-string types,
///   else a string. An integer must be integral (`3.0` becomes 3). A schema naming no type we know
///   counts as no schema. A key given twice keeps its first position and its last value.
/// - Whitespace around calls (GLM often writes "\n") is content like any other text; trimming it
///   is the response builder's business.
/// - Ids are "call_" + 24 hex digits drawn from `idSeed` and a counter: deterministic for a seed,
///   distinct within a parser. Pass a per-request seed so that ids differ across the turns of a
///   conversation.
class ToolCallParser {
public:
  /// `tools` is the request's OpenAI tools array (may be null or empty).
  explicit ToolCallParser(const nlohmann::ordered_json &tools, uint64_t idSeed = 0);

  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;
  };

  Delta feed(std::string_view text);
  /// At the end of the reply: an unfinished call is dropped (its text is not content either);
  /// held-back text that was not a call is returned as content.
  Delta finish();

private:
  /// The call in `body` (the text between the tags), or its raw text as content if malformed.
  void finishCall(std::string_view body, Delta &out);
  std::string nextCallId();

  nlohmann::ordered_json tools_;
  std::string pending_;
  bool inCall_ = false;
  size_t scannedUpTo_ = 0; // in a call: pending_ holds no `</tool_call>` that starts before this
  uint64_t idSeed_;
  uint64_t nextId_ = 0;
};

} // namespace glm::server
