// Request preparation: typed request, then prompt token ids, then the engine's sequence request.
#include "server/http/PreparedRequest.h"

#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

namespace glm::server {
namespace {

ApiError invalidValue(std::string message, const char *param) {
  return ApiError{400, "invalid_request_error", "invalid_value", std::move(message), param};
}

/// A chat request's prompt: its template variables computed and rendered once, then tokenized.
/// The rendering also says whether the reply starts in reasoning.
std::optional<ApiError> buildPrompt(const ChatRequest &request, const ServedModel &model,
                                    PreparedRequest &out) {
  Expected<ChatPrompt> prompt =
      renderChatRequest(*model.chatTemplate, request.body, model.tokenizerConfig);
  if (!prompt.ok()) {
    return invalidValue(prompt.status().message(), "messages");
  }
  Expected<std::vector<TokenId>> ids = model.tokenizer->encode(prompt->text);
  if (!ids.ok()) {
    return invalidValue(ids.status().message(), "messages");
  }
  out.sequence.prompt.assign(ids->begin(), ids->end());
  out.reply.startsInReasoning = !prompt->thinkingDisabled;
  out.reply.tools = request.tools;
  return std::nullopt;
}

/// A completion request's prompt: its token ids as given (each in the vocabulary), or its text
/// tokenized.
std::optional<ApiError> buildPrompt(const CompletionRequest &request, const ServedModel &model,
                                    PreparedRequest &out) {
  if (!request.promptIds.empty()) {
    for (int32_t id : request.promptIds) {
      if (!model.tokenizer->hasId(id)) {
        return invalidValue(strCat("token id ", id, " is not in the vocabulary"), "prompt");
      }
    }
    out.sequence.prompt = request.promptIds;
    return std::nullopt;
  }
  Expected<std::vector<TokenId>> ids = model.tokenizer->encode(request.prompt);
  if (!ids.ok()) {
    return invalidValue(ids.status().message(), "prompt");
  }
  out.sequence.prompt.assign(ids->begin(), ids->end());
  return std::nullopt;
}

/// The sequence's length limits and sampling, the same for both endpoints: the prompt must leave
/// room in the context for max_tokens (absent: all the room there is).
std::optional<ApiError> settleSequence(const SamplingOptions &sampling, const char *promptParam,
                                       const ServedModel &model, int64_t maxContext,
                                       runtime::SequenceRequest &s) {
  const int64_t promptTokens = static_cast<int64_t>(s.prompt.size());
  if (promptTokens == 0) {
    return invalidValue("the prompt is empty", promptParam);
  }
  const int64_t room = maxContext - promptTokens;
  const int64_t maxTokens = sampling.maxTokens.value_or(room);
  if (room < 1 || maxTokens > room) {
    return ApiError{400, "invalid_request_error", "context_length_exceeded",
                    strCat("This model's maximum context length is ", maxContext,
                           " tokens. However, you requested ", promptTokens + maxTokens,
                           " tokens (", promptTokens, " in the prompt, ", maxTokens,
                           " for the completion)."),
                    promptParam};
  }
  s.maxTokens = maxTokens;
  s.minTokens = sampling.minTokens;
  s.ignoreEos = sampling.ignoreEos;
  s.eosIds = model.eosIds;
  s.sampling.temperature = static_cast<float>(sampling.temperature);
  s.sampling.topP = static_cast<float>(sampling.topP);
  s.sampling.topK = static_cast<int32_t>(sampling.topK > 0 ? sampling.topK : 0);
  s.sampling.minP = static_cast<float>(sampling.minP);
  s.sampling.seed = sampling.seed ? *sampling.seed : std::random_device{}();
  return std::nullopt;
}

template <typename Request>
std::variant<PreparedRequest, ApiError> prepare(std::variant<Request, ApiError> parsed,
                                                const ServedModel &model,
                                                const ProtocolLimits &limits) {
  if (ApiError *error = std::get_if<ApiError>(&parsed)) {
    return std::move(*error);
  }
  const Request &request = std::get<Request>(parsed);
  constexpr bool chat = std::is_same_v<Request, ChatRequest>;
  PreparedRequest out;
  out.reply.chat = chat;
  out.reply.model = request.model;
  out.reply.stream = request.stream;
  out.reply.includeUsage = request.includeUsage;
  out.reply.stop = request.sampling.stop;
  if (std::optional<ApiError> error = buildPrompt(request, model, out)) {
    return std::move(*error);
  }
  if (std::optional<ApiError> error = settleSequence(request.sampling, chat ? "messages" : "prompt",
                                                     model, limits.maxContext, out.sequence)) {
    return std::move(*error);
  }
  return out;
}

} // namespace

std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string_view body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits) {
  if (endpoint == Endpoint::ChatCompletions) {
    return prepare(parseChatRequest(body, limits), model, limits);
  }
  return prepare(parseCompletionRequest(body, limits), model, limits);
}

} // namespace glm::server
