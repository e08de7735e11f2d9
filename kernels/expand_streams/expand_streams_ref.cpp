// expand_streams reference: plain copies.
#include "kernels/expand_streams/expand_streams.h"

#include <cstring>

namespace glm::kernels {

Status expandStreamsRef(const ExpandStreamsArgs &a) {
  if (a.x == nullptr || a.out == nullptr || a.tokens < 0 || a.streams < 1 || a.hidden < 1) {
    return invalidArgument("expand_streams: bad arguments");
  }
  for (int64_t t = 0; t < a.tokens; ++t) {
    for (int64_t s = 0; s < a.streams; ++s) {
      std::memcpy(a.out + (t * a.streams + s) * a.hidden, a.x + t * a.hidden,
                  static_cast<size_t>(a.hidden) * sizeof(float));
    }
  }
  return Status::success();
}

} // namespace glm::kernels
