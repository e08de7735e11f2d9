// The prefix-sharing token walk behind masks and position tables (included by TokenMask.h).
#pragma once

#include <algorithm>

namespace glm::grammar {

template <typename Visit>
void walkTokens(Recognizer &recognizer, const StackSet &start, const TokenVocabulary &vocabulary,
                std::span<const int32_t> ids, Visit &&visit, TokenWalk &scratch) {
  std::vector<uint32_t> &levels = scratch.levels;
  std::vector<char> &escaped = scratch.escaped;
  scratch.reset(start);
  levels.assign(1, 0);
  escaped.assign(1, 0);
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
      const StackSet &at = scratch.state(levels[dead]);
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
      levels[j + 1] = scratch.step(recognizer, levels[j], static_cast<uint8_t>(bytes[j]));
      const StackSet &next = scratch.state(levels[j + 1]);
      escaped[j + 1] = static_cast<char>(escaped[j] || next.escaped);
      valid = j + 1;
      if (next.tops.empty()) {
        dead = j + 1;
        break;
      }
    }
    const StackSet &last = scratch.state(levels[valid]);
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
