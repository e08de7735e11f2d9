// Tokenizer: a Hugging Face tokenizer.json with byte-level BPE (GLM's and GPT-2's kind), encoding
// text to ids and decoding ids to text exactly as the `tokenizers` library does.
#pragma once

#include "base/Status.h"
#include "server/tokenizer/AddedVocabulary.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

/// Loaded once, then shared: encode() and decode() are const and safe to call from many threads
/// at once (the word cache inside is locked per shard).
///
/// Supported tokenizer.json: model BPE (no dropout, byte_fallback or word affixes); normalizer
/// null; pre_tokenizer ByteLevel, or Split steps followed by ByteLevel; decoder ByteLevel;
/// post_processor null, ByteLevel, TemplateProcessing or a Sequence of those; truncation and
/// padding null. Anything else is refused at load with a message naming the field, rather than
/// tokenized differently from `tokenizers`.
class Tokenizer {
public:
  /// Parses the text of a tokenizer.json.
  static Expected<Tokenizer> fromJson(std::string_view json);
  /// Reads and parses a tokenizer.json file; errors name the file.
  static Expected<Tokenizer> fromFile(const std::string &path);
  /// MODEL_DIR/tokenizer.json.
  static Expected<Tokenizer> fromModelDir(const std::string &modelDir);

  Tokenizer(Tokenizer &&) noexcept;
  Tokenizer &operator=(Tokenizer &&) noexcept;
  ~Tokenizer();

  /// Text -> ids: added tokens are found first, the text between them is pre-tokenized and BPE
  /// encoded. With addSpecialTokens the post-processor's template (e.g. a BOS id) is applied, as
  /// `tokenizers`' encode(text, add_special_tokens=True) does; GLM's template adds nothing.
  /// InvalidArgument if `text` is not valid UTF-8 (tokenizers only takes Unicode strings).
  Expected<std::vector<TokenId>> encode(std::string_view text, bool addSpecialTokens = false) const;

  /// Ids -> text: each token's bytes (ByteLevel decoder) concatenated, then made valid UTF-8 by
  /// replacing ill-formed sequences with U+FFFD, as `tokenizers` does. skipSpecialTokens drops
  /// tokens whose text is a special added token. InvalidArgument naming the id if an id has no
  /// token (`tokenizers` silently drops those; a server should not).
  Expected<std::string> decode(std::span<const TokenId> ids, bool skipSpecialTokens = false) const;

  /// One past the largest id (vocab and added tokens); compare with config.json's vocab_size.
  size_t idCount() const;
  /// Whether some token has this id.
  bool hasId(TokenId id) const;
  /// The id of a token spelled as in tokenizer.json (added tokens first, then the vocab, whose
  /// entries are in the byte-level alphabet: " hello" is "Ġhello").
  std::optional<TokenId> tokenToId(std::string_view token) const;
  /// The token spelled as in tokenizer.json, or nullopt for an unknown id.
  std::optional<std::string_view> idToToken(TokenId id) const;
  /// The bytes one token decodes to (possibly part of a UTF-8 sequence); empty for unknown ids.
  std::string_view tokenBytes(TokenId id) const;
  /// Whether decode(..., skipSpecialTokens=true) drops this id.
  bool isSpecial(TokenId id) const;
  const std::vector<AddedToken> &addedTokens() const;

private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace glm::server
