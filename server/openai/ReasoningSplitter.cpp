// Splitting streamed GLM output into reasoning and content at <think> / </think>.
#include "server/openai/ReasoningSplitter.h"

#include <algorithm>

namespace glm::server {
namespace {

constexpr std::string_view kOpen = kThinkOpen;
constexpr std::string_view kClose = kThinkClose;

/// The length of the longest suffix of `text` that is a proper prefix of a marker: text that the
/// next piece may turn into a marker, so it cannot be emitted yet.
size_t partialMarkerLength(std::string_view text) {
  size_t longest = std::max(kOpen.size(), kClose.size()) - 1;
  for (size_t n = std::min(text.size(), longest); n > 0; --n) {
    std::string_view tail = text.substr(text.size() - n);
    if ((n < kOpen.size() && kOpen.starts_with(tail)) ||
        (n < kClose.size() && kClose.starts_with(tail))) {
      return n;
    }
  }
  return 0;
}

} // namespace

ReasoningSplitter::ReasoningSplitter(bool startsInReasoning) : inReasoning_(startsInReasoning) {}

ReasoningSplitter::Delta ReasoningSplitter::feed(std::string_view text) {
  Delta out;
  pending_.append(text);
  std::string_view rest = pending_;
  while (true) {
    std::string &channel = inReasoning_ ? out.reasoning : out.content;
    // The two markers cannot start at the same place ("<t" vs "</"), so the earlier one is the
    // one the text meets first.
    size_t open = rest.find(kOpen);
    size_t close = rest.find(kClose);
    if (open == std::string_view::npos && close == std::string_view::npos) {
      size_t keep = partialMarkerLength(rest);
      channel.append(rest.substr(0, rest.size() - keep));
      rest.remove_prefix(rest.size() - keep);
      break;
    }
    bool opens = open < close;
    size_t at = opens ? open : close;
    channel.append(rest.substr(0, at));
    rest.remove_prefix(at + (opens ? kOpen : kClose).size());
    inReasoning_ = opens;
  }
  // `rest` views the tail of pending_; move it to the front before pending_ changes.
  pending_.erase(0, pending_.size() - rest.size());
  return out;
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
  Delta out;
  // Nothing more can complete a held-back partial marker, so it was text after all.
  (inReasoning_ ? out.reasoning : out.content) = std::move(pending_);
  pending_.clear();
  return out;
}

} // namespace glm::server
