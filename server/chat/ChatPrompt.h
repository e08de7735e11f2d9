// Chat-completions request to prompt text, as transformers' apply_chat_template builds it.
#pragma once

#include "base/Status.h"
#include "server/chat/ChatTemplate.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glm::server {

/// What a chat template sees of tokenizer_config.json: transformers' special_tokens_map
/// (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
/// additional_special_tokens), in that order, each only if the file sets it. (Named apart from
/// the tokenizer's own configuration type, which holds far more.)
struct ChatTokenizerConfig {
  std::vector<std::pair<std::string, nlohmann::ordered_json>> specialTokens;
};

/// Reads the special tokens from the text of a tokenizer_config.json.
Expected<ChatTokenizerConfig> parseChatTokenizerConfig(std::string_view text,
                                                       std::string_view source);
/// Reads MODEL_DIR/tokenizer_config.json; a checkpoint without one has no special tokens.
Expected<ChatTokenizerConfig> loadChatTokenizerConfig(const std::filesystem::path &modelDir);

/// The checkpoint's chat template: MODEL_DIR/chat_template.jinja, or else the `chat_template`
/// string of tokenizer_config.json (older checkpoints), as transformers looks for them.
Expected<ChatTemplate> loadChatTemplate(const std::filesystem::path &modelDir);

/// The template variables for a chat-completions request: `messages` (tool-call arguments sent
/// as JSON strings parsed into objects, since templates iterate them with .items();
/// `reasoning` copied to `reasoning_content`), `tools` (None when absent), `documents` (None),
/// `add_generation_prompt` (the request's, default true), the special tokens, the request's
/// `reasoning_effort`, then everything in `chat_template_kwargs`, which wins.
Expected<nlohmann::ordered_json> chatTemplateVariables(const nlohmann::ordered_json &request,
                                                       const ChatTokenizerConfig &tokenizer);

/// Whether the request turns thinking off: `enable_thinking: false` (or, without it,
/// `thinking: false`) among the variables, or else `reasoning_effort: "none"`.
bool chatThinkingDisabled(const nlohmann::ordered_json &variables);

/// A request's prompt, and whether the request turned thinking off (chatThinkingDisabled), which
/// says whether the reply starts inside a think block.
struct ChatPrompt {
  std::string text;
  bool thinkingDisabled = false;
};

/// The prompt for a request, from one computation of its template variables. With thinking off, a
/// prompt that ends by opening a think block gets it closed ("<|assistant|><think></think>"),
/// since GLM-5.3's template has no switch of its own for that.
Expected<ChatPrompt> renderChatRequest(const ChatTemplate &chatTemplate,
                                       const nlohmann::ordered_json &request,
                                       const ChatTokenizerConfig &tokenizer);

/// renderChatRequest's text alone.
Expected<std::string> renderChatPrompt(const ChatTemplate &chatTemplate,
                                       const nlohmann::ordered_json &request,
                                       const ChatTokenizerConfig &tokenizer);

/// Parses JSON text without exceptions; the error names `source` and says where parsing failed.
Expected<nlohmann::ordered_json> parseJsonText(std::string_view text, std::string_view source);

} // namespace glm::server
