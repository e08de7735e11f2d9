// The reply pipeline: generated tokens to visible text, and that text to SSE chunks or a body.
// The text is detokenized, split into reasoning and content, cut at stop strings and searched for
// tool calls; every object written is built by server/openai/Protocol.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
#include "server/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

/// What shapes a reply, as request preparation settles it.
struct ReplyOptions {
  bool chat = false;         // chat.completion objects; otherwise text_completion
  std::string model;         // the model name the request gave, echoed in every object
  bool stream = false;       // SSE chunks as the text arrives; otherwise one JSON body at the end
  bool includeUsage = false; // stream_options.include_usage: a last chunk with the usage
  bool startsInReasoning = false; // chat: the prompt leaves the reply inside a think block
  nlohmann::ordered_json tools;   // chat: the tools whose calls are parsed out (null: none)
  std::vector<std::string> stop;  // stop strings, matched against the visible content
};

/// How the engine ended a request's generation.
struct GenerationEnd {
  runtime::FinishReason reason = runtime::FinishReason::Stop;
  Status error; // with FinishReason::Error
  int64_t completionTokens = 0;
};

/// One request's reply, written while the engine generates it. The transport calls begin() at
/// the engine's first output, token() for every token, and end() once; each writes through
/// `write`, one call per SSE event, so the client sees each event as soon as it is whole.
class ReplyStream {
public:
  /// Writes bytes to the client; false once the client is gone.
  using Write = std::function<bool(std::string_view)>;

  /// The reply `options` ask for, to a prompt of `promptTokens` tokens. Its id and `created` are
  /// taken now. The tokenizer must outlive it.
  static std::unique_ptr<ReplyStream> create(const Tokenizer &tokenizer, ReplyOptions options,
                                             int64_t promptTokens);
  virtual ~ReplyStream() = default;

  /// At the engine's first output, a token or the end. False when writing failed.
  virtual bool begin(const Write &write) = 0;
  /// One generated token. False when writing failed.
  virtual bool token(int32_t token, const Write &write) = 0;
  /// Whether a stop string has ended the visible reply (the engine may stop generating).
  virtual bool stopped() const = 0;
  /// The rest of the text and the last chunks (or the whole body), or the engine's error.
  virtual void end(const GenerationEnd &end, const Write &write) = 0;
};

} // namespace glm::server
