// The transport: cpp-httplib's setup, auth, the route table and the hand-off to streaming.
// PreparedRequest builds a generation and ReplyStream writes it; relay() feeds one to the other.
#include "server/http/HttpServer.h"
#include "server/http/StructuredRequest.h"

#include "server/anthropic/Messages.h"
#include "server/http/MessagesReply.h"
#include "server/http/Metrics.h"
#include "server/http/ReplyStream.h"
#include "server/http/RequestId.h"
#include "server/http/RequestLog.h"
#include "server/http/ResponsesReply.h"
#include "server/http/ThinkingBudget.h"
#include "server/http/TokenQueue.h"
#include "server/openai/Protocol.h"
#include "server/openai/ReasoningSplitter.h"
#include "server/openai/Responses.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace glm::server {

using OrderedJson = nlohmann::ordered_json;

namespace {

void sendJson(httplib::Response &res, int status, const OrderedJson &body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

/// Which API's error shape a route answers in: OpenAI's, or Anthropic's on /v1/messages.
enum class Shape { OpenAI, Anthropic };

void sendError(httplib::Response &res, const ApiError &error, Shape shape = Shape::OpenAI) {
  sendJson(res, error.status,
           shape == Shape::Anthropic ? anthropic::errorJson(error) : error.toJson());
}

Shape shapeOf(const std::string &path) {
  return path.starts_with("/v1/messages") ? Shape::Anthropic : Shape::OpenAI;
}

/// A response or message id: the prefix and 24 random hex digits.
std::string newId(const char *prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mutex);
  char hex[25];
  std::snprintf(hex, sizeof hex, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xFFFFFFFFull));
  return std::string(prefix) + hex;
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

/// The monitoring listener's bounds: a few probes and scrapers, requests without bodies.
ConnectionLimits monitorLimits(const ConnectionLimits &api) {
  ConnectionLimits l = api;
  l.maxConnections = 32;
  l.maxPerClient = 16;
  l.maxBodyBytes = 64 << 10;
  return l;
}

ConnectionLimits apiLimits(const ServerOptions &options) {
  ConnectionLimits l = options.connections;
  l.maxBodyBytes = options.maxBodyBytes;
  return l;
}

const ApiError kShuttingDown{503, "server_error", "server_shutting_down",
                             "the server is shutting down"};
const ApiError kCut{503, "server_error", "server_shutting_down",
                    "the server shut down before the reply was complete"};

} // namespace

struct HttpServer::Impl {
  ServerOptions options;
  runtime::EngineApi &engine;
  ServedModel model;
  ServerMetrics metrics;   // before the listeners, which count into it
  ResponseStore responses; // what GET /v1/responses/{id} and previous_response_id read
  const anthropic::ThinkingSigner signer; // its key drawn at start
  BoundedServer http;
  std::unique_ptr<BoundedServer> monitor;
  int monitorPort = -1;
  std::thread monitorThread;
  std::atomic<bool> draining{false};
  std::atomic<bool> cut{false};       // the drain's deadline passed: replies still running end now
  std::atomic<int64_t> inFlight{0};   // generation responses not yet fully written
  std::atomic<int64_t> cutReplies{0}; // replies the deadline ended
  // Requests building their prompt now, and how many may (ServerOptions::maxPreparing).
  std::mutex preparingMutex;
  std::condition_variable preparingFreed;
  int preparing = 0;
  const int maxPreparing;

  Impl(ServerOptions o, runtime::EngineApi &e, ServedModel m)
      : options(std::move(o)), engine(e), model(std::move(m)),
        responses(options.maxStoredResponses, options.maxStoredResponseBytes),
        http(apiLimits(options), metrics.connections),
        maxPreparing(
            options.maxPreparing > 0
                ? options.maxPreparing
                : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2, 4)) {
    if (options.monitorPort >= 0) {
      monitor = std::make_unique<BoundedServer>(monitorLimits(apiLimits(options)), metrics.monitor);
    }
    if (!model.structured && model.tokenizer) {
      model.structured = makeStructuredOutputs(*model.tokenizer); // token bytes, decoded once
    }
  }

  ProtocolLimits limits() const {
    ProtocolLimits l;
    l.modelNames = options.servedNames;
    l.maxContext = options.maxContext;
    return l;
  }

  bool keyMatches(const httplib::Request &req) const {
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
    return ok;
  }

  bool authorized(const httplib::Request &req, httplib::Response &res) {
    if (keyMatches(req)) {
      return true;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    sendError(
        res,
        ApiError{401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided."},
        shapeOf(req.path));
    return false;
  }

  /// Before a POST's body is read: the key, and admission while draining, so that neither an
  /// unauthenticated client nor a shutdown costs a body read (the connection then closes).
  httplib::Server::HandlerResponse gate(const httplib::Request &req, httplib::Response &res) {
    if (req.method != "POST") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const bool generation = req.path == "/v1/chat/completions" || req.path == "/v1/completions" ||
                            req.path == "/v1/responses" || req.path == "/v1/messages";
    const bool guarded = generation || req.path.find("tokenize") != std::string::npos ||
                         req.path == "/v1/messages/count_tokens";
    if (!guarded) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (!authorized(req, res) || (generation && draining)) {
      if (res.body.empty()) {
        sendError(res, kShuttingDown, shapeOf(req.path));
      }
      if (generation) {
        ++metrics.requestsTotal;
      }
      if (ClientConnection *c = ClientConnection::current()) {
        c->closeAfterReply();
      }
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  /// Submits; answers and returns null when the engine refuses: 400 naming the field for a
  /// request it can never run, 503 (with Retry-After) when it cannot take it now.
  std::shared_ptr<TokenQueue> submit(runtime::SequenceRequest request, httplib::Response &res,
                                     Shape shape) {
    auto queue = std::make_shared<TokenQueue>(metrics, request.n);
    const bool severalChoices = request.n > 1, biased = !request.sampling.logitBias.empty();
    Status s = engine.submit(std::move(request), queue);
    if (s.code() == StatusCode::InvalidArgument) {
      sendError(res,
                ApiError{400, "invalid_request_error", "invalid_value", s.message(),
                         refusedParam(s, severalChoices, biased)},
                shape);
      return nullptr;
    }
    if (!s.ok()) {
      res.set_header("Retry-After", "1");
      // Refused because the engine is missing a part (a tensor-parallel rank), or the queue is
      // full.
      const bool engineDown = !engine.health().ok();
      sendError(res,
                ApiError{503, "server_error",
                         engineDown ? "engine_unavailable" : "server_overloaded", s.message()},
                shape);
      ++metrics.requestsFailed;
      return nullptr;
    }
    return queue;
  }

  /// The client went away: stop its generation at the engine's next step, and count it.
  void abandon(TokenQueue &queue) {
    queue.cancel();
    ++metrics.clientsDisconnected;
  }

  enum class Relayed { Complete, Gone, Cut };

  /// Hands the engine's tokens to the reply until the engine has ended every choice: a client
  /// that went away (`gone`) cancels the request, and so does a reply that can show nothing more
  /// (stop strings ended every choice, or the engine failed); the drain's deadline cuts it.
  Relayed relay(TokenQueue &queue, ReplyStream &reply, const ReplyStream::Write &write,
                const std::function<bool()> &gone) {
    bool started = false;
    for (bool finished = false; !finished;) {
      if (gone()) {
        abandon(queue);
        return Relayed::Gone;
      }
      if (cut) {
        queue.cancel();
        ++cutReplies;
        reply.interrupt(kCut, write);
        return Relayed::Cut;
      }
      TokenQueue::Taken taken = queue.take(std::chrono::milliseconds(50));
      finished = taken.finished;
      if (!started && (!taken.tokens.empty() || !taken.ends.empty())) {
        reply.promptCached(taken.cachedTokens); // known before the first token
        started = true;
        if (!reply.begin(write)) {
          abandon(queue);
          return Relayed::Gone;
        }
      }
      for (const TokenQueue::Token &t : taken.tokens) {
        if (!reply.token(t.choice, t.token, write)) {
          abandon(queue);
          return Relayed::Gone;
        }
      }
      for (const TokenQueue::End &e : taken.ends) {
        if (!reply.finish(e.choice, e.reason, e.error, write)) {
          abandon(queue);
          return Relayed::Gone;
        }
      }
      if (reply.complete()) {
        queue.cancel();
      }
    }
    if (reply.engineFailure()) {
      ++metrics.requestsFailed;
    }
    return Relayed::Complete;
  }

  /// Prepares `body` once fewer than maxPreparing requests are at it, freeing the body once
  /// parsed.
  std::variant<PreparedRequest, ApiError> prepareInTurn(Endpoint endpoint, RequestBody &body) {
    PrepareTurn turn(*this);
    std::variant<PreparedRequest, ApiError> prepared =
        prepareRequest(endpoint, std::move(body.text()), model, limits());
    body.release();
    return prepared;
  }

  /// One of the maxPreparing turns at building a prompt (or tokenizing), held while it lives.
  struct PrepareTurn {
    explicit PrepareTurn(Impl &impl) : impl(impl) {
      std::unique_lock<std::mutex> lock(impl.preparingMutex);
      impl.preparingFreed.wait(lock, [&] { return impl.preparing < impl.maxPreparing; });
      ++impl.preparing;
    }
    ~PrepareTurn() {
      {
        std::lock_guard<std::mutex> lock(impl.preparingMutex);
        --impl.preparing;
      }
      impl.preparingFreed.notify_one();
    }
    Impl &impl;
  };

  /// POST /v1/chat/completions and /v1/completions.
  void generate(httplib::Response &res, Endpoint endpoint, RequestBody &body,
                const std::shared_ptr<RequestLog> &log) {
    ++metrics.requestsTotal;
    if (draining) {
      return sendError(res, kShuttingDown);
    }
    std::variant<PreparedRequest, ApiError> prepared = prepareInTurn(endpoint, body);
    if (ApiError *error = std::get_if<ApiError>(&prepared)) {
      return sendError(res, *error);
    }
    PreparedRequest &request = std::get<PreparedRequest>(prepared);
    const int64_t promptTokens = static_cast<int64_t>(request.sequence.prompt.size());
    const bool stream = request.reply.stream;
    log->model = request.reply.model;
    std::shared_ptr<ReplyStream> reply =
        ReplyStream::create(*model.tokenizer, std::move(request.reply), promptTokens);
    run(res, std::move(request.sequence), std::move(reply), stream, Shape::OpenAI, log);
  }

  /// Submits a prepared generation and writes its reply, whole or streamed.
  void run(httplib::Response &res, runtime::SequenceRequest sequence,
           std::shared_ptr<ReplyStream> reply, bool stream, Shape shape,
           const std::shared_ptr<RequestLog> &log) {
    const int64_t promptTokens = static_cast<int64_t>(sequence.prompt.size());
    log->promptTokens = promptTokens;
    std::shared_ptr<TokenQueue> queue = submit(std::move(sequence), res, shape);
    if (!queue) {
      return;
    }
    log->queue = queue;
    log->reply = reply;
    metrics.promptTokens += promptTokens;
    // Counted until the response is written, so a graceful stop waits for it.
    ++inFlight;
    auto done = std::shared_ptr<void>(nullptr, [this](void *) { --inFlight; });
    if (!stream) {
      return whole(*queue, *reply, res, shape);
    }
    res.set_header("Cache-Control", "no-cache");
    // The stream's writer holds the log line: it is written once the stream is over.
    log->status = 200;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, queue, reply, log, done = std::move(done)](size_t, httplib::DataSink &sink) {
          const ReplyStream::Write write = [&sink](std::string_view bytes) {
            return sink.write(bytes.data(), bytes.size());
          };
          // A stream's headers are out: a client that left resets the connection at the next
          // write, or shows as one that cannot be written to.
          const Relayed how = relay(*queue, *reply, write, [&] { return !sink.is_writable(); });
          if (how == Relayed::Gone) {
            return false; // cpp-httplib closes the connection
          }
          if (how == Relayed::Complete) {
            reply->end(write);
          }
          sink.done();
          return true;
        });
  }

  /// A chat body translated from another API, prepared as a chat request (in one of the
  /// preparing turns); errors name the client's fields through `params`, the conversation's
  /// as `conversationParam`.
  std::variant<PreparedRequest, ApiError> prepareTranslated(const nlohmann::ordered_json &chatBody,
                                                            const ParamMap &params,
                                                            const std::string &conversationParam,
                                                            const std::string &id) {
    std::variant<PreparedRequest, ApiError> prepared =
        prepareRequest(Endpoint::ChatCompletions, chatBody.dump(), model, limits());
    if (ApiError *error = std::get_if<ApiError>(&prepared)) {
      return params.toClient(std::move(*error), conversationParam);
    }
    // Neither API has a seed: the sampling key derives from the id the client sees, so the
    // reply can be replayed from it.
    std::get<PreparedRequest>(prepared).sequence.sampling.seed = requestSeed(id);
    return prepared;
  }

  static ReplyTextOptions textOptions(const ReplyOptions &reply) {
    return ReplyTextOptions{true, reply.startsInReasoning, reply.tools, reply.stop};
  }

  /// POST /v1/responses.
  void createResponse(httplib::Response &res, RequestBody &body,
                      const std::shared_ptr<RequestLog> &log) {
    ++metrics.requestsTotal;
    if (draining) {
      return sendError(res, kShuttingDown);
    }
    const std::string id = newId("resp_");
    std::optional<ResponsesRequest> request;
    std::variant<PreparedRequest, ApiError> prepared = [&]() -> decltype(prepared) {
      PrepareTurn turn(*this);
      std::variant<ResponsesRequest, ApiError> parsed =
          parseResponsesRequest(body.text(), [this](const std::string &previous) {
            return responses.conversation(previous);
          });
      body.release();
      if (ApiError *error = std::get_if<ApiError>(&parsed)) {
        return std::move(*error);
      }
      request = std::move(std::get<ResponsesRequest>(parsed));
      return prepareTranslated(request->chatBody, request->params, "input", id);
    }();
    if (ApiError *error = std::get_if<ApiError>(&prepared)) {
      return sendError(res, *error);
    }
    PreparedRequest &ready = std::get<PreparedRequest>(prepared);
    ResponsesReplyOptions options;
    options.text = textOptions(ready.reply);
    options.id = id;
    options.echo = std::move(request->echo);
    options.stream = request->stream;
    options.encryptedReasoning = request->encryptedReasoning;
    if (request->store) {
      options.onComplete = [this, id, conversation = std::move(request->conversation)](
                               const OrderedJson &response, const OrderedJson &output) {
        OrderedJson items = conversation;
        for (const OrderedJson &item : output) {
          items.push_back(item);
        }
        responses.put(id, response, std::move(items));
      };
    }
    const int64_t promptTokens = static_cast<int64_t>(ready.sequence.prompt.size());
    log->model = request->chatBody.value("model", "-");
    std::shared_ptr<ReplyStream> reply =
        createResponsesReply(*model.tokenizer, std::move(options), promptTokens);
    run(res, std::move(ready.sequence), std::move(reply), request->stream, Shape::OpenAI, log);
  }

  /// GET /v1/responses/{id}.
  void getResponse(const httplib::Request &req, httplib::Response &res) {
    if (!authorized(req, res)) {
      return;
    }
    const std::string id = req.matches[1];
    if (std::optional<OrderedJson> response = responses.response(id)) {
      return sendJson(res, 200, *response);
    }
    sendError(res, responseNotFound(id));
  }

  /// POST /v1/messages and /v1/messages/count_tokens, answering in Anthropic's shapes.
  /// `log` is null for count_tokens, which generates nothing.
  void createMessage(httplib::Response &res, RequestBody &body, bool countTokens,
                     const std::shared_ptr<RequestLog> &log) {
    if (!countTokens) {
      ++metrics.requestsTotal;
    }
    if (draining && !countTokens) {
      return sendError(res, kShuttingDown, Shape::Anthropic);
    }
    const std::string id = newId("msg_");
    std::optional<anthropic::MessagesRequest> request;
    std::variant<PreparedRequest, ApiError> prepared = [&]() -> decltype(prepared) {
      PrepareTurn turn(*this);
      std::variant<anthropic::MessagesRequest, ApiError> parsed =
          anthropic::parseMessagesRequest(body.text(), countTokens);
      body.release();
      if (ApiError *error = std::get_if<ApiError>(&parsed)) {
        return std::move(*error);
      }
      request = std::move(std::get<anthropic::MessagesRequest>(parsed));
      if (countTokens) {
        // Counted as a one-token reply would be: the prompt must fit the context.
        request->chatBody["max_tokens"] = 1;
      }
      return prepareTranslated(request->chatBody, request->params, "messages", id);
    }();
    if (ApiError *error = std::get_if<ApiError>(&prepared)) {
      return sendError(res, *error, Shape::Anthropic);
    }
    PreparedRequest &ready = std::get<PreparedRequest>(prepared);
    const int64_t promptTokens = static_cast<int64_t>(ready.sequence.prompt.size());
    if (countTokens) {
      return sendJson(res, 200, {{"input_tokens", promptTokens}});
    }
    if (request->thinkingBudget && ready.reply.startsInReasoning) {
      if (std::optional<TokenId> end = model.tokenizer->tokenToId(kThinkClose)) {
        std::shared_ptr<const runtime::TokenConstraint> &constraint = ready.sequence.constraint;
        constraint =
            std::make_shared<ThinkingBudget>(*request->thinkingBudget, static_cast<int32_t>(*end),
                                             constraint ? constraint->clone() : nullptr);
      }
    }
    MessagesReplyOptions options;
    options.text = textOptions(ready.reply);
    options.id = id;
    options.model = request->model;
    options.stream = request->stream;
    options.signer = &signer;
    log->model = request->model;
    std::shared_ptr<ReplyStream> reply =
        createMessagesReply(*model.tokenizer, std::move(options), promptTokens);
    run(res, std::move(ready.sequence), std::move(reply), request->stream, Shape::Anthropic, log);
  }

  /// A non-streamed reply: generated while the handler waits, so that its status can say how it
  /// ended (200, or the engine's failure: 503 for a lost rank, 500 otherwise; 503 for a shutdown)
  /// and the client is watched meanwhile: one that leaves cancels its generation.
  void whole(TokenQueue &queue, ReplyStream &reply, httplib::Response &res, Shape shape) {
    std::string body;
    const ReplyStream::Write write = [&body](std::string_view bytes) {
      body.append(bytes);
      return true;
    };
    ClientConnection *client = ClientConnection::current();
    const Relayed how =
        relay(queue, reply, write, [client] { return client != nullptr && client->gone(); });
    if (how == Relayed::Gone) {
      client->closeAfterReply();
      res.status = 499; // nobody reads it: the connection closes
      return;
    }
    if (how == Relayed::Cut) {
      return sendError(res, kCut, shape);
    }
    if (const std::optional<Status> &failure = reply.engineFailure()) {
      return sendError(res, engineError(*failure), shape);
    }
    reply.end(write);
    res.status = 200;
    res.set_content(body, "application/json");
  }

  /// GET /health: the status, and the state pool in tokens (how much a new request may take
  /// now), so that a router can send work where it fits.
  void health(httplib::Response &res) {
    const runtime::SchedulerStats stats = engine.stats();
    auto withPool = [&](OrderedJson body) {
      body["pool_tokens"] = stats.poolTokens;
      body["pool_free_tokens"] = stats.poolFreeTokens;
      return body;
    };
    if (draining) {
      return sendJson(res, 503, withPool({{"status", "draining"}}));
    }
    if (Status health = engine.health(); !health.ok()) {
      return sendJson(res, 503, withPool({{"status", "unavailable"}, {"error", health.message()}}));
    }
    sendJson(res, 200, withPool({{"status", "ok"}}));
  }

  void metricsPage(const httplib::Request &req, httplib::Response &res) {
    if (!options.metricsOpen && !authorized(req, res)) {
      return;
    }
    res.set_content(metrics.render(engine.stats(), options.servedNames.front()),
                    "text/plain; version=0.0.4");
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

  void tokenize(httplib::Response &res, const std::string &text) {
    OrderedJson body = OrderedJson::parse(text, nullptr, false);
    if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string()) {
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     "expected {\"prompt\": string}", "prompt"});
    }
    // Counted up to the window, like a prompt: more would never run.
    int64_t atLeast = 0;
    Expected<std::optional<std::vector<TokenId>>> ids = [&] {
      PrepareTurn turn(*this);
      return encodeWithin(*model.tokenizer, body["prompt"].get_ref<const std::string &>(),
                          options.maxContext, atLeast);
    }();
    if (!ids.ok()) {
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     ids.status().message(), "prompt"});
    }
    if (!*ids) {
      return sendError(
          res, ApiError{400, "invalid_request_error", "context_length_exceeded",
                        strCat("This model's maximum context length is ", options.maxContext,
                               " tokens; the prompt has more "
                               "than ",
                               atLeast),
                        "prompt"});
    }
    sendJson(res, 200,
             {{"tokens", **ids}, {"count", (*ids)->size()}, {"max_model_len", options.maxContext}});
  }

  void detokenize(httplib::Response &res, const std::string &text) {
    OrderedJson body = OrderedJson::parse(text, nullptr, false);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
      return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                     "expected {\"tokens\": [ids in the vocabulary]}", "tokens"});
    }
    std::vector<TokenId> ids;
    const OrderedJson &tokens = body["tokens"];
    for (size_t i = 0; i < tokens.size(); ++i) {
      // The id as the client wrote it, never narrowed: 4294967301 is not 5.
      const OrderedJson &t = tokens[i];
      const bool integral = t.is_number_integer();
      const bool inRange =
          integral && (t.is_number_unsigned()
                           ? t.get<uint64_t>() < model.tokenizer->idCount()
                           : t.get<int64_t>() >= 0 && static_cast<uint64_t>(t.get<int64_t>()) <
                                                          model.tokenizer->idCount());
      if (!inRange || !model.tokenizer->hasId(static_cast<TokenId>(t.get<int64_t>()))) {
        return sendError(res, ApiError{400, "invalid_request_error", "invalid_value",
                                       strCat("tokens[", i, "] is ",
                                              integral ? t.dump() : std::string("not an integer"),
                                              ": ids are integers in [0, ",
                                              model.tokenizer->idCount(), ") of the vocabulary"),
                                       strCat("tokens[", i, "]")});
      }
      ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    Expected<std::string> decoded = model.tokenizer->decode(ids);
    sendJson(res, 200, {{"prompt", decoded.ok() ? *decoded : std::string()}});
  }

  void install() {
    using Req = const httplib::Request &;
    using Res = httplib::Response &;
    using Reader = const httplib::ContentReader &;
    http.setGate([this](Req req, Res res) { return gate(req, res); });
    // Every response carries its request's id; a generation's handler sets it first (its log
    // line names the same id).
    auto tagged = [](Req req, Res res) {
      if (!res.has_header("X-Request-Id")) {
        res.set_header("X-Request-Id", requestIdFor(req.get_header_value("X-Request-Id")));
      }
    };
    http.set_post_routing_handler(tagged);
    // Every POST reads its body through readBody (bounded while it arrives, chunked too).
    auto withBody = [this](std::function<void(Req, Res, RequestBody &)> handler) {
      return [this, handler = std::move(handler)](Req req, Res res, Reader reader) {
        RequestBody body;
        if (http.readBody(req, reader, body, res)) {
          handler(req, res, body);
        }
      };
    };
    http.Get("/health", [this](Req, Res res) { health(res); });
    http.Get("/metrics", [this](Req req, Res res) { metricsPage(req, res); });
    http.Get("/v1/models", [this](Req req, Res res) { models(req, res); });
    http.Get(R"(/v1/models/(.+))", [this](Req req, Res res) { oneModel(req, res); });
    // A generation request's id and log line exist from its arrival, so that a refusal (a body
    // too large, a bad field) is logged and tagged as an answer is.
    using Generation = std::function<void(Res, RequestBody &, const std::shared_ptr<RequestLog> &)>;
    auto generation = [this](Generation handler) {
      return [this, handler = std::move(handler)](Req req, Res res, Reader reader) {
        auto log = std::make_shared<RequestLog>(requestIdFor(req.get_header_value("X-Request-Id")),
                                                req.path);
        res.set_header("X-Request-Id", log->requestId());
        RequestBody body;
        if (http.readBody(req, reader, body, res)) {
          handler(res, body, log);
        }
        if (log->status == 0) { // a stream's is set when it starts
          log->status = res.status;
        }
      };
    };
    http.Post("/v1/chat/completions", generation([this](Res res, RequestBody &body,
                                                        const std::shared_ptr<RequestLog> &log) {
                generate(res, Endpoint::ChatCompletions, body, log);
              }));
    http.Post("/v1/completions", generation([this](Res res, RequestBody &body,
                                                   const std::shared_ptr<RequestLog> &log) {
                generate(res, Endpoint::Completions, body, log);
              }));
    http.Post("/v1/responses", generation([this](Res res, RequestBody &body,
                                                 const std::shared_ptr<RequestLog> &log) {
                createResponse(res, body, log);
              }));
    http.Get(R"(/v1/responses/([^/]+))", [this](Req req, Res res) { getResponse(req, res); });
    http.Post("/v1/messages", generation([this](Res res, RequestBody &body,
                                                const std::shared_ptr<RequestLog> &log) {
                createMessage(res, body, /*countTokens=*/false, log);
              }));
    http.Post("/v1/messages/count_tokens", withBody([this](Req, Res res, RequestBody &body) {
                createMessage(res, body, /*countTokens=*/true, nullptr);
              }));
    for (const std::string prefix : {"", "/v1"}) {
      http.Post(prefix + "/tokenize",
                withBody([this](Req, Res res, RequestBody &body) { tokenize(res, body.text()); }));
      http.Post(prefix + "/detokenize", withBody([this](Req, Res res, RequestBody &body) {
                  detokenize(res, body.text());
                }));
    }
    // Any other POST: 404 without reading its body.
    http.Post(".*", [](Req, Res res, Reader) {
      if (ClientConnection *c = ClientConnection::current()) {
        c->closeAfterReply();
      }
      res.set_header("Connection", "close");
      sendError(
          res, ApiError{404, "invalid_request_error", "invalid_request_error", "no such endpoint"});
    });
    if (monitor) {
      monitor->set_post_routing_handler(tagged);
      monitor->Get("/health", [this](Req, Res res) { health(res); });
      monitor->Get("/metrics", [this](Req req, Res res) { metricsPage(req, res); });
      monitor->Post(".*", [](Req, Res res, Reader) {
        if (ClientConnection *c = ClientConnection::current()) {
          c->closeAfterReply();
        }
        sendError(res, ApiError{404, "invalid_request_error", "invalid_request_error",
                                "the monitoring port serves GET /health and /metrics"});
      });
    }
  }
};

HttpServer::HttpServer(ServerOptions options, runtime::EngineApi &engine, ServedModel model)
    : impl_(std::make_unique<Impl>(std::move(options), engine, std::move(model))) {
  impl_->install();
}

HttpServer::~HttpServer() {
  if (impl_->monitorThread.joinable()) {
    impl_->monitor->halt();
    impl_->monitorThread.join();
  }
}

Expected<int> HttpServer::bind() {
  GLM_ASSIGN_OR_RETURN(int port, impl_->http.bindTo(impl_->options.host, impl_->options.port));
  if (impl_->monitor) {
    GLM_ASSIGN_OR_RETURN(impl_->monitorPort, impl_->monitor->bindTo(impl_->options.monitorHost,
                                                                    impl_->options.monitorPort));
  }
  return port;
}

int HttpServer::monitorPort() const { return impl_->monitorPort; }

void HttpServer::serve() {
  if (impl_->monitor && !impl_->monitorThread.joinable()) {
    impl_->monitorThread = std::thread([this] { impl_->monitor->listen_after_bind(); });
  }
  impl_->http.listen_after_bind();
}

int64_t HttpServer::stop(int drainSeconds) {
  Impl &s = *impl_;
  s.draining = true;
  s.http.closeAfterCurrentRequests();
  // cpp-httplib's stop() cuts in-flight streams (server.md §4.1): first the requests running
  // finish, up to the deadline.
  auto idle = [&] {
    const runtime::SchedulerStats stats = s.engine.stats();
    return stats.running == 0 && stats.waiting == 0 && s.inFlight.load() == 0;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(drainSeconds);
  while (!idle() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (s.inFlight.load() > 0) {
    // The deadline: every reply still running ends now, with an error event and its finish,
    // and its generation is cancelled; each relay sees the flag within its 50 ms wait. A client
    // that reads none of it holds its reply no longer than the short grace.
    s.cut = true;
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (s.inFlight.load() > 0 && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  s.http.halt();
  if (s.monitor) {
    s.monitor->halt();
  }
  return s.cutReplies.load();
}

} // namespace glm::server
