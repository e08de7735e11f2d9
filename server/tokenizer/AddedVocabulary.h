// AddedVocabulary: tokenizer.json's "added_tokens" (special tokens and the like), found in the
// text before pre-tokenization, as Hugging Face's AddedVocabulary finds them.
#pragma once

#include "server/tokenizer/BpeModel.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glm::server {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool singleWord = false; // only matches with no word character on either side
  bool lstrip = false;     // swallows the whitespace before it
  bool rstrip = false;     // swallows the whitespace after it
  bool normalized = true;  // matched in normalized text (the same text here: no normalizer)
  bool special = false;    // skipped by decode(..., skipSpecialTokens)
};

class AddedVocabulary {
public:
  /// Reads "added_tokens". Ids follow tokenizers' rule (a content already in the vocab keeps its
  /// vocab id; others are numbered from the vocab's size in file order) and must agree with the
  /// ids the file states: a tokenizer.json where they disagree would make `tokenizers` use other
  /// ids than the model was trained with, so it is a FormatError naming the token.
  static Expected<AddedVocabulary> fromJson(const nlohmann::json &list, const BpeModel &model);

  /// A stretch of text to pre-tokenize (id < 0) or one added token (the text it matched,
  /// including any whitespace it strips).
  struct Segment {
    std::string_view text;
    TokenId id = -1;
  };

  /// Splits `text` (valid UTF-8) at added tokens: first the tokens with normalized=false over the
  /// whole text, then those with normalized=true over what is left; at each position the longest
  /// token wins, scanning left to right. Empty stretches are left out.
  void split(std::string_view text, std::vector<Segment> &segments) const;

  /// Every added token by id (after duplicates are folded), in file order.
  const std::vector<AddedToken> &tokens() const { return tokens_; }
  /// The added token with this id, or nullptr.
  const AddedToken *findById(TokenId id) const;
  /// Whether `content` is the text of a token marked special (tokenizers decides skipping by
  /// text, so a vocab token spelled like a special token is skipped too).
  bool isSpecialContent(std::string_view content) const;

private:
  /// A byte trie over the contents of one group of tokens.
  class Trie {
  public:
    void add(std::string_view content, size_t tokenIndex);
    /// The index and length of the longest token starting at text[pos], if any.
    bool longestAt(std::string_view text, size_t pos, size_t &tokenIndex, size_t &length) const;
    bool empty() const { return nodes_.size() <= 1; }

  private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t tokenIndex = -1;
    };
    std::vector<Node> nodes_{Node{}};
    std::array<bool, 256> firstByte_{};
  };

  void findMatches(std::string_view text, const Trie &trie, std::vector<Segment> &segments) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> indexById_;
  std::vector<std::string> specialContents_; // sorted
  Trie rawTrie_;
  Trie normalizedTrie_;
};

} // namespace glm::server
