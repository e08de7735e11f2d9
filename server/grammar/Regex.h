// Regular expressions (the ECMAScript subset vLLM's and xgrammar's guided_regex take) and the
// character classes GBNF shares, compiled into a GrammarBuilder.
#pragma once

#include "server/grammar/Grammar.h"

#include <string>
#include <string_view>

namespace glm::grammar {

/// How the matched text is spelled: as is, or as the inside of a JSON string (quotes,
/// backslashes and control characters written as JSON escapes).
enum class Spelling { Raw, JsonString };

/// Adds `pattern` as a rule and returns a reference to it; on error calls builder.fail() with
/// `path` and the offset. Accepted: literals (UTF-8), `.`, classes `[...]` / `[^...]` with ASCII
/// ranges, escapes \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation,
/// groups `(...)`, `(?:...)`, `(?<name>...)`, alternation, `* + ? {m} {m,} {m,n}` (a lazy `?`
/// suffix is accepted and changes nothing), `^` at the start and `$` at the end (the match is
/// always whole). Refused: backreferences, lookaround, non-ASCII ranges in a class.
Element compileRegex(GrammarBuilder &builder, std::string_view pattern, Spelling spelling,
                     const std::string &path);

/// A character class parsed from `text` at `at` (just past the '['), ending past the ']':
/// its ASCII bytes and its non-ASCII characters (UTF-8). Shared by the regex and GBNF parsers.
struct CharClass {
  ByteSet ascii;
  std::vector<std::string> wide;
  bool negated = false;
};
bool parseCharClass(std::string_view text, size_t &at, CharClass &out, std::string &error);
/// One escape after a backslash at `at` (which points past it) as UTF-8 bytes; false if unknown.
/// \d \w \s and their negations are classes, so they are parsed by the callers.
bool parseEscape(std::string_view text, size_t &at, std::string &out, std::string &error);
/// A class as an element: its ASCII part and its wide characters (negated: every other character),
/// spelled raw or inside a JSON string.
Element classElement(GrammarBuilder &builder, const CharClass &cls, Spelling spelling);
/// `bytes` (one literal character or more) as a sequence, spelled raw or inside a JSON string.
GrammarBuilder::Seq spelledLiteral(GrammarBuilder &builder, std::string_view bytes,
                                   Spelling spelling);

} // namespace glm::grammar
