// The reply of POST /v1/responses: the response object, or its stream of events (response.created
// ... response.completed), each with its sequence_number, as OpenAI's SDKs consume them.
#pragma once

#include "server/http/ReplyStream.h"
#include "server/http/ReplyText.h"
#include "server/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

namespace glm::server {

struct ResponsesReplyOptions {
  ReplyTextOptions text;
  std::string id;              // "resp_..."
  nlohmann::ordered_json echo; // ResponsesRequest::echo
  bool stream = false;
  bool encryptedReasoning = false;
  /// Called once the response is complete (or incomplete), with the object and its output
  /// items: the store keeps them. Not called for a failed or cut one.
  std::function<void(const nlohmann::ordered_json &response, const nlohmann::ordered_json &output)>
      onComplete;
};

std::unique_ptr<ReplyStream> createResponsesReply(const Tokenizer &tokenizer,
                                                  ResponsesReplyOptions options,
                                                  int64_t promptTokens);

} // namespace glm::server
