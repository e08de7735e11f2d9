// SynthTokenizer: the tokenizer files and chat template that `glmc synth` writes next to random
// weights.
#pragma once

#include "base/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::glm53 {

/// GLM-5.3's 36 special tokens, in the order the release assigns ids from its first special id
/// (154820 in the release): "<|endoftext|>", "[MASK]", "[gMASK]", ... "<|image|>", "<|video|>".
const std::vector<std::string> &glm53SpecialTokens();

struct SynthTokenizerOptions {
  /// Embedding rows; every id below it gets a token.
  int64_t vocabSize = 0;
  /// Id of "<|endoftext|>"; ids below it are byte-level BPE tokens.
  int64_t firstSpecialId = 0;
  /// Upper bound on learned merges; the BPE part holds min(firstSpecialId, 256 + maxMerges)
  /// learned tokens and is padded with unreachable filler tokens up to firstSpecialId.
  int64_t maxMerges = 0;
  /// Seeds the generated training text, hence the merges.
  uint64_t seed = 0;
};

/// The text of tokenizer.json (Hugging Face `tokenizers` format): byte-level BPE with GLM's
/// pre-tokenizer regex, merges trained on built-in plus seeded pseudo-random text, the special
/// tokens at firstSpecialId.., and "<|reserved_N|>" special tokens for any ids left up to
/// vocabSize. Deterministic in the options. InvalidArgument if firstSpecialId < 256,
/// vocabSize < firstSpecialId + 36 or maxMerges < 0.
Expected<std::string> makeSynthTokenizerJson(const SynthTokenizerOptions &options);

/// The text of tokenizer_config.json (no chat template in it: that ships as chat_template.jinja).
std::string makeSynthTokenizerConfigJson();

/// The text of chat_template.jinja: the GLM-5.3 prompt format.
std::string_view glm53ChatTemplate();

} // namespace glm::glm53
