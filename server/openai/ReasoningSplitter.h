// Splitting streamed GLM output into reasoning and content at <think> / </think>.
#pragma once

#include <string>
#include <string_view>

namespace glm::server {

/// GLM's reasoning markers (special tokens of its tokenizer).
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

/// GLM-5.3's generation prompt ends with "<think>", so a reply starts inside the reasoning and
/// leaves it at "</think>" (thinking disabled: the prompt closes the block and the reply is all
/// content). Text arrives in arbitrary pieces; a piece that ends with what may be the start of a
/// marker is held back until the next piece decides. Markers never appear in either output.
/// Only the exact markers count ("</thinking>" is text). Either marker sets the channel, so a
/// "<think>" inside content re-enters reasoning, and a stray "<think>" inside reasoning or a stray
/// "</think>" inside content changes nothing (and is dropped).
class ReasoningSplitter {
public:
  explicit ReasoningSplitter(bool startsInReasoning);

  struct Delta {
    std::string reasoning;
    std::string content;
  };

  /// The reasoning and content that `text` completes.
  Delta feed(std::string_view text);
  /// Whatever was held back, at the end of the reply.
  Delta finish();

  bool inReasoning() const { return inReasoning_; }

private:
  bool inReasoning_;
  std::string pending_;
};

} // namespace glm::server
