// Incremental detokenization with UTF-8 hold-back.
#include "server/tokenizer/StreamingDetokenizer.h"

#include "base/Utf8.h"

namespace glm::server {

Expected<std::string> StreamingDetokenizer::feed(TokenId id) {
  if (!tokenizer_->hasId(id)) {
    return invalidArgument("token id ", id, " is not in the vocabulary (ids run from 0 to ",
                           tokenizer_->idCount() - 1, ")");
  }
  std::string out;
  if (skipSpecialTokens_ && tokenizer_->isSpecial(id)) {
    return out;
  }
  pending_ += tokenizer_->tokenBytes(id);
  // The lossy decoder's choices depend only on bytes up to the end of each sequence, so
  // converting the settled prefix now gives what decoding everything at the end would.
  size_t consumed = appendUtf8Lossy(out, pending_, /*final=*/false);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out = utf8Lossy(pending_);
  pending_.clear();
  return out;
}

} // namespace glm::server
