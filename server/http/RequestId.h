// The id a request goes by in its X-Request-Id response header and its log line: the client's
// own X-Request-Id when it is a sane one, so that a client or a proxy can follow a request
// through the logs by the id it chose; otherwise one generated here.
#pragma once

#include <string>
#include <string_view>

namespace glm::server {

/// The longest X-Request-Id taken from a client, in bytes.
inline constexpr size_t kMaxRequestIdBytes = 128;

/// `header` (the request's X-Request-Id, empty when absent) if it is 1 to kMaxRequestIdBytes
/// printable ASCII bytes (0x20-0x7e: nothing that could split a log line or a header);
/// otherwise a new id, "req_" and 32 random hex digits.
std::string requestIdFor(std::string_view header);

} // namespace glm::server
