// UTF-8 helpers (tokenizer, chat templates, synth): validation, code point stepping, and the lossy
// conversion that Hugging Face's decoders use (Rust's String::from_utf8_lossy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace glm {

/// The replacement character U+FFFD, as UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// The byte offset of the first ill-formed or incomplete UTF-8 sequence in `text`, or nullopt
/// when all of it is well formed (no surrogates, no overlong forms, nothing above U+10FFFF).
std::optional<size_t> findInvalidUtf8(std::string_view text);

/// Decodes the code point at `text[pos]` and advances `pos` past it. `text` must be valid UTF-8.
uint32_t nextCodePoint(std::string_view text, size_t &pos);

/// The code point that ends at `text[end]` (exclusive). `text` must be valid UTF-8, end > 0.
uint32_t previousCodePoint(std::string_view text, size_t end);

/// The length in bytes of the UTF-8 sequence that starts with lead byte `lead` (1 for invalid
/// leads, so callers stepping through valid text never stall).
size_t utf8SequenceLength(uint8_t lead);

void appendUtf8(std::string &out, uint32_t codePoint);

/// Appends `bytes` to `out` as valid UTF-8, replacing each maximal ill-formed subsequence (as
/// Unicode §3.9 defines it, and as from_utf8_lossy does) with one U+FFFD. When `final` is false, an
/// incomplete sequence at the very end that more bytes could still complete is left unconsumed.
/// Returns how many bytes of `bytes` were consumed (all of them when `final`).
size_t appendUtf8Lossy(std::string &out, std::string_view bytes, bool final);

/// `bytes` as valid UTF-8, with from_utf8_lossy's replacements.
std::string utf8Lossy(std::string_view bytes);

/// Unicode's White_Space property (what Rust's char::is_whitespace and Oniguruma's \s accept).
bool isUnicodeWhiteSpace(uint32_t codePoint);

} // namespace glm
