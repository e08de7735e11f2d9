// The reply pipeline: tokens to text (ReplyText), then SSE chunks (StreamedReply) or a body.
// Every object is built by server/openai/Protocol.
#include "server/http/ReplyStream.h"

#include "server/http/ReplyText.h"
#include "server/openai/Protocol.h"

#include <algorithm>
#include <optional>
#include <random>
#include <span>
#include <utility>

namespace glm::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::optional<std::string> unlessEmpty(const std::string &text) {
  return text.empty() ? std::nullopt : std::optional(text);
}

/// A token as logprobs show it: its bytes decoded alone (a partial UTF-8 sequence comes out as
/// U+FFFD, OpenAI's lossy `token`) and the bytes themselves; an id the tokenizer lacks has no
/// text and no bytes.
TokenText tokenText(const Tokenizer &tokenizer, int32_t id, float logprob) {
  TokenText out;
  out.logprob = logprob;
  if (Expected<std::string> text = tokenizer.decode(std::span<const TokenId>(&id, 1)); text.ok()) {
    out.token = std::move(*text);
    out.bytes = std::string(tokenizer.tokenBytes(id));
  }
  return out;
}

bool isContinuationByte(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

/// What both reply forms share: a text pipeline per choice, the finish reasons, the usage and the
/// engine's error. They differ in how a delta, a choice's end, the reply's end and an error are
/// written.
class ReplyBase : public ReplyStream {
public:
  ReplyBase(const Tokenizer &tokenizer, ReplyOptions options, int64_t promptTokens)
      : options_(std::move(options)), tokenizer_(tokenizer), created_(unixSeconds()),
        promptTokens_(promptTokens) {
    // Tool-call ids must differ between replies and between choices: clients match tool results
    // to calls by id (the parser mixes its seed, so consecutive seeds give unrelated ids).
    const uint64_t idSeed = std::random_device{}();
    choices_.reserve(static_cast<size_t>(options_.n));
    for (int i = 0; i < options_.n; ++i) {
      choices_.emplace_back(tokenizer, options_, idSeed + static_cast<uint64_t>(i));
    }
  }

  bool token(int choice, const runtime::SampledToken &token, const Write &write) final {
    Choice *c = live(choice);
    if (!c) {
      return true;
    }
    // Every token the reply shows counts, and has logprobs, whichever part of the reply its
    // text lands in (reasoning, content, tool-call markup) and even when its text is held back
    // or cut by a stop string: so the logprobs cover exactly completion_tokens, as vLLM's.
    ++c->tokens;
    if (options_.logprobs) {
      c->logprobs.push_back(logprobsOf(*c, token));
    }
    Expected<ReplyText::Delta> d = c->text.feed(token.id);
    if (!d.ok()) {
      return true;
    }
    if (!deliverCounted(choice, *d, write)) {
      return false;
    }
    if (d->stopped) {
      // A stop string ends the choice now; the engine may generate more of it (it stops a whole
      // request only), and that is neither shown nor counted.
      c->stoppedByString = true;
      return close(choice, runtime::FinishReason::Stop, write);
    }
    return true;
  }

  bool finish(int choice, runtime::FinishReason reason, const Status &error,
              const Write &write) final {
    if (reason == runtime::FinishReason::Error && !error_) {
      error_ = error;
    }
    Choice *c = live(choice);
    if (!c) {
      return true;
    }
    if (Expected<ReplyText::Delta> rest = c->text.finish(); rest.ok()) {
      if (!deliverCounted(choice, *rest, write)) {
        return false;
      }
    }
    return close(choice, reason, write);
  }

  bool complete() const final {
    return error_ ||
           std::all_of(choices_.begin(), choices_.end(), [](const Choice &c) { return c.closed; });
  }

  const std::optional<Status> &engineFailure() const final { return error_; }

  void interrupt(const ApiError &error, const Write &write) final {
    if (!interruptible()) {
      return;
    }
    writeEvent(error.toJson(), write);
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice &c = choices_[i];
      if (!c.closed) {
        c.closed = true;
        c.finishReason = "length";
        if (!completeChoice(static_cast<int>(i), write)) {
          return;
        }
      }
    }
    write(kSseDone);
  }

  void end(const Write &write) final {
    if (error_) {
      fail(engineError(*error_).toJson(), write);
      return;
    }
    int64_t completionTokens = 0;
    for (const Choice &c : choices_) {
      completionTokens += c.tokens;
    }
    completeReply(Usage{promptTokens_, completionTokens, cachedTokens_}, write);
  }

  Summary summary() const final {
    Summary s;
    for (const Choice &c : choices_) {
      s.outputTokens += c.tokens;
      s.finishReasons.push_back(error_ ? "error" : c.closed ? c.finishReason : "cancelled");
    }
    return s;
  }

protected:
  /// One choice's text and what is known of it so far.
  struct Choice {
    Choice(const Tokenizer &tokenizer, const ReplyOptions &options, uint64_t idSeed)
        : text(tokenizer, textOptions(options), idSeed), codePoints(codePointsOf(options.echo)) {}
    ReplyText text;
    int64_t tokens = 0;    // completion tokens, up to the end of the choice
    int64_t toolCalls = 0; // tool calls written so far
    bool stoppedByString = false;
    bool closed = false;      // its end is written: what the engine still sends is dropped
    int64_t codePoints;       // characters begun in its text so far (text_offset), echo included
    std::string finishReason; // once closed
    std::vector<TokenLogprobs> logprobs; // not written yet
  };

  static ReplyTextOptions textOptions(const ReplyOptions &options) {
    return ReplyTextOptions{options.chat, options.startsInReasoning, options.tools, options.stop};
  }

  static int64_t codePointsOf(std::string_view text) {
    return std::count_if(text.begin(), text.end(), [](char b) { return !isContinuationByte(b); });
  }

  /// Writes (or keeps) one delta of choice `choice`'s text; `firstToolIndex` numbers its calls.
  virtual bool deliver(int choice, const ReplyText::Delta &d, int64_t firstToolIndex,
                       const Write &write) = 0;
  /// Writes the end of one choice (choices_[choice].finishReason is set).
  virtual bool completeChoice(int choice, const Write &write) = 0;
  /// Writes the end of a reply whose choices all ended.
  virtual void completeReply(const Usage &usage, const Write &write) = 0;
  /// Writes the engine's error in place of the rest of the reply.
  virtual void fail(const OrderedJson &error, const Write &write) = 0;
  /// Whether interrupt() writes anything (a stream), and how it writes an event.
  virtual bool interruptible() const { return false; }
  virtual void writeEvent(const OrderedJson &, const Write &) {}

  /// The logprobs of `tokens` in the endpoint's shape.
  OrderedJson logprobsJson(const std::vector<TokenLogprobs> &tokens) const {
    return options_.chat ? chatLogprobsJson(tokens) : completionLogprobsJson(tokens);
  }

  const ReplyOptions options_;
  const Tokenizer &tokenizer_;
  const int64_t created_;
  const int64_t promptTokens_;
  std::vector<Choice> choices_;

private:
  /// The choice whose output still shows; null for one that ended, an index the request has no
  /// choice at, or any once the engine failed (the error replaces the rest).
  Choice *live(int choice) {
    if (error_ || choice < 0 || choice >= static_cast<int>(choices_.size()) ||
        choices_[static_cast<size_t>(choice)].closed) {
      return nullptr;
    }
    return &choices_[static_cast<size_t>(choice)];
  }

  /// The token's logprobs, and where its text starts: at the character its first byte belongs
  /// to (a token may begin inside a character that the one before it began).
  TokenLogprobs logprobsOf(Choice &c, const runtime::SampledToken &token) const {
    TokenLogprobs out;
    out.sampled = tokenText(tokenizer_, token.id, token.logprob);
    out.top.reserve(token.top.size());
    for (const runtime::TokenLogprob &alternative : token.top) {
      out.top.push_back(tokenText(tokenizer_, alternative.id, alternative.logprob));
    }
    const std::string &bytes = out.sampled.bytes.value_or(std::string());
    const bool inside = !bytes.empty() && isContinuationByte(bytes.front()) && c.codePoints > 0;
    out.textOffset = c.codePoints - (inside ? 1 : 0);
    c.codePoints += codePointsOf(bytes);
    return out;
  }

  bool deliverCounted(int choice, const ReplyText::Delta &d, const Write &write) {
    Choice &c = choices_[static_cast<size_t>(choice)];
    const int64_t first = c.toolCalls;
    c.toolCalls += static_cast<int64_t>(d.calls.size());
    return deliver(choice, d, first, write);
  }

  /// Ends a choice with its finish_reason: one with tool calls ends in "tool_calls"; a stop
  /// string is a "stop" whatever the engine's reason.
  bool close(int choice, runtime::FinishReason reason, const Write &write) {
    Choice &c = choices_[static_cast<size_t>(choice)];
    c.closed = true;
    c.finishReason = c.toolCalls > 0                           ? "tool_calls"
                     : c.stoppedByString                       ? "stop"
                     : reason == runtime::FinishReason::Length ? "length"
                                                               : "stop";
    return completeChoice(choice, write);
  }

  std::optional<Status> error_; // the engine's first error
};

/// Server-sent events: one chunk per visible delta of a choice, each choice's finish chunk, the
/// usage chunk when asked for, then [DONE]. Choices interleave as the engine produces them.
class StreamedReply final : public ReplyBase {
public:
  using ReplyBase::ReplyBase;

  bool begin(const Write &write) override {
    // The role chunks go with the first engine output, as vLLM sends them: clients (and
    // `vllm bench serve`) take the first chunk as the first token, so sending them at request
    // receipt would report a time to first token that excludes queueing and prefill.
    if (!options_.chat) {
      // With echo, each choice's first chunk is the prompt.
      for (int i = 0; i < options_.n && !options_.echo.empty(); ++i) {
        if (!event(completionChunkJson(options_.id, created_, options_.model, i, options_.echo,
                                       std::nullopt, nullptr),
                   write)) {
          return false;
        }
      }
      return true;
    }
    for (int i = 0; i < options_.n; ++i) {
      if (!event(chatCompletionChunkJson(options_.id, created_, options_.model, i,
                                         chatDeltaJson(true, std::nullopt, std::nullopt),
                                         std::nullopt),
                 write)) {
        return false;
      }
    }
    return true;
  }

protected:
  bool deliver(int choice, const ReplyText::Delta &d, int64_t firstToolIndex,
               const Write &write) override {
    // A delta with no visible text writes nothing; its tokens' logprobs wait for the next chunk
    // of the choice (its finish chunk at the latest), so that every token's come exactly once.
    if (!options_.chat) {
      return d.content.empty() ||
             event(completionChunkJson(options_.id, created_, options_.model, choice, d.content,
                                       std::nullopt, takeLogprobs(choice)),
                   write);
    }
    const OrderedJson delta = chatDeltaJson(false, unlessEmpty(d.content), unlessEmpty(d.reasoning),
                                            d.calls, firstToolIndex);
    return delta.empty() ||
           event(chatCompletionChunkJson(options_.id, created_, options_.model, choice, delta,
                                         std::nullopt, takeLogprobs(choice)),
                 write);
  }

  bool completeChoice(int choice, const Write &write) override {
    const std::string &finishReason = choices_[static_cast<size_t>(choice)].finishReason;
    return event(options_.chat ? chatCompletionChunkJson(options_.id, created_, options_.model,
                                                         choice, OrderedJson::object(),
                                                         finishReason, takeLogprobs(choice))
                               : completionChunkJson(options_.id, created_, options_.model, choice,
                                                     "", finishReason, takeLogprobs(choice)),
                 write);
  }

  void completeReply(const Usage &usage, const Write &write) override {
    if (options_.includeUsage) {
      event(options_.chat ? chatUsageChunkJson(options_.id, created_, options_.model, usage)
                          : completionUsageChunkJson(options_.id, created_, options_.model, usage),
            write);
    }
    write(kSseDone);
  }

  void fail(const OrderedJson &error, const Write &write) override {
    event(error, write);
    write(kSseDone);
  }
  bool interruptible() const override { return true; }
  void writeEvent(const OrderedJson &json, const Write &write) override { event(json, write); }

private:
  /// The logprobs of the choice's tokens not written yet, which go in the chunk being written;
  /// null when there are none (or none were asked for).
  OrderedJson takeLogprobs(int choice) {
    std::vector<TokenLogprobs> &pending = choices_[static_cast<size_t>(choice)].logprobs;
    if (pending.empty()) {
      return nullptr;
    }
    OrderedJson json = logprobsJson(pending);
    pending.clear();
    return json;
  }

  static bool event(const OrderedJson &json, const Write &write) { return write(sseData(json)); }
};

/// One JSON body, written once the engine is done.
class WholeReply final : public ReplyBase {
public:
  WholeReply(const Tokenizer &tokenizer, ReplyOptions options, int64_t promptTokens)
      : ReplyBase(tokenizer, std::move(options), promptTokens),
        texts_(static_cast<size_t>(options_.n)) {}

  bool begin(const Write &) override { return true; }

protected:
  bool deliver(int choice, const ReplyText::Delta &d, int64_t, const Write &) override {
    Text &text = texts_[static_cast<size_t>(choice)];
    text.reasoning += d.reasoning;
    text.content += d.content;
    text.calls.insert(text.calls.end(), d.calls.begin(), d.calls.end());
    return true;
  }

  bool completeChoice(int, const Write &) override { return true; }

  void completeReply(const Usage &usage, const Write &write) override {
    // Asked for, logprobs are an object even with no tokens; otherwise null.
    auto logprobs = [&](size_t i) {
      return options_.logprobs ? logprobsJson(choices_[i].logprobs) : OrderedJson(nullptr);
    };
    if (options_.chat) {
      std::vector<ChatChoice> choices(texts_.size());
      for (size_t i = 0; i < texts_.size(); ++i) {
        choices[i].content = std::move(texts_[i].content);
        if (options_.startsInReasoning) {
          choices[i].reasoning = std::move(texts_[i].reasoning);
        }
        choices[i].toolCalls = std::move(texts_[i].calls);
        choices[i].finishReason = choices_[i].finishReason;
        choices[i].logprobs = logprobs(i);
      }
      write(chatCompletionJson(options_.id, created_, options_.model, choices, usage).dump());
      return;
    }
    std::vector<CompletionChoice> choices(texts_.size());
    for (size_t i = 0; i < texts_.size(); ++i) {
      choices[i].text = options_.echo + texts_[i].content;
      choices[i].finishReason = choices_[i].finishReason;
      choices[i].logprobs = logprobs(i);
    }
    write(completionJson(options_.id, created_, options_.model, choices, usage).dump());
  }

  void fail(const OrderedJson &error, const Write &write) override { write(error.dump()); }

private:
  struct Text {
    std::string reasoning, content;
    std::vector<ToolCall> calls;
  };
  std::vector<Text> texts_;
};

} // namespace

ApiError engineError(const Status &error) {
  return error.code() == StatusCode::Unavailable
             ? ApiError{503, "server_error", "engine_unavailable", error.message()}
             : ApiError{500, "server_error", "engine_error", error.message()};
}

std::unique_ptr<ReplyStream> ReplyStream::create(const Tokenizer &tokenizer, ReplyOptions options,
                                                 int64_t promptTokens) {
  if (options.stream) {
    return std::make_unique<StreamedReply>(tokenizer, std::move(options), promptTokens);
  }
  return std::make_unique<WholeReply>(tokenizer, std::move(options), promptTokens);
}

} // namespace glm::server
