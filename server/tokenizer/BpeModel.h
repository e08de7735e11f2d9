// BpeModel: tokenizer.json's byte-level BPE model (vocab and ranked merges), encoding one
// pre-tokenized word at a time with a shared, thread-safe cache of recent words.
#pragma once

#include "base/Status.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glm::server {

using TokenId = int32_t;

class BpeModel {
public:
  /// Reads tokenizer.json's "model" (type BPE). Merges may be ["a", "b"] pairs or "a b" strings;
  /// a merge whose parts or result are not in the vocab is a FormatError naming it, as are
  /// duplicate ids. byte_fallback, dropout, continuing_subword_prefix and end_of_word_suffix are
  /// Unimplemented (byte-level BPE never needs them); unk_token and ignore_merges are honoured.
  static Expected<BpeModel> fromJson(const nlohmann::json &config);

  BpeModel(BpeModel &&) noexcept;
  BpeModel &operator=(BpeModel &&) noexcept;
  ~BpeModel();

  /// Appends the ids of one word, given as raw bytes (the model spells them in the byte-level
  /// alphabet itself). Thread-safe.
  void encodeWord(std::string_view word, std::vector<TokenId> &ids) const;

  std::optional<TokenId> tokenToId(std::string_view token) const;
  /// Vocab entries by id; an id with no entry has an empty slot (see hasId).
  const std::vector<std::string> &tokensById() const { return tokens_; }
  bool hasId(TokenId id) const;
  /// The number of vocab entries (Hugging Face's get_vocab_size for the model).
  size_t vocabCount() const { return vocab_.size(); }

private:
  /// Lets maps keyed by std::string be searched with a string_view, without a copy.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  struct Merge {
    uint32_t rank;
    TokenId result;
  };
  class Cache;

  BpeModel();
  void mergeWord(std::string_view word, std::vector<TokenId> &ids) const;
  const Merge *findMerge(TokenId left, TokenId right) const;

  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> tokens_;  // by id
  std::vector<bool> present_;        // by id: whether the vocab has it
  std::array<TokenId, 256> byteIds_; // id of each byte's single-character token, or -1
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<TokenId> rankResults_; // the token each merge rank makes
  std::optional<TokenId> unkId_;
  bool fuseUnk_ = false;
  bool ignoreMerges_ = false;
  std::unique_ptr<Cache> cache_;
};

} // namespace glm::server
