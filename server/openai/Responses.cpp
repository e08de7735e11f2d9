// The Responses API: request translation, the response object, and the response store.
#include "server/openai/Responses.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

std::string indexed(const std::string &path, size_t i) { return strCat(path, "[", i, "]"); }

/// A required string member.
MaybeError readString(const Json &object, const char *key, const std::string &path,
                      std::string &out) {
  const Json *v = member(object, key);
  if (!v) {
    return fieldMissing(strCat(path, ".", key));
  }
  if (!v->is_string()) {
    return fieldTypeError(strCat(path, ".", key), "a string", *v);
  }
  out = v->get<std::string>();
  return std::nullopt;
}

/// Text parts of the given types, as chat text parts; anything else (images, files, audio) is
/// refused: the model reads text only, and dropping a part would answer another question.
MaybeError readTextParts(const Json &content, const std::string &path,
                         std::initializer_list<std::string_view> types, Json &out) {
  if (content.is_string()) {
    out = content;
    return std::nullopt;
  }
  if (!content.is_array()) {
    return fieldTypeError(path, "a string or an array of content parts", content);
  }
  out = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const Json &part = content[j];
    const std::string partPath = indexed(path, j);
    if (!part.is_object()) {
      return fieldTypeError(partPath, "an object", part);
    }
    std::string type;
    if (MaybeError e = readString(part, "type", partPath, type)) {
      return e;
    }
    if (std::find(types.begin(), types.end(), type) == types.end()) {
      std::string allowed;
      for (std::string_view t : types) {
        allowed += strCat(allowed.empty() ? "" : ", ", "\"", t, "\"");
      }
      return fieldUnsupported(partPath + ".type",
                              strCat("only text parts (", allowed, ") are supported here"));
    }
    const char *textKey = type == "refusal" ? "refusal" : "text";
    std::string text;
    if (MaybeError e = readString(part, textKey, partPath, text)) {
      return e;
    }
    out.push_back(Json{{"type", "text"}, {"text", std::move(text)}});
  }
  return std::nullopt;
}

/// The text of a reasoning item: its reasoning_text content, else its encrypted_content (ours
/// holds the text itself), else its summary.
MaybeError readReasoning(const Json &item, const std::string &path, std::string &out) {
  out.clear();
  if (const Json *content = member(item, "content")) {
    if (!content->is_array()) {
      return fieldTypeError(path + ".content", "an array", *content);
    }
    for (size_t j = 0; j < content->size(); ++j) {
      const Json &part = (*content)[j];
      const std::string partPath = indexed(path + ".content", j);
      if (!part.is_object()) {
        return fieldTypeError(partPath, "an object", part);
      }
      std::string text;
      if (MaybeError e = readString(part, "text", partPath, text)) {
        return e;
      }
      out += text;
    }
    if (!content->empty()) {
      return std::nullopt;
    }
  }
  if (const Json *encrypted = member(item, "encrypted_content")) {
    if (!encrypted->is_string()) {
      return fieldTypeError(path + ".encrypted_content", "a string", *encrypted);
    }
    out = encrypted->get<std::string>();
    return std::nullopt;
  }
  const Json *summary = member(item, "summary");
  if (!summary) {
    return fieldMissing(path + ".summary");
  }
  if (!summary->is_array()) {
    return fieldTypeError(path + ".summary", "an array", *summary);
  }
  for (size_t j = 0; j < summary->size(); ++j) {
    const Json &part = (*summary)[j];
    const std::string partPath = indexed(path + ".summary", j);
    if (!part.is_object()) {
      return fieldTypeError(partPath, "an object", part);
    }
    std::string text;
    if (MaybeError e = readString(part, "text", partPath, text)) {
      return e;
    }
    out += (j ? "\n\n" : "") + text;
  }
  return std::nullopt;
}

/// Turns Responses items into chat messages: messages stay messages, function_call items become
/// the tool_calls of an assistant message (consecutive ones share it), function_call_output
/// items tool messages, and a reasoning item the reasoning_content of the assistant turn after
/// it.
class Conversation {
public:
  Conversation(Json &messages, ParamMap &params) : messages_(messages), params_(params) {}

  MaybeError item(const Json &item, const std::string &path) {
    if (!item.is_object()) {
      return fieldTypeError(path, "an object", item);
    }
    std::string type = "message";
    if (const Json *t = member(item, "type")) {
      if (!t->is_string()) {
        return fieldTypeError(path + ".type", "a string", *t);
      }
      type = t->get<std::string>();
    }
    if (type == "message") {
      return message(item, path);
    }
    if (type == "function_call") {
      return functionCall(item, path);
    }
    if (type == "function_call_output") {
      return functionCallOutput(item, path);
    }
    if (type == "reasoning") {
      flushReasoning();
      if (MaybeError e = readReasoning(item, path, reasoning_)) {
        return e;
      }
      hasReasoning_ = true;
      reasoningPath_ = path;
      return std::nullopt;
    }
    return fieldUnsupported(path + ".type",
                            "only message, function_call, function_call_output and reasoning "
                            "items are supported");
  }

  /// At the end of the input: a reasoning item that no assistant turn followed becomes one.
  void finish() { flushReasoning(); }

private:
  MaybeError message(const Json &item, const std::string &path) {
    std::string role;
    if (MaybeError e = readString(item, "role", path, role)) {
      return e;
    }
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return fieldValueError(path + ".role",
                             "must be one of \"user\", \"system\", \"developer\", \"assistant\"");
    }
    const Json *content = member(item, "content");
    if (!content) {
      return fieldMissing(path + ".content");
    }
    Json parts;
    const bool assistant = role == "assistant";
    if (MaybeError e = readTextParts(
            *content, path + ".content",
            assistant
                ? std::initializer_list<std::string_view>{"output_text", "refusal", "input_text"}
                : std::initializer_list<std::string_view>{"input_text"},
            parts)) {
      return e;
    }
    if (!assistant) {
      flushReasoning();
    }
    Json message{{"role", role == "developer" ? "system" : role}, {"content", std::move(parts)}};
    if (assistant) {
      takeReasoning(message);
    }
    push(std::move(message), path);
    // Function calls after an assistant message belong to its turn.
    openAssistant_ = assistant;
    return std::nullopt;
  }

  MaybeError functionCall(const Json &item, const std::string &path) {
    std::string callId, name, arguments;
    if (MaybeError e = readString(item, "call_id", path, callId)) {
      return e;
    }
    if (MaybeError e = readString(item, "name", path, name)) {
      return e;
    }
    if (MaybeError e = readString(item, "arguments", path, arguments)) {
      return e;
    }
    // The chat template renders the arguments as a mapping.
    const Json parsed = Json::parse(arguments, nullptr, false);
    if (!parsed.is_object()) {
      return fieldValueError(path + ".arguments", "must be a JSON object serialised as a string");
    }
    if (!openAssistant_) {
      Json message{{"role", "assistant"}};
      takeReasoning(message);
      push(std::move(message), path);
      openAssistant_ = true;
    }
    Json &message = messages_.back();
    if (!message.contains("tool_calls")) {
      message["tool_calls"] = Json::array();
    }
    const size_t k = messages_.size() - 1, j = message["tool_calls"].size();
    message["tool_calls"].push_back(
        Json{{"id", callId},
             {"type", "function"},
             {"function", Json{{"name", name}, {"arguments", arguments}}}});
    params_.add(strCat("messages[", k, "].tool_calls[", j, "].function"), path);
    params_.add(strCat("messages[", k, "].tool_calls[", j, "]"), path);
    return std::nullopt;
  }

  MaybeError functionCallOutput(const Json &item, const std::string &path) {
    std::string callId;
    if (MaybeError e = readString(item, "call_id", path, callId)) {
      return e;
    }
    const Json *output = member(item, "output");
    if (!output) {
      return fieldMissing(path + ".output");
    }
    Json content;
    if (MaybeError e = readTextParts(*output, path + ".output", {"input_text"}, content)) {
      return e;
    }
    flushReasoning();
    push(Json{{"role", "tool"}, {"tool_call_id", callId}, {"content", std::move(content)}}, path);
    openAssistant_ = false;
    return std::nullopt;
  }

  void takeReasoning(Json &assistantMessage) {
    if (hasReasoning_) {
      assistantMessage["reasoning_content"] = std::move(reasoning_);
      hasReasoning_ = false;
    }
  }

  void flushReasoning() {
    if (hasReasoning_) {
      Json message{{"role", "assistant"}, {"content", ""}};
      takeReasoning(message);
      push(std::move(message), reasoningPath_);
      openAssistant_ = false;
    }
  }

  void push(Json message, const std::string &path) {
    params_.add(strCat("messages[", messages_.size(), "]"), path);
    messages_.push_back(std::move(message));
  }

  Json &messages_;
  ParamMap &params_;
  bool openAssistant_ = false; // the last message is an assistant turn that calls may join
  bool hasReasoning_ = false;
  std::string reasoning_;
  std::string reasoningPath_;
};

/// Function tools to chat tools; other kinds (web search, file search, computer use, MCP,
/// custom tools) are refused: the server runs none of them.
MaybeError readTools(const Json &body, Json &chatTools, ParamMap &params, Json &echo) {
  const Json *tools = member(body, "tools");
  echo["tools"] = Json::array();
  if (!tools) {
    return std::nullopt;
  }
  if (!tools->is_array()) {
    return fieldTypeError("tools", "an array", *tools);
  }
  chatTools = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json &tool = (*tools)[i];
    const std::string path = indexed("tools", i);
    if (!tool.is_object()) {
      return fieldTypeError(path, "an object", tool);
    }
    std::string type, name;
    if (MaybeError e = readString(tool, "type", path, type)) {
      return e;
    }
    if (type != "function") {
      return fieldUnsupported(path + ".type", "only function tools are supported");
    }
    if (MaybeError e = readString(tool, "name", path, name)) {
      return e;
    }
    Json function{{"name", name}};
    Json echoed{{"type", "function"}, {"name", name}};
    for (const char *key : {"description", "parameters", "strict"}) {
      if (const Json *v = member(tool, key)) {
        function[key] = *v;
      }
      echoed[key] = tool.contains(key) ? tool[key] : Json(nullptr);
    }
    if (!echoed["strict"].is_boolean()) {
      echoed["strict"] = true; // OpenAI's default for Responses function tools
    }
    if (echoed["parameters"].is_null()) {
      echoed["parameters"] = Json::object();
    }
    chatTools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
    // The chat parser's "tools[i].function.parameters" is the request's "tools[i].parameters".
    params.add(strCat("tools[", i, "].function"), path);
    params.add(path, path);
    echo["tools"].push_back(std::move(echoed));
  }
  return std::nullopt;
}

MaybeError readToolChoice(const Json &body, Json &chat, Json &echo) {
  const Json *choice = member(body, "tool_choice");
  echo["tool_choice"] = choice ? *choice : Json("auto");
  if (!choice) {
    return std::nullopt;
  }
  if (choice->is_string()) {
    const std::string &mode = choice->get_ref<const std::string &>();
    if (mode != "auto" && mode != "none" && mode != "required") {
      return fieldValueError("tool_choice", "must be \"auto\", \"none\", \"required\" or "
                                            "{\"type\": \"function\", \"name\": ...}");
    }
    chat["tool_choice"] = mode;
    return std::nullopt;
  }
  if (!choice->is_object()) {
    return fieldTypeError("tool_choice", "a string or an object", *choice);
  }
  std::string type, name;
  if (MaybeError e = readString(*choice, "type", "tool_choice", type)) {
    return e;
  }
  if (type != "function") {
    return fieldUnsupported("tool_choice.type", "only function tools can be chosen");
  }
  if (MaybeError e = readString(*choice, "name", "tool_choice", name)) {
    return e;
  }
  chat["tool_choice"] = Json{{"type", "function"}, {"function", Json{{"name", name}}}};
  return std::nullopt;
}

/// text.format to response_format (the chat parser decides what it supports).
MaybeError readTextFormat(const Json &body, Json &chat, ParamMap &params, Json &echo) {
  Json format{{"type", "text"}};
  std::string verbosity = "medium";
  if (const Json *text = member(body, "text")) {
    if (!text->is_object()) {
      return fieldTypeError("text", "an object", *text);
    }
    if (const Json *v = member(*text, "verbosity")) {
      if (!v->is_string() || (*v != "low" && *v != "medium" && *v != "high")) {
        return fieldValueError("text.verbosity", "must be \"low\", \"medium\" or \"high\"");
      }
      verbosity = v->get<std::string>();
    }
    if (const Json *f = member(*text, "format")) {
      if (!f->is_object()) {
        return fieldTypeError("text.format", "an object", *f);
      }
      std::string type;
      if (MaybeError e = readString(*f, "type", "text.format", type)) {
        return e;
      }
      format = *f;
      if (type == "json_object") {
        chat["response_format"] = Json{{"type", "json_object"}};
      } else if (type == "json_schema") {
        Json schema = *f;
        schema.erase("type");
        chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", schema}};
      } else if (type != "text") {
        return fieldValueError("text.format.type",
                               "must be \"text\", \"json_object\" or \"json_schema\"");
      }
    }
  }
  params.add("response_format.json_schema", "text.format");
  params.add("response_format", "text.format");
  echo["text"] = Json{{"format", format}, {"verbosity", verbosity}};
  return std::nullopt;
}

MaybeError readReasoningOptions(const Json &body, Json &chat, Json &echo) {
  Json effort = nullptr, summary = nullptr;
  if (const Json *reasoning = member(body, "reasoning")) {
    if (!reasoning->is_object()) {
      return fieldTypeError("reasoning", "an object", *reasoning);
    }
    if (const Json *e = member(*reasoning, "effort")) {
      static constexpr std::string_view kEfforts[] = {"none",   "minimal", "low",
                                                      "medium", "high",    "xhigh"};
      if (!e->is_string() || std::find(std::begin(kEfforts), std::end(kEfforts),
                                       e->get<std::string>()) == std::end(kEfforts)) {
        return fieldValueError("reasoning.effort", "must be one of \"none\", \"minimal\", "
                                                   "\"low\", \"medium\", \"high\", \"xhigh\"");
      }
      effort = *e;
      chat["reasoning_effort"] = *e;
    }
    // The reasoning is returned whole, as the item's reasoning_text content (the schema's place
    // for the reasoning itself); a summary asked for is accepted and echoed, and the item's
    // summary stays empty: writing one would take a second generation, and copying the
    // reasoning there would call the whole text a summary (docs/api.md).
    for (const char *key : {"summary", "generate_summary"}) {
      if (const Json *s = member(*reasoning, key)) {
        if (!s->is_string() ||
            (*s != "auto" && *s != "concise" && *s != "detailed" && *s != "none")) {
          return fieldValueError(strCat("reasoning.", key),
                                 "must be \"auto\", \"concise\", \"detailed\" or \"none\"");
        }
        summary = *s;
      }
    }
  }
  echo["reasoning"] = Json{{"effort", effort}, {"summary", summary}};
  return std::nullopt;
}

/// Fields of the Responses API that this server cannot honour: refused, never ignored.
MaybeError refuseUnsupported(const Json &body, bool &encryptedReasoning) {
  if (const Json *background = member(body, "background");
      background && !(background->is_boolean() && !background->get<bool>())) {
    return fieldUnsupported("background", "background responses are not supported");
  }
  for (const char *key : {"conversation", "prompt"}) {
    if (member(body, key)) {
      return fieldUnsupported(key, strCat("'", key,
                                          "' is not supported: send the input, or use "
                                          "previous_response_id"));
    }
  }
  if (const Json *truncation = member(body, "truncation");
      truncation && *truncation != "disabled") {
    return fieldUnsupported("truncation", "only \"disabled\" is supported: an input beyond the "
                                          "context is refused, never cut");
  }
  if (const Json *top = member(body, "top_logprobs");
      top && !(top->is_number_integer() && top->get<int64_t>() == 0)) {
    return fieldUnsupported("top_logprobs", "logprobs are not returned by /v1/responses");
  }
  if (const Json *include = member(body, "include")) {
    if (!include->is_array()) {
      return fieldTypeError("include", "an array", *include);
    }
    for (size_t i = 0; i < include->size(); ++i) {
      const Json &v = (*include)[i];
      if (!v.is_string()) {
        return fieldTypeError(indexed("include", i), "a string", v);
      }
      if (v == "reasoning.encrypted_content") {
        encryptedReasoning = true;
      } else if (v == "message.output_text.logprobs") {
        return fieldUnsupported(indexed("include", i),
                                "logprobs are not returned by /v1/responses");
      }
      // The others name outputs of tools this server never runs (file search, code
      // interpreter...): nothing to include.
    }
  }
  return std::nullopt;
}

MaybeError readBool(const Json &body, const char *key, bool &out) {
  if (const Json *v = member(body, key)) {
    if (!v->is_boolean()) {
      return fieldTypeError(key, "a boolean", *v);
    }
    out = v->get<bool>();
  }
  return std::nullopt;
}

} // namespace

std::variant<ResponsesRequest, ApiError> parseResponsesRequest(std::string_view text,
                                                               const ConversationLookup &lookup) {
  std::variant<Json, ApiError> parsed = parseClientBody(text);
  if (ApiError *error = std::get_if<ApiError>(&parsed)) {
    return std::move(*error);
  }
  const Json &body = std::get<Json>(parsed);
  ResponsesRequest out;
  Json &chat = out.chatBody = Json::object();
  Json &echo = out.echo = Json::object();
  std::string model;
  if (MaybeError e = readString(body, "model", "body", model)) {
    e->param = "model";
    e->message = e->code == "missing_required_parameter"
                     ? "Missing required parameter: 'model'."
                     : "Invalid type for 'model': expected a string.";
    return std::move(*e);
  }
  chat["model"] = model;
  echo["model"] = model;
  if (MaybeError e = refuseUnsupported(body, out.encryptedReasoning)) {
    return std::move(*e);
  }
  if (MaybeError e = readBool(body, "stream", out.stream)) {
    return std::move(*e);
  }
  if (MaybeError e = readBool(body, "store", out.store)) {
    return std::move(*e);
  }
  echo["store"] = out.store;

  Json messages = Json::array();
  Conversation conversation(messages, out.params);
  Json instructions = nullptr;
  if (const Json *v = member(body, "instructions")) {
    if (!v->is_string()) {
      return fieldUnsupported("instructions", "only a string is supported");
    }
    instructions = *v;
    out.params.add("messages[0]", "instructions");
    messages.push_back(Json{{"role", "system"}, {"content", *v}});
  }
  echo["instructions"] = instructions;

  // The previous response's conversation (instructions are not carried over, as OpenAI's).
  out.conversation = Json::array();
  Json previousId = nullptr;
  if (const Json *previous = member(body, "previous_response_id")) {
    if (!previous->is_string()) {
      return fieldTypeError("previous_response_id", "a string", *previous);
    }
    const std::string &id = previous->get_ref<const std::string &>();
    std::optional<Json> items = lookup ? lookup(id) : std::nullopt;
    if (!items) {
      ApiError error = fieldValueError("previous_response_id", "");
      error.code = "previous_response_not_found";
      error.message = strCat("Previous response with id '", id.substr(0, 128),
                             "' not found (responses are kept in memory, a bounded number, "
                             "and only with store: true).");
      return error;
    }
    for (const Json &item : *items) {
      if (MaybeError e = conversation.item(item, "previous_response_id")) {
        return std::move(*e);
      }
      out.conversation.push_back(item);
    }
    previousId = *previous;
  }
  echo["previous_response_id"] = previousId;

  const Json *input = member(body, "input");
  if (!input) {
    return fieldMissing("input");
  }
  if (input->is_string()) {
    Json item{{"type", "message"}, {"role", "user"}, {"content", *input}};
    if (MaybeError e = conversation.item(item, "input")) {
      return std::move(*e);
    }
    out.conversation.push_back(std::move(item));
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      if (MaybeError e = conversation.item((*input)[i], indexed("input", i))) {
        return std::move(*e);
      }
      out.conversation.push_back((*input)[i]);
    }
  } else {
    return fieldTypeError("input", "a string or an array of input items", *input);
  }
  conversation.finish();
  if (messages.empty()) {
    return fieldValueError("input", "the input must hold at least one item");
  }
  chat["messages"] = std::move(messages);

  Json chatTools;
  if (MaybeError e = readTools(body, chatTools, out.params, echo)) {
    return std::move(*e);
  }
  if (!chatTools.is_null()) {
    chat["tools"] = std::move(chatTools);
  }
  if (MaybeError e = readToolChoice(body, chat, echo)) {
    return std::move(*e);
  }
  if (MaybeError e = readTextFormat(body, chat, out.params, echo)) {
    return std::move(*e);
  }
  if (MaybeError e = readReasoningOptions(body, chat, echo)) {
    return std::move(*e);
  }
  // Sampling: checked by the chat parser, echoed as given (OpenAI's defaults otherwise).
  echo["temperature"] = 1.0;
  echo["top_p"] = 1.0;
  for (const char *key : {"temperature", "top_p"}) {
    if (const Json *v = member(body, key)) {
      chat[key] = *v;
      echo[key] = *v;
    }
  }
  // glmc's extension, as in chat (docs/api.md): the chat parser checks it, under the same name.
  if (const Json *v = member(body, "draft")) {
    chat["draft"] = *v;
  }
  echo["max_output_tokens"] = nullptr;
  if (const Json *v = member(body, "max_output_tokens")) {
    chat["max_tokens"] = *v;
    echo["max_output_tokens"] = *v;
  }
  out.params.add("max_tokens", "max_output_tokens");
  out.params.add("max_completion_tokens", "max_output_tokens");
  bool parallel = true;
  if (MaybeError e = readBool(body, "parallel_tool_calls", parallel)) {
    return std::move(*e);
  }
  chat["parallel_tool_calls"] = parallel;
  echo["parallel_tool_calls"] = parallel;
  echo["metadata"] = Json::object();
  if (const Json *metadata = member(body, "metadata")) {
    if (!metadata->is_object()) {
      return fieldTypeError("metadata", "an object", *metadata);
    }
    if (metadata->size() > 16) {
      return fieldValueError("metadata", "at most 16 keys");
    }
    for (const auto &[key, value] : metadata->items()) {
      if (!value.is_string()) {
        return fieldTypeError(strCat("metadata.", key.substr(0, 64)), "a string", value);
      }
    }
    echo["metadata"] = *metadata;
  }
  for (const char *key : {"user", "safety_identifier", "prompt_cache_key"}) {
    if (const Json *v = member(body, key); v && !v->is_string()) {
      return fieldTypeError(key, "a string", *v);
    }
  }
  if (const Json *user = member(body, "user")) {
    echo["user"] = *user;
  }
  return out;
}

Json responsesUsageJson(const ResponsesUsage &usage) {
  return Json{{"input_tokens", usage.inputTokens},
              {"input_tokens_details",
               Json{{"cached_tokens", usage.cachedTokens}, {"cache_write_tokens", 0}}},
              {"output_tokens", usage.outputTokens},
              {"output_tokens_details", Json{{"reasoning_tokens", usage.reasoningTokens}}},
              {"total_tokens", usage.inputTokens + usage.outputTokens}};
}

Json reasoningItemJson(const std::string &id, const std::string &text, const std::string &status,
                       bool encrypted) {
  Json item{{"id", id},
            {"type", "reasoning"},
            {"summary", Json::array()},
            {"content", Json::array({Json{{"type", "reasoning_text"}, {"text", text}}})},
            {"status", status}};
  if (encrypted) {
    // Not encrypted: the reasoning itself, for a client that sends the item back.
    item["encrypted_content"] = text;
  }
  return item;
}

Json messageItemJson(const std::string &id, const std::string &text, const std::string &status) {
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", Json::array({Json{{"type", "output_text"},
                                            {"text", text},
                                            {"annotations", Json::array()},
                                            {"logprobs", Json::array()}}})}};
}

Json functionCallItemJson(const std::string &id, const ToolCall &call, const std::string &status) {
  return Json{{"id", id},           {"type", "function_call"},
              {"status", status},   {"arguments", call.argumentsJson},
              {"call_id", call.id}, {"name", call.name}};
}

Json responseJson(const Json &echo, const std::string &id, int64_t createdAt,
                  const std::string &status, const Json &output,
                  const std::optional<ResponsesUsage> &usage,
                  const std::optional<ApiError> &error) {
  Json r{{"id", id},
         {"object", "response"},
         {"created_at", createdAt},
         {"status", status},
         {"background", false},
         {"completed_at", status == "completed" ? Json(unixSeconds()) : Json(nullptr)},
         {"error",
          error ? Json{{"code", "server_error"}, {"message", error->message}} : Json(nullptr)},
         {"incomplete_details",
          status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)}};
  for (const char *key : {"instructions", "max_output_tokens", "model"}) {
    r[key] = echo.contains(key) ? echo[key] : Json(nullptr);
  }
  r["output"] = output;
  for (const char *key : {"parallel_tool_calls", "previous_response_id", "reasoning", "store",
                          "temperature", "text", "tool_choice", "tools", "top_p"}) {
    r[key] = echo.contains(key) ? echo[key] : Json(nullptr);
  }
  r["truncation"] = "disabled";
  // OpenAI's schema has no null for these: absent until known (usage), or unless given (user).
  if (usage) {
    r["usage"] = responsesUsageJson(*usage);
  }
  if (echo.contains("user") && echo["user"].is_string()) {
    r["user"] = echo["user"];
  }
  r["metadata"] = echo.contains("metadata") ? echo["metadata"] : Json::object();
  return r;
}

ApiError responseNotFound(const std::string &id) {
  ApiError error;
  error.status = 404;
  error.code = "not_found";
  error.message = strCat("No response found with id '", id.substr(0, 128),
                         "' (responses are kept in memory, a bounded number, and only with "
                         "store: true).");
  return error;
}

ResponseStore::ResponseStore(size_t maxResponses, size_t maxBytes)
    : maxResponses_(maxResponses), maxBytes_(maxBytes) {}

void ResponseStore::put(const std::string &id, Json response, Json conversation) {
  const size_t bytes = id.size() + response.dump().size() + conversation.dump().size();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    entries_.erase(it->second);
    index_.erase(it);
  }
  if (bytes > maxBytes_ || maxResponses_ == 0) {
    return;
  }
  while (!entries_.empty() && (entries_.size() >= maxResponses_ || bytes_ + bytes > maxBytes_)) {
    bytes_ -= entries_.back().bytes;
    index_.erase(entries_.back().id);
    entries_.pop_back();
  }
  entries_.push_front(Entry{id, std::move(response), std::move(conversation), bytes});
  index_[id] = entries_.begin();
  bytes_ += bytes;
}

ResponseStore::Entry *ResponseStore::find(const std::string &id) {
  auto it = index_.find(id);
  if (it == index_.end()) {
    return nullptr;
  }
  entries_.splice(entries_.begin(), entries_, it->second);
  return &entries_.front();
}

std::optional<Json> ResponseStore::response(const std::string &id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry *entry = find(id);
  return entry ? std::optional<Json>(entry->response) : std::nullopt;
}

std::optional<Json> ResponseStore::conversation(const std::string &id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry *entry = find(id);
  return entry ? std::optional<Json>(entry->conversation) : std::nullopt;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

} // namespace glm::server
