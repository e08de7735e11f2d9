// The GPT-2 byte <-> code point tables.
#include "server/tokenizer/ByteLevel.h"

#include "base/Utf8.h"

#include <array>

namespace glm::server {
namespace {

struct Tables {
  std::array<uint32_t, 256> codePointOfByte{};
  // Every alphabet code point is below U+0144, so a flat table covers the reverse direction.
  std::array<int16_t, 512> byteOfCodePoint{};
};

bool printsAsItself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const Tables &tables() {
  static const Tables t = [] {
    Tables t;
    t.byteOfCodePoint.fill(-1);
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t cp = printsAsItself(b) ? b : shifted++;
      t.codePointOfByte[b] = cp;
      t.byteOfCodePoint[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return t;
}

} // namespace

uint32_t byteLevelCodePoint(uint8_t byte) { return tables().codePointOfByte[byte]; }

std::optional<uint8_t> byteLevelByte(uint32_t codePoint) {
  if (codePoint >= 512 || tables().byteOfCodePoint[codePoint] < 0) {
    return std::nullopt;
  }
  return static_cast<uint8_t>(tables().byteOfCodePoint[codePoint]);
}

std::string byteLevelEncode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) {
    appendUtf8(out, byteLevelCodePoint(static_cast<uint8_t>(c)));
  }
  return out;
}

std::string byteLevelDecodeToken(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    std::optional<uint8_t> b = byteLevelByte(nextCodePoint(token, pos));
    if (!b) {
      return std::string(token);
    }
    bytes += static_cast<char>(*b);
  }
  return bytes;
}

} // namespace glm::server
