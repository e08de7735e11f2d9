// Request preparation for both generation endpoints: body to typed request to prompt tokens.
// The body is parsed through server/openai/Protocol, the chat template rendered once, the prompt
// checked against the context; the result is ready for the engine and the reply.
#pragma once

#include "runtime/api/EngineApi.h"
#include "server/chat/ChatPrompt.h"
#include "server/chat/ChatTemplate.h"
#include "server/grammar/StructuredOutputs.h"
#include "server/http/ReplyStream.h"
#include "server/openai/Protocol.h"
#include "server/tokenizer/Tokenizer.h"

#include <cstdint>
#include <memory>
#include <optional>
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
  /// Structured outputs over the tokenizer's vocabulary (makeStructuredOutputs); HttpServer makes
  /// it when not given. Null: constrained requests are refused.
  std::shared_ptr<grammar::StructuredOutputs> structured;
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

/// Text's token ids, counted before they are all made: text that cannot fit in `limit` tokens
/// is found out 64 KiB at a time, so that a body of any size costs the tokenizer about `limit`
/// tokens' work, never the whole text's. Text that fits (or nearly: a chunked count is within a
/// few tokens a cut of the whole's) is encoded whole, exactly as the tokenizer encodes it.
/// nullopt when the text has more than `limit` tokens, `atLeast` then a lower bound on them;
/// `limit` 0: no limit.
Expected<std::optional<std::vector<TokenId>>>
encodeWithin(const Tokenizer &tokenizer, std::string_view text, int64_t limit, int64_t &atLeast);

/// Parses `body` as the endpoint's request and builds its prompt. Every error is the client's
/// (400, or 404 for an unknown model): malformed or unsupported fields, a chat template or
/// tokenizer failure, an empty prompt, a prompt plus max_tokens beyond `limits.maxContext`.
std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string_view body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits);
/// The same, freeing `body` as soon as it is parsed (its content lives on in the parsed request):
/// a large body is not held twice while its prompt is built.
std::variant<PreparedRequest, ApiError> prepareRequest(Endpoint endpoint, std::string &&body,
                                                       const ServedModel &model,
                                                       const ProtocolLimits &limits);

} // namespace glm::server
