// Translating another API's request (Responses, Anthropic Messages) into a chat-completions
// body: field checks that name the client's own paths, and the chat parser's errors mapped back
// onto those paths, so that a client is told about the fields it sent.
#pragma once

#include "base/Status.h"
#include "server/openai/Protocol.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace glm::server {

// Errors about a client's field: fieldTypeError, fieldValueError, fieldMissing and
// fieldUnsupported (Protocol.h), the words the chat parser uses.

/// The body as a JSON object: nesting bounded before any DOM is built, malformed JSON reported
/// by byte without echoing it (invalid_json), a non-object refused.
std::variant<nlohmann::ordered_json, ApiError> parseClientBody(std::string_view body);

/// The member `key` of `object`, or null when it is absent or JSON null.
const nlohmann::ordered_json *member(const nlohmann::ordered_json &object, const char *key);

/// Where each part of the chat body came from in the client's request: the chat parser's
/// `param` (and its message) rewritten from chat paths to the client's.
class ParamMap {
public:
  /// `chatPath` (e.g. "messages[3]", "max_tokens") came from `clientPath` ("input[1]",
  /// "max_output_tokens"). The longest matching prefix wins.
  void add(std::string chatPath, std::string clientPath);
  /// `error` with its param and message naming the client's fields. A path nothing maps keeps
  /// its name (the two APIs share model, temperature...), but for the conversation's
  /// ("messages...": the rendered prompt, its length), which becomes `fallback`.
  ApiError toClient(ApiError error, const std::string &fallback) const;

private:
  std::vector<std::pair<std::string, std::string>> paths_;
};

} // namespace glm::server
