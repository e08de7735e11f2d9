// PreTokenizer: splits text between added tokens into the words that BPE encodes one by one
// (tokenizer.json's "pre_tokenizer": Split steps followed by one ByteLevel step).
#pragma once

#include "server/tokenizer/Regex.h"

#include <nlohmann/json_fwd.hpp>

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

/// What a Split step does with the pieces its pattern matches (Hugging Face's
/// SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
public:
  /// Reads tokenizer.json's "pre_tokenizer". Accepted: ByteLevel alone, or a Sequence of Split
  /// steps (Regex or String pattern, any behavior, invert or not) ending in one ByteLevel step
  /// (with or without the GPT-2 regex and prefix space). Anything else is Unimplemented, a
  /// malformed entry FormatError, a bad pattern InvalidArgument; messages name the entry.
  static Expected<PreTokenizer> fromJson(const nlohmann::json &config);

  /// Appends the words of `text` (valid UTF-8) in order, as raw bytes: the byte-level mapping
  /// is left to the BPE model. Words are views into `text`, or into strings added to `storage`
  /// when a step prepends a space. Fails only if a regex gives up (PCRE2 limits).
  Status split(std::string_view text, std::vector<std::string_view> &words,
               std::deque<std::string> &storage) const;

private:
  struct SplitStep {
    Regex regex;
    SplitBehavior behavior;
    bool invert;
  };

  PreTokenizer() = default;
  Status applySplit(const Regex &regex, SplitBehavior behavior, bool invert,
                    std::vector<std::string_view> &pieces) const;

  std::vector<SplitStep> splits_;
  bool addPrefixSpace_ = false;
  std::optional<Regex> byteLevelRegex_; // the GPT-2 pattern, when ByteLevel has use_regex
};

} // namespace glm::server
