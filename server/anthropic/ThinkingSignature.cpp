// Thinking signatures: HMAC-SHA256 (runtime/comm's) in base64.
#include "server/anthropic/ThinkingSignature.h"

#include "base/Hmac.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>

namespace glm::server::anthropic {

ThinkingSigner::ThinkingSigner() {
  std::array<uint8_t, 32> key{};
  if (!randomBytes(key.data(), key.size())) {
    // Without getrandom the key is still unpredictable enough for an opaque tag (see the
    // header: signatures protect nothing here).
    std::random_device device;
    for (uint8_t &b : key) {
      b = static_cast<uint8_t>(device());
    }
  }
  key_.assign(reinterpret_cast<const char *>(key.data()), key.size());
}

std::string ThinkingSigner::sign(std::string_view thinking) const {
  const Sha256Digest mac = hmacSha256(key_, thinking);
  return base64(std::string_view(reinterpret_cast<const char *>(mac.data()), mac.size()));
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) {
      group = (group << 8) | (j < n ? static_cast<uint8_t>(bytes[i + j]) : 0u);
    }
    for (size_t j = 0; j < 4; ++j) {
      out += j <= n ? kAlphabet[(group >> (18 - 6 * j)) & 0x3F] : '=';
    }
  }
  return out;
}

} // namespace glm::server::anthropic
