// Anthropic's Messages API: request translation, the message object and Anthropic's errors.
#include "server/anthropic/Messages.h"

#include <utility>

namespace glm::server::anthropic {
namespace {

using Json = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

/// Anthropic bounds a thinking budget from below (and by max_tokens from above).
constexpr int64_t kMinThinkingBudget = 1024;

std::string indexed(const std::string &path, size_t i) { return strCat(path, "[", i, "]"); }

MaybeError readString(const Json &object, const char *key, const std::string &path,
                      std::string &out) {
  const Json *v = member(object, key);
  const std::string at = path.empty() ? std::string(key) : strCat(path, ".", key);
  if (!v) {
    return fieldMissing(at);
  }
  if (!v->is_string()) {
    return fieldTypeError(at, "a string", *v);
  }
  out = v->get<std::string>();
  return std::nullopt;
}

/// A block's type, required.
MaybeError blockType(const Json &block, const std::string &path, std::string &type) {
  if (!block.is_object()) {
    return fieldTypeError(path, "an object", block);
  }
  return readString(block, "type", path, type);
}

/// Text blocks (a string, or an array of {type: "text", text}) as chat text parts. Images,
/// documents and the rest are refused: the model reads text only.
MaybeError readTextBlocks(const Json &content, const std::string &path, Json &out) {
  if (content.is_string()) {
    out = content;
    return std::nullopt;
  }
  if (!content.is_array()) {
    return fieldTypeError(path, "a string or an array of text blocks", content);
  }
  out = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string blockPath = indexed(path, j);
    std::string type, text;
    if (MaybeError e = blockType(content[j], blockPath, type)) {
      return e;
    }
    if (type != "text") {
      return fieldUnsupported(blockPath + ".type", "only text blocks are supported here");
    }
    if (MaybeError e = readString(content[j], "text", blockPath, text)) {
      return e;
    }
    out.push_back(Json{{"type", "text"}, {"text", std::move(text)}});
  }
  return std::nullopt;
}

/// Anthropic's turns to chat messages: a user turn's tool_result blocks become tool messages (in
/// order, its text a user message after them), an assistant turn's thinking blocks its
/// reasoning_content and its tool_use blocks its tool_calls.
class Conversation {
public:
  Conversation(Json &messages, ParamMap &params) : messages_(messages), params_(params) {}

  MaybeError message(const Json &message, const std::string &path) {
    if (!message.is_object()) {
      return fieldTypeError(path, "an object", message);
    }
    std::string role;
    if (MaybeError e = readString(message, "role", path, role)) {
      return e;
    }
    if (role != "user" && role != "assistant") {
      return fieldValueError(path + ".role", "must be \"user\" or \"assistant\"");
    }
    const Json *content = member(message, "content");
    if (!content) {
      return fieldMissing(path + ".content");
    }
    if (content->is_string()) {
      push(Json{{"role", role}, {"content", *content}}, path);
      return std::nullopt;
    }
    if (!content->is_array()) {
      return fieldTypeError(path + ".content", "a string or an array of content blocks", *content);
    }
    return role == "user" ? userBlocks(*content, path) : assistantBlocks(*content, path);
  }

private:
  MaybeError userBlocks(const Json &blocks, const std::string &path) {
    Json text = Json::array();
    std::string textPath;
    for (size_t j = 0; j < blocks.size(); ++j) {
      const std::string blockPath = indexed(path + ".content", j);
      std::string type;
      if (MaybeError e = blockType(blocks[j], blockPath, type)) {
        return e;
      }
      if (type == "text") {
        std::string t;
        if (MaybeError e = readString(blocks[j], "text", blockPath, t)) {
          return e;
        }
        text.push_back(Json{{"type", "text"}, {"text", std::move(t)}});
        if (textPath.empty()) {
          textPath = blockPath;
        }
      } else if (type == "tool_result") {
        std::string id;
        if (MaybeError e = readString(blocks[j], "tool_use_id", blockPath, id)) {
          return e;
        }
        Json result = "";
        if (const Json *c = member(blocks[j], "content")) {
          if (MaybeError e = readTextBlocks(*c, blockPath + ".content", result)) {
            return e;
          }
        }
        if (const Json *isError = member(blocks[j], "is_error");
            isError && !isError->is_boolean()) {
          return fieldTypeError(blockPath + ".is_error", "a boolean", *isError);
        }
        push(Json{{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(result)}},
             blockPath);
      } else {
        return fieldUnsupported(blockPath + ".type",
                                "only text and tool_result blocks are supported in user turns");
      }
    }
    if (!text.empty()) {
      push(Json{{"role", "user"}, {"content", std::move(text)}}, textPath);
    }
    return std::nullopt;
  }

  MaybeError assistantBlocks(const Json &blocks, const std::string &path) {
    Json message{{"role", "assistant"}};
    std::string text, thinking;
    bool hasThinking = false;
    Json calls = Json::array();
    const size_t k = messages_.size();
    for (size_t j = 0; j < blocks.size(); ++j) {
      const std::string blockPath = indexed(path + ".content", j);
      std::string type;
      if (MaybeError e = blockType(blocks[j], blockPath, type)) {
        return e;
      }
      if (type == "text") {
        std::string t;
        if (MaybeError e = readString(blocks[j], "text", blockPath, t)) {
          return e;
        }
        text += t;
      } else if (type == "thinking") {
        // Its signature is not checked: see ThinkingSignature.h.
        std::string t;
        if (MaybeError e = readString(blocks[j], "thinking", blockPath, t)) {
          return e;
        }
        thinking += t;
        hasThinking = true;
      } else if (type == "redacted_thinking") {
        // Another model's encrypted reasoning: nothing this model can read.
      } else if (type == "tool_use") {
        std::string id, name;
        if (MaybeError e = readString(blocks[j], "id", blockPath, id)) {
          return e;
        }
        if (MaybeError e = readString(blocks[j], "name", blockPath, name)) {
          return e;
        }
        const Json *input = member(blocks[j], "input");
        if (!input) {
          return fieldMissing(blockPath + ".input");
        }
        if (!input->is_object()) {
          return fieldTypeError(blockPath + ".input", "an object", *input);
        }
        params_.add(strCat("messages[", k, "].tool_calls[", calls.size(), "].function"), blockPath);
        params_.add(strCat("messages[", k, "].tool_calls[", calls.size(), "]"), blockPath);
        calls.push_back(Json{{"id", id},
                             {"type", "function"},
                             {"function", Json{{"name", name}, {"arguments", input->dump()}}}});
      } else {
        return fieldUnsupported(blockPath + ".type", "only text, thinking, redacted_thinking and "
                                                     "tool_use blocks are supported in "
                                                     "assistant turns");
      }
    }
    message["content"] = text;
    if (hasThinking) {
      message["reasoning_content"] = thinking;
    }
    if (!calls.empty()) {
      message["tool_calls"] = std::move(calls);
    }
    push(std::move(message), path);
    return std::nullopt;
  }

  void push(Json message, const std::string &path) {
    params_.add(strCat("messages[", messages_.size(), "]"), path);
    messages_.push_back(std::move(message));
  }

  Json &messages_;
  ParamMap &params_;
};

MaybeError readSystem(const Json &body, Json &messages, ParamMap &params) {
  const Json *system = member(body, "system");
  if (!system) {
    return std::nullopt;
  }
  Json content;
  if (MaybeError e = readTextBlocks(*system, "system", content)) {
    return e;
  }
  params.add("messages[0]", "system");
  messages.push_back(Json{{"role", "system"}, {"content", std::move(content)}});
  return std::nullopt;
}

/// Client tools ({name, description, input_schema}) to chat tools. Anthropic's server tools
/// (web search, code execution, computer use, bash, text editor...) run on Anthropic's side:
/// refused, not ignored.
MaybeError readTools(const Json &body, Json &chat, ParamMap &params) {
  const Json *tools = member(body, "tools");
  if (!tools) {
    return std::nullopt;
  }
  if (!tools->is_array()) {
    return fieldTypeError("tools", "an array", *tools);
  }
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json &tool = (*tools)[i];
    const std::string path = indexed("tools", i);
    if (!tool.is_object()) {
      return fieldTypeError(path, "an object", tool);
    }
    if (const Json *type = member(tool, "type"); type && *type != "custom") {
      return fieldUnsupported(path + ".type",
                              "only client tools (type \"custom\" or none) are supported: the "
                              "server runs no tools of its own");
    }
    std::string name;
    if (MaybeError e = readString(tool, "name", path, name)) {
      return e;
    }
    const Json *schema = member(tool, "input_schema");
    if (!schema) {
      return fieldMissing(path + ".input_schema");
    }
    if (!schema->is_object()) {
      return fieldTypeError(path + ".input_schema", "an object", *schema);
    }
    Json function{{"name", name}, {"parameters", *schema}};
    if (const Json *description = member(tool, "description")) {
      function["description"] = *description;
    }
    out.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
    params.add(strCat(path, ".function.parameters"), path + ".input_schema");
    params.add(strCat(path, ".function"), path);
    params.add(path, path);
  }
  chat["tools"] = std::move(out);
  return std::nullopt;
}

MaybeError readToolChoice(const Json &body, Json &chat) {
  const Json *choice = member(body, "tool_choice");
  if (!choice) {
    return std::nullopt;
  }
  std::string type;
  if (MaybeError e = blockType(*choice, "tool_choice", type)) {
    return e;
  }
  if (type == "auto" || type == "none") {
    chat["tool_choice"] = type;
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "tool") {
    std::string name;
    if (MaybeError e = readString(*choice, "name", "tool_choice", name)) {
      return e;
    }
    chat["tool_choice"] = Json{{"type", "function"}, {"function", Json{{"name", name}}}};
  } else {
    return fieldValueError("tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\"");
  }
  if (const Json *single = member(*choice, "disable_parallel_tool_use")) {
    if (!single->is_boolean()) {
      return fieldTypeError("tool_choice.disable_parallel_tool_use", "a boolean", *single);
    }
    chat["parallel_tool_calls"] = !single->get<bool>();
  }
  return std::nullopt;
}

/// thinking: enabled (with budget_tokens, at least 1024 and below max_tokens, as Anthropic
/// requires; the think block is closed there) or adaptive turn GLM's think block on; disabled,
/// or no thinking field (Anthropic's default), turn it off.
MaybeError readThinking(const Json &body, const Json *maxTokens, Json &chat,
                        std::optional<int64_t> &budgetTokens) {
  bool enabled = false;
  if (const Json *thinking = member(body, "thinking")) {
    std::string type;
    if (MaybeError e = blockType(*thinking, "thinking", type)) {
      return e;
    }
    if (type == "enabled") {
      const Json *budget = member(*thinking, "budget_tokens");
      if (!budget) {
        return fieldMissing("thinking.budget_tokens");
      }
      if (!budget->is_number_integer()) {
        return fieldTypeError("thinking.budget_tokens", "an integer", *budget);
      }
      if (budget->get<int64_t>() < kMinThinkingBudget) {
        return fieldValueError("thinking.budget_tokens",
                               strCat("must be at least ", kMinThinkingBudget));
      }
      if (maxTokens && maxTokens->is_number_integer() &&
          budget->get<int64_t>() >= maxTokens->get<int64_t>()) {
        return fieldValueError("thinking.budget_tokens", "must be less than max_tokens");
      }
      enabled = true;
      budgetTokens = budget->get<int64_t>();
    } else if (type == "adaptive") {
      enabled = true;
    } else if (type != "disabled") {
      return fieldValueError("thinking.type", "must be \"enabled\", \"adaptive\" or \"disabled\"");
    }
  }
  chat["chat_template_kwargs"] = Json{{"enable_thinking", enabled}};
  return std::nullopt;
}

} // namespace

std::variant<MessagesRequest, ApiError> parseMessagesRequest(std::string_view text,
                                                             bool countTokens) {
  std::variant<Json, ApiError> parsed = parseClientBody(text);
  if (ApiError *error = std::get_if<ApiError>(&parsed)) {
    return std::move(*error);
  }
  const Json &body = std::get<Json>(parsed);
  MessagesRequest out;
  Json &chat = out.chatBody = Json::object();
  if (MaybeError e = readString(body, "model", "", out.model)) {
    return std::move(*e);
  }
  chat["model"] = out.model;
  for (const char *key : {"container", "mcp_servers"}) {
    if (member(body, key)) {
      return fieldUnsupported(key, strCat("'", key, "' is not supported by this server"));
    }
  }
  Json messages = Json::array();
  if (MaybeError e = readSystem(body, messages, out.params)) {
    return std::move(*e);
  }
  const Json *turns = member(body, "messages");
  if (!turns) {
    return fieldMissing("messages");
  }
  if (!turns->is_array()) {
    return fieldTypeError("messages", "an array", *turns);
  }
  if (turns->empty()) {
    return fieldValueError("messages", "must hold at least one message");
  }
  Conversation conversation(messages, out.params);
  for (size_t i = 0; i < turns->size(); ++i) {
    if (MaybeError e = conversation.message((*turns)[i], indexed("messages", i))) {
      return std::move(*e);
    }
  }
  chat["messages"] = std::move(messages);
  if (MaybeError e = readTools(body, chat, out.params)) {
    return std::move(*e);
  }
  if (MaybeError e = readToolChoice(body, chat)) {
    return std::move(*e);
  }
  const Json *maxTokens = member(body, "max_tokens");
  if (MaybeError e = readThinking(body, maxTokens, chat, out.thinkingBudget)) {
    return std::move(*e);
  }
  if (countTokens) {
    return out;
  }
  if (!maxTokens) {
    return fieldMissing("max_tokens");
  }
  if (!maxTokens->is_number_integer() || maxTokens->get<int64_t>() < 1) {
    return fieldValueError("max_tokens", "must be an integer of at least 1");
  }
  chat["max_tokens"] = *maxTokens;
  if (const Json *stream = member(body, "stream")) {
    if (!stream->is_boolean()) {
      return fieldTypeError("stream", "a boolean", *stream);
    }
    out.stream = stream->get<bool>();
  }
  if (const Json *temperature = member(body, "temperature")) {
    // Anthropic's range is [0, 1]; the chat parser checks the type.
    if (temperature->is_number() &&
        (temperature->get<double>() < 0 || temperature->get<double>() > 1)) {
      return fieldValueError("temperature", "must be in [0, 1]");
    }
    chat["temperature"] = *temperature;
  }
  // draft: glmc's extension, as in chat (docs/api.md); the chat parser checks it.
  for (const char *key : {"top_p", "top_k", "draft"}) {
    if (const Json *v = member(body, key)) {
      chat[key] = *v;
    }
  }
  if (const Json *stop = member(body, "stop_sequences")) {
    if (!stop->is_array()) {
      return fieldTypeError("stop_sequences", "an array of strings", *stop);
    }
    chat["stop"] = *stop;
  }
  out.params.add("stop", "stop_sequences");
  if (const Json *metadata = member(body, "metadata"); metadata && !metadata->is_object()) {
    return fieldTypeError("metadata", "an object", *metadata);
  }
  return out;
}

Json errorJson(const ApiError &error) {
  const char *type = "api_error";
  switch (error.status) {
  case 400:
  case 422:
    type = "invalid_request_error";
    break;
  case 401:
    type = "authentication_error";
    break;
  case 403:
    type = "permission_error";
    break;
  case 404:
    type = "not_found_error";
    break;
  case 408:
    type = "timeout_error";
    break;
  case 413:
    type = "request_too_large";
    break;
  case 429:
    type = "rate_limit_error";
    break;
  case 503:
  case 529:
    type = "overloaded_error";
    break;
  default:
    break;
  }
  return Json{{"type", "error"}, {"error", Json{{"type", type}, {"message", error.message}}}};
}

Json usageJson(const MessagesUsage &usage) {
  return Json{{"input_tokens", usage.inputTokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", usage.cacheReadInputTokens},
              {"output_tokens", usage.outputTokens}};
}

Json thinkingBlockJson(const std::string &thinking, const std::string &signature) {
  return Json{{"type", "thinking"}, {"thinking", thinking}, {"signature", signature}};
}

Json textBlockJson(const std::string &text) { return Json{{"type", "text"}, {"text", text}}; }

Json toolUseBlockJson(const ToolCall &call) {
  Json input = Json::parse(call.argumentsJson, nullptr, false);
  if (!input.is_object()) {
    input = Json::object();
  }
  const std::string id = call.id.starts_with("call_") ? "toolu_" + call.id.substr(5) : call.id;
  return Json{{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", std::move(input)}};
}

Json messageJson(const std::string &id, const std::string &model, const Json &content,
                 const Json &stopReason, const Json &stopSequence, const MessagesUsage &usage) {
  return Json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", stopReason},
              {"stop_sequence", stopSequence},
              {"usage", usageJson(usage)}};
}

} // namespace glm::server::anthropic
