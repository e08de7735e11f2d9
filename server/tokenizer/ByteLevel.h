// The byte-level alphabet of GPT-2 (`bytes_to_unicode`): every byte stands for one printable
// code point, so byte-level BPE vocabularies can be stored as text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace glm::server {

/// The code point that stands for `byte`: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
/// 0xAE..0xFF) stand for themselves, the other 68 for U+0100.. in byte order.
uint32_t byteLevelCodePoint(uint8_t byte);

/// The byte a code point stands for, or nullopt if it is not in the alphabet.
std::optional<uint8_t> byteLevelByte(uint32_t codePoint);

/// Raw bytes -> their byte-level spelling (UTF-8 of the alphabet's code points).
std::string byteLevelEncode(std::string_view raw);

/// One token's text -> the bytes it stands for, as Hugging Face's ByteLevel decoder does it: when
/// every character of the token is in the alphabet, the bytes they stand for; otherwise (a token
/// outside the byte-level alphabet, such as an added token with a space in it) the token's own
/// UTF-8 bytes, unchanged.
std::string byteLevelDecodeToken(std::string_view token);

} // namespace glm::server
