// The one line logged (info) at the end of each generation request: who asked (request id,
// endpoint, model), what it cost (prompt, cached and output tokens, time to first token, decode
// speed) and how it ended (finish reasons, HTTP status). Never the prompt's or the reply's text.
#pragma once

#include "server/http/ReplyStream.h"
#include "server/http/TokenQueue.h"

#include <cstdint>
#include <memory>
#include <string>

namespace glm::server {

/// Filled in as the request is handled; the line is written when the last holder lets go of it:
/// the handler for a whole reply (before the body is sent), the stream's writer for an SSE
/// reply (once the stream is done, or the client gone).
class RequestLog {
public:
  RequestLog(std::string requestId, std::string endpoint)
      : requestId_(std::move(requestId)), endpoint_(std::move(endpoint)) {}
  RequestLog(const RequestLog &) = delete;
  RequestLog &operator=(const RequestLog &) = delete;
  ~RequestLog();

  const std::string &requestId() const { return requestId_; }

  std::string model = "-"; // the served name the request gave, once parsed (never the client's
                           // text otherwise: a name the server does not serve is refused)
  int status = 0;          // the HTTP status sent
  int64_t promptTokens = 0;
  /// Once submitted: the engine's side (timing, cached tokens) and the reply's (its usage's
  /// output tokens, finish reasons).
  std::shared_ptr<TokenQueue> queue;
  std::shared_ptr<const ReplyStream> reply;

  /// The line, without the logger's prefix.
  std::string line() const;

private:
  const std::string requestId_;
  const std::string endpoint_;
};

} // namespace glm::server
