// In-process tests of every endpoint with a fake engine that replies with scripted text, and one
// end-to-end test over the tiny fixture's CPU plan whose greedy reply equals glmc generate's.
#include "server/http/HttpServer.h"
#include "models/glm53/Config.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Scheduler.h"
#include "server/chat/ChatPrompt.h"
#include "server/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// Replies to every request with the token ids of a scripted text, on its own thread.
class FakeEngine : public runtime::EngineApi {
public:
  std::vector<int32_t> script;
  bool full = false;
  int delayMs = 0; // between tokens
  std::atomic<int> running{0};
  std::atomic<int> cancelled{0}; // requests whose sink asked to stop
  std::atomic<int> emitted{0};   // tokens handed to sinks, counted before the handing
  runtime::SequenceRequest last;

  Status submit(runtime::SequenceRequest request,
                std::shared_ptr<runtime::TokenSink> sink) override {
    if (full) {
      return Status(StatusCode::Unavailable, "the waiting queue is full (0 requests)");
    }
    last = request;
    ++running;
    std::thread([this, sink, tokens = script, max = request.maxTokens, delay = delayMs] {
      int64_t n = 0;
      runtime::FinishReason reason = runtime::FinishReason::Stop;
      for (int32_t t : tokens) {
        if (n == max) {
          reason = runtime::FinishReason::Length;
          break;
        }
        ++n;
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        ++emitted;
        if (!sink->onToken(t)) {
          ++cancelled;
          reason = runtime::FinishReason::Cancelled;
          break;
        }
      }
      --running;
      sink->onFinish(reason, Status::success());
    }).detach();
    return Status::success();
  }
  runtime::SchedulerStats stats() const override { return {.running = running.load()}; }
};

/// The fixture's end-of-sequence ids, from its config.json as glmc serve reads them.
std::vector<int32_t> tinyEosIds() {
  const std::vector<int64_t> ids = std::move(glm53::loadGlm53Config(kTiny)).value().eosTokenIds;
  return std::vector<int32_t>(ids.begin(), ids.end());
}

/// A server on a free loopback port over an engine, torn down with the test.
class Running {
public:
  Running(runtime::EngineApi &engine, ServerOptions options = {}) {
    tokenizer_ = std::make_unique<Tokenizer>(std::move(Tokenizer::fromModelDir(kTiny)).value());
    template_ = std::make_unique<ChatTemplate>(std::move(loadChatTemplate(kTiny)).value());
    ServedModel model{tokenizer_.get(), template_.get(),
                      std::move(loadChatTokenizerConfig(kTiny)).value(), tinyEosIds()};
    options.port = 0;
    options.servedNames = {"tiny"};
    if (options.maxContext == 0) {
      options.maxContext = 2048;
    }
    server_ = std::make_unique<HttpServer>(options, engine, model);
    port_ = *server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
  }
  ~Running() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  const Tokenizer &tokenizer() const { return *tokenizer_; }

private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

std::vector<int32_t> encode(const Tokenizer &t, const std::string &text) {
  return std::move(t.encode(text)).value();
}

Json post(const Running &server, const std::string &path, const Json &body, int expectStatus,
          httplib::Headers headers = {}) {
  httplib::Client client = server.client();
  auto res = client.Post(path.c_str(), headers, body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) {
    return {};
  }
  EXPECT_EQ(res->status, expectStatus) << res->body;
  return Json::parse(res->body, nullptr, false);
}

Json chat(const std::string &content) {
  return {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", content}}}}};
}

/// The data events of an SSE body, parsed; "[DONE]" as a string.
std::vector<Json> events(const std::string &body) {
  std::vector<Json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) {
      continue;
    }
    const std::string data = line.substr(6);
    out.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data, nullptr, false));
  }
  return out;
}

TEST(HttpServer, HealthModelsAndUnknownPaths) {
  FakeEngine engine;
  Running server(engine);
  httplib::Client c = server.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  Json m = Json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  auto one = c.Get("/v1/models/tiny");
  ASSERT_TRUE(one);
  EXPECT_EQ(Json::parse(one->body)["id"], "tiny");
  auto other = c.Get("/v1/models/other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  auto missing = c.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(Json::parse(missing->body, nullptr, false).contains("error"));
}

TEST(HttpServer, ChatSplitsReasoningFromContent) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "Let me think.</think>Hello there");
  Json r = post(server, "/v1/chat/completions", chat("Hi"), 200);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], engine.script.size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], engine.last.prompt.size());
  // The request shows in the latency histograms: one first token, the rest inter-token gaps.
  httplib::Client c = server.client();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(
      metrics->body.find(strCat("vllm:inter_token_latency_seconds_count{model_name=\"tiny\"} ",
                                engine.script.size() - 1)),
      std::string::npos);
  EXPECT_NE(metrics->body.find(
                "vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1"),
            std::string::npos);
  // The prompt is the chat template's rendering, ending in the open think block.
  const std::string prompt = std::move(server.tokenizer().decode(engine.last.prompt)).value();
  EXPECT_EQ(prompt, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
}

TEST(HttpServer, ThinkingOffMakesEverythingContent) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "Plain answer");
  Json request = chat("Hi");
  request["chat_template_kwargs"] = {{"enable_thinking", false}};
  Json r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Plain answer");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
}

TEST(HttpServer, StreamsChunksUsageAndDone) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "Hmm.</think>Streamed reply");
  Json request = chat("Hi");
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  httplib::Client c = server.client();
  auto res = c.Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  std::vector<Json> ev = events(res->body);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string content, reasoning, finish;
  for (const Json &e : ev) {
    if (!e.is_object() || e["choices"].empty()) {
      continue;
    }
    const Json &choice = e["choices"][0];
    content += choice["delta"].value("content", "");
    reasoning += choice["delta"].value("reasoning_content", "");
    if (!choice["finish_reason"].is_null()) {
      finish = choice["finish_reason"];
    }
  }
  EXPECT_EQ(content, "Streamed reply");
  EXPECT_EQ(reasoning, "Hmm.");
  EXPECT_EQ(finish, "stop");
  const Json &usage = ev[ev.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], engine.script.size());
}

/// The first chunk (the role chunk) leaves only once the engine has produced a token, so a client's
/// time to first token includes queueing and prefill, as with vLLM.
TEST(HttpServer, TheRoleChunkWaitsForTheFirstToken) {
  FakeEngine engine;
  engine.delayMs = 50; // before every token, the first included
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>ok");
  Json request = chat("Hi");
  request["stream"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = request.dump();
  req.set_header("Content-Type", "application/json");
  int emittedAtFirstChunk = -1;
  req.content_receiver = [&](const char *, size_t, uint64_t, uint64_t) {
    if (emittedAtFirstChunk < 0) {
      emittedAtFirstChunk = engine.emitted.load();
    }
    return true;
  };
  httplib::Client c = server.client();
  auto res = c.send(req);
  ASSERT_TRUE(res);
  EXPECT_GE(emittedAtFirstChunk, 1);
}

TEST(HttpServer, ToolCallsAreTypedByTheSchema) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(),
                         "</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
                         "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>");
  Json request = chat("Weather?");
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer"}}}}}])");
  Json r = post(server, "/v1/chat/completions", request, 200);
  const Json &message = r["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST(HttpServer, StopStringsEndTheReply) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>one two three four");
  Json request = chat("Count");
  request["stop"] = {" three"};
  Json r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "one two");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(HttpServer, CompletionsFromTextAndIds) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), " world");
  Json r = post(server, "/v1/completions",
                {{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 8}}, 200);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], " world");
  EXPECT_EQ(engine.last.maxTokens, 8);
  r = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 1}},
           200);
  EXPECT_EQ(engine.last.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
}

TEST(HttpServer, ErrorsHaveOpenAisShape) {
  FakeEngine engine;
  ServerOptions options;
  options.maxBodyBytes = 4096;
  options.maxContext = 64;
  Running server(engine, options);
  httplib::Client c = server.client();
  auto bad = c.Post("/v1/chat/completions", "{\"model\": ", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["type"], "invalid_request_error");

  Json wrongModel = chat("Hi");
  wrongModel["model"] = "other";
  EXPECT_EQ(post(server, "/v1/chat/completions", wrongModel, 404)["error"]["code"],
            "model_not_found");

  Json tooLong = chat("Hi");
  tooLong["max_tokens"] = 60;
  EXPECT_EQ(post(server, "/v1/chat/completions", tooLong, 400)["error"]["code"],
            "context_length_exceeded");

  auto huge = c.Post("/v1/chat/completions", std::string(8192, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_TRUE(Json::parse(huge->body, nullptr, false).contains("error"));

  engine.full = true;
  EXPECT_EQ(post(server, "/v1/chat/completions", chat("Hi"), 503)["error"]["code"],
            "server_overloaded");
}

TEST(HttpServer, ApiKeysGuardTheApi) {
  FakeEngine engine;
  engine.script = {1};
  ServerOptions options;
  options.apiKeys = {"sk-test"};
  Running server(engine, options);
  httplib::Client c = server.client();
  EXPECT_EQ(post(server, "/v1/chat/completions", chat("Hi"), 401)["error"]["code"],
            "invalid_api_key");
  post(server, "/v1/chat/completions", chat("Hi"), 200, {{"Authorization", "Bearer sk-test"}});
  auto health = c.Get("/health"); // open without a key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(HttpServer, TokenizeAndDetokenize) {
  FakeEngine engine;
  Running server(engine);
  Json t = post(server, "/tokenize", {{"prompt", "Hello world"}}, 200);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), encode(server.tokenizer(), "Hello world"));
  Json d = post(server, "/v1/detokenize", {{"tokens", t["tokens"]}}, 200);
  EXPECT_EQ(d["prompt"], "Hello world");
  post(server, "/detokenize", {{"tokens", {1 << 20}}}, 400);
}

TEST(HttpServer, AGracefulStopFinishesTheStreamsInFlight) {
  FakeEngine engine;
  engine.delayMs = 20;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>a slow reply of several tokens");
  std::string body;
  std::thread client([&] {
    Json request = chat("Hi");
    request["stream"] = true;
    httplib::Client c = server.client();
    auto res = c.Post("/v1/chat/completions", request.dump(), "application/json");
    if (res) {
      body = res->body;
    }
  });
  while (engine.running.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server.stop(); // returns once the stream has been written
  client.join();
  std::vector<Json> ev = events(body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string content;
  for (const Json &e : ev) {
    if (e.is_object() && !e["choices"].empty()) {
      content += e["choices"][0]["delta"].value("content", "");
    }
  }
  EXPECT_EQ(content, "a slow reply of several tokens");
}

/// A client that gives up cancels its generation, streamed or not; the engine would otherwise run
/// every script to its end.
TEST(HttpServer, AClientThatLeavesCancelsItsGeneration) {
  FakeEngine engine;
  engine.delayMs = 10; // 3 s for the whole reply
  Running server(engine);
  std::string longReply = "</think>";
  for (int i = 0; i < 300; ++i) {
    longReply += " word";
  }
  engine.script = encode(server.tokenizer(), longReply);
  ASSERT_GE(engine.script.size(), 300u);
  for (bool stream : {false, true}) {
    Json request = chat("Hi");
    request["stream"] = stream;
    httplib::Client c = server.client();
    std::thread client([&] { c.Post("/v1/chat/completions", request.dump(), "application/json"); });
    while (engine.running.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    c.stop(); // shuts the socket mid-reply
    client.join();
    while (engine.running.load() != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  EXPECT_EQ(engine.cancelled.load(), 2);
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(
      metrics->body.find("vllm:http_requests_client_disconnected_total{model_name=\"tiny\"} 2"),
      std::string::npos)
      << metrics->body;
}

TEST(HttpServerEndToEnd, GreedyRepliesMatchTheEngineAndStreamsRunConcurrently) {
  // The tiny fixture's CPU plan behind the real scheduler: at temperature 0 the reply is the
  // greedy continuation, computed here on a second engine directly.
  const auto plan =
      std::filesystem::temp_directory_path() / ("http_e2e_" + std::to_string(::getpid()) + ".glmp");
  ASSERT_EQ(std::system((std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                         plan.string() + " --target cpu --precision f32 --tp 1 2>/dev/null")
                            .c_str()),
            0);
  std::unique_ptr<Checkpoint> ck = std::move(Checkpoint::open(kTiny)).value();
  auto makeEngine = [&] {
    return std::move(
               runtime::CpuEngine::create(std::move(runtime::PlanFile::open(plan)).value(), *ck))
        .value();
  };
  std::unique_ptr<runtime::CpuEngine> reference = makeEngine();
  runtime::Scheduler engine(makeEngine(), 16);
  std::filesystem::remove(plan);
  Running server(engine);
  Json request = {{"model", "tiny"},
                  {"prompt", "tensor parallel"},
                  {"max_tokens", 6},
                  {"temperature", 0},
                  {"ignore_eos", true}};
  Json r = post(server, "/v1/completions", request, 200);

  const std::vector<int32_t> prompt = encode(server.tokenizer(), "tensor parallel");
  const int slot = *reference->newSequence();
  std::vector<float> logits = *reference->prefill(slot, prompt, runtime::LogitRows::Last);
  const int64_t vocab = reference->vocabSize();
  std::vector<int32_t> greedy;
  std::vector<float> row(logits.end() - vocab, logits.end());
  for (int i = 0; i < 6; ++i) {
    for (int32_t eos : tinyEosIds()) {
      row[static_cast<size_t>(eos)] = -INFINITY; // ignore_eos
    }
    greedy.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    const int slots[] = {slot};
    row = *reference->decode(slots, std::span(&greedy.back(), 1));
  }
  EXPECT_EQ(r["choices"][0]["text"], std::move(server.tokenizer().decode(greedy)).value());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");

  // Eight concurrent streams all complete.
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      Json req = request;
      req["stream"] = true;
      req["prompt"] = "stream " + std::to_string(i);
      httplib::Client c = server.client();
      auto res = c.Post("/v1/completions", req.dump(), "application/json");
      if (res && res->status == 200 && events(res->body).back() == "[DONE]") {
        ++ok;
      }
    });
  }
  for (std::thread &t : clients) {
    t.join();
  }
  EXPECT_EQ(ok.load(), 8);
}

} // namespace
} // namespace glm::server
