// Request ids: the client's when printable and bounded, else random.
#include "server/http/RequestId.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <random>

namespace glm::server {

std::string requestIdFor(std::string_view header) {
  const bool usable =
      !header.empty() && header.size() <= kMaxRequestIdBytes &&
      std::all_of(header.begin(), header.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
  if (usable) {
    return std::string(header);
  }
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  unsigned long long high, low;
  {
    std::lock_guard<std::mutex> lock(mutex);
    high = rng();
    low = rng();
  }
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", high, low);
  return std::string("req_") + hex;
}

} // namespace glm::server
