// FNV-1a, 64 bit: a content hash that is stable across builds and machines, unlike std::hash.
// For cache keys and plan identity, not for security.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace glm {

class Fnv1a64 {
public:
  Fnv1a64 &add(std::string_view bytes) {
    for (char c : bytes) {
      state_ = (state_ ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    }
    // A separator, so that ("ab", "c") and ("a", "bc") differ.
    state_ = (state_ ^ 0xFFu) * 0x100000001B3ull;
    return *this;
  }
  uint64_t value() const { return state_; }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(state_));
    return text;
  }

private:
  uint64_t state_ = 0xCBF29CE484222325ull;
};

} // namespace glm
