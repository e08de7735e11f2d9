// Endpoints of the OpenAI-compatible server. Each handler parses a typed request (Protocol),
// builds the prompt (chat template, tokenizer), submits it to the engine and turns the tokens it
// gets back into a JSON response or an SSE stream.
#include "server/http/HttpServer.h"

#include "server/openai/Protocol.h"
#include "server/openai/ReasoningSplitter.h"
#include "server/openai/ToolCallParser.h"
#include "server/tokenizer/StreamingDetokenizer.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <sys/socket.h>
#include <thread>

namespace glm::server {

using OrderedJson = nlohmann::ordered_json;

namespace {

int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string randomId(const char *prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mutex);
  char hex[25];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFull));
  return std::string(prefix) + hex;
}

void sendJson(httplib::Response &res, int status, const OrderedJson &body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void sendError(httplib::Response &res, const ApiError &error) {
  sendJson(res, error.status, error.toJson());
}

ApiError makeError(int status, std::string type, std::string code, std::string message,
                   std::optional<std::string> param = std::nullopt) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

/// A request the engine failed: 503 when the engine lost a part it needs (a tensor-parallel rank;
/// the client may retry once /health is ok again), 500 otherwise.
ApiError engineError(const Status &error) {
  return error.code() == StatusCode::Unavailable
             ? makeError(503, "server_error", "engine_unavailable", error.message())
             : makeError(500, "server_error", "engine_error", error.message());
}

/// A Prometheus histogram with fixed buckets (upper bounds in seconds).
class Histogram {
public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) -
                                         bounds_.begin());
    ++counts_[i];
    sum_ += seconds;
  }
  std::string render(const std::string &name, const std::string &labels) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out = "# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    char le[32];
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      std::snprintf(le, sizeof le, "%g", bounds_[i]);
      out += strCat(name, "_bucket{", labels, ",le=\"", le, "\"} ", cumulative, "\n");
    }
    cumulative += counts_.back();
    out += strCat(name, "_bucket{", labels, ",le=\"+Inf\"} ", cumulative, "\n");
    out += strCat(name, "_sum{", labels, "} ", sum_, "\n");
    out += strCat(name, "_count{", labels, "} ", cumulative, "\n");
    return out;
  }

private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
};

/// Request latencies as vLLM names and buckets them (server.md §1.11, §3).
struct LatencyMetrics {
  Histogram timeToFirstToken{{0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                              0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                              20.0,  40.0,  80.0, 160.0, 640.0, 2560.0}};
  Histogram interTokenLatency{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram endToEnd{{0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                      30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};
  std::atomic<int64_t> promptTokens{0};
};

/// Tokens from the scheduler thread to the handler thread. The times are taken here, as the
/// engine produces tokens, not when a handler happens to wake up.
class TokenQueue : public runtime::TokenSink {
public:
  explicit TokenQueue(LatencyMetrics &metrics)
      : metrics_(metrics), submitted_(std::chrono::steady_clock::now()), last_(submitted_) {}

  bool onToken(int32_t token) override {
    const auto now = std::chrono::steady_clock::now();
    const double gap = std::chrono::duration<double>(now - last_).count();
    (tokensSeen_++ == 0 ? metrics_.timeToFirstToken : metrics_.interTokenLatency).observe(gap);
    last_ = now;
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.push_back(token);
    ready_.notify_all();
    return !cancelled_;
  }
  void onFinish(runtime::FinishReason reason, const Status &error) override {
    metrics_.endToEnd.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count());
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    reason_ = reason;
    error_ = error;
    ready_.notify_all();
  }
  bool cancelled() const override { return cancelled_.load(); }
  void cancel() { cancelled_ = true; }
  /// Waits up to `timeout` for tokens or the end; returns what arrived.
  std::vector<int32_t> take(std::chrono::milliseconds timeout, bool &finished,
                            runtime::FinishReason &reason, Status &error) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait_for(lock, timeout, [&] { return !tokens_.empty() || finished_; });
    std::vector<int32_t> out(tokens_.begin(), tokens_.end());
    tokens_.clear();
    finished = finished_;
    reason = reason_;
    error = error_;
    return out;
  }

private:
  LatencyMetrics &metrics_;
  std::chrono::steady_clock::time_point submitted_, last_;
  int64_t tokensSeen_ = 0;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<int32_t> tokens_;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
  runtime::FinishReason reason_ = runtime::FinishReason::Stop;
  Status error_;
};

/// Turns a request's tokens into visible text: detokenized, split into reasoning and content,
/// tool calls parsed out of the content, stop strings applied.
class ReplyBuilder {
public:
  ReplyBuilder(const Tokenizer &tokenizer, bool chat, bool startsInReasoning,
               const OrderedJson &tools, std::vector<std::string> stop, uint64_t idSeed)
      // Special tokens stay in the text: <think>, </think> and the tool-call markers are special
      // tokens the splitter and parser need; end-of-sequence tokens never reach here.
      : detokenizer_(tokenizer, /*skipSpecialTokens=*/false), chat_(chat),
        splitter_(startsInReasoning), tools_(tools, idSeed),
        // Without tools (or with tool_choice "none"), tool-call markup is plain content.
        parseTools_(!tools.is_null() && !tools.empty()), stop_(std::move(stop)) {
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

std::string finishReasonText(runtime::FinishReason reason, bool stoppedByString, bool toolCalls) {
  if (toolCalls) {
    return "tool_calls";
  }
  if (stoppedByString) {
    return "stop";
  }
  return reason == runtime::FinishReason::Length ? "length" : "stop";
}

} // namespace

struct HttpServer::Impl {
  ServerOptions options;
  runtime::EngineApi &engine;
  ServedModel model;
  httplib::Server http;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> requestsTotal{0};
  std::atomic<int64_t> inFlight{0}; // generation responses not yet fully written
  std::atomic<int64_t> requestsFailed{0};
  std::atomic<int64_t> clientsDisconnected{0};
  LatencyMetrics latency;

  Impl(ServerOptions o, runtime::EngineApi &e, ServedModel m)
      : options(std::move(o)), engine(e), model(std::move(m)) {}

  ProtocolLimits limits() const {
    ProtocolLimits l;
    l.modelNames = options.servedNames;
    l.maxContext = options.maxContext;
    return l;
  }

  bool authorized(const httplib::Request &req, httplib::Response &res) {
    if (options.apiKeys.empty()) {
      return true;
    }
    std::string key = req.get_header_value("Authorization");
    if (key.rfind("Bearer ", 0) == 0) {
      key = key.substr(7);
    } else {
      key = req.get_header_value("X-Api-Key");
    }
    // Compare against every key without an early exit, so timing says nothing about which
    // prefix matched.
    bool ok = false;
    for (const std::string &k : options.apiKeys) {
      unsigned diff = static_cast<unsigned>(k.size() ^ key.size());
      for (size_t i = 0; i < k.size(); ++i) {
        diff |= static_cast<unsigned>(k[i] ^ (i < key.size() ? key[i] : 0));
      }
      ok |= diff == 0;
    }
    if (!ok) {
      res.set_header("WWW-Authenticate", "Bearer");
      sendError(res, makeError(401, "invalid_request_error", "invalid_api_key",
                               "Incorrect API key provided."));
    }
    return ok;
  }

  /// Prompt, sequence request and reply settings shared by both generation endpoints.
  struct Prepared {
    runtime::SequenceRequest sequence;
    int64_t promptTokens = 0;
  };

  std::optional<ApiError> prepare(const std::vector<int32_t> &prompt,
                                  const SamplingOptions &sampling, const char *promptParam,
                                  Prepared &out) {
    const int64_t promptTokens = static_cast<int64_t>(prompt.size());
    if (promptTokens == 0) {
      return makeError(400, "invalid_request_error", "invalid_value", "the prompt is empty",
                       promptParam);
    }
    const int64_t room = options.maxContext - promptTokens;
    const int64_t maxTokens = sampling.maxTokens.value_or(room);
    if (room < 1 || maxTokens > room) {
      return makeError(400, "invalid_request_error", "context_length_exceeded",
                       strCat("This model's maximum context length is ", options.maxContext,
                              " tokens. However, you requested ", promptTokens + maxTokens,
                              " tokens (", promptTokens, " in the prompt, ", maxTokens,
                              " for the completion)."),
                       promptParam);
    }
    out.promptTokens = promptTokens;
    runtime::SequenceRequest &s = out.sequence;
    s.prompt = prompt;
    s.maxTokens = maxTokens;
    s.minTokens = sampling.minTokens;
    s.ignoreEos = sampling.ignoreEos;
    s.eosIds = model.eosIds;
    s.sampling.temperature = static_cast<float>(sampling.temperature);
    s.sampling.topP = static_cast<float>(sampling.topP);
    s.sampling.topK = static_cast<int32_t>(sampling.topK > 0 ? sampling.topK : 0);
    s.sampling.minP = static_cast<float>(sampling.minP);
    s.sampling.seed = sampling.seed ? *sampling.seed : std::random_device{}();
    return std::nullopt;
  }

  /// The client went away: stop its generation at the engine's next step, and count it.
  /// Returns false, which tells cpp-httplib to close the connection.
  bool abandon(TokenQueue &queue) {
    queue.cancel();
    ++clientsDisconnected;
    return false;
  }

  /// How a reply's generation ended.
  struct Generation {
    int64_t completionTokens = 0;
    bool stoppedByString = false;
    runtime::FinishReason reason = runtime::FinishReason::Stop;
    Status error;
  };

  /// Feeds a request's tokens through its ReplyBuilder until the engine finishes, polling the
  /// client between waits. `onFirstOutput` runs once, when the engine first produces anything;
  /// `onDelta` gets every builder delta (not the one from builder.finish()). Either returning
  /// false, or the client going away, abandons the request and returns false.
  bool pump(TokenQueue &queue, ReplyBuilder &builder, httplib::DataSink &sink, Generation &g,
            const std::function<bool()> &onFirstOutput,
            const std::function<bool(const ReplyBuilder::Delta &)> &onDelta) {
    bool finished = false, started = false;
    while (!finished) {
      if (!sink.is_writable()) {
        return abandon(queue);
      }
      std::vector<int32_t> tokens =
          queue.take(std::chrono::milliseconds(50), finished, g.reason, g.error);
      if (!started && (!tokens.empty() || finished)) {
        started = true;
        if (!onFirstOutput()) {
          return abandon(queue);
        }
      }
      for (int32_t token : tokens) {
        ++g.completionTokens;
        Expected<ReplyBuilder::Delta> d = builder.feed(token);
        if (!d.ok()) {
          continue;
        }
        if (!onDelta(*d)) {
          return abandon(queue);
        }
        if (d->stopped) {
          g.stoppedByString = true;
          queue.cancel();
        }
      }
    }
    return true;
  }

  /// Submits; on a full queue answers 503 (with Retry-After) and returns null.
  std::shared_ptr<TokenQueue> submit(runtime::SequenceRequest request, httplib::Response &res) {
    auto queue = std::make_shared<TokenQueue>(latency);
    Status s = engine.submit(std::move(request), queue);
    if (!s.ok()) {
      res.set_header("Retry-After", "1");
      // Refused because the engine is missing a part (a tensor-parallel rank), or the queue is
      // full.
      const bool engineDown = !engine.health().ok();
      sendError(res,
                makeError(503, "server_error",
                          engineDown ? "engine_unavailable" : "server_overloaded", s.message()));
      ++requestsFailed;
      return nullptr;
    }
    return queue;
  }

  void handleGeneration(const httplib::Request &req, httplib::Response &res, bool chat) {
    ++requestsTotal;
    if (!authorized(req, res)) {
      return;
    }
    if (draining) {
      sendError(res, makeError(503, "server_error", "server_shutting_down",
                               "the server is shutting down"));
      return;
    }
    ChatRequest chatRequest;
    CompletionRequest completionRequest;
    std::vector<int32_t> prompt;
    OrderedJson tools;
    bool startsInReasoning = false;
    const SamplingOptions *sampling = nullptr;
    bool stream = false, includeUsage = false;
    std::string modelName;
    if (chat) {
      auto parsed = parseChatRequest(req.body, limits());
      if (auto *error = std::get_if<ApiError>(&parsed)) {
        return sendError(res, *error);
      }
      chatRequest = std::move(std::get<ChatRequest>(parsed));
      Expected<std::string> text =
          renderChatPrompt(*model.chatTemplate, chatRequest.body, model.tokenizerConfig);
      if (!text.ok()) {
        return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                        text.status().message(), "messages"));
      }
      Expected<OrderedJson> vars = chatTemplateVariables(chatRequest.body, model.tokenizerConfig);
      startsInReasoning = !(vars.ok() && chatThinkingDisabled(*vars));
      Expected<std::vector<TokenId>> ids = model.tokenizer->encode(*text);
      if (!ids.ok()) {
        return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                        ids.status().message(), "messages"));
      }
      prompt.assign(ids->begin(), ids->end());
      tools = chatRequest.tools;
      sampling = &chatRequest.sampling;
      stream = chatRequest.stream;
      includeUsage = chatRequest.includeUsage;
      modelName = chatRequest.model;
    } else {
      auto parsed = parseCompletionRequest(req.body, limits());
      if (auto *error = std::get_if<ApiError>(&parsed)) {
        return sendError(res, *error);
      }
      completionRequest = std::move(std::get<CompletionRequest>(parsed));
      if (!completionRequest.promptIds.empty()) {
        for (int32_t id : completionRequest.promptIds) {
          if (!model.tokenizer->hasId(id)) {
            return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                            strCat("token id ", id, " is not in the vocabulary"),
                                            "prompt"));
          }
        }
        prompt = completionRequest.promptIds;
      } else {
        Expected<std::vector<TokenId>> ids = model.tokenizer->encode(completionRequest.prompt);
        if (!ids.ok()) {
          return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                          ids.status().message(), "prompt"));
        }
        prompt.assign(ids->begin(), ids->end());
      }
      sampling = &completionRequest.sampling;
      stream = completionRequest.stream;
      includeUsage = completionRequest.includeUsage;
      modelName = completionRequest.model;
    }
    Prepared prepared;
    if (auto error = prepare(prompt, *sampling, chat ? "messages" : "prompt", prepared)) {
      return sendError(res, *error);
    }
    std::shared_ptr<TokenQueue> queue = submit(std::move(prepared.sequence), res);
    if (!queue) {
      return;
    }
    latency.promptTokens += prepared.promptTokens;
    // Counted until the response is written, so a graceful stop waits for it.
    ++inFlight;
    auto done = std::shared_ptr<void>(nullptr, [this](void *) { --inFlight; });
    // Tool-call ids must differ between replies: clients match tool results to calls by id.
    auto builder = std::make_shared<ReplyBuilder>(*model.tokenizer, chat, startsInReasoning, tools,
                                                  sampling->stop, std::random_device{}());
    const std::string id = randomId(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = nowSeconds();
    const int64_t promptTokens = prepared.promptTokens;

    if (!stream) {
      // The body is written through a chunked provider, not set_content, because only a provider
      // can poll is_writable(): a client that gives up while its request waits, prefills or
      // decodes cancels it (cpp-httplib 0.11.4 has no Request::is_connection_closed). The cost is
      // that the 200 status is sent before generation; an engine failure then comes as an OpenAI
      // error object in the body.
      res.set_chunked_content_provider("application/json", [=, this, done = std::move(done)](
                                                               size_t, httplib::DataSink &sink) {
        std::string content, reasoning;
        std::vector<ToolCall> calls;
        auto collect = [&](const ReplyBuilder::Delta &d) {
          reasoning += d.reasoning;
          content += d.content;
          calls.insert(calls.end(), d.calls.begin(), d.calls.end());
          return true;
        };
        Generation g;
        if (!pump(*queue, *builder, sink, g, [] { return true; }, collect)) {
          return false;
        }
        std::string body;
        if (g.reason == runtime::FinishReason::Error) {
          ++requestsFailed;
          body = engineError(g.error).toJson().dump();
        } else {
          if (Expected<ReplyBuilder::Delta> rest = builder->finish(); rest.ok()) {
            collect(*rest);
          }
          const std::string finish = finishReasonText(g.reason, g.stoppedByString, !calls.empty());
          const Usage usage{promptTokens, g.completionTokens};
          body =
              chat ? chatCompletionJson(id, created, modelName, content,
                                        startsInReasoning ? std::optional(reasoning) : std::nullopt,
                                        calls, finish, usage)
                         .dump()
                   : completionJson(id, created, modelName, content, finish, usage).dump();
        }
        sink.write(body.data(), body.size());
        sink.done();
        return true;
      });
      return;
    }

    // Streaming: one SSE event per visible delta; a client that goes away cancels generation.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [=, this, done = std::move(done)](
                                                              size_t, httplib::DataSink &sink) {
      auto write = [&](const OrderedJson &json) {
        const std::string event = sseData(json);
        return sink.write(event.data(), event.size());
      };
      bool anyCalls = false;
      int callIndex = 0;
      auto emit = [&](const ReplyBuilder::Delta &d) {
        if (!chat) {
          return d.content.empty() ||
                 write(completionChunkJson(id, created, modelName, d.content, std::nullopt));
        }
        OrderedJson delta = OrderedJson::object();
        if (!d.reasoning.empty()) {
          delta["reasoning_content"] = d.reasoning;
          delta["reasoning"] = d.reasoning;
        }
        if (!d.content.empty()) {
          delta["content"] = d.content;
        }
        if (!d.calls.empty()) {
          OrderedJson list = OrderedJson::array();
          for (const ToolCall &c : d.calls) {
            list.push_back({{"index", callIndex++},
                            {"id", c.id},
                            {"type", "function"},
                            {"function", {{"name", c.name}, {"arguments", c.argumentsJson}}}});
          }
          delta["tool_calls"] = list;
          anyCalls = true;
        }
        return delta.empty() ||
               write(chatCompletionChunkJson(id, created, modelName, delta, std::nullopt));
      };
      // The role chunk goes with the first engine output, as vLLM sends it: clients (and
      // `vllm bench serve`) take the first chunk as the first token, so sending it at request
      // receipt would report a time to first token that excludes queueing and prefill.
      auto role = [&] {
        return !chat ||
               write(chatCompletionChunkJson(
                   id, created, modelName, {{"role", "assistant"}, {"content", ""}}, std::nullopt));
      };
      Generation g;
      if (!pump(*queue, *builder, sink, g, role, emit)) {
        return false;
      }
      if (g.reason == runtime::FinishReason::Error) {
        ++requestsFailed;
        write(engineError(g.error).toJson());
      } else {
        if (Expected<ReplyBuilder::Delta> rest = builder->finish(); rest.ok()) {
          emit(*rest);
        }
        const std::string finish = finishReasonText(g.reason, g.stoppedByString, anyCalls);
        write(chat ? chatCompletionChunkJson(id, created, modelName, OrderedJson::object(), finish)
                   : completionChunkJson(id, created, modelName, "", finish));
        if (includeUsage) {
          const Usage usage{promptTokens, g.completionTokens};
          write(chat ? chatUsageChunkJson(id, created, modelName, usage)
                     : completionUsageChunkJson(id, created, modelName, usage));
        }
      }
      sink.write(kSseDone.data(), kSseDone.size());
      sink.done();
      return true;
    });
  }

  void install() {
    http.set_payload_max_length(options.maxBodyBytes);
    // cpp-httplib answers some errors itself with an empty body; give them OpenAI's shape.
    http.set_error_handler([](const httplib::Request &, httplib::Response &res) {
      if (!res.body.empty()) {
        return;
      }
      const int status = res.status;
      const char *message = status == 413   ? "the request body is too large"
                            : status == 404 ? "no such endpoint"
                                            : "bad request";
      sendError(res,
                makeError(status, "invalid_request_error",
                          status == 413 ? "request_too_large" : "invalid_request_error", message));
    });
    http.new_task_queue = [threads = options.threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
    http.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
      if (draining) {
        return sendJson(res, 503, {{"status", "draining"}});
      }
      if (Status health = engine.health(); !health.ok()) {
        return sendJson(res, 503, {{"status", "unavailable"}, {"error", health.message()}});
      }
      sendJson(res, 200, {{"status", "ok"}});
    });
    auto models = [this](const httplib::Request &req, httplib::Response &res) {
      if (authorized(req, res)) {
        sendJson(res, 200, modelsJson(options.servedNames, nowSeconds()));
      }
    };
    http.Get("/v1/models", models);
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request &req, httplib::Response &res) {
      if (!authorized(req, res)) {
        return;
      }
      const std::string name = req.matches[1];
      if (std::find(options.servedNames.begin(), options.servedNames.end(), name) ==
          options.servedNames.end()) {
        return sendError(res, makeError(404, "invalid_request_error", "model_not_found",
                                        "The model `" + name.substr(0, 256) + "` does not exist.",
                                        "model"));
      }
      sendJson(res, 200, modelJson(name, nowSeconds()));
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) {
      handleGeneration(req, res, true);
    });
    http.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
      handleGeneration(req, res, false);
    });
    for (const char *prefix : {"", "/v1"}) {
      http.Post(std::string(prefix) + "/tokenize", [this](const httplib::Request &req,
                                                          httplib::Response &res) {
        if (!authorized(req, res)) {
          return;
        }
        OrderedJson body = OrderedJson::parse(req.body, nullptr, false);
        if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string()) {
          return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                          "expected {\"prompt\": string}", "prompt"));
        }
        Expected<std::vector<TokenId>> ids =
            model.tokenizer->encode(body["prompt"].get<std::string>());
        if (!ids.ok()) {
          return sendError(res, makeError(400, "invalid_request_error", "invalid_value",
                                          ids.status().message(), "prompt"));
        }
        sendJson(res, 200,
                 {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", options.maxContext}});
      });
      http.Post(std::string(prefix) + "/detokenize", [this](const httplib::Request &req,
                                                            httplib::Response &res) {
        if (!authorized(req, res)) {
          return;
        }
        OrderedJson body = OrderedJson::parse(req.body, nullptr, false);
        std::vector<TokenId> ids;
        bool valid = body.is_object() && body.contains("tokens") && body["tokens"].is_array();
        if (valid) {
          for (const OrderedJson &t : body["tokens"]) {
            valid &= t.is_number_integer() && model.tokenizer->hasId(t.get<int32_t>());
            if (valid) {
              ids.push_back(t.get<int32_t>());
            }
          }
        }
        if (!valid) {
          return sendError(res,
                           makeError(400, "invalid_request_error", "invalid_value",
                                     "expected {\"tokens\": [ids in the vocabulary]}", "tokens"));
        }
        Expected<std::string> text = model.tokenizer->decode(ids);
        sendJson(res, 200, {{"prompt", text.ok() ? *text : std::string()}});
      });
    }
    http.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
      const runtime::SchedulerStats s = engine.stats();
      const std::string name = options.servedNames.front();
      std::string text;
      auto gauge = [&](const char *metric, const char *kind, int64_t value) {
        text += strCat("# TYPE ", metric, " ", kind, "\n", metric, "{model_name=\"", name, "\"} ",
                       value, "\n");
      };
      gauge("vllm:num_requests_running", "gauge", s.running);
      gauge("vllm:num_requests_waiting", "gauge", s.waiting);
      gauge("vllm:request_success_total", "counter", s.finished);
      gauge("vllm:generation_tokens_total", "counter", s.generatedTokens);
      gauge("vllm:num_preemptions_total", "counter", s.preemptions);
      gauge("glmc:http_requests_total", "counter", requestsTotal.load());
      gauge("glmc:http_requests_failed_total", "counter", requestsFailed.load());
      gauge("vllm:http_requests_client_disconnected_total", "counter", clientsDisconnected.load());
      gauge("vllm:prompt_tokens_total", "counter", latency.promptTokens.load());
      const std::string labels = "model_name=\"" + name + "\"";
      text += latency.timeToFirstToken.render("vllm:time_to_first_token_seconds", labels);
      text += latency.interTokenLatency.render("vllm:inter_token_latency_seconds", labels);
      text += latency.endToEnd.render("vllm:e2e_request_latency_seconds", labels);
      res.set_content(text, "text/plain; version=0.0.4");
    });
  }
};

HttpServer::HttpServer(ServerOptions options, runtime::EngineApi &engine, ServedModel model)
    : impl_(std::make_unique<Impl>(std::move(options), engine, std::move(model))) {
  impl_->install();
}

HttpServer::~HttpServer() = default;

Expected<int> HttpServer::bind() {
  // cpp-httplib enables SO_REUSEPORT, which lets a second server share the port silently.
  impl_->http.set_socket_options([](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (impl_->options.port == 0) {
    const int port = impl_->http.bind_to_any_port(impl_->options.host);
    if (port <= 0) {
      return Status(StatusCode::Unavailable, strCat("cannot bind ", impl_->options.host));
    }
    return port;
  }
  if (!impl_->http.bind_to_port(impl_->options.host, impl_->options.port)) {
    return Status(StatusCode::Unavailable, strCat("cannot bind ", impl_->options.host, ":",
                                                  impl_->options.port, " (in use?)"));
  }
  return impl_->options.port;
}

void HttpServer::serve() { impl_->http.listen_after_bind(); }

void HttpServer::stop(int drainSeconds) {
  impl_->draining = true;
  // cpp-httplib's stop() cuts in-flight streams (server.md §4.1), so wait for the engine to
  // finish what it has first.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drainSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const runtime::SchedulerStats s = impl_->engine.stats();
    if (s.running == 0 && s.waiting == 0 && impl_->inFlight.load() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  impl_->http.stop();
}

} // namespace glm::server
