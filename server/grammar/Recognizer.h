// The pushdown recognizer over a Grammar: a state is a set of stacks of grammar positions, each
// stack shared structurally with the others (hash-consed nodes in an arena), advanced a byte or a
// special token at a time.
#pragma once

#include "server/grammar/Grammar.h"

#include <cstdint>
#include <vector>

namespace glm::grammar {

/// The parent of a root frame: reaching it means the input may end here.
inline constexpr int32_t kBottom = -1;
/// The parent of a frame whose caller is not known (the per-position token tables): reaching it
/// means the bytes continue outside the frame.
inline constexpr int32_t kFrame = -2;

/// One stack frame: the next position to match in it and the frame below (a node id, kBottom or
/// kFrame). Equal (pos, parent) pairs are one node, so equal stacks are equal ids.
struct StackNode {
  uint32_t pos = 0;
  int32_t parent = kBottom;
  uint32_t mark = 0;
};

class StackArena {
public:
  StackArena() { clear(); }
  int32_t intern(uint32_t pos, int32_t parent);
  const StackNode &node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  StackNode &node(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  void clear();
  uint32_t nextEpoch() { return ++epoch_; }

private:
  void grow();
  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;
  uint32_t epoch_ = 0;
};

/// A recognizer state: the stacks whose top is a terminal (a Bytes or Token element).
struct StackSet {
  std::vector<int32_t> tops;
  bool accepting = false; // some path completed the root
  bool escaped = false;   // some path left a kFrame-bottomed frame
  void reset() {
    tops.clear();
    accepting = false;
    escaped = false;
  }
};

class Recognizer {
public:
  Recognizer(const Grammar &grammar, StackArena &arena) : g_(grammar), arena_(arena) {}

  /// The state before any input: the root's alternatives expanded.
  void start(StackSet &out);
  /// The state of one frame at position `pos` (a terminal) over an unknown caller.
  void frame(uint32_t pos, StackSet &out);
  /// `in` advanced by byte `b` (out is reset first; in and out must differ).
  void advance(const StackSet &in, uint8_t b, StackSet &out);
  /// `in` advanced by the special token `id`.
  void advanceToken(const StackSet &in, int32_t id, StackSet &out);
  /// `in` advanced over `bytes`; false when it dies on the way (out then empty).
  bool advanceBytes(const StackSet &in, std::string_view bytes, StackSet &out);

  const Grammar &grammar() const { return g_; }
  StackArena &arena() { return arena_; }

private:
  /// Adds the terminals reachable from node `id` without consuming input.
  void expand(int32_t id, uint32_t epoch, StackSet &out);

  const Grammar &g_;
  StackArena &arena_;
  std::vector<int32_t> work_;
};

/// Copies the stacks of `state` out of `from` into a fresh `to` (dropping every dead node).
void compact(const StackArena &from, const StackSet &state, StackArena &to, StackSet &out);

} // namespace glm::grammar
