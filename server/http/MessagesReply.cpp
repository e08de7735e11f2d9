// Anthropic's content blocks and stream events from the blocks of a one-choice reply.
#include "server/http/MessagesReply.h"

#include "server/anthropic/Messages.h"
#include "server/http/BlockReply.h"

#include <utility>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

class MessagesReply final : public BlockReply {
public:
  MessagesReply(const Tokenizer &tokenizer, MessagesReplyOptions options, int64_t promptTokens)
      : BlockReply(tokenizer, options.text, promptTokens), options_(std::move(options)) {}

  bool begin(const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    return event("message_start",
                 {{"message", anthropic::messageJson(options_.id, options_.model, Json::array(),
                                                     nullptr, nullptr, usage())}},
                 write) &&
           event("ping", Json::object(), write);
  }

  void end(const Write &write) override {
    if (error_) {
      const Json error = anthropic::errorJson(engineError(*error_));
      if (options_.stream) {
        write(strCat("event: error\ndata: ", error.dump(), "\n\n"));
      } else {
        write(error.dump());
      }
      return;
    }
    const Json reason = end_ == End::ToolCalls    ? "tool_use"
                        : end_ == End::StopString ? "stop_sequence"
                        : end_ == End::Length     ? "max_tokens"
                                                  : "end_turn";
    const Json sequence = end_ == End::StopString ? Json(stopString_) : Json(nullptr);
    if (!options_.stream) {
      Json content = Json::array();
      for (size_t i = 0; i < blocks_.size(); ++i) {
        content.push_back(block(i));
      }
      write(anthropic::messageJson(options_.id, options_.model, content, reason, sequence, usage())
                .dump());
      return;
    }
    event("message_delta",
          {{"delta", Json{{"stop_reason", reason}, {"stop_sequence", sequence}}},
           {"usage", anthropic::usageJson(usage())}},
          write);
    event("message_stop", Json::object(), write);
  }

  void interrupt(const ApiError &error, const Write &write) override {
    if (options_.stream) {
      write(strCat("event: error\ndata: ", anthropic::errorJson(error).dump(), "\n\n"));
    }
  }

protected:
  bool opened(size_t index, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const Block &b = blocks_[index];
    Json start = b.kind == Kind::Reasoning ? anthropic::thinkingBlockJson("", "")
                 : b.kind == Kind::Text    ? anthropic::textBlockJson("")
                                           : anthropic::toolUseBlockJson(b.call);
    if (b.kind == Kind::ToolCall) {
      start["input"] = Json::object(); // the input follows as input_json_delta
    }
    if (!event("content_block_start", {{"index", index}, {"content_block", start}}, write)) {
      return false;
    }
    if (b.kind != Kind::ToolCall) {
      return true;
    }
    return event(
        "content_block_delta",
        {{"index", index},
         {"delta", Json{{"type", "input_json_delta"},
                        {"partial_json", anthropic::toolUseBlockJson(b.call)["input"].dump()}}}},
        write);
  }

  bool extended(size_t index, std::string_view text, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    const bool thinking = blocks_[index].kind == Kind::Reasoning;
    return event(
        "content_block_delta",
        {{"index", index},
         {"delta", thinking ? Json{{"type", "thinking_delta"}, {"thinking", std::string(text)}}
                            : Json{{"type", "text_delta"}, {"text", std::string(text)}}}},
        write);
  }

  bool closed(size_t index, const Write &write) override {
    if (!options_.stream) {
      return true;
    }
    // A thinking block's signature comes last, just before its content_block_stop (the SDKs
    // read it there).
    if (blocks_[index].kind == Kind::Reasoning &&
        !event("content_block_delta",
               {{"index", index},
                {"delta",
                 Json{{"type", "signature_delta"}, {"signature", signature(blocks_[index].text)}}}},
               write)) {
      return false;
    }
    return event("content_block_stop", {{"index", index}}, write);
  }

private:
  Json block(size_t index) const {
    const Block &b = blocks_[index];
    return b.kind == Kind::Reasoning ? anthropic::thinkingBlockJson(b.text, signature(b.text))
           : b.kind == Kind::Text    ? anthropic::textBlockJson(b.text)
                                     : anthropic::toolUseBlockJson(b.call);
  }

  std::string signature(const std::string &thinking) const {
    return options_.signer ? options_.signer->sign(thinking) : std::string();
  }

  anthropic::MessagesUsage usage() const {
    return {promptTokens_ - cachedTokens_, tokens_, cachedTokens_};
  }

  static bool event(const char *type, Json fields, const Write &write) {
    Json json{{"type", type}};
    for (auto &[key, value] : fields.items()) {
      json[key] = std::move(value);
    }
    return write(strCat("event: ", type, "\ndata: ", json.dump(), "\n\n"));
  }

  const MessagesReplyOptions options_;
};

} // namespace

std::unique_ptr<ReplyStream> createMessagesReply(const Tokenizer &tokenizer,
                                                 MessagesReplyOptions options,
                                                 int64_t promptTokens) {
  return std::make_unique<MessagesReply>(tokenizer, std::move(options), promptTokens);
}

} // namespace glm::server
