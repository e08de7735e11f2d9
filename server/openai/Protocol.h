// The OpenAI wire protocol: typed, validated requests and the JSON of responses, stream chunks
// and errors (reference/server.md §1). No HTTP here: server/http calls these.
#pragma once

#include "server/openai/ToolCallParser.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace glm::server {

/// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with a string code.
struct ApiError {
  int status = 400; // HTTP status
  std::string type = "invalid_request_error";
  std::string code; // "invalid_json", "invalid_type", "invalid_value",
                    // "missing_required_parameter", "unsupported_parameter", "unsupported_value",
                    // "context_length_exceeded", "model_not_found", ...; empty becomes null
  std::string message;
  std::optional<std::string> param; // the request field at fault, when there is one

  nlohmann::ordered_json toJson() const;
};

/// Sampling and stopping, as both endpoints accept them (OpenAI fields and vLLM's extensions).
struct SamplingOptions {
  double temperature = 1.0;
  double topP = 1.0;
  int64_t topK = 0; // 0: off (vLLM's -1 also means off)
  double minP = 0.0;
  std::optional<uint64_t> seed;
  std::optional<int64_t> maxTokens; // max_tokens / max_completion_tokens; absent: up to the context
  int64_t minTokens = 0;
  bool ignoreEos = false;
  std::vector<std::string> stop; // at most 8 strings, each non-empty
};

/// What the server limits, for validation.
struct ProtocolLimits {
  std::vector<std::string> modelNames; // served names; a request naming another model is 404
  int64_t maxContext = 0;              // tokens; max_tokens beyond it is 400 (0: unchecked)
};

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json body; // the whole request (messages, tools, reasoning_effort,
                               // chat_template_kwargs...) for the chat template
  bool stream = false;
  bool includeUsage = false; // stream_options.include_usage
  SamplingOptions sampling;
  nlohmann::ordered_json tools; // the tools array, for the tool-call parser: null if none, or
                                // if tool_choice is "none" (the template still sees them in body)
};

struct CompletionRequest {
  std::string model;
  std::string prompt;             // a string prompt, or
  std::vector<int32_t> promptIds; // a token-id prompt (exactly one of the two is set)
  bool stream = false;
  bool includeUsage = false;
  bool echo = false;
  SamplingOptions sampling;
};

/// Parses and validates a request body. Every error is a 400 `invalid_request_error` naming the
/// `param` (malformed JSON with its position, wrong types, NaN/Inf, out-of-range values, n != 1,
/// logprobs, unsupported constraint fields such as response_format json_schema/guided_*), or 404
/// `model_not_found`. Unknown other fields are ignored.
std::variant<ChatRequest, ApiError> parseChatRequest(std::string_view body,
                                                     const ProtocolLimits &limits);
std::variant<CompletionRequest, ApiError> parseCompletionRequest(std::string_view body,
                                                                 const ProtocolLimits &limits);

struct Usage {
  int64_t promptTokens = 0;
  int64_t completionTokens = 0;
};

/// finish_reason: "stop", "length" or "tool_calls".
nlohmann::ordered_json chatCompletionJson(const std::string &id, int64_t created,
                                          const std::string &model, const std::string &content,
                                          const std::optional<std::string> &reasoning,
                                          const std::vector<ToolCall> &toolCalls,
                                          const std::string &finishReason, const Usage &usage);

/// One chat.completion.chunk: `delta` holds role / content / reasoning_content + reasoning /
/// tool_calls (each call whole, with its index); finish_reason null until the last chunk; usage
/// (when given) only in the final usage chunk, whose choices are empty.
nlohmann::ordered_json chatCompletionChunkJson(const std::string &id, int64_t created,
                                               const std::string &model,
                                               const nlohmann::ordered_json &delta,
                                               const std::optional<std::string> &finishReason);
/// A chunk's delta: `role: "assistant"` (with `content: ""` when no content is given, as vLLM's
/// first chunk), reasoning as both reasoning_content and reasoning, content, and whole tool calls
/// ({index, id, type, function {name, arguments}}) numbered from `firstToolIndex`. Only what is
/// given appears.
nlohmann::ordered_json chatDeltaJson(bool role, const std::optional<std::string> &content,
                                     const std::optional<std::string> &reasoning,
                                     const std::vector<ToolCall> &toolCalls = {},
                                     int64_t firstToolIndex = 0);
nlohmann::ordered_json chatUsageChunkJson(const std::string &id, int64_t created,
                                          const std::string &model, const Usage &usage);

nlohmann::ordered_json completionJson(const std::string &id, int64_t created,
                                      const std::string &model, const std::string &text,
                                      const std::string &finishReason, const Usage &usage);
nlohmann::ordered_json completionChunkJson(const std::string &id, int64_t created,
                                           const std::string &model, const std::string &text,
                                           const std::optional<std::string> &finishReason);

/// The last chunk of a completions stream with stream_options.include_usage: empty choices.
nlohmann::ordered_json completionUsageChunkJson(const std::string &id, int64_t created,
                                                const std::string &model, const Usage &usage);

/// The `created` of responses, chunks and models: seconds since the Unix epoch, now.
int64_t unixSeconds();

/// GET /v1/models, and GET /v1/models/{model} for one of them.
nlohmann::ordered_json modelsJson(const std::vector<std::string> &names, int64_t created);
nlohmann::ordered_json modelJson(const std::string &name, int64_t created);

/// "data: <json>\n\n", and the stream's end.
std::string sseData(const nlohmann::ordered_json &json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

} // namespace glm::server
