// The transport: cpp-httplib's setup, auth, the route table and the hand-off to streaming.
// PreparedRequest builds a generation and ReplyStream writes it; relay() feeds one to the other.
#include "server/http/HttpServer.h"

#include "server/http/Metrics.h"
#include "server/http/ReplyStream.h"
#include "server/http/TokenQueue.h"
#include "server/openai/Protocol.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <thread>

namespace glm::server {

using OrderedJson = nlohmann::ordered_json;

namespace {

void sendJson(httplib::Response &res, int status, const OrderedJson &body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void sendError(httplib::Response &res, const ApiError &error) {
  sendJson(res, error.status, error.toJson());
}

bool isWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// Whether `word` appears in `text` as a whole word.
bool hasWord(std::string_view text, std::string_view word) {
  for (size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !isWordChar(text[at - 1])) && (end == text.size() || !isWordChar(text[end]))) {
      return true;
    }
  }
  return false;
}

/// The request field a refusal of submit() is about. EngineApi's InvalidArgument names it, as the
/// wire spells it or as SequenceRequest does (logitBias); failing that, of the fields the engine
/// checks (n above its slots, logit_bias ids beyond its vocabulary), the one the request set.
std::optional<std::string> refusedParam(const Status &status, bool severalChoices, bool biased) {
  const std::string &message = status.message();
  if (hasWord(message, "logit_bias") || hasWord(message, "logitBias")) {
    return "logit_bias";
  }
  if (hasWord(message, "n")) {
    return "n";
  }
  if (severalChoices != biased) {
    return severalChoices ? "n" : "logit_bias";
  }
  return std::nullopt;
}

} // namespace

struct HttpServer::Impl {
  ServerOptions options;
  runtime::EngineApi &engine;
  ServedModel model;
  httplib::Server http;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> inFlight{0}; // generation responses not yet fully written
  ServerMetrics metrics;

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
      sendError(res, ApiError{401, "invalid_request_error", "invalid_api_key",
                              "Incorrect API key provided."});
    }
    return ok;
  }

  /// Submits; answers and returns null when the engine refuses: 400 naming the field for a
  /// request it can never run, 503 (with Retry-After) when it cannot take it now.
  std::shared_ptr<TokenQueue> submit(runtime::SequenceRequest request, httplib::Response &res) {
    auto queue = std::make_shared<TokenQueue>(metrics, request.n);
    const bool severalChoices = request.n > 1, biased = !request.sampling.logitBias.empty();
    Status s = engine.submit(std::move(request), queue);
    if (s.code() == StatusCode::InvalidArgument) {
      sendError(res, ApiError{400, "invalid_request_error", "invalid_value", s.message(),
                              refusedParam(s, severalChoices, biased)});
      return nullptr;
    }
    if (!s.ok()) {
      res.set_header("Retry-After", "1");
      // Refused because the engine is missing a part (a tensor-parallel rank), or the queue is
      // full.
      const bool engineDown = !engine.health().ok();
      sendError(res,
                ApiError{503, "server_error",
                         engineDown ? "engine_unavailable" : "server_overloaded", s.message()});
      ++metrics.requestsFailed;
      return nullptr;
    }
    return queue;
  }

  /// The client went away: stop its generation at the engine's next step, and count it.
  /// Returns false, which tells cpp-httplib to close the connection.
  bool abandon(TokenQueue &queue) {
    queue.cancel();
    ++metrics.clientsDisconnected;
    return false;
  }

  /// Hands the engine's tokens to the reply until the engine has ended every choice, polling the
  /// client between waits; a client that went away cancels the request, and so does a reply
  /// that can show nothing more (stop strings ended every choice, or the engine failed).
  bool relay(TokenQueue &queue, ReplyStream &reply, httplib::DataSink &sink) {
    const ReplyStream::Write write = [&sink](std::string_view bytes) {
      return sink.write(bytes.data(), bytes.size());
    };
    bool started = false, failed = false;
    for (bool finished = false; !finished;) {
      if (!sink.is_writable()) {
        return abandon(queue);
      }
      TokenQueue::Taken taken = queue.take(std::chrono::milliseconds(50));
      finished = taken.finished;
      if (!started && (!taken.tokens.empty() || !taken.ends.empty())) {
        started = true;
        if (!reply.begin(write)) {
          return abandon(queue);
        }
      }
      for (const TokenQueue::Token &t : taken.tokens) {
        if (!reply.token(t.choice, t.token, write)) {
          return abandon(queue);
        }
      }
      for (const TokenQueue::End &e : taken.ends) {
        failed |= e.reason == runtime::FinishReason::Error;
        if (!reply.finish(e.choice, e.reason, e.error, write)) {
          return abandon(queue);
        }
      }
      if (reply.complete()) {
        queue.cancel();
      }
    }
    if (failed) {
      ++metrics.requestsFailed;
    }
    reply.end(write);
    sink.done();
    return true;
  }

  /// POST /v1/chat/completions and /v1/completions.
  void generate(const httplib::Request &req, httplib::Response &res, Endpoint endpoint) {
    ++metrics.requestsTotal;
    if (!authorized(req, res)) {
      return;
    }
    if (draining) {
      return sendError(res, ApiError{503, "server_error", "server_shutting_down",
                                     "the server is shutting down"});
    }
    std::variant<PreparedRequest, ApiError> prepared =
        prepareRequest(endpoint, req.body, model, limits());
    if (ApiError *error = std::get_if<ApiError>(&prepared)) {
      return sendError(res, *error);
    }
    PreparedRequest &request = std::get<PreparedRequest>(prepared);
    const int64_t promptTokens = static_cast<int64_t>(request.sequence.prompt.size());
    std::shared_ptr<TokenQueue> queue = submit(std::move(request.sequence), res);
    if (!queue) {
      return;
    }
    metrics.promptTokens += promptTokens;
    // Counted until the response is written, so a graceful stop waits for it.
    ++inFlight;
    auto done = std::shared_ptr<void>(nullptr, [this](void *) { --inFlight; });
    const bool stream = request.reply.stream;
    std::shared_ptr<ReplyStream> reply =
        ReplyStream::create(*model.tokenizer, std::move(request.reply), promptTokens);
    // Even a whole JSON body is written through a chunked provider, not set_content, because only
    // a provider can poll is_writable(): a client that gives up while its request waits,
    // prefills or decodes cancels it (cpp-httplib 0.11.4 has no Request::is_connection_closed).
    // The cost is that the 200 status is sent before generation; an engine failure then comes as
    // an OpenAI error object in the body.
    if (stream) {
      res.set_header("Cache-Control", "no-cache");
    }
    res.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [this, queue, reply, done = std::move(done)](size_t, httplib::DataSink &sink) {
          return relay(*queue, *reply, sink);
        });
  }

  void health(httplib::Response &res) {
    if (draining) {
      return sendJson(res, 503, {{"status", "draining"}});
    }
    if (Status health = engine.health(); !health.ok()) {
      return sendJson(res, 503, {{"status", "unavailable"}, {"error", health.message()}});
    }
    sendJson(res, 200, {{"status", "ok"}});
  }

  void models(const httplib::Request &req, httplib::Response &res) {
    if (authorized(req, res)) {
      sendJson(res, 200, modelsJson(options.servedNames, unixSeconds()));
    }
  }

  void oneModel(const httplib::Request &req, httplib::Response &res) {
    if (!authorized(req, res)) {
      return;
    }
    const std::string name = req.matches[1];
    if (std::find(options.servedNames.begin(), options.servedNames.end(), name) ==
        options.servedNames.end()) {
      return sendError(res, ApiError{404, "invalid_request_error", "model_not_found",
                                     "The model `" + name.substr(0, 256) + "` does not exist.",
                                     "model"});
    }
    sendJson(res, 200, modelJson(name, unixSeconds()));
  }

  void tokenize(const httplib::Request &req, httplib::Response &res) {
    if (!authorized(req, res)) {
      return;
    }
    OrderedJson body = OrderedJson::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string()) {
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     "expected {\"prompt\": string}", "prompt"});
    }
    Expected<std::vector<TokenId>> ids = model.tokenizer->encode(body["prompt"].get<std::string>());
    if (!ids.ok()) {
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     ids.status().message(), "prompt"});
    }
    sendJson(res, 200,
             {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", options.maxContext}});
  }

  void detokenize(const httplib::Request &req, httplib::Response &res) {
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
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     "expected {\"tokens\": [ids in the vocabulary]}", "tokens"});
    }
    Expected<std::string> text = model.tokenizer->decode(ids);
    sendJson(res, 200, {{"prompt", text.ok() ? *text : std::string()}});
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
                ApiError{status, "invalid_request_error",
                         status == 413 ? "request_too_large" : "invalid_request_error", message});
    });
    http.new_task_queue = [threads = options.threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };

    using Req = const httplib::Request &;
    using Res = httplib::Response &;
    http.Get("/health", [this](Req, Res res) { health(res); });
    http.Get("/v1/models", [this](Req req, Res res) { models(req, res); });
    http.Get(R"(/v1/models/(.+))", [this](Req req, Res res) { oneModel(req, res); });
    http.Post("/v1/chat/completions",
              [this](Req req, Res res) { generate(req, res, Endpoint::ChatCompletions); });
    http.Post("/v1/completions",
              [this](Req req, Res res) { generate(req, res, Endpoint::Completions); });
    for (const std::string prefix : {"", "/v1"}) {
      http.Post(prefix + "/tokenize", [this](Req req, Res res) { tokenize(req, res); });
      http.Post(prefix + "/detokenize", [this](Req req, Res res) { detokenize(req, res); });
    }
    http.Get("/metrics", [this](Req, Res res) {
      res.set_content(metrics.render(engine.stats(), options.servedNames.front()),
                      "text/plain; version=0.0.4");
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
