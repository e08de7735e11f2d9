// Regex: the pre-tokenizer's split patterns (Oniguruma syntax in tokenizer.json) compiled with
// PCRE2, JIT when available, and iterated the way Hugging Face's onig-backed find_iter does.
#pragma once

#include "base/Status.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glm::server {

/// A compiled pattern. Immutable after compile(); findAll may run from many threads at once.
class Regex {
public:
  /// Compiles a pattern written for Oniguruma (what `tokenizers` uses) so that PCRE2 matches the
  /// same text: \s and \S follow Unicode White_Space (PCRE2's \s also takes U+180E), \w and \W
  /// are Letter|Mark|Number|Connector_Punctuation, \h and \H are hex digits, (?m) is dot-all and
  /// ^/$ anchor at lines, and \p{L} and \p{N} include the letters and numbers of Unicode 15 and
  /// 16 (Oniguruma's tables) that PCRE2 10.42's Unicode 14 tables lack; other properties, and
  /// \P{L} or \P{N} inside a class, keep Unicode 14 meanings. Character-class intersection (&&) and
  /// nested classes, which PCRE2 lacks, are Unimplemented; a pattern PCRE2 rejects is
  /// InvalidArgument with its message.
  static Expected<Regex> compile(std::string_view pattern);

  /// A pattern matching `text` literally (a Split pre-tokenizer's {"String": ...} pattern).
  static Expected<Regex> literal(std::string_view text);

  /// The PCRE2 spelling of an Oniguruma pattern (see compile()); exposed for tests.
  static Expected<std::string> translateOnigurumaPattern(std::string_view pattern);

  Regex(Regex &&) noexcept;
  Regex &operator=(Regex &&) noexcept;
  ~Regex();

  /// Appends the [start, end) byte ranges of successive matches in `subject` (valid UTF-8; the
  /// caller checks). After an empty match that ends where the previous match ended, the search
  /// moves on one character, as Rust's onig FindMatches does. Fails only when PCRE2 gives up
  /// (match or JIT stack limits).
  Status findAll(std::string_view subject, std::vector<std::pair<size_t, size_t>> &matches) const;

  /// Whether the pattern runs as JIT-compiled code (false: the interpreter).
  bool usesJit() const;
  const std::string &pattern() const;

private:
  struct Impl;
  explicit Regex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace glm::server
