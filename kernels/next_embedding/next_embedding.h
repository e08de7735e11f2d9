// next_embedding: the launch contract of the MTP head's input, each row's next token embedded
// (reference/glm53_arch.md §2.8). The head at row n guesses the token two past n's, from the
// trunk's output at n and the embedding of the token after n's.
//
//   ids        i32 [rows]                 one sequence's tokens in this step
//   sampled    i32 [rows or 1, 1 + 20]    the draws after its rows (the sampler's ids), or after
//                                         its last row only (a head that ran on that row alone)
//   positions  i32 [rows]                 absolute positions
//   following  i32                        the token after the last row where the host knows it
//                                         (a prefill chunk with more of the prompt after it), or
//                                         -1 (the sampling_params' `following` word, less one)
//   table          [vocab, hidden]        weight (embed_tokens.weight)
//   out        f32 [rows, hidden]
//
//   next(n) = ids[n + 1]         with followInput, for every row but the last (a prompt's
//                                tokens follow each other)
//           = following          with followInput, for the last row, where known
//           = sampled[n][0]      otherwise (every row of a decode step, whose next token is the
//                                one drawn after it; [0][0] when only the last row's draw is
//                                held)
//   out[n]  = table[next(n)], zeros at position 0 (vLLM's MTP convention, glm53_arch.md §6.14)
#pragma once

#include "base/Status.h"
#include "kernels/common/WeightView.h"
#include "kernels/sample/sample_params.h"

#include <cstdint>

namespace glm::kernels {

/// Columns of a sampler's ids row: the token, then its alternatives.
inline constexpr int64_t kSampledIdsWidth = 1 + kSampleTopLogprobs;

struct NextEmbeddingArgs {
  const int32_t *ids = nullptr;
  const int32_t *sampled = nullptr;
  bool sampledLastOnly = false; // `sampled` holds the last row's draw alone
  const int32_t *positions = nullptr;
  int32_t following = -1;
  WeightView table;
  float *out = nullptr;
  int64_t rows = 0;
  bool followInput = false;
};

/// Fails on a next token outside [0, vocab), and on a last-row draw without followInput.
Status nextEmbeddingRef(const NextEmbeddingArgs &args);

} // namespace glm::kernels
