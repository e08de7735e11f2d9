// embedding: CPU reference of the row gather, widening the stored row to fp32.
#include "kernels/embedding/embedding.h"

#include <algorithm>

namespace glm::kernels {

Status embeddingRef(const EmbeddingArgs &a) {
  if (!a.table.present() || a.table.rank != 2) {
    return invalidArgument("embedding: the table must be a 2-D weight [vocab, hidden]");
  }
  if (a.tokens < 0 || a.copies < 1) {
    return invalidArgument("embedding: tokens must be >= 0 and copies >= 1");
  }
  const int64_t vocab = a.table.dim(0);
  const int64_t hidden = a.table.dim(1);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t id = a.tokenIds[t];
    if (id < 0 || id >= vocab) {
      return invalidArgument("embedding: token id ", id, " at position ", t, " is outside [0, ",
                             vocab, ")");
    }
    float *first = a.out + t * a.copies * hidden;
    a.table.loadRow(id, first);
    for (int64_t c = 1; c < a.copies; ++c) {
      std::copy(first, first + hidden, first + c * hidden);
    }
  }
  return Status::success();
}

} // namespace glm::kernels
