// Reading response_format, guided_* and structured_outputs.
#include "server/openai/ConstraintFields.h"

#include "base/Status.h"
#include "server/openai/Protocol.h"

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
using Kind = OutputConstraint::Kind;

ApiError error(std::string code, const std::string &param, std::string message) {
  ApiError e;
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = param;
  return e;
}

ApiError typeError(const std::string &param, std::string_view expected) {
  return error("invalid_type", param,
               strCat("Invalid type for '", param, "': expected ", expected, "."));
}

const Json *field(const Json &object, const char *key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

/// A schema given as an object (or a boolean), or as JSON text (vLLM takes both for guided_json).
std::optional<ApiError> readSchema(const Json &value, const std::string &param,
                                   OutputConstraint &out) {
  if (value.is_string()) {
    Json parsed = Json::parse(value.get_ref<const std::string &>(), nullptr, false);
    if (parsed.is_discarded()) {
      return error("invalid_value", param, strCat("Invalid '", param, "': not valid JSON."));
    }
    out.text = parsed.dump();
  } else if (value.is_object() || value.is_boolean()) {
    out.text = value.dump();
  } else {
    return typeError(param, "a JSON schema (an object)");
  }
  out.kind = Kind::JsonSchema;
  out.param = param;
  return std::nullopt;
}

std::optional<ApiError> readText(const Json &value, const std::string &param, Kind kind,
                                 OutputConstraint &out) {
  if (!value.is_string()) {
    return typeError(param, "a string");
  }
  if (value.get_ref<const std::string &>().empty()) {
    return error("invalid_value", param, strCat("Invalid '", param, "': must not be empty."));
  }
  out.kind = kind;
  out.text = value.get<std::string>();
  out.param = param;
  return std::nullopt;
}

std::optional<ApiError> readChoices(const Json &value, const std::string &param,
                                    OutputConstraint &out) {
  if (!value.is_array() || value.empty()) {
    return typeError(param, "a non-empty array of strings");
  }
  out.choices.clear();
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      return typeError(strCat(param, "[", i, "]"), "a string");
    }
    out.choices.push_back(value[i].get<std::string>());
  }
  out.kind = Kind::Choice;
  out.param = param;
  return std::nullopt;
}

/// One constraint field of vLLM's (guided_* or a structured_outputs key).
std::optional<ApiError> readVllm(const std::string &key, const Json &value,
                                 const std::string &param, OutputConstraint &out) {
  if (key == "json") {
    return readSchema(value, param, out);
  }
  if (key == "regex") {
    return readText(value, param, Kind::Regex, out);
  }
  if (key == "choice") {
    return readChoices(value, param, out);
  }
  if (key == "grammar") {
    return readText(value, param, Kind::Grammar, out);
  }
  // key == "json_object"
  if (!value.is_boolean()) {
    return typeError(param, "a boolean");
  }
  if (value.get<bool>()) {
    out.kind = Kind::JsonObject;
    out.param = param;
  }
  return std::nullopt;
}

} // namespace

std::optional<ApiError> readOutputConstraint(const Json &body, OutputConstraint &out) {
  out = OutputConstraint{};
  std::vector<std::string> given; // the fields that set a constraint, to refuse two at once
  auto note = [&](const OutputConstraint &c) {
    if (c.kind != Kind::None) {
      given.push_back(c.param);
    }
  };
  if (const Json *format = field(body, "response_format")) {
    if (!format->is_object()) {
      return typeError("response_format", "an object");
    }
    const Json *type = field(*format, "type");
    if (!type) {
      return error("missing_required_parameter", "response_format.type",
                   "Missing required parameter: 'response_format.type'.");
    }
    if (!type->is_string()) {
      return typeError("response_format.type", "a string");
    }
    const std::string &name = type->get_ref<const std::string &>();
    if (name == "json_object") {
      out.kind = Kind::JsonObject;
      out.param = "response_format";
    } else if (name == "json_schema") {
      const Json *spec = field(*format, "json_schema");
      if (!spec) {
        return error("missing_required_parameter", "response_format.json_schema",
                     "Missing required parameter: 'response_format.json_schema'.");
      }
      if (!spec->is_object()) {
        return typeError("response_format.json_schema", "an object");
      }
      if (const Json *n = field(*spec, "name"); n && !n->is_string()) {
        return typeError("response_format.json_schema.name", "a string");
      }
      if (const Json *strict = field(*spec, "strict"); strict && !strict->is_boolean()) {
        return typeError("response_format.json_schema.strict", "a boolean");
      }
      // strict or not, the reply is held to the schema: a constraint is never loosened.
      const Json *schema = field(*spec, "schema");
      if (!schema) {
        out.kind = Kind::JsonObject; // OpenAI: no schema means any JSON object
        out.param = "response_format.json_schema";
      } else if (auto e = readSchema(*schema, "response_format.json_schema.schema", out)) {
        return e;
      }
    } else if (name != "text") {
      return error("invalid_value", "response_format.type",
                   "Invalid 'response_format.type': must be \"text\", \"json_object\" or "
                   "\"json_schema\".");
    }
    note(out);
  }
  for (const char *key : {"json", "regex", "choice", "grammar"}) {
    const std::string name = strCat("guided_", key);
    if (const Json *value = field(body, name.c_str())) {
      OutputConstraint c;
      if (auto e = readVllm(key, *value, name, c)) {
        return e;
      }
      note(c);
      if (c.kind != Kind::None) {
        out = std::move(c);
      }
    }
  }
  if (const Json *structured = field(body, "structured_outputs")) {
    if (!structured->is_object()) {
      return typeError("structured_outputs", "an object");
    }
    for (const char *key : {"json", "regex", "choice", "grammar", "json_object"}) {
      if (const Json *value = field(*structured, key)) {
        OutputConstraint c;
        if (auto e = readVllm(key, *value, strCat("structured_outputs.", key), c)) {
          return e;
        }
        note(c);
        if (c.kind != Kind::None) {
          out = std::move(c);
        }
      }
    }
    if (const Json *tag = field(*structured, "structural_tag")) {
      (void)tag;
      return error("unsupported_parameter", "structured_outputs.structural_tag",
                   "Unsupported parameter: 'structured_outputs.structural_tag'.");
    }
  }
  if (const Json *pattern = field(body, "guided_whitespace_pattern")) {
    (void)pattern;
    return error("unsupported_parameter", "guided_whitespace_pattern",
                 "Unsupported parameter: 'guided_whitespace_pattern': JSON whitespace follows "
                 "the server's bounded rule.");
  }
  if (given.size() > 1) {
    return error("invalid_value", given[1],
                 strCat("Invalid '", given[1],
                        "': only one structured-output constraint may be "
                        "given, and '",
                        given[0], "' is one already."));
  }
  return std::nullopt;
}

} // namespace glm::server
