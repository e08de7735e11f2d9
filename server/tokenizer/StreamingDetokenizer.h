// StreamingDetokenizer: turns generated ids into text one id at a time, never emitting a broken
// UTF-8 sequence, so a server can stream pieces that concatenate to Tokenizer::decode.
#pragma once

#include "server/tokenizer/Tokenizer.h"

#include <string>

namespace glm::server {

/// Holds back the bytes of a character split across tokens until the token that completes it
/// arrives. Concatenating every feed() result and finish() gives exactly
/// tokenizer.decode(ids, skipSpecialTokens). Not thread-safe: one per stream. The tokenizer must
/// outlive it.
class StreamingDetokenizer {
public:
  explicit StreamingDetokenizer(const Tokenizer &tokenizer, bool skipSpecialTokens = false)
      : tokenizer_(&tokenizer), skipSpecialTokens_(skipSpecialTokens) {}

  /// The text that `id` completes: valid UTF-8, possibly empty (while a character is still
  /// incomplete, or for a skipped special token). Bytes that can no longer become valid are
  /// replaced with U+FFFD right away. InvalidArgument for an id with no token; the stream is
  /// left as it was.
  Expected<std::string> feed(TokenId id);

  /// Flushes what is held back (an incomplete character becomes U+FFFD) and starts over.
  std::string finish();

  /// Bytes held back, waiting for the rest of a character.
  size_t pendingBytes() const { return pending_.size(); }

private:
  const Tokenizer *tokenizer_;
  bool skipSpecialTokens_;
  std::string pending_;
};

} // namespace glm::server
