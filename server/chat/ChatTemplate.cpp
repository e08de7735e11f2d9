// A checkpoint's chat template: the public face of the Jinja-subset interpreter.
#include "server/chat/ChatTemplate.h"

#include "base/InputFile.h"
#include "server/chat/JinjaInterpreter.h"
#include "server/chat/JinjaLimits.h"
#include "server/chat/JinjaParser.h"

namespace glm::server {

Expected<ChatTemplate> ChatTemplate::parse(std::string_view text, std::string sourceName) {
  GLM_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Template> parsed,
                       jinja::parseTemplate(text, std::move(sourceName)));
  return ChatTemplate(std::move(parsed));
}

Expected<ChatTemplate> ChatTemplate::load(const std::filesystem::path &path) {
  GLM_ASSIGN_OR_RETURN(std::string text, readChatFile(path, jinja::kMaxTemplateBytes));
  return parse(text, path.string());
}

Expected<std::string> ChatTemplate::render(const nlohmann::ordered_json &variables) const {
  if (!variables.is_object()) {
    return invalidArgument(template_->name, ": template variables must be a JSON object");
  }
  jinja::DictData context;
  context.entries.reserve(variables.size());
  for (const auto &[key, value] : variables.items()) {
    context.entries.emplace_back(key, jinja::valueFromJson(value));
  }
  return jinja::renderTemplate(*template_, context);
}

const std::string &ChatTemplate::sourceName() const { return template_->name; }

Expected<std::string> readChatFile(const std::filesystem::path &path, uint64_t maxBytes) {
  const std::string_view what = path.extension() == ".jinja"                 ? "chat template"
                                : path.filename() == "tokenizer_config.json" ? "tokenizer config"
                                                                             : "file";
  return readInputFile(path, maxBytes, what);
}

} // namespace glm::server
