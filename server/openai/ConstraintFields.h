// The request fields that constrain a reply's form (structured outputs and forced tool calls),
// read into the typed requests of Protocol.h. Only their shape is checked here; the grammar
// engine compiles them when the request is prepared (server/http/StructuredRequest).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace glm::server {

struct ApiError;

/// A structured-output constraint as the request states it: response_format json_object /
/// json_schema, vLLM's guided_json / guided_regex / guided_choice / guided_grammar, or
/// structured_outputs {json, regex, choice, grammar, json_object}. At most one per request.
struct OutputConstraint {
  enum class Kind { None, JsonObject, JsonSchema, Regex, Choice, Grammar };
  Kind kind = Kind::None;
  std::string text;                 // JsonSchema: the schema as JSON text; Regex; Grammar (GBNF)
  std::vector<std::string> choices; // Choice
  /// The field it came from ("response_format.json_schema.schema", "guided_regex",
  /// "structured_outputs.choice", ...): compile errors name it, then the path inside.
  std::string param;
};

/// tool_choice: the model decides (auto), no tools (none), at least one call (required), or a call
/// of the named function.
enum class ToolChoice { Auto, None, Required, Named };

/// Reads the constraint fields of a request body into `out` (both endpoints take all of them, as
/// vLLM does); 400s name the field at fault.
std::optional<ApiError> readOutputConstraint(const nlohmann::ordered_json &body,
                                             OutputConstraint &out);

} // namespace glm::server
