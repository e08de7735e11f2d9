// next_embedding: CPU reference, a row gather from each row's next token.
#include "kernels/next_embedding/next_embedding.h"

#include <algorithm>

namespace glm::kernels {

Status nextEmbeddingRef(const NextEmbeddingArgs &a) {
  if (!a.table.present() || a.table.rank != 2) {
    return invalidArgument("next_embedding: the table must be a 2-D weight [vocab, hidden]");
  }
  if (a.rows < 0 || (a.sampledLastOnly && !a.followInput)) {
    return invalidArgument("next_embedding: rows must be >= 0, and only a step following its "
                           "input may hold its last row's draw alone");
  }
  const int64_t vocab = a.table.dim(0);
  const int64_t hidden = a.table.dim(1);
  for (int64_t n = 0; n < a.rows; ++n) {
    float *row = a.out + n * hidden;
    if (a.positions[n] == 0) {
      std::fill(row, row + hidden, 0.0f);
      continue;
    }
    const bool last = n + 1 == a.rows;
    const int64_t drawn = a.sampledLastOnly ? 0 : n;
    const int64_t id = !a.followInput     ? a.sampled[drawn * kSampledIdsWidth]
                       : !last            ? a.ids[n + 1]
                       : a.following >= 0 ? a.following
                                          : a.sampled[drawn * kSampledIdsWidth];
    if (id < 0 || id >= vocab) {
      return invalidArgument("next_embedding: the token after row ", n, " (", id,
                             ") is outside [0, ", vocab, ")");
    }
    a.table.loadRow(id, row);
  }
  return Status::success();
}

} // namespace glm::kernels
