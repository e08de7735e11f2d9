// A checkpoint's chat template: the public face of the Jinja-subset interpreter.
#include "server/chat/ChatTemplate.h"

#include "server/chat/JinjaInterpreter.h"
#include "server/chat/JinjaParser.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace glm::server {

Expected<ChatTemplate> ChatTemplate::parse(std::string_view text, std::string sourceName) {
  GLM_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Template> parsed,
                       jinja::parseTemplate(text, std::move(sourceName)));
  return ChatTemplate(std::move(parsed));
}

Expected<ChatTemplate> ChatTemplate::load(const std::filesystem::path &path) {
  GLM_ASSIGN_OR_RETURN(std::string text, readChatFile(path));
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

Expected<std::string> readChatFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return notFound(path.string(), ": cannot open (", std::strerror(errno), ")");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return ioError(path.string(), ": read failed");
  }
  return text.str();
}

} // namespace glm::server
