// count_tokens: the launch contract of keeping each sequence's token counts, which the sampler's
// penalties read (the plan's `count_tokens` op; sample.h).
//
//   tokens     i32 [rows]          the step's input tokens
//   positions  i32 [rows]          StepContext: row r's absolute position (negative: padding)
//   slots      i32 [batch]         StepContext: sequence b's state slot (negative: padding)
//   params     SampleWords [batch] the sampling_params io slot: promptTokens
//   counts     u32 [max_seqs, vocab] the token_counts state
//
// For each row r of sequence b = r / rowsPerSequence holding a token t:
//   counts[slots[b]][t] |= kPromptSeenBit     when positions[r] < params[b].promptTokens
//   counts[slots[b]][t] += 1                  otherwise (a generated token)
// A step's input tokens are the sequence's tokens in order, so after any prefill or decode the
// counts are those of every token the sequence holds, whether it was prefilled once or again
// after a preemption. Token ids outside [0, vocab) are skipped.
#pragma once

#include "base/Status.h"
#include "kernels/sample/sample_params.h"

#include <cstdint>

namespace glm::kernels {

struct CountTokensArgs {
  const int32_t *tokens = nullptr;
  const int32_t *positions = nullptr;
  const int32_t *slots = nullptr;
  const SampleWords *params = nullptr;
  uint32_t *counts = nullptr;
  int64_t rows = 0;
  int64_t rowsPerSequence = 1;
  int64_t vocab = 0;
};

Status countTokensRef(const CountTokensArgs &args);

} // namespace glm::kernels
