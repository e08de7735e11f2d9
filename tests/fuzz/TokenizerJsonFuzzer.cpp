// Fuzzes tokenizer.json through Tokenizer::fromJson, then encodes and decodes fixed text with
// whatever tokenizer it accepts, as `glmc tokenize`, `generate` and `serve` do at start.
#include "server/tokenizer/Tokenizer.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <string_view>

namespace {

// Text that reaches every part: ASCII words and digits (the split regex), whitespace runs,
// multi-byte UTF-8, and GLM's special tokens (added-vocabulary matching).
constexpr std::string_view kTexts[] = {
    "Hello, world! 12345 tensor-parallelism   \n\n\tx",
    "日本語で答えて: 🙂 naïve café — ½?",
    "[gMASK]<sop><|system|>be terse<|user|>hi<|assistant|><think></think>ok<|endoftext|>",
    "",
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view json(reinterpret_cast<const char *>(data), size);
  glm::Expected<glm::server::Tokenizer> tokenizer = glm::server::Tokenizer::fromJson(json);
  if (!tokenizer.ok()) {
    return 0;
  }
  for (std::string_view text : kTexts) {
    for (bool special : {false, true}) {
      glm::Expected<std::vector<glm::server::TokenId>> ids = tokenizer->encode(text, special);
      if (!ids.ok()) {
        continue;
      }
      for (glm::server::TokenId id : *ids) {
        GLM_FUZZ_CHECK(tokenizer->hasId(id), "encode returned an id without a token");
      }
      glm::Expected<std::string> back = tokenizer->decode(*ids, special);
      (void)back;
    }
  }
  // Every id below idCount() the tokenizer knows, decoded alone and looked up both ways.
  const size_t count = std::min<size_t>(tokenizer->idCount(), 4096);
  for (size_t i = 0; i < count; ++i) {
    const auto id = static_cast<glm::server::TokenId>(i);
    if (!tokenizer->hasId(id)) {
      continue;
    }
    const glm::server::TokenId one[] = {id};
    glm::Expected<std::string> text = tokenizer->decode(one);
    (void)text;
    if (std::optional<std::string_view> token = tokenizer->idToToken(id)) {
      GLM_FUZZ_CHECK(tokenizer->tokenToId(*token).has_value(), std::string(*token));
    }
    (void)tokenizer->tokenBytes(id);
    (void)tokenizer->isSpecial(id);
  }
  return 0;
}
