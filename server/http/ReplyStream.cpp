// The reply pipeline: tokens to text (ReplyText), then SSE chunks (StreamedReply) or a body.
// Every object is built by server/openai/Protocol.
#include "server/http/ReplyStream.h"

#include "server/openai/Protocol.h"
#include "server/openai/ReasoningSplitter.h"
#include "server/openai/ToolCallParser.h"
#include "server/tokenizer/StreamingDetokenizer.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

namespace glm::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::string randomId(const char *prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mutex);
  char hex[25];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFull));
  return std::string(prefix) + hex;
}

/// A request the engine failed: 503 when the engine lost a part it needs (a tensor-parallel rank;
/// the client may retry once /health is ok again), 500 otherwise.
ApiError engineError(const Status &error) {
  return error.code() == StatusCode::Unavailable
             ? ApiError{503, "server_error", "engine_unavailable", error.message()}
             : ApiError{500, "server_error", "engine_error", error.message()};
}

std::optional<std::string> unlessEmpty(const std::string &text) {
  return text.empty() ? std::nullopt : std::optional(text);
}

/// Turns a request's tokens into visible text: detokenized, split into reasoning and content,
/// tool calls parsed out of the content, stop strings applied.
class ReplyText {
public:
  ReplyText(const Tokenizer &tokenizer, const ReplyOptions &options, uint64_t idSeed)
      // Special tokens stay in the text: <think>, </think> and the tool-call markers are special
      // tokens the splitter and parser need; end-of-sequence tokens never reach here.
      : detokenizer_(tokenizer, /*skipSpecialTokens=*/false), chat_(options.chat),
        splitter_(options.startsInReasoning), tools_(options.tools, idSeed),
        // Without tools (or with tool_choice "none"), tool-call markup is plain content.
        parseTools_(!options.tools.is_null() && !options.tools.empty()), stop_(options.stop) {
    for (const std::string &s : stop_) {
      holdBack_ = std::max(holdBack_, s.size() - 1);
    }
  }

  struct Delta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> calls;
    bool stopped = false; // a stop string ended the reply
  };

  Expected<Delta> feed(int32_t token) {
    GLM_ASSIGN_OR_RETURN(std::string text, detokenizer_.feed(token));
    return route(text, false);
  }
  Expected<Delta> finish() { return route(detokenizer_.finish(), true); }

private:
  Delta route(const std::string &text, bool final) {
    Delta out;
    if (stopped_) {
      return out;
    }
    std::string content = text;
    if (chat_) {
      ReasoningSplitter::Delta d = splitter_.feed(text);
      if (final) {
        ReasoningSplitter::Delta rest = splitter_.finish();
        d.reasoning += rest.reasoning;
        d.content += rest.content;
      }
      out.reasoning = std::move(d.reasoning);
      content = std::move(d.content);
    }
    // Stop strings apply to the visible content; the last (longest stop - 1) bytes are held
    // back so a stop string split across tokens is still caught.
    pending_ += content;
    size_t cut = std::string::npos;
    for (const std::string &s : stop_) {
      cut = std::min(cut, pending_.find(s));
    }
    std::string release;
    if (cut != std::string::npos) {
      release = pending_.substr(0, cut);
      pending_.clear();
      stopped_ = out.stopped = true;
    } else if (final) {
      release = std::move(pending_);
      pending_.clear();
    } else if (pending_.size() > holdBack_) {
      size_t keep = pending_.size() - holdBack_;
      while (keep > 0 && (static_cast<uint8_t>(pending_[keep]) & 0xC0) == 0x80) {
        --keep; // never split a UTF-8 sequence
      }
      release = pending_.substr(0, keep);
      pending_.erase(0, keep);
    }
    if (chat_ && parseTools_) {
      ToolCallParser::Delta t = tools_.feed(release);
      if (final || out.stopped) {
        ToolCallParser::Delta rest = tools_.finish();
        t.content += rest.content;
        t.calls.insert(t.calls.end(), rest.calls.begin(), rest.calls.end());
      }
      out.content = std::move(t.content);
      out.calls = std::move(t.calls);
    } else {
      out.content = std::move(release);
    }
    return out;
  }

  StreamingDetokenizer detokenizer_;
  bool chat_;
  ReasoningSplitter splitter_;
  ToolCallParser tools_;
  bool parseTools_;
  std::vector<std::string> stop_;
  size_t holdBack_ = 0;
  std::string pending_;
  bool stopped_ = false;
};

/// What both reply forms share: the text pipeline, the finish reason and the engine's error.
/// They differ in how a delta, an error and the end are written.
class ReplyBase : public ReplyStream {
public:
  ReplyBase(const Tokenizer &tokenizer, ReplyOptions options, int64_t promptTokens)
      : options_(std::move(options)),
        // Tool-call ids must differ between replies: clients match tool results to calls by id.
        text_(tokenizer, options_, std::random_device{}()),
        id_(randomId(options_.chat ? "chatcmpl-" : "cmpl-")), created_(unixSeconds()),
        promptTokens_(promptTokens) {}

  bool token(int32_t token, const Write &write) final {
    Expected<ReplyText::Delta> d = text_.feed(token);
    if (!d.ok()) {
      return true;
    }
    if (!deliverCounted(*d, write)) {
      return false;
    }
    stoppedByString_ |= d->stopped;
    return true;
  }

  bool stopped() const final { return stoppedByString_; }

  void end(const GenerationEnd &end, const Write &write) final {
    if (end.reason == runtime::FinishReason::Error) {
      fail(engineError(end.error).toJson(), write);
      return;
    }
    if (Expected<ReplyText::Delta> rest = text_.finish(); rest.ok()) {
      deliverCounted(*rest, write);
    }
    complete(finishReason(end.reason), Usage{promptTokens_, end.completionTokens}, write);
  }

protected:
  /// Writes (or keeps) one delta of text; `firstToolIndex` numbers its tool calls.
  virtual bool deliver(const ReplyText::Delta &d, int64_t firstToolIndex, const Write &write) = 0;
  /// Writes the engine's error in place of the rest of the reply.
  virtual void fail(const OrderedJson &error, const Write &write) = 0;
  /// Writes the end of a reply the engine finished.
  virtual void complete(const std::string &finishReason, const Usage &usage,
                        const Write &write) = 0;

  const ReplyOptions options_;
  ReplyText text_;
  const std::string id_;
  const int64_t created_;
  const int64_t promptTokens_;

private:
  bool deliverCounted(const ReplyText::Delta &d, const Write &write) {
    const int64_t first = toolCalls_;
    toolCalls_ += static_cast<int64_t>(d.calls.size());
    return deliver(d, first, write);
  }

  /// finish_reason: a reply with tool calls ends in "tool_calls"; a stop string is a "stop"
  /// whatever the engine's reason.
  std::string finishReason(runtime::FinishReason reason) const {
    if (toolCalls_ > 0) {
      return "tool_calls";
    }
    if (stoppedByString_) {
      return "stop";
    }
    return reason == runtime::FinishReason::Length ? "length" : "stop";
  }

  int64_t toolCalls_ = 0;
  bool stoppedByString_ = false;
};

/// Server-sent events: one chunk per visible delta, the finish chunk, the usage chunk when asked
/// for, then [DONE].
class StreamedReply final : public ReplyBase {
public:
  using ReplyBase::ReplyBase;

  bool begin(const Write &write) override {
    // The role chunk goes with the first engine output, as vLLM sends it: clients (and
    // `vllm bench serve`) take the first chunk as the first token, so sending it at request
    // receipt would report a time to first token that excludes queueing and prefill.
    return !options_.chat ||
           event(chatCompletionChunkJson(id_, created_, options_.model,
                                         chatDeltaJson(true, std::nullopt, std::nullopt),
                                         std::nullopt),
                 write);
  }

protected:
  bool deliver(const ReplyText::Delta &d, int64_t firstToolIndex, const Write &write) override {
    if (!options_.chat) {
      return d.content.empty() ||
             event(completionChunkJson(id_, created_, options_.model, d.content, std::nullopt),
                   write);
    }
    const OrderedJson delta = chatDeltaJson(false, unlessEmpty(d.content), unlessEmpty(d.reasoning),
                                            d.calls, firstToolIndex);
    return delta.empty() ||
           event(chatCompletionChunkJson(id_, created_, options_.model, delta, std::nullopt),
                 write);
  }

  void fail(const OrderedJson &error, const Write &write) override {
    event(error, write);
    write(kSseDone);
  }

  void complete(const std::string &finishReason, const Usage &usage, const Write &write) override {
    event(options_.chat ? chatCompletionChunkJson(id_, created_, options_.model,
                                                  OrderedJson::object(), finishReason)
                        : completionChunkJson(id_, created_, options_.model, "", finishReason),
          write);
    if (options_.includeUsage) {
      event(options_.chat ? chatUsageChunkJson(id_, created_, options_.model, usage)
                          : completionUsageChunkJson(id_, created_, options_.model, usage),
            write);
    }
    write(kSseDone);
  }

private:
  static bool event(const OrderedJson &json, const Write &write) { return write(sseData(json)); }
};

/// One JSON body, written once the engine is done.
class WholeReply final : public ReplyBase {
public:
  using ReplyBase::ReplyBase;

  bool begin(const Write &) override { return true; }

protected:
  bool deliver(const ReplyText::Delta &d, int64_t, const Write &) override {
    reasoning_ += d.reasoning;
    content_ += d.content;
    calls_.insert(calls_.end(), d.calls.begin(), d.calls.end());
    return true;
  }

  void fail(const OrderedJson &error, const Write &write) override { write(error.dump()); }

  void complete(const std::string &finishReason, const Usage &usage, const Write &write) override {
    const std::optional<std::string> reasoning =
        options_.startsInReasoning ? std::optional(reasoning_) : std::nullopt;
    write(
        options_.chat
            ? chatCompletionJson(id_, created_, options_.model, content_, reasoning, calls_,
                                 finishReason, usage)
                  .dump()
            : completionJson(id_, created_, options_.model, content_, finishReason, usage).dump());
  }

private:
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
};

} // namespace

std::unique_ptr<ReplyStream> ReplyStream::create(const Tokenizer &tokenizer, ReplyOptions options,
                                                 int64_t promptTokens) {
  if (options.stream) {
    return std::make_unique<StreamedReply>(tokenizer, std::move(options), promptTokens);
  }
  return std::make_unique<WholeReply>(tokenizer, std::move(options), promptTokens);
}

} // namespace glm::server
