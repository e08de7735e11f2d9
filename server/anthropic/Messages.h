// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens): a request translated into a
// chat-completions body (the server runs every generation as a chat), the message object, its
// content blocks and usage, and errors in Anthropic's shape.
#pragma once

#include "server/openai/Protocol.h"
#include "server/openai/ToolCallParser.h"
#include "server/openai/Translation.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace glm::server::anthropic {

/// A Messages request, translated.
struct MessagesRequest {
  /// The chat-completions body that runs it: system and messages (tool_use blocks as tool calls,
  /// tool_result blocks as tool messages, thinking blocks as reasoning_content), tools,
  /// tool_choice, max_tokens, stop, sampling, and thinking as enable_thinking. No stream flag.
  nlohmann::ordered_json chatBody;
  ParamMap params; // the chat body's paths back to the request's
  std::string model;
  bool stream = false;
  /// thinking: {type: "enabled", budget_tokens}: the think block's most tokens (the server
  /// closes it there, ThinkingBudget); none for adaptive or disabled thinking.
  std::optional<int64_t> thinkingBudget;
};

/// Validates and translates a /v1/messages body (`countTokens`: a /v1/messages/count_tokens
/// one, which has no max_tokens and no sampling). Errors name the request's own fields
/// (`messages[1].content[0].tool_use_id`). A thinking block sent back is read whatever its
/// signature (ThinkingSignature.h says why); redacted_thinking blocks are dropped: they hold
/// another model's encrypted reasoning, which nothing here can read.
std::variant<MessagesRequest, ApiError> parseMessagesRequest(std::string_view body,
                                                             bool countTokens);

/// Anthropic's error object {"type": "error", "error": {"type", "message"}}, its type from the
/// HTTP status (400 invalid_request_error, 401 authentication_error, 404 not_found_error, 413
/// request_too_large, 429 rate_limit_error, 500 api_error, 503 overloaded_error...).
nlohmann::ordered_json errorJson(const ApiError &error);

/// Anthropic counts the prompt in parts: input_tokens are the ones processed anew, and
/// cache_read_input_tokens those read from a cache (a kept prompt state here); their sum is the
/// prompt.
struct MessagesUsage {
  int64_t inputTokens = 0; // uncached prompt tokens
  int64_t outputTokens = 0;
  int64_t cacheReadInputTokens = 0;
};
nlohmann::ordered_json usageJson(const MessagesUsage &usage);

/// Content blocks.
/// A thinking block with its signature (ThinkingSigner::sign of the text; "" while streamed,
/// the signature_delta carries it).
nlohmann::ordered_json thinkingBlockJson(const std::string &thinking, const std::string &signature);
nlohmann::ordered_json textBlockJson(const std::string &text);
/// tool_use with the call's arguments as its input object; its id "toolu_..." from the call's.
nlohmann::ordered_json toolUseBlockJson(const ToolCall &call);

/// The message object; stop_reason "end_turn", "max_tokens", "stop_sequence" (with
/// stop_sequence) or "tool_use"; null ones while it is being streamed.
nlohmann::ordered_json messageJson(const std::string &id, const std::string &model,
                                   const nlohmann::ordered_json &content,
                                   const nlohmann::ordered_json &stopReason,
                                   const nlohmann::ordered_json &stopSequence,
                                   const MessagesUsage &usage);

} // namespace glm::server::anthropic
