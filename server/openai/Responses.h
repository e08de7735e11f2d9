// OpenAI's Responses API (/v1/responses): a request translated into a chat-completions body (the
// server runs every generation as a chat), the response object and its items, and the bounded
// in-memory store behind previous_response_id and GET /v1/responses/{id}.
#pragma once

#include "server/openai/Protocol.h"
#include "server/openai/ToolCallParser.h"
#include "server/openai/Translation.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

namespace glm::server {

/// A Responses request, translated.
struct ResponsesRequest {
  /// The chat-completions body that runs it: messages from instructions, the previous
  /// response's conversation and `input`; tools, tool_choice, max_tokens, sampling,
  /// reasoning_effort, response_format (from text.format). No stream flag: the reply is ours.
  nlohmann::ordered_json chatBody;
  ParamMap params; // the chat body's paths back to the request's
  bool stream = false;
  bool store = true;
  /// include: ["reasoning.encrypted_content"]: reasoning items carry their text there too, for
  /// clients that keep no state on the server (store: false) and send the items back.
  bool encryptedReasoning = false;
  /// The conversation so far as Responses items (the previous response's, then this input): a
  /// stored response keeps it, with its output, for the next previous_response_id.
  nlohmann::ordered_json conversation;
  /// The fields of the response object that the request settles (instructions, tools,
  /// tool_choice, temperature, top_p, max_output_tokens, reasoning, text, store, metadata...).
  nlohmann::ordered_json echo;
};

/// A stored response's conversation (its input items, then its output), or nullopt if none is
/// kept under that id.
using ConversationLookup =
    std::function<std::optional<nlohmann::ordered_json>(const std::string &id)>;

/// Validates and translates a /v1/responses body. Errors name the request's own fields
/// (`input[2].content[0].text`); a previous_response_id the store lacks is 400
/// `previous_response_not_found`. The model name and the sampling ranges are checked when the
/// chat body is parsed (map its errors with `params`).
std::variant<ResponsesRequest, ApiError> parseResponsesRequest(std::string_view body,
                                                               const ConversationLookup &lookup);

/// Responses' usage: input/output tokens, the reasoning tokens among the output, cached input.
struct ResponsesUsage {
  int64_t inputTokens = 0;
  int64_t outputTokens = 0;
  int64_t reasoningTokens = 0;
  int64_t cachedTokens = 0;
};
nlohmann::ordered_json responsesUsageJson(const ResponsesUsage &usage);

/// Output items. `status` is "in_progress", "completed" or "incomplete".
nlohmann::ordered_json reasoningItemJson(const std::string &id, const std::string &text,
                                         const std::string &status, bool encrypted);
nlohmann::ordered_json messageItemJson(const std::string &id, const std::string &text,
                                       const std::string &status);
nlohmann::ordered_json functionCallItemJson(const std::string &id, const ToolCall &call,
                                            const std::string &status);

/// The response object: `echo`'s fields with the id, times, status ("in_progress",
/// "completed", "incomplete", "failed"), output, usage (absent while in progress) and, for an
/// incomplete one, incomplete_details {reason: "max_output_tokens"}; `error` for a failed one.
nlohmann::ordered_json responseJson(const nlohmann::ordered_json &echo, const std::string &id,
                                    int64_t createdAt, const std::string &status,
                                    const nlohmann::ordered_json &output,
                                    const std::optional<ResponsesUsage> &usage,
                                    const std::optional<ApiError> &error = std::nullopt);

/// 404 for GET /v1/responses/{id} of one not kept.
ApiError responseNotFound(const std::string &id);

/// Responses kept in memory for GET and previous_response_id, bounded in count and bytes; the
/// least recently used go first. Thread-safe.
class ResponseStore {
public:
  ResponseStore(size_t maxResponses, size_t maxBytes);

  /// Keeps `response` (the object GET returns) and `conversation` (the items a follow-up
  /// continues from). One larger than the whole budget is not kept.
  void put(const std::string &id, nlohmann::ordered_json response,
           nlohmann::ordered_json conversation);
  std::optional<nlohmann::ordered_json> response(const std::string &id);
  std::optional<nlohmann::ordered_json> conversation(const std::string &id);

  size_t size() const;
  size_t bytes() const;

private:
  struct Entry {
    std::string id;
    nlohmann::ordered_json response;
    nlohmann::ordered_json conversation;
    size_t bytes = 0;
  };
  Entry *find(const std::string &id); // moves it to the front

  const size_t maxResponses_;
  const size_t maxBytes_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_; // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

} // namespace glm::server
