// UTF-8 validation, stepping and lossy conversion for the tokenizer.
#include "base/Utf8.h"

namespace glm {
namespace {

/// How a sequence starting with `lead` continues: its total length and the range its second byte
/// must fall in (the later bytes are always 80..BF). Length 0 marks a byte that cannot start one.
struct LeadInfo {
  uint8_t length;
  uint8_t secondLo;
  uint8_t secondHi;
};

LeadInfo leadInfo(uint8_t lead) {
  if (lead < 0x80) {
    return {1, 0, 0};
  }
  if (lead >= 0xC2 && lead <= 0xDF) {
    return {2, 0x80, 0xBF};
  }
  if (lead == 0xE0) {
    return {3, 0xA0, 0xBF}; // no overlong forms
  }
  if (lead == 0xED) {
    return {3, 0x80, 0x9F}; // no surrogates
  }
  if (lead >= 0xE1 && lead <= 0xEF) {
    return {3, 0x80, 0xBF};
  }
  if (lead == 0xF0) {
    return {4, 0x90, 0xBF};
  }
  if (lead >= 0xF1 && lead <= 0xF3) {
    return {4, 0x80, 0xBF};
  }
  if (lead == 0xF4) {
    return {4, 0x80, 0x8F}; // nothing above U+10FFFF
  }
  return {0, 0, 0};
}

enum class SeqKind { Valid, Invalid, Truncated };

/// Classifies the sequence at bytes[pos]: Valid (length bytes long), Invalid (the maximal
/// ill-formed subpart is `length` bytes) or Truncated (the input ends inside a sequence that is
/// well formed so far; `length` is what is left).
SeqKind classify(std::string_view bytes, size_t pos, size_t &length) {
  auto lead = static_cast<uint8_t>(bytes[pos]);
  LeadInfo info = leadInfo(lead);
  if (info.length == 0) {
    length = 1;
    return SeqKind::Invalid;
  }
  for (size_t k = 1; k < info.length; ++k) {
    if (pos + k >= bytes.size()) {
      length = k;
      return SeqKind::Truncated;
    }
    auto b = static_cast<uint8_t>(bytes[pos + k]);
    uint8_t lo = k == 1 ? info.secondLo : 0x80;
    uint8_t hi = k == 1 ? info.secondHi : 0xBF;
    if (b < lo || b > hi) {
      length = k;
      return SeqKind::Invalid;
    }
  }
  length = info.length;
  return SeqKind::Valid;
}

} // namespace

std::optional<size_t> findInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs dominate real text; skip them without the table walk.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t length = 0;
    if (classify(text, pos, length) != SeqKind::Valid) {
      return pos;
    }
    pos += length;
  }
  return std::nullopt;
}

size_t utf8SequenceLength(uint8_t lead) {
  LeadInfo info = leadInfo(lead);
  return info.length == 0 ? 1 : info.length;
}

uint32_t nextCodePoint(std::string_view text, size_t &pos) {
  auto lead = static_cast<uint8_t>(text[pos]);
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  size_t length = utf8SequenceLength(lead);
  uint32_t cp = lead & (0x7F >> length);
  for (size_t k = 1; k < length && pos + k < text.size(); ++k) {
    cp = (cp << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
  }
  pos += length;
  return cp;
}

uint32_t previousCodePoint(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  return nextCodePoint(text, start);
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t appendUtf8Lossy(std::string &out, std::string_view bytes, bool final) {
  size_t pos = 0;
  size_t validFrom = 0; // start of the run of valid bytes not yet copied
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t length = 0;
    SeqKind kind = classify(bytes, pos, length);
    if (kind == SeqKind::Valid) {
      pos += length;
      continue;
    }
    out.append(bytes.substr(validFrom, pos - validFrom));
    if (kind == SeqKind::Truncated && !final) {
      return pos;
    }
    out.append(kReplacementChar);
    pos += length;
    validFrom = pos;
  }
  out.append(bytes.substr(validFrom, pos - validFrom));
  return pos;
}

std::string utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  appendUtf8Lossy(out, bytes, /*final=*/true);
  return out;
}

bool isUnicodeWhiteSpace(uint32_t cp) {
  if (cp <= 0x20) {
    return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  }
  if (cp < 0x85) {
    return false;
  }
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

} // namespace glm
