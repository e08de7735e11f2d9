// `glmc render-chat`: the prompt text the server would build for a chat-completions request.
#include "server/chat/ChatPrompt.h"
#include "server/chat/ChatTemplate.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <cstdio>
#include <string>

namespace glm::tools {

int runRenderChat(const std::vector<std::string> &args) {
  CommandLine cl("glmc render-chat", "--model DIR REQUEST.json",
                 "Prints the prompt text the server would build for a chat request.");
  cl.option("model", "DIR", "the checkpoint whose chat template to use").positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  const std::optional<std::string> modelDir = cl.get("model");
  if (!modelDir) {
    std::fprintf(stderr, "glmc render-chat: missing --model DIR\n");
    return 2;
  }
  const std::string requestPath = cl.positionals()[0];

  Expected<server::ChatTemplate> chatTemplate = server::loadChatTemplate(*modelDir);
  if (!chatTemplate.ok()) {
    return cl.fail(chatTemplate.status());
  }
  Expected<server::ChatTokenizerConfig> tokenizer = server::loadChatTokenizerConfig(*modelDir);
  if (!tokenizer.ok()) {
    return cl.fail(tokenizer.status());
  }
  Expected<std::string> text = server::readChatFile(requestPath);
  if (!text.ok()) {
    return cl.fail(text.status());
  }
  Expected<nlohmann::ordered_json> request = server::parseJsonText(*text, requestPath);
  if (!request.ok()) {
    return cl.fail(request.status());
  }
  Expected<std::string> prompt = server::renderChatPrompt(*chatTemplate, *request, *tokenizer);
  if (!prompt.ok()) {
    return cl.fail(prompt.status().withContext(requestPath));
  }
  // The prompt exactly: no newline of our own, so it can be compared byte for byte.
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

} // namespace glm::tools
