// Request preparation: typed request, then prompt token ids, then the engine's sequence request.
#include "server/http/PreparedRequest.h"

#include "base/Hash.h"

#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

namespace glm::server {
namespace {

std::string randomId(const char *prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mutex);
  char hex[25];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFull));
  return std::string(prefix) + hex;
}

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
    if (request.echo) {
      Expected<std::string> text = model.tokenizer->decode(request.promptIds);
      if (!text.ok()) {
        return invalidValue(text.status().message(), "prompt");
      }
      out.reply.echo = std::move(text).value();
    }
    return std::nullopt;
  }
  if (request.echo) {
    out.reply.echo = request.prompt;
  }
  Expected<std::vector<TokenId>> ids = model.tokenizer->encode(request.prompt);
  if (!ids.ok()) {
    return invalidValue(ids.status().message(), "prompt");
  }
  out.sequence.prompt.assign(ids->begin(), ids->end());
  return std::nullopt;
}

/// The sequence's length limits and sampling, the same for both endpoints: the prompt must leave
/// room in the context for max_tokens (absent: all the room there is), for each choice.
std::optional<ApiError> settleSequence(const SamplingOptions &sampling, const char *promptParam,
                                       const ServedModel &model, int64_t maxContext,
                                       const std::string &requestId, runtime::SequenceRequest &s) {
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
  s.sampling.presencePenalty = static_cast<float>(sampling.presencePenalty);
  s.sampling.frequencyPenalty = static_cast<float>(sampling.frequencyPenalty);
  s.sampling.repetitionPenalty = static_cast<float>(sampling.repetitionPenalty);
  s.sampling.logitBias.clear();
  for (const auto &[id, bias] : sampling.logitBias) {
    s.sampling.logitBias.emplace_back(id, static_cast<float>(bias));
  }
  s.sampling.seed = sampling.seed.value_or(requestSeed(requestId));
  s.sampling.logprobs = sampling.logprobs;
  s.n = static_cast<int32_t>(sampling.n);
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
  out.reply.id = randomId(chat ? "chatcmpl-" : "cmpl-");
  out.reply.model = request.model;
  out.reply.stream = request.stream;
  out.reply.includeUsage = request.includeUsage;
  out.reply.stop = request.sampling.stop;
  out.reply.n = static_cast<int>(request.sampling.n);
  out.reply.logprobs = request.sampling.logprobs >= 0;
  if (std::optional<ApiError> error = buildPrompt(request, model, out)) {
    return std::move(*error);
  }
  if (std::optional<ApiError> error =
          settleSequence(request.sampling, chat ? "messages" : "prompt", model, limits.maxContext,
                         out.reply.id, out.sequence)) {
    return std::move(*error);
  }
  return out;
}

} // namespace

uint64_t requestSeed(std::string_view requestId) { return Fnv1a64().add(requestId).value(); }

std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string_view body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits) {
  if (endpoint == Endpoint::ChatCompletions) {
    return prepare(parseChatRequest(body, limits), model, limits);
  }
  return prepare(parseCompletionRequest(body, limits), model, limits);
}

} // namespace glm::server
