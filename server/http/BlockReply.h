// A one-choice reply read as a sequence of blocks (reasoning, text, tool calls), the form both
// the Responses API's output items and Anthropic's content blocks take. Subclasses write each
// block's opening, text and closing in their own wire shape.
#pragma once

#include "server/http/ReplyStream.h"
#include "server/http/ReplyText.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

class BlockReply : public ReplyStream {
public:
  enum class Kind { Reasoning, Text, ToolCall };
  struct Block {
    Kind kind = Kind::Text;
    std::string text; // reasoning or text so far
    ToolCall call;    // a tool call, whole
    bool open = true;
  };

  BlockReply(const Tokenizer &tokenizer, const ReplyTextOptions &text, int64_t promptTokens);

  bool token(int choice, const runtime::SampledToken &token, const Write &write) final;
  bool finish(int choice, runtime::FinishReason reason, const Status &error,
              const Write &write) final;
  bool complete() const final { return ended_ || error_.has_value(); }
  const std::optional<Status> &engineFailure() const final { return error_; }
  Summary summary() const final;

protected:
  /// blocks_[index] opened: empty for reasoning and text, whole for a tool call.
  virtual bool opened(size_t index, const Write &write) = 0;
  /// More text of the open reasoning or text block blocks_[index] (already appended).
  virtual bool extended(size_t index, std::string_view text, const Write &write) = 0;
  /// blocks_[index] is complete.
  virtual bool closed(size_t index, const Write &write) = 0;

  /// How the reply ended, once complete(): by a tool call, by a stop string (stopString_), by
  /// the token budget, or by the model.
  enum class End { Model, StopString, Length, ToolCalls };
  End end_ = End::Model;
  std::string stopString_;
  std::vector<Block> blocks_;
  const int64_t promptTokens_;
  int64_t tokens_ = 0;          // output tokens shown (a stop string's cut ends the count)
  int64_t reasoningTokens_ = 0; // of which generated inside the think block
  bool ended_ = false;
  std::optional<Status> error_;

private:
  bool deliver(const ReplyText::Delta &d, const Write &write);
  bool closeOpen(const Write &write);
  bool close(runtime::FinishReason reason, const Write &write);

  ReplyText text_;
  /// Whitespace after the last block, written only once text follows it: GLM writes "\n"
  /// before a tool call and at the end, which would otherwise open a text block of its own.
  std::string pendingSpace_;
  bool calls_ = false;
};

} // namespace glm::server
