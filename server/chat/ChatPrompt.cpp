// Chat-completions request to prompt text: transformers' template variables plus vLLM's extras.
#include "server/chat/ChatPrompt.h"

#include "base/JsonChecker.h"

#include <algorithm>
#include <optional>
#include <system_error>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

/// Deeper than any chat request or tokenizer config needs; the same cap as an HTTP body's.
constexpr size_t kMaxJsonDepth = 64;

/// transformers' special_tokens_map, in its order.
constexpr std::string_view kSpecialTokenNames[] = {
    "bos_token", "eos_token", "unk_token",  "sep_token",
    "pad_token", "cls_token", "mask_token", "additional_special_tokens"};

/// A token in tokenizer_config.json is a string or a serialized AddedToken {"content": ...}.
std::optional<Json> tokenText(const Json &v) {
  if (v.is_string()) {
    return v;
  }
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"];
  }
  return std::nullopt;
}

/// Variables a request may not set through chat_template_kwargs: transformers passes them
/// itself, and passing one twice is an error there too.
constexpr std::string_view kReservedVariables[] = {"messages", "tools", "documents",
                                                   "add_generation_prompt"};

/// OpenAI sends tool-call arguments as a string of JSON; the template iterates them as a mapping.
Status parseToolCallArguments(Json &message, size_t messageIndex) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) {
    return Status::success();
  }
  for (size_t j = 0; j < calls->size(); ++j) {
    Json &call = (*calls)[j];
    if (!call.is_object()) {
      return invalidArgument("messages[", messageIndex, "].tool_calls[", j, "] must be an object");
    }
    const bool wrapped = call.contains("function") && call["function"].is_object();
    Json &function = wrapped ? call["function"] : call;
    const std::string where = strCat("messages[", messageIndex, "].tool_calls[", j, "]",
                                     wrapped ? ".function" : "", ".arguments");
    auto arguments = function.find("arguments");
    if (arguments == function.end() || !arguments->is_string()) {
      continue;
    }
    const std::string &text = arguments->get_ref<const std::string &>();
    // Some clients send "" for a call without arguments.
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      *arguments = Json::object();
      continue;
    }
    Expected<Json> parsed = parseJsonText(text, where);
    if (!parsed.ok()) {
      return parsed.status();
    }
    if (!parsed->is_object()) {
      return invalidArgument(where, " must be a JSON object, got ", parsed->type_name());
    }
    *arguments = std::move(parsed).value();
  }
  return Status::success();
}

} // namespace

Expected<Json> parseJsonText(std::string_view text, std::string_view source) {
  JsonChecker checker(kMaxJsonDepth);
  if (!Json::sax_parse(text.begin(), text.end(), &checker)) {
    if (checker.tooDeep()) {
      return invalidArgument(source, ": nests deeper than ", kMaxJsonDepth, " levels");
    }
    return invalidArgument(source, ": not valid JSON (",
                           checker.error().empty() ? "parse error" : checker.error(), ")");
  }
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return invalidArgument(source, ": not valid JSON");
  }
  return value;
}

Expected<ChatTokenizerConfig> parseChatTokenizerConfig(std::string_view text,
                                                       std::string_view source) {
  GLM_ASSIGN_OR_RETURN(Json root, parseJsonText(text, source));
  if (!root.is_object()) {
    return invalidArgument(source, ": expected a JSON object at the top level");
  }
  ChatTokenizerConfig config;
  for (std::string_view name : kSpecialTokenNames) {
    auto it = root.find(std::string(name));
    if (it == root.end() || it->is_null()) {
      continue;
    }
    if (name == "additional_special_tokens") {
      if (!it->is_array()) {
        return invalidArgument(source, ": field '", name, "' must be an array");
      }
      Json tokens = Json::array();
      for (const Json &t : *it) {
        std::optional<Json> token = tokenText(t);
        if (!token) {
          return invalidArgument(source, ": field '", name, "' holds a token that is not text");
        }
        tokens.push_back(*token);
      }
      config.specialTokens.emplace_back(name, std::move(tokens));
      continue;
    }
    std::optional<Json> token = tokenText(*it);
    if (!token) {
      return invalidArgument(source, ": field '", name,
                             "' must be a string or an object with a 'content' string");
    }
    config.specialTokens.emplace_back(name, *token);
  }
  return config;
}

Expected<ChatTokenizerConfig> loadChatTokenizerConfig(const std::filesystem::path &modelDir) {
  const std::filesystem::path path = modelDir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return ChatTokenizerConfig{};
  }
  GLM_ASSIGN_OR_RETURN(std::string text, readChatFile(path));
  return parseChatTokenizerConfig(text, path.string());
}

Expected<ChatTemplate> loadChatTemplate(const std::filesystem::path &modelDir) {
  const std::filesystem::path path = modelDir / "chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    return ChatTemplate::load(path);
  }
  const std::filesystem::path configPath = modelDir / "tokenizer_config.json";
  if (std::filesystem::exists(configPath, ec)) {
    GLM_ASSIGN_OR_RETURN(std::string text, readChatFile(configPath));
    GLM_ASSIGN_OR_RETURN(Json config, parseJsonText(text, configPath.string()));
    const std::string source = configPath.string() + " (chat_template)";
    auto it = config.is_object() ? config.find("chat_template") : config.end();
    if (it != config.end() && it->is_string()) {
      return ChatTemplate::parse(it->get<std::string>(), source);
    }
    // Several named templates: transformers uses the one called "default".
    if (it != config.end() && it->is_array()) {
      for (const Json &entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          return ChatTemplate::parse(entry["template"].get<std::string>(), source);
        }
      }
    }
  }
  return notFound(path.string(),
                  ": cannot open (and tokenizer_config.json has no chat_template either)");
}

Expected<Json> chatTemplateVariables(const Json &request, const ChatTokenizerConfig &tokenizer) {
  if (!request.is_object()) {
    return invalidArgument("the request must be a JSON object");
  }
  auto messagesIt = request.find("messages");
  if (messagesIt == request.end() || !messagesIt->is_array()) {
    return invalidArgument("the request needs 'messages', an array of messages");
  }
  Json variables = Json::object();
  Json messages = Json::array();
  for (size_t i = 0; i < messagesIt->size(); ++i) {
    Json message = (*messagesIt)[i];
    if (!message.is_object()) {
      return invalidArgument("messages[", i, "] must be an object");
    }
    // vLLM's name for the reasoning of a past turn is `reasoning`; templates read
    // `reasoning_content`.
    if (message.contains("reasoning") && message["reasoning"].is_string() &&
        !message.contains("reasoning_content")) {
      message["reasoning_content"] = message["reasoning"];
    }
    GLM_RETURN_IF_ERROR(parseToolCallArguments(message, i));
    messages.push_back(std::move(message));
  }
  variables["messages"] = std::move(messages);

  auto toolsIt = request.find("tools");
  if (toolsIt != request.end() && !toolsIt->is_null()) {
    if (!toolsIt->is_array()) {
      return invalidArgument("'tools' must be an array");
    }
    variables["tools"] = *toolsIt;
  } else {
    variables["tools"] = nullptr;
  }
  variables["documents"] = nullptr;

  auto promptIt = request.find("add_generation_prompt");
  if (promptIt != request.end() && !promptIt->is_null() && !promptIt->is_boolean()) {
    return invalidArgument("'add_generation_prompt' must be a boolean");
  }
  variables["add_generation_prompt"] =
      promptIt != request.end() && promptIt->is_boolean() ? promptIt->get<bool>() : true;

  for (const auto &[name, value] : tokenizer.specialTokens) {
    variables[name] = value;
  }
  auto effortIt = request.find("reasoning_effort");
  if (effortIt != request.end() && !effortIt->is_null()) {
    variables["reasoning_effort"] = *effortIt;
  }
  auto kwargsIt = request.find("chat_template_kwargs");
  if (kwargsIt != request.end() && !kwargsIt->is_null()) {
    if (!kwargsIt->is_object()) {
      return invalidArgument("'chat_template_kwargs' must be an object");
    }
    for (const auto &[key, value] : kwargsIt->items()) {
      if (std::find(std::begin(kReservedVariables), std::end(kReservedVariables), key) !=
          std::end(kReservedVariables)) {
        return invalidArgument("chat_template_kwargs may not set '", key,
                               "' (it is a request field of its own)");
      }
      variables[key] = value;
    }
  }
  // GLM-5.3's template knows the efforts "low", "high" and "max" (anything else renders as
  // "Max"): OpenAI's finer levels map to the nearest, as the peers map them (medium to high,
  // minimal to low, xhigh to max; reference/peers.md §2.1). "none" disables thinking.
  if (auto effort = variables.find("reasoning_effort");
      effort != variables.end() && effort->is_string()) {
    const std::string level = effort->get<std::string>();
    if (level == "medium") {
      *effort = "high";
    } else if (level == "minimal") {
      *effort = "low";
    } else if (level == "xhigh") {
      *effort = "max";
    }
  }
  return variables;
}

bool chatThinkingDisabled(const Json &variables) {
  const auto isFalse = [&](const char *key) {
    auto it = variables.find(key);
    return it != variables.end() && it->is_boolean() && !it->get<bool>();
  };
  if (variables.contains("enable_thinking")) {
    return isFalse("enable_thinking");
  }
  if (variables.contains("thinking")) {
    return isFalse("thinking");
  }
  auto effort = variables.find("reasoning_effort");
  return effort != variables.end() && effort->is_string() && effort->get<std::string>() == "none";
}

Expected<ChatPrompt> renderChatRequest(const ChatTemplate &chatTemplate, const Json &request,
                                       const ChatTokenizerConfig &tokenizer) {
  GLM_ASSIGN_OR_RETURN(Json variables, chatTemplateVariables(request, tokenizer));
  ChatPrompt prompt;
  GLM_ASSIGN_OR_RETURN(prompt.text, chatTemplate.render(variables));
  prompt.thinkingDisabled = chatThinkingDisabled(variables);
  constexpr std::string_view kOpenThink = "<think>";
  if (variables["add_generation_prompt"].get<bool>() && prompt.thinkingDisabled &&
      prompt.text.ends_with(kOpenThink)) {
    prompt.text += "</think>";
  }
  return prompt;
}

Expected<std::string> renderChatPrompt(const ChatTemplate &chatTemplate, const Json &request,
                                       const ChatTokenizerConfig &tokenizer) {
  GLM_ASSIGN_OR_RETURN(ChatPrompt prompt, renderChatRequest(chatTemplate, request, tokenizer));
  return std::move(prompt.text);
}

} // namespace glm::server
