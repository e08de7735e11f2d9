// Fuzzes a request body of POST /v1/chat/completions and /v1/completions: parseChatRequest and
// parseCompletionRequest, then for an accepted request what prepareRequest does next with the
// tiny fixture's chat template and tokenizer (render, encode; ids checked and decoded), and the
// tool-call parser built from the request's tools over a reply that calls one.
#include "server/chat/ChatPrompt.h"
#include "server/chat/ChatTemplate.h"
#include "server/openai/Protocol.h"
#include "server/openai/ToolCallParser.h"
#include "server/tokenizer/Tokenizer.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <memory>
#include <string_view>
#include <variant>

namespace {

struct Model {
  std::unique_ptr<glm::server::Tokenizer> tokenizer;
  std::unique_ptr<glm::server::ChatTemplate> chatTemplate;
  glm::server::ChatTokenizerConfig tokenizerConfig;
  glm::server::ProtocolLimits limits{{"glm-5.3", "glm53-tiny"}, 2048};
};

const Model &model() {
  static const Model m = [] {
    Model out;
    const std::filesystem::path dir = glm::fuzz::fixturesDir() / "glm53-tiny";
    glm::Expected<glm::server::Tokenizer> tokenizer =
        glm::server::Tokenizer::fromModelDir(dir.string());
    glm::Expected<glm::server::ChatTemplate> chatTemplate = glm::server::loadChatTemplate(dir);
    glm::Expected<glm::server::ChatTokenizerConfig> config =
        glm::server::loadChatTokenizerConfig(dir);
    if (!tokenizer.ok() || !chatTemplate.ok() || !config.ok()) {
      glm::fuzz::contractBroken("the glm53-tiny fixture loads", dir.string());
    }
    out.tokenizer = std::make_unique<glm::server::Tokenizer>(std::move(tokenizer).value());
    out.chatTemplate = std::make_unique<glm::server::ChatTemplate>(std::move(chatTemplate).value());
    out.tokenizerConfig = std::move(config).value();
    return out;
  }();
  return m;
}

constexpr std::string_view kReply =
    "<think>the tool</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key>"
    "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>";

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const Model &m = model();
  const std::string_view body(reinterpret_cast<const char *>(data), size);

  auto chat = glm::server::parseChatRequest(body, m.limits);
  if (auto *request = std::get_if<glm::server::ChatRequest>(&chat)) {
    glm::Expected<glm::server::ChatPrompt> prompt =
        glm::server::renderChatRequest(*m.chatTemplate, request->body, m.tokenizerConfig);
    if (prompt.ok()) {
      glm::Expected<std::vector<glm::server::TokenId>> ids = m.tokenizer->encode(prompt->text);
      (void)ids;
    }
    glm::server::ToolCallParser parser(request->tools, request->sampling.seed.value_or(0));
    (void)parser.feed(kReply);
    (void)parser.finish();
  } else {
    (void)std::get<glm::server::ApiError>(chat).toJson().dump();
  }

  auto completion = glm::server::parseCompletionRequest(body, m.limits);
  if (auto *request = std::get_if<glm::server::CompletionRequest>(&completion)) {
    if (!request->promptIds.empty()) {
      bool known = true;
      for (int32_t id : request->promptIds) {
        known = known && m.tokenizer->hasId(id);
      }
      if (known) {
        glm::Expected<std::string> text = m.tokenizer->decode(request->promptIds);
        (void)text;
      }
    } else {
      glm::Expected<std::vector<glm::server::TokenId>> ids = m.tokenizer->encode(request->prompt);
      (void)ids;
    }
  } else {
    (void)std::get<glm::server::ApiError>(completion).toJson().dump();
  }
  return 0;
}
