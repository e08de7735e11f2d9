// The prefix-sharing token walk behind masks and position tables (included by TokenMask.h).
#pragma once

#include <algorithm>

namespace glm::grammar {

template <typename Visit>
void walkTokens(Recognizer &recognizer, const StackSet &start, const TokenVocabulary &vocabulary,
                std::span<const int32_t> ids, Visit &&visit) {
  // levels[j]: the state after the first j bytes of the previous token; escaped[j]: a path left
  // the frame within those j bytes.
  std::vector<StackSet> levels(1, start);
  std::vector<char> escaped(1, 0);
  std::string_view previous;
  size_t valid = 0;                     // levels[0 .. valid] hold for `previous`
  size_t dead = std::string_view::npos; // levels[dead] has no stacks (dead <= valid)
  for (int32_t id : ids) {
    const std::string_view bytes = vocabulary.bytes(id);
    size_t common = 0;
    const size_t limit = std::min({previous.size(), bytes.size(), valid});
    while (common < limit && previous[common] == bytes[common]) {
      ++common;
    }
    previous = bytes;
    if (dead != std::string_view::npos && common >= dead) {
      // Same dead prefix: same verdict, but for a token that ends exactly where the state
      // emptied after completing.
      const StackSet &at = levels[dead];
      const bool ends = bytes.size() == dead && (at.accepting || at.escaped);
      visit(id, ends, escaped[dead] != 0);
      continue;
    }
    valid = common;
    dead = std::string_view::npos;
    if (levels.size() < bytes.size() + 1) {
      levels.resize(bytes.size() + 1);
      escaped.resize(bytes.size() + 1);
    }
    for (size_t j = valid; j < bytes.size(); ++j) {
      recognizer.advance(levels[j], static_cast<uint8_t>(bytes[j]), levels[j + 1]);
      escaped[j + 1] = static_cast<char>(escaped[j] || levels[j + 1].escaped);
      valid = j + 1;
      if (levels[j + 1].tops.empty()) {
        dead = j + 1;
        break;
      }
    }
    const StackSet &last = levels[valid];
    if (dead == std::string_view::npos) {
      visit(id, true, escaped[bytes.size() - 1] != 0);
    } else {
      const bool ends = dead == bytes.size() && (last.accepting || last.escaped);
      // A path that left the frame before the last byte needs the bytes after it matched outside.
      visit(id, ends, (dead == bytes.size() ? escaped[dead - 1] : escaped[dead]) != 0);
    }
  }
}

} // namespace glm::grammar
