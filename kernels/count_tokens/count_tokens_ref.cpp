// count_tokens: CPU reference (contract in count_tokens.h).
#include "kernels/count_tokens/count_tokens.h"

namespace glm::kernels {

Status countTokensRef(const CountTokensArgs &a) {
  if (a.rows < 0 || a.vocab <= 0 || a.rowsPerSequence <= 0) {
    return invalidArgument("count_tokens: rows must be >= 0, vocab and rows per sequence > 0");
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t b = r / a.rowsPerSequence;
    const int32_t token = a.tokens[r], slot = a.slots[b];
    if (a.positions[r] < 0 || slot < 0 || token < 0 || token >= a.vocab) {
      continue;
    }
    uint32_t &count = a.counts[static_cast<int64_t>(slot) * a.vocab + token];
    if (a.positions[r] < a.params[b].promptTokens) {
      count |= kPromptSeenBit;
    } else {
      ++count;
    }
  }
  return Status::success();
}

} // namespace glm::kernels
