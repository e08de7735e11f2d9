// JSON Schema to grammar: the keywords OpenAI's strict mode and common clients (Pydantic, zod)
// write, compiled into a GrammarBuilder. docs/structured-outputs.md lists what is accepted.
#pragma once

#include "server/grammar/Grammar.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace glm::grammar {

/// The most whitespace bytes (space, tab, \n, \r) between two JSON tokens: enough for indented
/// output, bounded so that a model cannot write whitespace forever.
inline constexpr int64_t kMaxJsonWhitespace = 16;
/// Digits a number may have: integer part, fraction, exponent.
inline constexpr int64_t kMaxIntegerDigits = 20;
inline constexpr int64_t kMaxFractionDigits = 20;
inline constexpr int64_t kMaxExponentDigits = 4;

class JsonSchemaCompiler {
public:
  using Json = nlohmann::ordered_json;
  /// `root` is the whole document ($ref "#..." resolves in it); errors name `basePath` + the
  /// path inside the schema (e.g. "response_format.json_schema.schema.properties.a.type").
  JsonSchemaCompiler(GrammarBuilder &builder, const Json &root, std::string basePath);

  /// A JSON value of `schema` (at `path`, a JSON pointer-ish dotted path below basePath).
  Element value(const Json &schema, const std::string &path, int depth = 0);
  /// A tool-call argument: string-only schemas as the raw text (GLM writes string arguments
  /// unquoted), everything else as JSON.
  Element argument(const Json &schema, const std::string &path);
  /// Any JSON value; any JSON object.
  Element anyValue();
  Element anyObject();
  /// Whitespace between JSON tokens.
  Element ws();

private:
  using Seq = GrammarBuilder::Seq;
  std::string at(const std::string &path) const;
  Element typed(const std::string &type, const Json &schema, const std::string &path,
                const std::string &typePath, int depth);
  Element string(const Json &schema, const std::string &path, bool raw);
  Element object(const Json &schema, const std::string &path, int depth);
  Element array(const Json &schema, const std::string &path, int depth);
  Element ref(const std::string &pointer, const std::string &path, int depth);
  Element jsonString();
  Element number(bool integer);
  Element literalRule(const std::string &text, const std::string &name);

  GrammarBuilder &b_;
  const Json &root_;
  std::string base_;
  std::map<std::string, uint32_t> refs_;
  int64_t wsRule_ = -1, stringRule_ = -1, anyRule_ = -1, anyObjectRule_ = -1, intRule_ = -1,
          numberRule_ = -1, charRule_ = -1;
};

} // namespace glm::grammar
