// The pushdown recognizer: hash-consed stack nodes, expansion to terminals, byte and token steps.
#include "server/grammar/Recognizer.h"

#include <unordered_map>

namespace glm::grammar {
namespace {

size_t hashNode(uint32_t pos, int32_t parent) {
  uint64_t h = (static_cast<uint64_t>(pos) << 32) ^ static_cast<uint32_t>(parent);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<size_t>(h);
}

} // namespace

void StackArena::clear() {
  nodes_.clear();
  table_.assign(1024, -1);
}

void StackArena::grow() {
  table_.assign(table_.size() * 2, -1);
  const size_t mask = table_.size() - 1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    size_t at = hashNode(nodes_[i].pos, nodes_[i].parent) & mask;
    while (table_[at] >= 0) {
      at = (at + 1) & mask;
    }
    table_[at] = static_cast<int32_t>(i);
  }
}

int32_t StackArena::intern(uint32_t pos, int32_t parent) {
  if ((nodes_.size() + 1) * 2 > table_.size()) {
    grow();
  }
  const size_t mask = table_.size() - 1;
  size_t at = hashNode(pos, parent) & mask;
  while (table_[at] >= 0) {
    const StackNode &n = nodes_[static_cast<size_t>(table_[at])];
    if (n.pos == pos && n.parent == parent) {
      return table_[at];
    }
    at = (at + 1) & mask;
  }
  nodes_.push_back({pos, parent, 0});
  table_[at] = static_cast<int32_t>(nodes_.size() - 1);
  return table_[at];
}

void Recognizer::expand(int32_t id, uint32_t epoch, StackSet &out) {
  work_.clear();
  work_.push_back(id);
  while (!work_.empty()) {
    const int32_t at = work_.back();
    work_.pop_back();
    if (at == kBottom) {
      out.accepting = true;
      continue;
    }
    if (at == kFrame) {
      out.escaped = true;
      continue;
    }
    StackNode &n = arena_.node(at);
    if (n.mark == epoch) {
      continue;
    }
    n.mark = epoch;
    const uint32_t pos = n.pos;
    const int32_t parent = n.parent;
    const Element &e = g_.at(pos);
    switch (e.kind) {
    case ElementKind::Bytes:
    case ElementKind::Token:
      out.tops.push_back(at);
      break;
    case ElementKind::End:
      work_.push_back(parent);
      break;
    case ElementKind::Rule: {
      // A reference in tail position returns straight to this frame's caller, so right
      // recursion (repetition) keeps the stack flat.
      const int32_t ret =
          g_.at(pos + 1).kind == ElementKind::End ? parent : arena_.intern(pos + 1, parent);
      for (uint32_t alt : g_.alternatives(e.value)) {
        work_.push_back(arena_.intern(alt, ret));
      }
      break;
    }
    }
  }
}

void Recognizer::start(StackSet &out) {
  out.reset();
  const uint32_t epoch = arena_.nextEpoch();
  for (uint32_t alt : g_.alternatives(g_.root())) {
    expand(arena_.intern(alt, kBottom), epoch, out);
  }
}

void Recognizer::frame(uint32_t pos, StackSet &out) {
  out.reset();
  out.tops.push_back(arena_.intern(pos, kFrame));
}

void Recognizer::advance(const StackSet &in, uint8_t b, StackSet &out) {
  out.reset();
  const uint32_t epoch = arena_.nextEpoch();
  for (int32_t top : in.tops) {
    const StackNode n = arena_.node(top);
    const Element &e = g_.at(n.pos);
    if (e.kind == ElementKind::Bytes && g_.byteSet(e.value).test(b)) {
      expand(arena_.intern(n.pos + 1, n.parent), epoch, out);
    }
  }
}

void Recognizer::advanceToken(const StackSet &in, int32_t id, StackSet &out) {
  out.reset();
  const uint32_t epoch = arena_.nextEpoch();
  for (int32_t top : in.tops) {
    const StackNode n = arena_.node(top);
    const Element &e = g_.at(n.pos);
    if (e.kind == ElementKind::Token && static_cast<int32_t>(e.value) == id) {
      expand(arena_.intern(n.pos + 1, n.parent), epoch, out);
    }
  }
}

bool Recognizer::advanceBytes(const StackSet &in, std::string_view bytes, StackSet &out) {
  StackSet a = in, b;
  for (size_t i = 0; i < bytes.size(); ++i) {
    advance(a, static_cast<uint8_t>(bytes[i]), b);
    std::swap(a, b);
    if (a.tops.empty()) {
      const bool last = i + 1 == bytes.size();
      const bool ended = last && (a.accepting || a.escaped);
      out = ended ? std::move(a) : StackSet{};
      return ended;
    }
  }
  out = std::move(a);
  return true;
}

void compact(const StackArena &from, const StackSet &state, StackArena &to, StackSet &out) {
  to.clear();
  std::unordered_map<int32_t, int32_t> moved;
  auto copy = [&](auto &&self, int32_t id) -> int32_t {
    if (id < 0) {
      return id;
    }
    if (auto it = moved.find(id); it != moved.end()) {
      return it->second;
    }
    const StackNode &n = from.node(id);
    const int32_t parent = self(self, n.parent);
    const int32_t copied = to.intern(n.pos, parent);
    moved.emplace(id, copied);
    return copied;
  };
  StackSet result;
  result.accepting = state.accepting;
  result.escaped = state.escaped;
  for (int32_t top : state.tops) {
    result.tops.push_back(copy(copy, top));
  }
  out = std::move(result);
}

} // namespace glm::grammar
