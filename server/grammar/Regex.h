// Regular expressions (the ECMAScript subset vLLM's and xgrammar's guided_regex take), compiled
// into a GrammarBuilder.
#pragma once

#include "server/grammar/CharClass.h"
#include "server/grammar/Grammar.h"

#include <string>
#include <string_view>

namespace glm::grammar {

/// Adds `pattern` as a rule and returns a reference to it; on error calls builder.fail() with
/// `path` and the offset. Accepted: literals (UTF-8), `.`, classes `[...]` / `[^...]` with ASCII
/// ranges, escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation,
/// groups `(...)`, `(?:...)`, `(?<name>...)`, alternation, `* + ? {m} {m,} {m,n}` (a lazy `?`
/// suffix is accepted and changes nothing), `^` at the start and `$` at the end (the match is
/// always whole). Refused: backreferences, lookaround, non-ASCII ranges in a class.
Element compileRegex(GrammarBuilder &builder, std::string_view pattern, Spelling spelling,
                     const std::string &path);

} // namespace glm::grammar
