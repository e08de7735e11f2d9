// GBNF, llama.cpp's grammar notation (which vLLM's guided_grammar takes in practice), compiled into
// the grammar form.
#pragma once

#include "server/grammar/Grammar.h"

#include <string>
#include <string_view>

namespace glm::grammar {

/// Rules `name ::= alternatives`, the start rule `root`. Accepted: "literals" with escapes
/// (\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [classes] / [^classes] with ASCII ranges,
/// rule names ([A-Za-z0-9_-]+), ( groups ), `|`, `* + ?`, `{m}` `{m,}` `{m,n}`, `.` (any
/// character), `#` comments. Newlines do not matter: a rule ends where the next `name ::=`
/// starts. Left-recursive rules are refused (the recognizer, like llama.cpp's, cannot run them).
/// Returns the root rule; errors go to builder.fail() with `path` and the line.
uint32_t compileGbnf(GrammarBuilder &builder, std::string_view text, const std::string &path);

} // namespace glm::grammar
