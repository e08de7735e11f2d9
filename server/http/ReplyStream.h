// The reply pipeline: generated tokens to visible text, and that text to SSE chunks or a body.
// The text is detokenized, split into reasoning and content, cut at stop strings and searched for
// tool calls; every object written is built by server/openai/Protocol.
#pragma once

#include "base/Status.h"
#include "runtime/api/EngineApi.h"
#include "server/openai/Protocol.h"
#include "server/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {

/// What shapes a reply, as request preparation settles it.
struct ReplyOptions {
  bool chat = false; // chat.completion objects; otherwise text_completion
  /// The response's id ("chatcmpl-..." / "cmpl-..."), taken at preparation: the sampling key of a
  /// request that gives no seed derives from it.
  std::string id;
  std::string model;         // the model name the request gave, echoed in every object
  bool stream = false;       // SSE chunks as the text arrives; otherwise one JSON body at the end
  bool includeUsage = false; // stream_options.include_usage: a last chunk with the usage
  bool startsInReasoning = false; // chat: the prompt leaves the reply inside a think block
  nlohmann::ordered_json tools;   // chat: the tools whose calls are parsed out (null: none)
  std::vector<std::string> stop;  // stop strings, matched against the visible content
  int n = 1;                      // choices, each with its own text, finish and tool calls
  bool logprobs = false;          // every token's logprob and the alternatives the engine gives
  /// Completions with echo: the prompt's text, shown before each choice's (text_offset counts
  /// from its start, as OpenAI's does).
  std::string echo;
};

/// One request's reply, written while the engine generates it, choice by choice. The transport
/// calls begin() at the engine's first output, token() for every token, finish() once for every
/// choice the engine ends, and end() once after the last; each writes through `write`, one call
/// per SSE event, so the client sees each event as soon as it is whole.
class ReplyStream {
public:
  /// Writes bytes to the client; false once the client is gone.
  using Write = std::function<bool(std::string_view)>;

  /// The reply `options` ask for, to a prompt of `promptTokens` tokens; `created` is taken now.
  /// The tokenizer must outlive it.
  static std::unique_ptr<ReplyStream> create(const Tokenizer &tokenizer, ReplyOptions options,
                                             int64_t promptTokens);
  virtual ~ReplyStream() = default;

  /// The first `tokens` tokens of the prompt resumed from a kept state (usage's cached tokens).
  /// At most once, before begin().
  void promptCached(int64_t tokens) { cachedTokens_ = tokens; }
  /// At the engine's first output, a token or an end. False when writing failed.
  virtual bool begin(const Write &write) = 0;
  /// One generated token of choice `choice`. False when writing failed.
  virtual bool token(int choice, const runtime::SampledToken &token, const Write &write) = 0;
  /// The engine ended choice `choice`. False when writing failed.
  virtual bool finish(int choice, runtime::FinishReason reason, const Status &error,
                      const Write &write) = 0;
  /// Whether nothing more the engine generates can show: every choice ended, by the engine or a
  /// stop string, or the engine failed. The engine may stop then.
  virtual bool complete() const = 0;
  /// Once the engine ended every choice: the last chunks (or the whole body), or the engine's
  /// error.
  virtual void end(const Write &write) = 0;
  /// The engine's first error, once it failed the request.
  virtual const std::optional<Status> &engineFailure() const = 0;
  /// Ends a reply the server cuts short (a shutdown's deadline): a stream gets `error` as an
  /// event, every choice still open its finish chunk with finish_reason "length" (the reply is
  /// truncated, as by max_tokens), then [DONE]. A whole reply writes nothing: its handler answers
  /// with the error instead.
  virtual void interrupt(const ApiError &error, const Write &write) = 0;

  /// What the per-request log line tells of the reply: the output tokens its usage counts, and
  /// each choice's end in chat completions' words ("stop", "length", "tool_calls"; "error" once
  /// the engine failed, "cancelled" for a choice that never ended).
  struct Summary {
    int64_t outputTokens = 0;
    std::vector<std::string> finishReasons;
  };
  virtual Summary summary() const = 0;

protected:
  int64_t cachedTokens_ = 0;
};

/// The HTTP error of a request the engine failed: 503 `engine_unavailable` when the engine lost a
/// part it needs (a tensor-parallel rank; the client may retry once /health is ok), 500
/// `engine_error` otherwise.
ApiError engineError(const Status &error);

} // namespace glm::server
