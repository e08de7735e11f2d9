#include "runtime/engine/Drafter.h"

#include <algorithm>

namespace glm::runtime {

namespace {

/// kMatch token ids below 2^21 each (GLM's vocabulary is 154,880) packed exactly into one key;
/// false for an id outside that range, which is never matched.
bool packKey(std::span<const int32_t> tokens, int64_t at, uint64_t &key) {
  key = 0;
  for (int64_t i = 0; i < CopyDrafter::kMatch; ++i) {
    const int32_t id = tokens[static_cast<size_t>(at + i)];
    if (id < 0 || id >= (1 << 21)) {
      return false;
    }
    key = key << 21 | static_cast<uint64_t>(id);
  }
  return true;
}

} // namespace

std::vector<int32_t> CopyDrafter::draft(std::span<const int32_t> tokens, int32_t, int64_t max) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < indexed_ + kMatch - 1) {
    latest_.clear(); // not the tokens indexed so far: start again
    indexed_ = 0;
  }
  // Every occurrence that a token follows, that is every start but the last one's.
  for (; indexed_ + kMatch < n; ++indexed_) {
    uint64_t key = 0;
    if (packKey(tokens, indexed_, key)) {
      latest_[key] = indexed_;
    }
  }
  std::vector<int32_t> drafts;
  uint64_t key = 0;
  if (max <= 0 || n < kMatch || !packKey(tokens, n - kMatch, key)) {
    return drafts;
  }
  auto found = latest_.find(key);
  if (found == latest_.end()) {
    return drafts;
  }
  const int64_t from = found->second + kMatch;
  const int64_t count = std::min(max, n - from);
  drafts.assign(tokens.begin() + from, tokens.begin() + from + count);
  return drafts;
}

std::vector<int32_t> CopyOrHeadDrafter::draft(std::span<const int32_t> tokens, int32_t headGuess,
                                              int64_t max) {
  std::vector<int32_t> drafts = CopyDrafter::draft(tokens, headGuess, max);
  if (drafts.empty() && headGuess >= 0 && max >= 1) {
    drafts.push_back(headGuess);
  }
  return drafts;
}

} // namespace glm::runtime
