// Character classes and escapes, the part of the syntax the regex and GBNF parsers share:
// `[...]` / `[^...]` with ASCII ranges, `\d \w \s` and their negations, `\n \xHH \uHHHH ...`.
#pragma once

#include "server/grammar/Grammar.h"

#include <string>
#include <string_view>
#include <vector>

namespace glm::grammar {

/// How the matched text is spelled: as is, or as the inside of a JSON string (quotes,
/// backslashes and control characters written as JSON escapes).
enum class Spelling { Raw, JsonString };

/// A character class parsed from `text` at `at` (just past the '['), ending past the ']':
/// its ASCII bytes and its non-ASCII characters (UTF-8).
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

/// \d \D \w \W \s \S (the letter after the backslash) as a class; false for other letters.
bool shorthandClass(char c, CharClass &out);
/// The length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t utf8SequenceLength(uint8_t lead);

} // namespace glm::grammar
