// The index of kept prompt states: prefix lookup by hash, then an exact comparison; LRU eviction.
#include "runtime/engine/PrefixCache.h"

#include <algorithm>
#include <cstring>

namespace glm::runtime {

uint64_t PrefixCache::step(uint64_t hash, int32_t token) {
  // FNV-1a over the token's four bytes: a prefix's hash extends to a longer prefix's.
  auto bits = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i, bits >>= 8) {
    hash = (hash ^ (bits & 0xFFu)) * 0x100000001B3ull;
  }
  return hash;
}

uint64_t PrefixCache::hashOf(std::span<const int32_t> tokens) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (int32_t t : tokens) {
    hash = step(hash, t);
  }
  return hash;
}

std::optional<PrefixCache::Hit> PrefixCache::find(std::span<const int32_t> tokens,
                                                  int64_t maxLength) {
  const int64_t limit = std::min<int64_t>(maxLength, static_cast<int64_t>(tokens.size()));
  // Entries by length, so one pass over the tokens meets each entry's length in turn.
  std::vector<Entry *> byLength;
  for (Entry &e : entries_) {
    if (!e.tokens.empty() && static_cast<int64_t>(e.tokens.size()) <= limit) {
      byLength.push_back(&e);
    }
  }
  std::sort(byLength.begin(), byLength.end(),
            [](const Entry *a, const Entry *b) { return a->tokens.size() < b->tokens.size(); });
  Entry *best = nullptr;
  uint64_t hash = 0xCBF29CE484222325ull;
  size_t at = 0;
  for (Entry *e : byLength) {
    for (; at < e->tokens.size(); ++at) {
      hash = step(hash, tokens[at]);
    }
    if (e->hash == hash &&
        std::memcmp(e->tokens.data(), tokens.data(), e->tokens.size() * sizeof(int32_t)) == 0) {
      best = e;
    }
  }
  if (best == nullptr) {
    return std::nullopt;
  }
  best->used = ++clock_;
  return Hit{best->kept, static_cast<int64_t>(best->tokens.size())};
}

bool PrefixCache::contains(std::span<const int32_t> tokens) {
  const uint64_t hash = hashOf(tokens);
  for (Entry &e : entries_) {
    if (e.hash == hash && e.tokens.size() == tokens.size() &&
        std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) {
      e.used = ++clock_;
      return true;
    }
  }
  return false;
}

uint64_t PrefixCache::insert(std::vector<int32_t> tokens, int kept) {
  Entry e;
  e.hash = hashOf(tokens);
  e.tokens = std::move(tokens);
  e.kept = kept;
  e.used = ++clock_;
  e.serial = ++serials_;
  entries_.push_back(std::move(e));
  return serials_;
}

std::optional<int> PrefixCache::evict() {
  if (entries_.empty()) {
    return std::nullopt;
  }
  auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                 [](const Entry &a, const Entry &b) { return a.used < b.used; });
  const int kept = oldest->kept;
  entries_.erase(oldest);
  return kept;
}

std::optional<int> PrefixCache::remove(uint64_t serial) {
  auto at = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry &e) { return e.serial == serial; });
  if (at == entries_.end()) {
    return std::nullopt;
  }
  const int kept = at->kept;
  entries_.erase(at);
  return kept;
}

} // namespace glm::runtime
