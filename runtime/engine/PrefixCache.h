// The scheduler's index of kept prompt states: which token sequences the engine holds a state
// for, the longest of them that begins a new prompt, and which to evict first (least recently
// used). It holds ids only; the engine holds the states (Engine::keepState).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace glm::runtime {

class PrefixCache {
public:
  /// At most `capacity` states are kept (0: none).
  explicit PrefixCache(size_t capacity) : capacity_(capacity) {}

  struct Hit {
    int kept = -1;
    int64_t length = 0;
  };
  /// The kept state of the most tokens, at most `maxLength`, that are the first tokens of
  /// `tokens`, which then counts as the most recently used. Linear in the tokens and entries:
  /// a prefix hash at each entry's length, its tokens compared only where the hash agrees.
  std::optional<Hit> find(std::span<const int32_t> tokens, int64_t maxLength);
  /// Whether a state of exactly `tokens` is kept (which is then used, not kept twice).
  bool contains(std::span<const int32_t> tokens);
  /// Records kept state `kept` of `tokens` and returns the entry's serial number (never reused,
  /// unlike kept-state ids). The caller makes room first (full(), evict()).
  uint64_t insert(std::vector<int32_t> tokens, int kept);
  bool full() const { return entries_.size() >= capacity_; }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  /// Removes the least recently used entry and returns its kept-state id (nullopt when empty).
  std::optional<int> evict();
  /// Removes entry `serial` and returns its kept-state id; nullopt when it is gone already.
  std::optional<int> remove(uint64_t serial);

private:
  struct Entry {
    std::vector<int32_t> tokens;
    uint64_t hash = 0;
    int kept = -1;
    uint64_t used = 0; // the clock when last found or kept
    uint64_t serial = 0;
  };
  static uint64_t step(uint64_t hash, int32_t token);
  static uint64_t hashOf(std::span<const int32_t> tokens);

  size_t capacity_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  uint64_t serials_ = 0;
};

} // namespace glm::runtime
