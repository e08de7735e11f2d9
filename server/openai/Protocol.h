// The OpenAI wire protocol: typed, validated requests and the JSON of responses, stream chunks
// and errors (reference/server.md §1). No HTTP here: server/http calls these.
#pragma once

#include "server/openai/ConstraintFields.h"
#include "server/openai/ToolCallParser.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

/// The 400s about a request's field, worded as OpenAI's (every front end uses them: a Responses
/// or Messages request's errors name its own paths in the same words). `param` is the field's
/// path, e.g. "messages[2].content[0].text".
ApiError fieldTypeError(const std::string &param, std::string_view expected,
                        const nlohmann::ordered_json &got);
ApiError fieldValueError(const std::string &param, std::string_view detail);
ApiError fieldMissing(const std::string &param);
/// A value understood and refused: ignoring it would change what the client gets without telling
/// it (server.md §0 item 3, §1.1).
ApiError fieldUnsupported(const std::string &param, std::string_view detail);
/// "a boolean", "a number", "a string", "an array", "an object" or "null".
std::string_view jsonTypeName(const nlohmann::ordered_json &value);

/// The most choices a request may ask for (OpenAI's bound on `n`; the engine may allow fewer).
inline constexpr int64_t kMaxChoices = 128;

/// Sampling and stopping, as both endpoints accept them (OpenAI fields and vLLM's extensions).
struct SamplingOptions {
  double temperature = 1.0;
  double topP = 1.0;
  int64_t topK = 0; // 0: off (vLLM's -1 also means off)
  double minP = 0.0;
  double presencePenalty = 0.0;   // [-2, 2]
  double frequencyPenalty = 0.0;  // [-2, 2]
  double repetitionPenalty = 1.0; // > 0 (vLLM); 1: off
  /// logit_bias: token id -> bias in [-100, 100], distinct ids, in the body's order.
  std::vector<std::pair<int32_t, double>> logitBias;
  std::optional<uint64_t> seed;
  std::optional<int64_t> maxTokens; // max_tokens / max_completion_tokens; absent: up to the context
  int64_t minTokens = 0;
  bool ignoreEos = false;
  /// glmc's `draft`: false decodes one token a step, without speculative drafts (the serial
  /// reference a drafted reply must equal, token for token).
  bool draft = true;
  std::vector<std::string> stop; // at most 8 strings, each non-empty
  int64_t n = 1;                 // choices, 1 .. kMaxChoices
  /// -1: no logprobs; k in [0, 20]: each token's logprob and its k most likely alternatives
  /// (chat: logprobs true with top_logprobs k; completions: logprobs k).
  int32_t logprobs = -1;
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
  /// Structured outputs: what the reply (after its reasoning) must be; kind None: free text.
  OutputConstraint constraint;
  /// tool_choice. Required and Named force the reply (after its reasoning) to be GLM tool calls
  /// of the tools (Named: of `toolChoiceName` only) with arguments that satisfy their schemas;
  /// they exclude `constraint`.
  ToolChoice toolChoice = ToolChoice::Auto;
  std::string toolChoiceName;
  /// parallel_tool_calls: false allows one call where calls are forced.
  bool parallelToolCalls = true;
};

struct CompletionRequest {
  std::string model;
  std::string prompt;             // a string prompt, or
  std::vector<int32_t> promptIds; // a token-id prompt (exactly one of the two is set)
  bool stream = false;
  bool includeUsage = false;
  bool echo = false;
  SamplingOptions sampling;
  OutputConstraint constraint; // structured outputs (vLLM's fields, response_format)
};

/// Parses and validates a request body. Every error is a 400 `invalid_request_error` naming the
/// `param` (malformed JSON with its position, wrong types, NaN/Inf, out-of-range values,
/// unsupported fields such as best_of or prompt logprobs), or 404 `model_not_found`. Constraint
/// fields are read into `constraint` (their schemas compile later, PreparedRequest). Unknown other
/// fields are ignored.
std::variant<ChatRequest, ApiError> parseChatRequest(std::string_view body,
                                                     const ProtocolLimits &limits);
std::variant<CompletionRequest, ApiError> parseCompletionRequest(std::string_view body,
                                                                 const ProtocolLimits &limits);

struct Usage {
  int64_t promptTokens = 0;
  int64_t completionTokens = 0; // over every choice
  /// Of the prompt tokens, those resumed from a kept prompt state instead of prefilled
  /// (prompt_tokens_details.cached_tokens); the choices share the prompt, so counted once.
  int64_t cachedTokens = 0;
};

/// A token as logprobs show it: its text (the token's bytes decoded alone, a partial UTF-8
/// sequence replaced as any decode does), its bytes (none for an id without a token), its
/// log-probability (non-finite ones are written as OpenAI's -9999.0, "very unlikely").
struct TokenText {
  std::string token;
  std::optional<std::string> bytes;
  float logprob = 0.0f;
};

/// One generated token's logprobs: the sampled token, the most likely alternatives (most likely
/// first), and where its text starts in the choice's text, in code points (completions'
/// text_offset).
struct TokenLogprobs {
  TokenText sampled;
  std::vector<TokenText> top;
  int64_t textOffset = 0;
};

/// A chat choice's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob,
/// bytes}]}], "refusal": null}.
nlohmann::ordered_json chatLogprobsJson(const std::vector<TokenLogprobs> &tokens);
/// A completion choice's logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"},
/// each top_logprobs entry an object token -> logprob that holds the sampled token too (OpenAI:
/// "up to logprobs+1 elements"). Tokens whose texts coincide keep the first, most likely, one.
nlohmann::ordered_json completionLogprobsJson(const std::vector<TokenLogprobs> &tokens);

/// One choice of a chat.completion; its index is its place in the list.
struct ChatChoice {
  std::string content;
  std::optional<std::string> reasoning;
  std::vector<ToolCall> toolCalls;
  std::string finishReason = "stop"; // "stop", "length" or "tool_calls"
  nlohmann::ordered_json logprobs;   // chatLogprobsJson, or null when not asked for
};

nlohmann::ordered_json chatCompletionJson(const std::string &id, int64_t created,
                                          const std::string &model,
                                          const std::vector<ChatChoice> &choices,
                                          const Usage &usage);

/// One chat.completion.chunk for the choice `index` (a stream of n choices interleaves them, one
/// choice a chunk, as OpenAI's): `delta` holds role / content / reasoning_content + reasoning /
/// tool_calls (each call whole, with its index); finish_reason null until the choice's last
/// chunk; logprobs those of the tokens the chunk carries (null: none); usage (when given) only in
/// the final usage chunk, whose choices are empty.
nlohmann::ordered_json chatCompletionChunkJson(const std::string &id, int64_t created,
                                               const std::string &model, int64_t index,
                                               const nlohmann::ordered_json &delta,
                                               const std::optional<std::string> &finishReason,
                                               const nlohmann::ordered_json &logprobs = nullptr);
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

/// One choice of a text_completion; its index is its place in the list.
struct CompletionChoice {
  std::string text;
  std::string finishReason = "stop"; // "stop" or "length"
  nlohmann::ordered_json logprobs;   // completionLogprobsJson, or null when not asked for
};

nlohmann::ordered_json completionJson(const std::string &id, int64_t created,
                                      const std::string &model,
                                      const std::vector<CompletionChoice> &choices,
                                      const Usage &usage);
/// One streamed text_completion for the choice `index`, shaped as the whole object (OpenAI's
/// rule); logprobs those of the tokens it carries (null: none).
nlohmann::ordered_json completionChunkJson(const std::string &id, int64_t created,
                                           const std::string &model, int64_t index,
                                           const std::string &text,
                                           const std::optional<std::string> &finishReason,
                                           const nlohmann::ordered_json &logprobs = nullptr);

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
