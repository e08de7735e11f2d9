// Request preparation for both generation endpoints: body to typed request to prompt tokens.
// The body is parsed through server/openai/Protocol, the chat template rendered once, the prompt
// checked against the context; the result is ready for the engine and the reply.
#pragma once

#include "runtime/api/EngineApi.h"
#include "server/chat/ChatPrompt.h"
#include "server/chat/ChatTemplate.h"
#include "server/http/ReplyStream.h"
#include "server/openai/Protocol.h"
#include "server/tokenizer/Tokenizer.h"

#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

namespace glm::server {

/// What the server needs of the model directory.
struct ServedModel {
  const Tokenizer *tokenizer = nullptr;
  const ChatTemplate *chatTemplate = nullptr;
  ChatTokenizerConfig tokenizerConfig;
  std::vector<int32_t> eosIds;
};

enum class Endpoint { ChatCompletions, Completions };

/// A generation request ready to run: the engine's part and the reply's.
struct PreparedRequest {
  runtime::SequenceRequest sequence;
  ReplyOptions reply;
};

/// The sampling key of a request that gives no seed: base/Hash.h's FNV-1a of its response id. Every
/// request has a key, and one without a seed can still be replayed from its id alone: sent again
/// with seed = requestSeed(id), it draws the same tokens.
uint64_t requestSeed(std::string_view requestId);

/// Parses `body` as the endpoint's request and builds its prompt. Every error is the client's
/// (400, or 404 for an unknown model): malformed or unsupported fields, a chat template or
/// tokenizer failure, an empty prompt, a prompt plus max_tokens beyond `limits.maxContext`.
std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string_view body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits);

} // namespace glm::server
