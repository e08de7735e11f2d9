// Request preparation: typed request, then prompt token ids, then the engine's sequence request.
#include "server/http/PreparedRequest.h"

#include "base/Hash.h"
#include "server/http/StructuredRequest.h"

#include <algorithm>
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

/// The text counted at a time: a chunk's tokens and the tokenizer's work on it stay small, and
/// counting stops within a chunk of the window, whatever the body's size.
constexpr size_t kCountChunkBytes = 64 << 10;
/// How far a chunked count may be off the whole text's at each cut: a cut falls between a letter
/// or digit and a space before another, a boundary of GLM's pre-tokenizer (so none, there), but a
/// text without such a place is cut anywhere, splitting one pre-token.
constexpr int64_t kSlackPerCut = 8;

bool isAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/// Where to end the chunk of `text` that starts at `from`: within kCountChunkBytes, at "x| y"
/// (x, y letters or digits) outside every added token, else at a UTF-8 boundary.
size_t chunkEnd(std::string_view text, size_t from, const Tokenizer &tokenizer) {
  if (text.size() - from <= kCountChunkBytes) {
    return text.size();
  }
  const size_t limit = from + kCountChunkBytes;
  auto insideAddedToken = [&](size_t at) {
    for (const AddedToken &t : tokenizer.addedTokens()) {
      const size_t n = t.content.size();
      if (n < 2) {
        continue;
      }
      const size_t begin = at >= n - 1 ? at - (n - 1) : 0;
      const size_t found = text.substr(begin, 2 * n - 1).find(t.content);
      if (found != std::string_view::npos && begin + found < at && begin + found + n > at) {
        return true;
      }
    }
    return false;
  };
  for (size_t at = limit; at > from + kCountChunkBytes / 2; --at) {
    if (text[at] == ' ' && isAlnum(text[at - 1]) && at + 1 < text.size() && isAlnum(text[at + 1]) &&
        !insideAddedToken(at)) {
      return at;
    }
  }
  size_t at = limit;
  while (at > from + 1 && (static_cast<uint8_t>(text[at]) & 0xC0) == 0x80) {
    --at; // never inside a UTF-8 sequence
  }
  return at;
}

} // namespace

Expected<std::optional<std::vector<TokenId>>>
encodeWithin(const Tokenizer &tokenizer, std::string_view text, int64_t limit, int64_t &atLeast) {
  if (limit > 0 && text.size() > kCountChunkBytes) {
    int64_t counted = 0, cuts = 0;
    for (size_t from = 0; from < text.size(); ++cuts) {
      const size_t end = chunkEnd(text, from, tokenizer);
      GLM_ASSIGN_OR_RETURN(std::vector<TokenId> ids,
                           tokenizer.encode(text.substr(from, end - from)));
      counted += static_cast<int64_t>(ids.size());
      from = end;
      if (counted - kSlackPerCut * cuts > limit) {
        atLeast = counted - kSlackPerCut * cuts;
        return std::optional<std::vector<TokenId>>();
      }
    }
  }
  GLM_ASSIGN_OR_RETURN(std::vector<TokenId> ids, tokenizer.encode(text));
  return std::optional<std::vector<TokenId>>(std::move(ids));
}

namespace {

/// The most prompt tokens a request may have: the context less the room its completion needs.
int64_t promptLimit(const SamplingOptions &sampling, int64_t maxContext) {
  return maxContext <= 0 ? 0 : maxContext - std::max<int64_t>(1, sampling.maxTokens.value_or(1));
}

ApiError promptTooLong(int64_t maxContext, int64_t atLeast, const char *param) {
  return ApiError{400, "invalid_request_error", "context_length_exceeded",
                  strCat("This model's maximum context length is ", maxContext,
                         " tokens. However, your prompt alone has more than ", atLeast, " tokens."),
                  param};
}

/// A chat request's prompt: its template variables computed and rendered once, then tokenized.
/// The rendering also says whether the reply starts in reasoning.
std::optional<ApiError> buildPrompt(const ChatRequest &request, const ServedModel &model,
                                    int64_t maxContext, PreparedRequest &out) {
  Expected<ChatPrompt> prompt =
      renderChatRequest(*model.chatTemplate, request.body, model.tokenizerConfig);
  if (!prompt.ok()) {
    return invalidValue(prompt.status().message(), "messages");
  }
  int64_t atLeast = 0;
  Expected<std::optional<std::vector<TokenId>>> ids = encodeWithin(
      *model.tokenizer, prompt->text, promptLimit(request.sampling, maxContext), atLeast);
  if (!ids.ok()) {
    return invalidValue(ids.status().message(), "messages");
  }
  if (!*ids) {
    return promptTooLong(maxContext, atLeast, "messages");
  }
  out.sequence.prompt.assign((*ids)->begin(), (*ids)->end());
  out.reply.startsInReasoning = !prompt->thinkingDisabled;
  out.reply.tools = request.tools;
  return std::nullopt;
}

/// A completion request's prompt: its token ids as given (each in the vocabulary), or its text
/// tokenized.
std::optional<ApiError> buildPrompt(const CompletionRequest &request, const ServedModel &model,
                                    int64_t maxContext, PreparedRequest &out) {
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
  int64_t atLeast = 0;
  Expected<std::optional<std::vector<TokenId>>> ids = encodeWithin(
      *model.tokenizer, request.prompt, promptLimit(request.sampling, maxContext), atLeast);
  if (!ids.ok()) {
    return invalidValue(ids.status().message(), "prompt");
  }
  if (!*ids) {
    return promptTooLong(maxContext, atLeast, "prompt");
  }
  if (request.echo) {
    out.reply.echo = request.prompt;
  }
  out.sequence.prompt.assign((*ids)->begin(), (*ids)->end());
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
  s.draft = sampling.draft;
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
  if (std::optional<ApiError> error = buildPrompt(request, model, limits.maxContext, out)) {
    return std::move(*error);
  }
  if (std::optional<ApiError> error =
          settleSequence(request.sampling, chat ? "messages" : "prompt", model, limits.maxContext,
                         out.reply.id, out.sequence)) {
    return std::move(*error);
  }
  if (std::optional<grammar::ConstraintSpec> spec = constraintSpec(request)) {
    if (!model.structured) {
      return ApiError{400, "invalid_request_error", "unsupported_value",
                      "structured outputs are not available on this server", spec->path};
    }
    if (std::optional<ApiError> error =
            attachConstraint(*spec, *model.structured, *model.tokenizer,
                             out.reply.startsInReasoning, out.sequence)) {
      return std::move(*error);
    }
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

std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string &&body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits) {
  if (endpoint == Endpoint::ChatCompletions) {
    std::variant<ChatRequest, ApiError> parsed = parseChatRequest(body, limits);
    std::string().swap(body);
    return prepare(std::move(parsed), model, limits);
  }
  std::variant<CompletionRequest, ApiError> parsed = parseCompletionRequest(body, limits);
  std::string().swap(body);
  return prepare(std::move(parsed), model, limits);
}

} // namespace glm::server
