// The per-request log line, built from what the token queue timed and the reply counted.
#include "server/http/RequestLog.h"

#include "base/Logging.h"

#include <cstdio>

namespace glm::server {
namespace {

/// A client's request id as one field: quoted (with `"` and `\` escaped) unless it is a plain
/// word, so that an id such as `x status=500` cannot pose as the line's other fields.
std::string field(const std::string &text) {
  const bool plain = !text.empty() && text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
                                                             "klmnopqrstuvwxyz0123456789._:-/+") ==
                                          std::string::npos;
  if (plain) {
    return text;
  }
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + '"';
}

std::string fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

} // namespace

RequestLog::~RequestLog() {
  if (logThreshold() <= LogLevel::Info) {
    logMessage(LogLevel::Info, line());
  }
}

std::string RequestLog::line() const {
  std::string ttft = "-", decode = "-", finish = "-";
  int64_t cached = 0, output = 0;
  if (queue) {
    const TokenQueue::Timing t = queue->timing();
    cached = t.cachedTokens;
    if (t.timeToFirstToken) {
      ttft = fixed(*t.timeToFirstToken * 1e3, 1);
    }
    // The speed of one sequence's decode (choice 0's, as the latency metrics take it): its
    // tokens after the first over the time they took.
    if (t.decodeTokens > 0 && t.decodeSeconds > 0) {
      decode = fixed(static_cast<double>(t.decodeTokens) / t.decodeSeconds, 1);
    }
  }
  if (reply) {
    const ReplyStream::Summary s = reply->summary();
    output = s.outputTokens;
    finish.clear();
    for (const std::string &reason : s.finishReasons) {
      finish += (finish.empty() ? "" : ",") + reason;
    }
  }
  return strCat("request id=", field(requestId_), " endpoint=", endpoint_, " model=", model,
                " status=", status, " prompt_tokens=", promptTokens, " cached_tokens=", cached,
                " output_tokens=", output, " ttft_ms=", ttft, " decode_tok_s=", decode,
                " finish=", finish);
}

} // namespace glm::server
