// The Jinja lexer: template text to tokens, with jinja2's whitespace control.
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server::jinja {

/// A place in the template, 1-based; the column counts code points.
struct SourceLoc {
  int line = 1;
  int column = 1;
};

enum class TokenKind : uint8_t {
  Data,          // literal template text, whitespace control already applied
  VariableBegin, // {{
  VariableEnd,   // }}
  BlockBegin,    // {%
  BlockEnd,      // %}
  Name,
  String,   // text holds the unescaped value
  Integer,  // intValue
  Float,    // floatValue
  Operator, // text holds the operator: + - * / // % ** ~ [ ] ( ) { } == != < <= > >= = . : | , ;
  End,
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;
  int64_t intValue = 0;
  double floatValue = 0.0;
  SourceLoc loc;
};

/// Splits a template into tokens. Errors name the source: "chat_template.jinja:3:7: ...".
Expected<std::vector<Token>> tokenizeTemplate(std::string_view source, std::string_view name);

/// "name:line:column: message", the prefix every template diagnostic carries.
std::string locatedMessage(std::string_view name, SourceLoc loc, std::string_view message);

} // namespace glm::server::jinja
