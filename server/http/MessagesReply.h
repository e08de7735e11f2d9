// The reply of POST /v1/messages: Anthropic's message object, or its stream of events
// (message_start, ping, content_block_start / _delta / _stop, message_delta, message_stop).
#pragma once

#include "server/anthropic/ThinkingSignature.h"
#include "server/http/ReplyStream.h"
#include "server/http/ReplyText.h"
#include "server/tokenizer/Tokenizer.h"

#include <memory>
#include <string>

namespace glm::server {

struct MessagesReplyOptions {
  ReplyTextOptions text;
  std::string id;    // "msg_..."
  std::string model; // as the request named it
  bool stream = false;
  /// Signs the thinking blocks; the server's, which outlives the reply.
  const anthropic::ThinkingSigner *signer = nullptr;
};

std::unique_ptr<ReplyStream>
createMessagesReply(const Tokenizer &tokenizer, MessagesReplyOptions options, int64_t promptTokens);

} // namespace glm::server
