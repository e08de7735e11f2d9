// Responses' output items and stream events from the blocks of a one-choice reply.
#include "server/http/ResponsesReply.h"

#include "server/http/BlockReply.h"
#include "server/openai/Responses.h"

#include <utility>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

class ResponsesReply final : public BlockReply {
public:
  ResponsesReply(const Tokenizer &tokenizer, ResponsesReplyOptions options, int64_t promptTokens)
      : BlockReply(tokenizer, options.text, promptTokens), options_(std::move(options)),
        created_(unixSeconds()) {}

  bool begin(const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const Json response = responseJson(options_.echo, options_.id, created_, "in_progress",
                                       Json::array(), std::nullopt);
    return event("response.created", {{"response", response}}, write) &&
           event("response.in_progress", {{"response", response}}, write);
  }

  void end(const Write &write) override {
    if (error_) {
      const ApiError error = engineError(*error_);
      if (options_.stream) {
        event("response.failed",
              {{"response", responseJson(options_.echo, options_.id, created_, "failed", output(),
                                         usage(), error)}},
              write);
      } else {
        write(error.toJson().dump());
      }
      return;
    }
    const std::string status = end_ == End::Length ? "incomplete" : "completed";
    const Json items = output();
    const Json response =
        responseJson(options_.echo, options_.id, created_, status, items, usage());
    if (options_.onComplete) {
      options_.onComplete(response, items);
    }
    if (options_.stream) {
      event(status == "completed" ? "response.completed" : "response.incomplete",
            {{"response", response}}, write);
    } else {
      write(response.dump());
    }
  }

  void interrupt(const ApiError &error, const Write &write) override {
    if (options_.stream) {
      event("error",
            {{"code", error.code.empty() ? Json(nullptr) : Json(error.code)},
             {"message", error.message},
             {"param", error.param ? Json(*error.param) : Json(nullptr)}},
            write);
    }
  }

protected:
  bool opened(size_t index, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const Block &b = blocks_[index];
    const std::string id = itemId(index);
    switch (b.kind) {
    case Kind::Reasoning:
      return event("response.output_item.added",
                   {{"output_index", index},
                    {"item", Json{{"id", id},
                                  {"type", "reasoning"},
                                  {"summary", Json::array()},
                                  {"content", Json::array()},
                                  {"status", "in_progress"}}}},
                   write) &&
             event("response.content_part.added",
                   {{"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", Json{{"type", "reasoning_text"}, {"text", ""}}}},
                   write);
    case Kind::Text:
      return event("response.output_item.added",
                   {{"output_index", index},
                    {"item", Json{{"id", id},
                                  {"type", "message"},
                                  {"status", "in_progress"},
                                  {"role", "assistant"},
                                  {"content", Json::array()}}}},
                   write) &&
             event("response.content_part.added",
                   {{"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", textPart("")}},
                   write);
    case Kind::ToolCall: {
      Json item = functionCallItemJson(id, b.call, "in_progress");
      item["arguments"] = "";
      return event("response.output_item.added", {{"output_index", index}, {"item", item}},
                   write) &&
             event("response.function_call_arguments.delta",
                   {{"item_id", id}, {"output_index", index}, {"delta", b.call.argumentsJson}},
                   write);
    }
    }
    return true;
  }

  bool extended(size_t index, std::string_view text, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const bool reasoning = blocks_[index].kind == Kind::Reasoning;
    Json fields{{"item_id", itemId(index)},
                {"output_index", index},
                {"content_index", 0},
                {"delta", std::string(text)}};
    if (!reasoning) {
      fields["logprobs"] = Json::array();
    }
    return event(reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", fields,
                 write);
  }

  bool closed(size_t index, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const Block &b = blocks_[index];
    const std::string id = itemId(index);
    const Json done = item(index);
    switch (b.kind) {
    case Kind::Reasoning:
      return event(
                 "response.reasoning_text.done",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", b.text}},
                 write) &&
             event("response.content_part.done",
                   {{"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", Json{{"type", "reasoning_text"}, {"text", b.text}}}},
                   write) &&
             event("response.output_item.done", {{"output_index", index}, {"item", done}}, write);
    case Kind::Text:
      return event("response.output_text.done",
                   {{"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"text", b.text},
                    {"logprobs", Json::array()}},
                   write) &&
             event("response.content_part.done",
                   {{"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", textPart(b.text)}},
                   write) &&
             event("response.output_item.done", {{"output_index", index}, {"item", done}}, write);
    case Kind::ToolCall:
      return event("response.function_call_arguments.done",
                   {{"item_id", id},
                    {"name", b.call.name},
                    {"output_index", index},
                    {"arguments", b.call.argumentsJson}},
                   write) &&
             event("response.output_item.done", {{"output_index", index}, {"item", done}}, write);
    }
    return true;
  }

private:
  static Json textPart(const std::string &text) {
    return Json{{"type", "output_text"},
                {"text", text},
                {"annotations", Json::array()},
                {"logprobs", Json::array()}};
  }

  /// Item ids carry the response's: unique across responses, stable within one.
  std::string itemId(size_t index) const {
    static constexpr const char *kPrefixes[] = {"rs_", "msg_", "fc_"};
    const std::string suffix = options_.id.substr(options_.id.find('_') + 1);
    return strCat(kPrefixes[static_cast<int>(blocks_[index].kind)], suffix, "_", index);
  }

  /// The item blocks_[index] is now: a block the token budget cut is incomplete.
  Json item(size_t index) const {
    const Block &b = blocks_[index];
    const std::string status =
        !b.open && !(ended_ && end_ == End::Length && index + 1 == blocks_.size()) ? "completed"
                                                                                   : "incomplete";
    switch (b.kind) {
    case Kind::Reasoning:
      return reasoningItemJson(itemId(index), b.text, status, options_.encryptedReasoning);
    case Kind::Text:
      return messageItemJson(itemId(index), b.text, status);
    case Kind::ToolCall:
      return functionCallItemJson(itemId(index), b.call, "completed");
    }
    return nullptr;
  }

  Json output() const {
    Json items = Json::array();
    for (size_t i = 0; i < blocks_.size(); ++i) {
      items.push_back(item(i));
    }
    return items;
  }

  ResponsesUsage usage() const {
    return ResponsesUsage{promptTokens_, tokens_, reasoningTokens_, cachedTokens_};
  }

  bool event(const char *type, Json fields, const Write &write) {
    Json json{{"type", type}};
    for (auto &[key, value] : fields.items()) {
      json[key] = std::move(value);
    }
    json["sequence_number"] = sequence_++;
    return write(strCat("event: ", type, "\ndata: ", json.dump(), "\n\n"));
  }

  const ResponsesReplyOptions options_;
  const int64_t created_;
  int64_t sequence_ = 0;
};

} // namespace

std::unique_ptr<ReplyStream> createResponsesReply(const Tokenizer &tokenizer,
                                                  ResponsesReplyOptions options,
                                                  int64_t promptTokens) {
  return std::make_unique<ResponsesReply>(tokenizer, std::move(options), promptTokens);
}

} // namespace glm::server
