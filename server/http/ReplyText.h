// One choice's generated tokens as visible text: detokenized, split into reasoning and content,
// cut at stop strings, tool calls parsed out. Every reply writer (chat, completions, responses,
// Anthropic messages) reads its text through it.
#pragma once

#include "base/Status.h"
#include "server/openai/ReasoningSplitter.h"
#include "server/openai/ToolCallParser.h"
#include "server/tokenizer/StreamingDetokenizer.h"
#include "server/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace glm::server {

/// What settles how one choice's text is read.
struct ReplyTextOptions {
  bool chat = false;              // split reasoning and parse tool calls; otherwise plain text
  bool startsInReasoning = false; // the prompt leaves the reply inside a think block
  nlohmann::ordered_json tools;   // tools whose calls are parsed out (null or empty: none)
  std::vector<std::string> stop;  // stop strings
};

/// Stop strings are matched the way vLLM matches them: against the text the model generates,
/// its reasoning included (vLLM's detokenizer checks its whole output text, and its reasoning
/// parser splits what is left). A stop string inside the think block ends the reply there: the
/// reasoning is cut before it and the reply has no content. Within each part the last (longest
/// stop - 1) bytes are held back, so a stop string split across tokens is still caught; a stop
/// string spanning the end of the think block is not (the marker separates the two parts).
class ReplyText {
public:
  ReplyText(const Tokenizer &tokenizer, const ReplyTextOptions &options, uint64_t idSeed);

  struct Delta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> calls;
    bool stopped = false;   // a stop string ended the reply
    std::string stopString; // which one, when stopped
  };

  /// One generated token's text. `reasoningToken()` then says whether it was generated inside
  /// the think block (the closing marker's token included).
  Expected<Delta> feed(int32_t token);
  /// Whatever is held back, at the end of the reply.
  Expected<Delta> finish();
  /// Whether the last token fed began inside the think block.
  bool reasoningToken() const { return reasoningToken_; }

private:
  Delta route(const std::string &text, bool final);
  /// Moves what `pending` may release to `out`: all of it when `final`, up to a stop string when
  /// one is found (and then `stopped`), else all but the held-back tail.
  void release(std::string &pending, bool final, std::string &out, Delta &delta);

  StreamingDetokenizer detokenizer_;
  bool chat_;
  ReasoningSplitter splitter_;
  ToolCallParser tools_;
  bool parseTools_;
  std::vector<std::string> stop_;
  size_t holdBack_ = 0;
  std::string pendingReasoning_;
  std::string pendingContent_;
  bool stopped_ = false;
  bool reasoningToken_ = false;
};

} // namespace glm::server
