// The `signature` of the thinking blocks the server writes. Anthropic's clients keep it opaque
// and send it back with the block; an empty one reads as "unsigned" to some of them, so the
// server signs: base64 of HMAC-SHA256 over the thinking text, under a key drawn at random when
// the server starts (a restart changes every signature).
//
// Not a security boundary: a thinking block sent back is read into the prompt whether its
// signature verifies or not (Anthropic refuses a tampered one; here a client could write the
// same text as a user turn anyway, so refusing would protect nothing and break clients that
// move a conversation between servers).
#pragma once

#include <string>
#include <string_view>

namespace glm::server::anthropic {

class ThinkingSigner {
public:
  /// A key from the kernel's random source.
  ThinkingSigner();
  /// A given key (tests).
  explicit ThinkingSigner(std::string key) : key_(std::move(key)) {}

  /// Base64 (RFC 4648, padded) of HMAC-SHA256(key, thinking): 44 characters.
  std::string sign(std::string_view thinking) const;

private:
  std::string key_;
};

/// RFC 4648 base64 with padding.
std::string base64(std::string_view bytes);

} // namespace glm::server::anthropic
