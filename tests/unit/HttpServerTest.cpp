// In-process tests of every endpoint with a fake engine that replies with scripted text, and one
// end-to-end test over the tiny fixture's CPU plan whose greedy reply equals glmc generate's.
#include "server/http/HttpServer.h"
#include "models/glm53/Config.h"
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Scheduler.h"
#include "server/chat/ChatPrompt.h"
#include "server/grammar/StructuredOutputs.h"
#include "server/tokenizer/Tokenizer.h"
#include "tests/unit/support/FakeEngine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <netinet/in.h>
#include <poll.h>
#include <set>
#include <span>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

using testing::FakeEngine;

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
  /// Stops as a SIGTERM does, draining for up to `drainSeconds`; the replies cut.
  int64_t stop(int drainSeconds = 30) {
    int64_t cut = 0;
    if (thread_.joinable()) {
      cut = server_->stop(drainSeconds);
      thread_.join();
    }
    return cut;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Client monitorClient() const {
    httplib::Client c("127.0.0.1", server_->monitorPort());
    c.set_read_timeout(30, 0);
    return c;
  }
  int port() const { return port_; }
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
  EXPECT_EQ(r["usage"]["prompt_tokens"], engine.last().prompt.size());
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
  const std::string prompt = std::move(server.tokenizer().decode(engine.last().prompt)).value();
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
  EXPECT_EQ(engine.last().maxTokens, 8);
  r = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 1}},
           200);
  EXPECT_EQ(engine.last().prompt, (std::vector<int32_t>{1, 2, 3}));
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

/// The SSE events of a streamed POST.
std::vector<Json> streamed(const Running &server, const std::string &path, Json body) {
  body["stream"] = true;
  httplib::Client c = server.client();
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) {
    return {};
  }
  EXPECT_EQ(res->status, 200) << res->body;
  std::vector<Json> ev = events(res->body);
  EXPECT_FALSE(ev.empty());
  EXPECT_EQ(ev.empty() ? Json() : ev.back(), "[DONE]");
  return ev;
}

/// Each token of `ids` decoded alone, as logprobs show it.
std::vector<std::string> tokenTexts(const Tokenizer &t, const std::vector<int32_t> &ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) {
    out.push_back(std::move(t.decode(std::span(&id, 1))).value());
  }
  return out;
}

/// Checks one chat logprobs entry against the fake engine's token `id` with `k` alternatives.
void expectChatEntry(const Tokenizer &t, const Json &entry, int32_t id, int k) {
  std::vector<int> bytes;
  for (unsigned char byte : t.tokenBytes(id)) {
    bytes.push_back(byte);
  }
  EXPECT_EQ(entry["token"], tokenTexts(t, {id})[0]);
  EXPECT_EQ(entry["logprob"], -0.5);
  EXPECT_EQ(entry["bytes"], Json(bytes));
  ASSERT_EQ(entry["top_logprobs"].size(), static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const Json &alternative = entry["top_logprobs"][j];
    EXPECT_TRUE(alternative["token"].is_string());
    EXPECT_TRUE(alternative["bytes"].is_array());
    if (j > 0) {
      EXPECT_LT(alternative["logprob"].get<double>(),
                entry["top_logprobs"][j - 1]["logprob"].get<double>());
    }
  }
  if (k > 0) {
    EXPECT_EQ(entry["top_logprobs"][0]["token"], entry["token"]);
  }
}

/// Every generated token has its entry, reasoning and tool-call markup included, in order.
TEST(HttpServer, ChatLogprobs) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "Let me think.</think>Hello there");
  Json request = chat("Hi");
  request["logprobs"] = true;
  request["top_logprobs"] = 2;
  Json r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(engine.last().sampling.logprobs, 2);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there");
  const Json &logprobs = r["choices"][0]["logprobs"];
  EXPECT_TRUE(logprobs["refusal"].is_null());
  ASSERT_EQ(logprobs["content"].size(), engine.script.size());
  for (size_t i = 0; i < engine.script.size(); ++i) {
    expectChatEntry(server.tokenizer(), logprobs["content"][i], engine.script[i], 2);
  }

  // logprobs alone: the sampled tokens', no alternatives. Not asked for: null.
  request.erase("top_logprobs");
  r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(engine.last().sampling.logprobs, 0);
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"], Json::array());
  r = post(server, "/v1/chat/completions", chat("Hi"), 200);
  EXPECT_EQ(engine.last().sampling.logprobs, -1);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
}

/// Each chunk carries the logprobs of the tokens whose text it carries; tokens whose text is
/// held back (a stop string's possible start, the think block's close) come with a later chunk,
/// so every token comes exactly once.
TEST(HttpServer, StreamedChatLogprobs) {
  FakeEngine engine;
  Running server(engine);
  const std::string text = "Hmm.</think>Streamed reply, with more words";
  engine.script = encode(server.tokenizer(), text);
  Json request = chat("Hi");
  request["logprobs"] = true;
  request["top_logprobs"] = 1;
  request["stop"] = {"never matched"};
  std::vector<Json> ev = streamed(server, "/v1/chat/completions", request);
  EXPECT_TRUE(ev.front()["choices"][0]["logprobs"].is_null()); // the role chunk
  std::vector<int32_t> seen;
  for (const Json &e : ev) {
    if (!e.is_object() || e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) {
      continue;
    }
    for (const Json &entry : e["choices"][0]["logprobs"]["content"]) {
      ASSERT_LT(seen.size(), engine.script.size());
      expectChatEntry(server.tokenizer(), entry, engine.script[seen.size()], 1);
      seen.push_back(engine.script[seen.size()]);
    }
  }
  EXPECT_EQ(seen, engine.script);
}

/// echo: the prompt's text before each choice's, whole or as each choice's first chunk.
TEST(HttpServer, CompletionsEchoThePrompt) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), " world");
  Json request = {{"model", "tiny"}, {"prompt", "Hello"}, {"echo", true}, {"max_tokens", 8}};
  Json r = post(server, "/v1/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["text"], "Hello world");
  std::string text;
  for (const Json &e : streamed(server, "/v1/completions", request)) {
    if (e.is_object() && !e["choices"].empty()) {
      text += e["choices"][0]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "Hello world");
  // A token-id prompt echoes its decoded text.
  request["prompt"] = encode(server.tokenizer(), "Hi");
  r = post(server, "/v1/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["text"], "Hi world");
}

TEST(HttpServer, CompletionLogprobs) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), " a tensor parallel world");
  const std::vector<std::string> texts = tokenTexts(server.tokenizer(), engine.script);
  auto check = [&](const Json &tokens, const Json &logprobs, const Json &top, const Json &offsets) {
    ASSERT_EQ(tokens.size(), texts.size());
    ASSERT_EQ(logprobs.size(), texts.size());
    ASSERT_EQ(top.size(), texts.size());
    ASSERT_EQ(offsets.size(), texts.size());
    int64_t offset = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(tokens[i], texts[i]);
      EXPECT_EQ(logprobs[i], -0.5);
      // Three alternatives, the sampled token among them.
      EXPECT_EQ(top[i].size(), 3u);
      EXPECT_EQ(top[i].value(texts[i], 0.0), -0.5);
      EXPECT_EQ(offsets[i], offset); // where the token starts in the text
      offset += static_cast<int64_t>(texts[i].size());
    }
  };
  Json request = {{"model", "tiny"}, {"prompt", "Hello"}, {"logprobs", 3}};
  Json r = post(server, "/v1/completions", request, 200);
  EXPECT_EQ(engine.last().sampling.logprobs, 3);
  EXPECT_EQ(r["choices"][0]["text"], " a tensor parallel world");
  const Json &lp = r["choices"][0]["logprobs"];
  check(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]);

  // Streamed: the same lists, cut along the chunks; offsets count from the start of the text.
  Json tokens = Json::array(), logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  std::string text;
  for (const Json &e : streamed(server, "/v1/completions", request)) {
    if (!e.is_object() || e["choices"].empty()) {
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    const Json &chunk = e["choices"][0]["logprobs"];
    if (chunk.is_null()) {
      continue;
    }
    for (size_t i = 0; i < chunk["tokens"].size(); ++i) {
      tokens.push_back(chunk["tokens"][i]);
      logprobs.push_back(chunk["token_logprobs"][i]);
      top.push_back(chunk["top_logprobs"][i]);
      offsets.push_back(chunk["text_offset"][i]);
    }
  }
  EXPECT_EQ(text, " a tensor parallel world");
  check(tokens, logprobs, top, offsets);

  r = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", "Hello"}}, 200);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
}

/// A character split across tokens: each piece's text is U+FFFD, its bytes the piece's, and its
/// text_offset the character it is part of.
TEST(HttpServer, LogprobsOfPartialCharacters) {
  FakeEngine engine;
  Running server(engine);
  const std::string text = " h\xc3\xa9llo w\xc3\xb6rld"; // " héllo wörld"
  engine.script = encode(server.tokenizer(), text);
  std::vector<size_t> starts; // the byte where each character starts
  for (size_t b = 0; b < text.size(); ++b) {
    if ((static_cast<unsigned char>(text[b]) & 0xC0) != 0x80) {
      starts.push_back(b);
    }
  }
  Json r =
      post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"logprobs", 0}}, 200);
  EXPECT_EQ(r["choices"][0]["text"], text);
  const Json &lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), engine.script.size());
  size_t byte = 0, partial = 0;
  for (size_t i = 0; i < engine.script.size(); ++i) {
    const std::string_view bytes = server.tokenizer().tokenBytes(engine.script[i]);
    const size_t character = std::upper_bound(starts.begin(), starts.end(), byte) - starts.begin();
    EXPECT_EQ(lp["text_offset"][i], character - 1) << i;
    if (std::string(bytes) != lp["tokens"][i].get<std::string>()) {
      EXPECT_EQ(lp["tokens"][i], "\ufffd") << i; // a piece of a character
      ++partial;
    }
    byte += bytes.size();
  }
  EXPECT_GT(partial, 0u) << "the fixture's tokenizer no longer splits these characters";

  // Chat: the bytes of the entries make up the reply.
  Json request = chat("Hi");
  request["chat_template_kwargs"] = {{"enable_thinking", false}};
  request["logprobs"] = true;
  r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], text);
  std::string joined;
  for (const Json &entry : r["choices"][0]["logprobs"]["content"]) {
    for (int b : entry["bytes"]) {
      joined += static_cast<char>(b);
    }
  }
  EXPECT_EQ(joined, text);
}

/// n choices: each its own text, reasoning, finish reason and logprobs; usage sums them.
TEST(HttpServer, ChoicesHaveTheirOwnReplies) {
  FakeEngine engine;
  Running server(engine);
  engine.scripts = {encode(server.tokenizer(), "a.</think>alpha"),
                    encode(server.tokenizer(), "b.</think>beta beta"),
                    encode(server.tokenizer(), "c.</think>gamma gamma gamma")};
  Json request = chat("Hi");
  request["n"] = 3;
  request["max_tokens"] = static_cast<int64_t>(engine.scripts[1].size()); // choice 2 is cut
  request["logprobs"] = true;
  Json r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(engine.last().n, 3);
  ASSERT_EQ(r["choices"].size(), 3u);
  const char *contents[] = {"alpha", "beta beta", nullptr};
  const char *reasoning[] = {"a.", "b.", "c."};
  size_t tokens = 0;
  for (size_t i = 0; i < 3; ++i) {
    const Json &choice = r["choices"][i];
    EXPECT_EQ(choice["index"], i);
    if (contents[i]) {
      EXPECT_EQ(choice["message"]["content"], contents[i]);
    }
    EXPECT_EQ(choice["message"]["reasoning_content"], reasoning[i]);
    EXPECT_EQ(choice["finish_reason"], i == 2 ? "length" : "stop");
    const size_t expected = std::min(engine.scripts[i].size(), engine.scripts[1].size());
    EXPECT_EQ(choice["logprobs"]["content"].size(), expected);
    tokens += expected;
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], tokens);
  EXPECT_EQ(r["usage"]["prompt_tokens"], engine.last().prompt.size());

  // Completions too.
  r = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", "Hello"}, {"n", 2}}, 200);
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], "a.</think>alpha");
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], "b.</think>beta beta");
}

/// A stream of n choices interleaves them, one choice a chunk: each has its role chunk, its
/// deltas and its finish chunk; the usage chunk and [DONE] come once, after all.
TEST(HttpServer, StreamedChoicesInterleave) {
  FakeEngine engine;
  Running server(engine);
  engine.scripts = {encode(server.tokenizer(), "</think>one two three"),
                    encode(server.tokenizer(), "</think>four five six seven"),
                    encode(server.tokenizer(), "</think>eight")};
  Json request = chat("Hi");
  request["n"] = 3;
  request["stream_options"] = {{"include_usage", true}};
  std::vector<Json> ev = streamed(server, "/v1/chat/completions", request);
  std::string content[3];
  int roles[3] = {}, finishes[3] = {};
  std::vector<int> order; // the choice of every content chunk
  for (size_t e = 0; e + 2 < ev.size(); ++e) {
    ASSERT_EQ(ev[e]["choices"].size(), 1u) << ev[e].dump();
    const Json &choice = ev[e]["choices"][0];
    const int i = choice["index"].get<int>();
    ASSERT_TRUE(i >= 0 && i < 3);
    roles[i] += choice["delta"].contains("role");
    if (choice["delta"].contains("content") && !choice["delta"].contains("role")) {
      content[i] += choice["delta"]["content"].get<std::string>();
      order.push_back(i);
    }
    if (!choice["finish_reason"].is_null()) {
      EXPECT_EQ(choice["finish_reason"], "stop");
      ++finishes[i];
    }
  }
  EXPECT_EQ(content[0], "one two three");
  EXPECT_EQ(content[1], "four five six seven");
  EXPECT_EQ(content[2], "eight");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end())); // interleaved, not one after another
  const Json &usage = ev[ev.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"],
            engine.scripts[0].size() + engine.scripts[1].size() + engine.scripts[2].size());
}

/// A stop string ends its own choice only; the engine's further tokens of it are not counted.
TEST(HttpServer, AStopStringEndsItsChoice) {
  FakeEngine engine;
  Running server(engine);
  engine.scripts = {encode(server.tokenizer(), "</think>one two STOP three four five"),
                    encode(server.tokenizer(), "</think>six seven")};
  Json request = chat("Count");
  request["n"] = 2;
  request["stop"] = {" STOP"};
  Json r = post(server, "/v1/chat/completions", request, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "one two");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][1]["message"]["content"], "six seven");
  const size_t shown = encode(server.tokenizer(), "</think>one two STOP").size();
  EXPECT_LT(r["usage"]["completion_tokens"].get<size_t>(),
            engine.scripts[0].size() + engine.scripts[1].size());
  EXPECT_GE(r["usage"]["completion_tokens"].get<size_t>(), shown + engine.scripts[1].size());
}

TEST(HttpServer, SamplingControlsReachTheEngine) {
  FakeEngine engine;
  engine.script = {1};
  Running server(engine);
  Json request = chat("Hi");
  request.update(Json::parse(R"({"presence_penalty": 0.5, "frequency_penalty": -0.25,
      "repetition_penalty": 1.5, "logit_bias": {"17": -100, "3": 2.5}, "n": 2, "seed": 9,
      "min_tokens": 1, "ignore_eos": true, "temperature": 0.75, "top_p": 0.5, "top_k": 7,
      "min_p": 0.125})"));
  post(server, "/v1/chat/completions", request, 200);
  const runtime::SamplingParams s = engine.last().sampling;
  EXPECT_EQ(s.presencePenalty, 0.5f);
  EXPECT_EQ(s.frequencyPenalty, -0.25f);
  EXPECT_EQ(s.repetitionPenalty, 1.5f);
  EXPECT_EQ(s.logitBias, (std::vector<std::pair<int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.temperature, 0.75f);
  EXPECT_EQ(s.topP, 0.5f);
  EXPECT_EQ(s.topK, 7);
  EXPECT_EQ(s.minP, 0.125f);
  EXPECT_EQ(s.logprobs, -1);
  EXPECT_TRUE(s.allowedTokens.empty());
  EXPECT_EQ(engine.last().n, 2);
  EXPECT_EQ(engine.last().minTokens, 1);
  EXPECT_TRUE(engine.last().ignoreEos);

  post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}}, 200);
  EXPECT_EQ(engine.last().sampling.presencePenalty, 0.0f);
  EXPECT_EQ(engine.last().sampling.repetitionPenalty, 1.0f);
  EXPECT_TRUE(engine.last().sampling.logitBias.empty());
  EXPECT_EQ(engine.last().n, 1);
}

/// glmc's `draft`: false asks the engine for the serial reference, absent or true leaves drafts
/// on; anything but a boolean is a 400 naming the field, on both endpoints.
TEST(HttpServer, TheDraftFieldReachesTheEngine) {
  FakeEngine engine;
  engine.script = {1};
  Running server(engine);
  const Json completion = {{"model", "tiny"}, {"prompt", "x"}};
  for (const Json &base : {chat("Hi"), completion}) {
    const std::string path = base.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    post(server, path, base, 200);
    EXPECT_TRUE(engine.last().draft) << path;
    for (bool draft : {false, true}) {
      Json request = base;
      request["draft"] = draft;
      post(server, path, request, 200);
      EXPECT_EQ(engine.last().draft, draft) << path;
    }
    const int submitted = engine.requests.load();
    for (const Json &bad : {Json(0), Json("false"), Json::array({false})}) {
      Json request = base;
      request["draft"] = bad;
      Json e = post(server, path, request, 400)["error"];
      EXPECT_EQ(e["param"], "draft") << path << " " << bad.dump();
      EXPECT_EQ(e["code"], "invalid_type") << bad.dump();
      EXPECT_NE(e["message"].get<std::string>().find("'draft'"), std::string::npos) << e.dump();
    }
    EXPECT_EQ(engine.requests.load(), submitted) << "a refused request reached the engine";
  }
}

/// Without a seed the key derives from the request id, so every request has its own and can be
/// replayed; a seed given is the key.
TEST(HttpServer, TheSamplingKeyIsTheSeedOrDerivesFromTheId) {
  FakeEngine engine;
  engine.script = {1};
  Running server(engine);
  Json a = post(server, "/v1/chat/completions", chat("Hi"), 200);
  const uint64_t keyA = engine.last().sampling.seed;
  Json b = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}}, 200);
  const uint64_t keyB = engine.last().sampling.seed;
  EXPECT_EQ(keyA, requestSeed(a["id"].get<std::string>()));
  EXPECT_EQ(keyB, requestSeed(b["id"].get<std::string>()));
  EXPECT_NE(a["id"], b["id"]);
  EXPECT_NE(keyA, keyB);
  // A streamed reply's chunks carry the same id the key came from.
  std::vector<Json> ev = streamed(server, "/v1/chat/completions", chat("Hi"));
  EXPECT_EQ(engine.last().sampling.seed, requestSeed(ev.front()["id"].get<std::string>()));

  Json seeded = chat("Hi");
  seeded["seed"] = 12345;
  post(server, "/v1/chat/completions", seeded, 200);
  EXPECT_EQ(engine.last().sampling.seed, 12345u);
  post(server, "/v1/chat/completions", seeded, 200);
  EXPECT_EQ(engine.last().sampling.seed, 12345u);
  // base/Hash.h's FNV-1a of the id and its separator byte: pinned, since a client replays a
  // reply with seed = requestSeed(id) on any build.
  EXPECT_EQ(requestSeed(""), 0xaf64724c8602eb6eull);
  EXPECT_EQ(requestSeed("a"), 0x089bc907b544c769ull);
}

/// A request the engine can never run is the client's error: 400 naming the field, the engine's
/// message.
TEST(HttpServer, AnEngineRefusalIs400NamingTheField) {
  FakeEngine engine;
  Running server(engine);
  Json many = chat("Hi");
  many["n"] = 8;
  engine.refusal = invalidArgument("n = 8 is above the engine's 4 sequence slots");
  Json e = post(server, "/v1/chat/completions", many, 400)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["code"], "invalid_value");
  EXPECT_EQ(e["param"], "n");
  EXPECT_EQ(e["message"], "n = 8 is above the engine's 4 sequence slots");

  Json biased = {{"model", "tiny"}, {"prompt", "x"}, {"logit_bias", {{"999999", 5}}}};
  engine.refusal = invalidArgument("logitBias: token 999999 is outside the vocabulary");
  EXPECT_EQ(post(server, "/v1/completions", biased, 400)["error"]["param"], "logit_bias");
  // A message that names no field: the one field the engine checks that the request set.
  engine.refusal = invalidArgument("token 999999 is outside the vocabulary");
  EXPECT_EQ(post(server, "/v1/completions", biased, 400)["error"]["param"], "logit_bias");
  EXPECT_EQ(post(server, "/v1/chat/completions", many, 400)["error"]["param"], "n");
}

/// An engine failure replaces the rest of the reply with the error, whatever choices ended.
TEST(HttpServer, AnEngineFailureEndsTheReply) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>one two three");
  engine.failure = Status(StatusCode::Internal, "the step failed");
  Json request = chat("Hi");
  request["n"] = 2;
  // A whole reply waits for the engine, so its status says how it ended: 500 for a failed step.
  Json r = post(server, "/v1/chat/completions", request, 500);
  EXPECT_EQ(r["error"]["type"], "server_error");
  EXPECT_EQ(r["error"]["code"], "engine_error");
  EXPECT_EQ(r["error"]["message"], "the step failed");
  std::vector<Json> ev = streamed(server, "/v1/chat/completions", request);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["error"]["message"], "the step failed");
  for (size_t e = 0; e + 2 < ev.size(); ++e) {
    EXPECT_TRUE(ev[e]["choices"][0]["finish_reason"].is_null()) << ev[e].dump();
  }
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("glmc:http_requests_failed_total{model_name=\"tiny\"} 2"),
            std::string::npos)
      << metrics->body;
}

/// Choice 0 stands for the request in the latency histograms.
TEST(HttpServer, LatenciesFollowTheFirstChoice) {
  FakeEngine engine;
  Running server(engine);
  engine.scripts = {encode(server.tokenizer(), "</think>a b c"),
                    encode(server.tokenizer(), "</think>d e f g h")};
  Json request = chat("Hi");
  request["n"] = 2;
  post(server, "/v1/chat/completions", request, 200);
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(
      metrics->body.find(strCat("vllm:inter_token_latency_seconds_count{model_name=\"tiny\"} ",
                                engine.scripts[0].size() - 1)),
      std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find(
                "vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1"),
            std::string::npos);
}

/// A prompt resumed from a kept state shows in every usage as prompt_tokens_details.cached_tokens,
/// counted once however many choices share the prompt.
TEST(HttpServer, CachedPromptTokensReachTheUsage) {
  FakeEngine engine;
  engine.cachedTokens = 5;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>Hello there");
  Json r = post(server, "/v1/chat/completions", chat("Hi"), 200);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], engine.last().prompt.size());

  Json streamed = chat("Hi");
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  streamed["n"] = 2;
  auto res = server.client().Post("/v1/chat/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(res);
  std::vector<Json> ev = events(res->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << res->body;

  Json completion = {{"model", "tiny"}, {"prompt", "Hi there"}, {"n", 3}, {"max_tokens", 4}};
  Json c = post(server, "/v1/completions", completion, 200);
  EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << c.dump();
  completion["stream"] = true;
  completion["stream_options"] = {{"include_usage", true}};
  res = server.client().Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(res);
  ev = events(res->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["prompt_tokens_details"]["cached_tokens"], 5) << res->body;

  // Without a kept state the field is there, 0.
  engine.cachedTokens = 0;
  r = post(server, "/v1/chat/completions", chat("Hi"), 200);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

/// /health says how much of the state pool a new request may take, on both listeners, and
/// /metrics has the same as gauges.
TEST(HttpServer, HealthAndMetricsShowThePool) {
  FakeEngine engine;
  engine.reported.poolTokens = 4096;
  engine.reported.poolFreeTokens = 1024;
  ServerOptions options;
  options.monitorPort = 0;
  Running server(engine, options);
  for (bool monitor : {false, true}) {
    httplib::Client c = monitor ? server.monitorClient() : server.client();
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(Json::parse(health->body),
              Json({{"status", "ok"}, {"pool_tokens", 4096}, {"pool_free_tokens", 1024}}))
        << monitor;
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("# TYPE glmc:pool_tokens gauge\n"
                                 "glmc:pool_tokens{model_name=\"tiny\"} 4096\n"),
              std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("# TYPE glmc:pool_free_tokens gauge\n"
                                 "glmc:pool_free_tokens{model_name=\"tiny\"} 1024\n"),
              std::string::npos);
  }
}

/// The engine's speculative-decoding counts are on /metrics under vLLM's names, the accepted
/// drafts by position as one family with a position label.
TEST(HttpServer, MetricsCountTheDrafts) {
  FakeEngine engine;
  engine.reported.specDrafts = 40;
  engine.reported.specDraftTokens = 120;
  engine.reported.specAcceptedTokens = 75;
  engine.reported.specAcceptedPerPosition = {35, 25, 15};
  Running server(engine);
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  const std::string &body = metrics->body;
  for (const char *expected :
       {"# TYPE vllm:spec_decode_num_drafts_total counter\n"
        "vllm:spec_decode_num_drafts_total{model_name=\"tiny\"} 40\n",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        "vllm:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 120\n",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        "vllm:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 75\n",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"} "
        "35\n"
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"} "
        "25\n"
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"2\"} "
        "15\n"}) {
    EXPECT_NE(body.find(expected), std::string::npos) << expected << "\n" << body;
  }
  EXPECT_EQ(body.find("position=\"3\""), std::string::npos) << body;

  // Without drafts the counters are 0 and the per-position family has no series.
  engine.reported = {};
  metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:spec_decode_num_drafts_total{model_name=\"tiny\"} 0\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(
      metrics->body.find("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"),
      std::string::npos);
  EXPECT_EQ(metrics->body.find("position="), std::string::npos) << metrics->body;
}

/// Every response echoes the request's X-Request-Id, or one generated when it gives none (or one
/// too long or not printable): answers, errors, streams, and the other endpoints.
TEST(HttpServer, EveryResponseCarriesARequestId) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>ok");
  httplib::Client c = server.client();
  auto idOf = [&](const char *path, const Json &body, const httplib::Headers &headers, int status) {
    auto res = c.Post(path, headers, body.dump(), "application/json");
    EXPECT_TRUE(res) << path;
    if (!res) {
      return std::string();
    }
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_EQ(res->get_header_value_count("X-Request-Id"), 1u) << path;
    return res->get_header_value("X-Request-Id");
  };
  EXPECT_EQ(idOf("/v1/chat/completions", chat("Hi"), {{"X-Request-Id", "client-id-1"}}, 200),
            "client-id-1");
  Json streamed = chat("Hi");
  streamed["stream"] = true;
  EXPECT_EQ(idOf("/v1/chat/completions", streamed, {{"X-Request-Id", "sse id 2"}}, 200),
            "sse id 2");
  Json bad = chat("Hi");
  bad["temperature"] = "hot";
  EXPECT_EQ(idOf("/v1/chat/completions", bad, {{"x-request-id", "bad-3"}}, 400), "bad-3");
  EXPECT_EQ(idOf("/v1/nothing", Json::object(), {{"X-Request-Id", "missing-4"}}, 404), "missing-4");
  EXPECT_EQ(idOf("/tokenize", {{"prompt", "hi"}}, {{"X-Request-Id", "tok-5"}}, 200), "tok-5");

  auto generated = [](const std::string &id) {
    return id.size() == 36 && id.starts_with("req_") &&
           id.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
  };
  const std::string first = idOf("/v1/chat/completions", chat("Hi"), {}, 200);
  const std::string second = idOf("/v1/chat/completions", chat("Hi"), {}, 200);
  EXPECT_TRUE(generated(first)) << first;
  EXPECT_TRUE(generated(second)) << second;
  EXPECT_NE(first, second);
  EXPECT_TRUE(generated(
      idOf("/v1/chat/completions", chat("Hi"), {{"X-Request-Id", std::string(129, 'a')}}, 200)));
  EXPECT_EQ(
      idOf("/v1/chat/completions", chat("Hi"), {{"X-Request-Id", std::string(128, 'a')}}, 200),
      std::string(128, 'a'));
  EXPECT_TRUE(generated(idOf("/v1/chat/completions", chat("Hi"), {{"X-Request-Id", "a\tb"}}, 200)));
  EXPECT_TRUE(
      generated(idOf("/v1/chat/completions", chat("Hi"), {{"X-Request-Id", "\xc3\xa9"}}, 200)));
  auto health = c.Get("/health", {{"X-Request-Id", "probe-6"}});
  ASSERT_TRUE(health);
  EXPECT_EQ(health->get_header_value("X-Request-Id"), "probe-6");
}

/// Each generation request ends in one info line with its id, endpoint, model, token counts,
/// timing, finish reasons and status; never the prompt's text.
TEST(HttpServer, EachGenerationRequestLogsOneLine) {
  FakeEngine engine;
  engine.cachedTokens = 3;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>a b c");
  httplib::Client c = server.client();
  c.set_keep_alive(true);
  Json streamed = chat("the secret prompt");
  streamed["stream"] = true;
  streamed["n"] = 2;
  Json bad = chat("Hi");
  bad["max_tokens"] = -1;
  ::testing::internal::CaptureStderr();
  auto whole = c.Post("/v1/chat/completions", {{"X-Request-Id", "log-1"}},
                      chat("the secret prompt").dump(), "application/json");
  auto stream = c.Post("/v1/chat/completions", {{"X-Request-Id", "log-2"}}, streamed.dump(),
                       "application/json");
  auto refused =
      c.Post("/v1/chat/completions", {{"X-Request-Id", "log-3"}}, bad.dump(), "application/json");
  // An id that would read as the line's own fields is quoted.
  auto posing = c.Post("/v1/chat/completions", {{"X-Request-Id", "x status=500 \"q\""}},
                       chat("the secret prompt").dump(), "application/json");
  // The same connection serves one request after another: the stream's line (written once the
  // stream is over) is out before this one is answered.
  auto models = c.Get("/v1/models");
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(whole && stream && refused && posing && models);
  const int64_t prompt = static_cast<int64_t>(engine.last().prompt.size());
  const int64_t tokens = static_cast<int64_t>(engine.script.size());
  auto lineOf = [&](const std::string &id) {
    const size_t at = log.find("glmc: info: request id=" + id + " ");
    EXPECT_NE(at, std::string::npos) << log;
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  const std::string first = lineOf("log-1");
  EXPECT_NE(first.find(strCat(" endpoint=/v1/chat/completions model=tiny status=200 prompt_tokens=",
                              prompt, " cached_tokens=3 output_tokens=", tokens, " ttft_ms=")),
            std::string::npos)
      << first;
  EXPECT_NE(first.find(" decode_tok_s="), std::string::npos);
  EXPECT_TRUE(first.ends_with(" finish=stop")) << first;
  const std::string second = lineOf("log-2");
  EXPECT_NE(second.find(strCat(" status=200 prompt_tokens=", prompt,
                               " cached_tokens=3 output_tokens=", 2 * tokens)),
            std::string::npos)
      << second;
  EXPECT_TRUE(second.ends_with(" finish=stop,stop")) << second;
  const std::string third = lineOf("log-3");
  EXPECT_NE(third.find(" model=- status=400 prompt_tokens=0 cached_tokens=0 output_tokens=0 "
                       "ttft_ms=- decode_tok_s=- finish=-"),
            std::string::npos)
      << third;
  EXPECT_NE(log.find("glmc: info: request id=\"x status=500 \\\"q\\\"\" endpoint="),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("secret"), std::string::npos) << "no prompt text in the log";
  size_t lines = 0;
  for (size_t at = log.find("request id="); at != std::string::npos;
       at = log.find("request id=", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 4u) << "one line a request, none for GET /v1/models:\n" << log;
}

//===------------------------------------------------------------------------------------------===//
// Structured outputs through the server, and raw tool arguments
//===------------------------------------------------------------------------------------------===//

/// The grammar a request's constraint runs on (the shared compiled one), or null.
const grammar::CompiledGrammar *compiledOf(const runtime::SequenceRequest &request) {
  const auto *constraint =
      dynamic_cast<const grammar::GrammarConstraint *>(request.constraint.get());
  return constraint ? &constraint->matcher().compiled() : nullptr;
}

Json schemaRequest(const Json &schema) {
  Json request = chat("Hi");
  request["chat_template_kwargs"] = {{"enable_thinking", false}};
  request["response_format"] = {{"type", "json_schema"},
                                {"json_schema", {{"name", "s"}, {"schema", schema}}}};
  return request;
}

/// A schema compiles once: a second request with it (other fields differing) runs on the same
/// compiled grammar; another schema gets its own.
TEST(HttpServer, TheCompiledGrammarIsReusedForTheSameSchema) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "{}");
  const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  post(server, "/v1/chat/completions", schemaRequest(schema), 200);
  const grammar::CompiledGrammar *first = compiledOf(engine.last());
  ASSERT_NE(first, nullptr);
  Json again = schemaRequest(schema);
  again["temperature"] = 0.5;
  again["messages"][0]["content"] = "Something else";
  post(server, "/v1/chat/completions", again, 200);
  EXPECT_EQ(compiledOf(engine.last()), first);
  // Completions share the cache.
  Json completion = {{"model", "tiny"},
                     {"prompt", "x"},
                     {"response_format", schemaRequest(schema)["response_format"]}};
  post(server, "/v1/completions", completion, 200);
  EXPECT_EQ(compiledOf(engine.last()), first);
  post(server, "/v1/chat/completions", schemaRequest({{"type", "array"}}), 200);
  ASSERT_NE(compiledOf(engine.last()), nullptr);
  EXPECT_NE(compiledOf(engine.last()), first);
}

/// ignore_eos with a constraint: the end-of-sequence token is not offered (the scheduler would
/// hand it to the grammar as a token, an error), so a structure that may end or go on goes on;
/// one that is complete still ends the reply.
TEST(HttpServer, IgnoreEosWithAConstraintEndsWhenTheStructureIsComplete) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "{}");
  const std::vector<int32_t> eos = tinyEosIds();
  ASSERT_FALSE(eos.empty());
  const size_t words = (server.tokenizer().idCount() + 31) / 32;
  auto allows = [](const std::vector<uint32_t> &mask, int32_t id) {
    return (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
  };
  // A regex that may end after "a" or go on: the end is offered unless ignore_eos.
  for (bool ignoreEos : {false, true}) {
    Json request = chat("Hi");
    request["chat_template_kwargs"] = {{"enable_thinking", false}};
    request["structured_outputs"] = {{"regex", "a+"}};
    request["ignore_eos"] = ignoreEos;
    post(server, "/v1/chat/completions", request, 200);
    ASSERT_TRUE(engine.last().constraint);
    std::unique_ptr<runtime::TokenConstraint> c = engine.last().constraint->clone();
    ASSERT_TRUE(c->advance(encode(server.tokenizer(), "a").front()));
    std::vector<uint32_t> mask(words, 0u);
    ASSERT_TRUE(c->fillAllowed(mask));
    EXPECT_TRUE(allows(mask, encode(server.tokenizer(), "a").front()));
    EXPECT_EQ(static_cast<bool>(allows(mask, eos.front())), !ignoreEos) << ignoreEos;
    EXPECT_FALSE(c->complete());
  }
  // A JSON object is complete at its closing brace: the reply ends there, ignore_eos or not.
  Json request = schemaRequest({{"type", "object"}});
  request["ignore_eos"] = true;
  post(server, "/v1/chat/completions", request, 200);
  std::unique_ptr<runtime::TokenConstraint> c = engine.last().constraint->clone();
  for (int32_t id : encode(server.tokenizer(), "{}")) {
    ASSERT_FALSE(c->complete());
    ASSERT_TRUE(c->advance(id));
  }
  EXPECT_TRUE(c->complete());
}

/// A raw string argument may hold `</arg_value>` itself (markup, code): the value runs to the
/// `</arg_value>` that the next pair or the call's end follows.
TEST(HttpServer, RawToolArgumentsMayHoldTheValueClosingTag) {
  FakeEngine engine;
  Running server(engine);
  Json request = chat("Write the file");
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "write",
      "parameters": {"type": "object", "properties": {"text": {"type": "string"},
      "lines": {"type": "integer"}}}}}])");
  engine.script = encode(server.tokenizer(),
                         "</think><tool_call>write<arg_key>text</arg_key><arg_value>a</arg_value>b"
                         "</arg_value>c</arg_value><arg_key>lines</arg_key><arg_value>3"
                         "</arg_value></tool_call>");
  Json r = post(server, "/v1/chat/completions", request, 200);
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(
      Json::parse(
          r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
      Json({{"text", "a</arg_value>b</arg_value>c"}, {"lines", 3}}));
  // As the last value too.
  engine.script =
      encode(server.tokenizer(), "</think><tool_call>write<arg_key>text</arg_key><arg_value><x>"
                                 "</arg_value></x></arg_value>\n</tool_call>");
  r = post(server, "/v1/chat/completions", request, 200);
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(
      Json::parse(
          r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
      Json({{"text", "<x></arg_value></x>"}}));
  // Sent back, the call renders its value raw: the model reads what it wrote.
  Json next = chat("Write the file");
  next["tools"] = request["tools"];
  next["messages"].push_back(r["choices"][0]["message"]);
  next["messages"].push_back({{"role", "tool"},
                              {"tool_call_id", r["choices"][0]["message"]["tool_calls"][0]["id"]},
                              {"content", "done"}});
  engine.script = encode(server.tokenizer(), "</think>ok");
  post(server, "/v1/chat/completions", next, 200);
  const std::string prompt = std::move(server.tokenizer().decode(engine.last().prompt)).value();
  EXPECT_NE(prompt.find("<arg_value><x></arg_value></x></arg_value>"), std::string::npos) << prompt;
}

//===------------------------------------------------------------------------------------------===//
// Hostile clients (issue 26): deadlines, connection limits, framing, body limits, drain.
//===------------------------------------------------------------------------------------------===//

/// A raw TCP connection to the server, from loopback address `source` (127.0.0.x: the per-client
/// limit counts connections by address).
class RawClient {
public:
  explicit RawClient(int port, const char *source = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr *>(&from), sizeof from), 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr *>(&to), sizeof to) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  void shutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  /// What the server sends until it closes the connection (or `timeoutMs` passes, a bound
  /// never reached when the server behaves); `closed` says whether it closed.
  std::string readAll(bool *closed = nullptr, int timeoutMs = 20000) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) {
        continue;
      }
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, sizeof buffer, 0);
      if (got <= 0) {
        if (closed != nullptr) {
          *closed = true;
        }
        return out;
      }
      out.append(buffer, static_cast<size_t>(got));
    }
    if (closed != nullptr) {
      *closed = false;
    }
    return out;
  }
  /// Reads until `needle` has arrived (or the connection ends).
  std::string readUntil(std::string_view needle, int timeoutMs = 20000) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (out.find(needle) == std::string::npos && std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) {
        continue;
      }
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, sizeof buffer, 0);
      if (got <= 0) {
        break;
      }
      out.append(buffer, static_cast<size_t>(got));
    }
    return out;
  }

private:
  int fd_ = -1;
  bool connected_ = false;
};

/// The status of the first response in `reply` ("HTTP/1.1 200 OK..."), past any interim 100s.
int statusOf(const std::string &reply) {
  size_t at = 0;
  while (true) {
    if (reply.compare(at, 9, "HTTP/1.1 ") != 0 || reply.size() < at + 12) {
      return -1;
    }
    const int status = std::stoi(reply.substr(at + 9, 3));
    if (status != 100) {
      return status;
    }
    at = reply.find("\r\n\r\n", at);
    if (at == std::string::npos) {
      return -1;
    }
    at += 4;
  }
}

std::string bodyOf(const std::string &reply) {
  // The last header block's end: interim responses come first.
  size_t at = 0, end;
  while ((end = reply.find("\r\n\r\n", at)) != std::string::npos &&
         reply.compare(at, 12, "HTTP/1.1 100") == 0) {
    at = end + 4;
  }
  end = reply.find("\r\n\r\n", at);
  return end == std::string::npos ? "" : reply.substr(end + 4);
}

/// A raw request's reply status and body, the connection closed by the server after.
std::pair<int, std::string> rawRequest(int port, const std::string &request) {
  RawClient c(port);
  EXPECT_TRUE(c.send(request));
  const std::string reply = c.readUntil("\r\n\r\n");
  const std::string rest = c.readAll();
  return {statusOf(reply), bodyOf(reply + rest)};
}

std::string chatBody() { return chat("Hi").dump(); }

/// A client that sends its headers a line at a time gets 408 once the header deadline passes,
/// and its connection is closed; the deadline counts the whole of the headers, not each read.
TEST(HttpServerHostile, SlowHeadersGet408AtTheDeadline) {
  FakeEngine engine;
  ServerOptions options;
  options.connections.headerTimeoutMs = 400;
  Running server(engine, options);
  RawClient slow(server.port());
  ASSERT_TRUE(slow.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"));
  std::atomic<bool> stop{false};
  // One header line every 100 ms: each read comes well within any per-read timeout.
  std::thread trickle([&] {
    for (int i = 0; i < 200 && !stop; ++i) {
      if (!slow.send(strCat("X-Slow-", i, ": y\r\n"))) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  bool closed = false;
  const std::string reply = slow.readAll(&closed);
  stop = true;
  trickle.join();
  EXPECT_EQ(statusOf(reply), 408) << reply;
  EXPECT_TRUE(closed);
  EXPECT_NE(bodyOf(reply).find("request_timeout"), std::string::npos) << reply;
  // A connection that sends nothing at all is closed at the same deadline.
  RawClient silent(server.port());
  closed = false;
  silent.readAll(&closed);
  EXPECT_TRUE(closed);
}

/// A slow body is bounded by its own deadline.
TEST(HttpServerHostile, ASlowBodyGets408) {
  FakeEngine engine;
  ServerOptions options;
  options.connections.bodyTimeoutMs = 400;
  Running server(engine, options);
  RawClient slow(server.port());
  ASSERT_TRUE(slow.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                        "100000\r\n\r\n{"));
  bool closed = false;
  const std::string reply = slow.readAll(&closed);
  EXPECT_EQ(statusOf(reply), 408) << reply;
  EXPECT_TRUE(closed);
}

/// Connections beyond the per-address limit get 429, beyond the server's limit 503, at once;
/// meanwhile the monitoring port answers /health, and once the slow clients are gone the API does
/// again. Nothing here waits on a deadline.
TEST(HttpServerHostile, ConnectionLimitsRefuseAtOnceAndTheMonitorAnswers) {
  FakeEngine engine;
  ServerOptions options;
  options.connections.maxConnections = 4;
  options.connections.maxPerClient = 2;
  options.connections.headerTimeoutMs = 60000; // the slow clients hold their connections
  options.monitorPort = 0;
  Running server(engine, options);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (const char *source : {"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"}) {
    slow.push_back(std::make_unique<RawClient>(server.port(), source));
    ASSERT_TRUE(slow.back()->connected());
    ASSERT_TRUE(slow.back()->send("GET /health HTTP/1.1\r\n")); // never finished
  }
  // The server counts a connection once its thread takes it; wait until all four are counted.
  for (int i = 0; i < 400; ++i) {
    auto metrics = server.monitorClient().Get("/metrics");
    ASSERT_TRUE(metrics);
    if (metrics->body.find("glmc:http_connections{model_name=\"tiny\",listener=\"api\"} 4") !=
        std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    RawClient third(server.port(), "127.0.0.3");
    const std::string reply = third.readAll();
    EXPECT_EQ(statusOf(reply), 503) << reply; // the server is full before the address counts
  }
  slow.pop_back(); // 127.0.0.3 now has one; the server three
  for (int i = 0; i < 400; ++i) {
    auto metrics = server.monitorClient().Get("/metrics");
    ASSERT_TRUE(metrics);
    if (metrics->body.find("glmc:http_connections{model_name=\"tiny\",listener=\"api\"} 3") !=
        std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    RawClient third(server.port(), "127.0.0.2");
    ASSERT_TRUE(third.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string reply = third.readAll();
    EXPECT_EQ(statusOf(reply), 429) << reply;
    EXPECT_NE(bodyOf(reply).find("too_many_connections"), std::string::npos) << reply;
  }
  auto health = server.monitorClient().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = server.monitorClient().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("glmc:http_connections_refused_total{model_name=\"tiny\",listener="
                               "\"api\",reason=\"busy\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("glmc:http_connections_refused_total{model_name=\"tiny\",listener="
                               "\"api\",reason=\"client\"} 1"),
            std::string::npos)
      << metrics->body;
  slow.clear();
  auto api = server.client().Get("/health");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200);
}

/// A kept-alive connection that sends no next request is closed after the idle timeout.
TEST(HttpServerHostile, AnIdleKeptAliveConnectionIsClosed) {
  FakeEngine engine;
  ServerOptions options;
  options.connections.idleTimeoutMs = 200;
  Running server(engine, options);
  RawClient c(server.port());
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool closed = false;
  const std::string reply = c.readAll(&closed);
  EXPECT_EQ(statusOf(reply), 200) << reply;
  EXPECT_TRUE(closed);
}

/// Framings two readers could read two ways are refused before any body is read, and so are
/// headers no proxy would pass on as they are.
TEST(HttpServerHostile, SmugglingAndMalformedHeadersAreRefused) {
  FakeEngine engine;
  engine.script = {1};
  Running server(engine);
  const std::string body = chatBody();
  const std::string start = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
  const std::string length = strCat("Content-Length: ", body.size(), "\r\n");
  struct Case {
    std::string name, request;
    int status;
  };
  const std::vector<Case> cases = {
      {"two lengths",
       start + length + strCat("Content-Length: ", body.size() + 1, "\r\n\r\n") + body, 400},
      {"a length list", start + strCat("Content-Length: ", body.size(), ", 7\r\n\r\n") + body, 400},
      {"a signed length", start + "Content-Length: +5\r\n\r\n" + body, 400},
      {"length and chunked", start + length + "Transfer-Encoding: chunked\r\n\r\n" + body, 400},
      {"another coding", start + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
      {"no length", start + "\r\n" + body, 411},
      {"no colon", start + length + "X-Broken\r\n\r\n" + body, 400},
      {"a NUL", start + length + std::string("X-Nul: a\0b\r\n\r\n", 14) + body, 400},
      {"a bare LF", start + length + "X-Lf: a\n\r\n" + body, 400},
      {"folding", start + length + "X-A: a\r\n  folded\r\n\r\n" + body, 400},
      {"a space before the colon", start + "Content-Length : 5\r\n\r\nhello", 400},
  };
  for (const Case &c : cases) {
    const auto [status, reply] = rawRequest(server.port(), c.request);
    EXPECT_EQ(status, c.status) << c.name << ": " << reply;
    EXPECT_TRUE(Json::parse(reply, nullptr, false).contains("error")) << c.name << ": " << reply;
  }
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 200; ++i) {
    many += strCat("X-", i, ": y\r\n");
  }
  EXPECT_EQ(rawRequest(server.port(), many + "\r\n").first, 431);
  EXPECT_EQ(rawRequest(server.port(),
                       "GET /health HTTP/1.1\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n")
                .first,
            431);
  // A well-framed request on the same server is served.
  EXPECT_EQ(rawRequest(server.port(), start + length + "Connection: close\r\n\r\n" + body).first,
            200);
}

/// The body limit holds while the body arrives: a chunked body over it gets 413 (no length to
/// check first), one within it is served.
TEST(HttpServerHostile, ChunkedBodiesOverTheLimitGet413) {
  FakeEngine engine;
  engine.script = {1};
  ServerOptions options;
  options.maxBodyBytes = 4096;
  Running server(engine, options);
  auto chunked = [](const std::string &body) {
    std::string out;
    for (size_t at = 0; at < body.size(); at += 1000) {
      const std::string piece = body.substr(at, 1000);
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
      out += size + piece + "\r\n";
    }
    return out + "0\r\n\r\n";
  };
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                           "chunked\r\nConnection: close\r\n\r\n";
  Json big = chat(std::string(8000, 'a'));
  const auto [tooLarge, reply] = rawRequest(server.port(), head + chunked(big.dump()));
  EXPECT_EQ(tooLarge, 413) << reply;
  EXPECT_EQ(Json::parse(reply, nullptr, false)["error"]["code"], "request_too_large") << reply;
  EXPECT_EQ(rawRequest(server.port(), head + chunked(chatBody())).first, 200);
  // A declared length over the limit is refused before the body is sent.
  RawClient declared(server.port());
  ASSERT_TRUE(declared.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                            "1000000000\r\n\r\n"));
  EXPECT_EQ(statusOf(declared.readAll()), 413);
}

/// A client that half-closes its socket after the whole request still gets its reply.
TEST(HttpServerHostile, AHalfClosedClientGetsItsReply) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>half closed");
  engine.delayMs = 20;
  RawClient c(server.port());
  const std::string body = chatBody();
  ASSERT_TRUE(c.send(strCat("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                            body.size(), "\r\n\r\n", body)));
  c.shutdownWrite();
  const std::string reply = c.readAll();
  ASSERT_EQ(statusOf(reply), 200) << reply;
  EXPECT_EQ(Json::parse(bodyOf(reply), nullptr, false)["choices"][0]["message"]["content"],
            "half closed")
      << reply;
}

/// The API key guards a POST before its body is read.
TEST(HttpServerHostile, TheKeyIsCheckedBeforeTheBody) {
  FakeEngine engine;
  ServerOptions options;
  options.apiKeys = {"sk-test"};
  Running server(engine, options);
  RawClient c(server.port());
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     "1000000\r\n\r\n"));
  const std::string reply = c.readAll(); // no body sent: a reply now, not at the body deadline
  EXPECT_EQ(statusOf(reply), 401) << reply;
}

TEST(HttpServerHostile, DetokenizeRefusesIdsOutsideTheVocabularyByIndex) {
  FakeEngine engine;
  Running server(engine);
  const int64_t ids = static_cast<int64_t>(server.tokenizer().idCount());
  for (const Json &bad : {Json(4294967301ll), Json(-1), Json(ids), Json(1.5), Json("5"),
                          Json(std::numeric_limits<uint64_t>::max())}) {
    Json e = post(server, "/detokenize", {{"tokens", {1, bad}}}, 400)["error"];
    EXPECT_EQ(e["param"], "tokens[1]") << bad.dump();
  }
  EXPECT_EQ(post(server, "/detokenize", {{"tokens", {5}}}, 200)["prompt"],
            std::move(server.tokenizer().decode(std::vector<int32_t>{5})).value());
}

TEST(HttpServerHostile, MetricsNeedTheKeyUnlessOpened) {
  FakeEngine engine;
  for (bool open : {false, true}) {
    ServerOptions options;
    options.apiKeys = {"sk-test"};
    options.metricsOpen = open;
    options.monitorPort = 0;
    Running server(engine, options);
    for (bool monitor : {false, true}) {
      httplib::Client c = monitor ? server.monitorClient() : server.client();
      auto bare = c.Get("/metrics");
      ASSERT_TRUE(bare);
      EXPECT_EQ(bare->status, open ? 200 : 401);
      auto keyed = c.Get("/metrics", {{"Authorization", "Bearer sk-test"}});
      ASSERT_TRUE(keyed);
      EXPECT_EQ(keyed->status, 200);
      auto health = c.Get("/health"); // always open
      ASSERT_TRUE(health);
      EXPECT_EQ(health->status, 200);
    }
  }
}

/// A lost rank on a whole (non-streamed) reply: 503 with OpenAI's error, the kind to retry.
TEST(HttpServerHostile, AnEngineUnavailableMidReplyIs503) {
  FakeEngine engine;
  Running server(engine);
  engine.script = encode(server.tokenizer(), "</think>one two three");
  engine.failure = Status(StatusCode::Unavailable, "tensor-parallel rank 1 is not connected");
  Json r = post(server, "/v1/chat/completions", chat("Hi"), 503);
  EXPECT_EQ(r["error"]["type"], "server_error");
  EXPECT_EQ(r["error"]["code"], "engine_unavailable");
  EXPECT_EQ(r["error"]["message"], "tensor-parallel rank 1 is not connected");
}

/// A prompt far beyond the window is refused without tokenizing all of it; one of several
/// counting chunks that fits is tokenized exactly as a whole.
TEST(HttpServerHostile, PromptsAreCountedUpToTheWindow) {
  FakeEngine engine;
  engine.script = {1};
  ServerOptions options;
  options.maxContext = 64;
  options.maxBodyBytes = 8u << 20;
  {
    Running server(engine, options);
    std::string text;
    while (text.size() < (4u << 20)) {
      text += "many words of a very long prompt ";
    }
    Json e = post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", text}}, 400)["error"];
    EXPECT_EQ(e["code"], "context_length_exceeded");
    EXPECT_NE(e["message"].get<std::string>().find("more than"), std::string::npos) << e.dump();
  }
  options.maxContext = 1 << 22;
  Running server(engine, options);
  std::string text;
  for (int i = 0; text.size() < (200u << 10); ++i) {
    text += strCat("word", i % 97, i % 7 == 0 ? ".\n" : " ");
  }
  post(server, "/v1/completions", {{"model", "tiny"}, {"prompt", text}, {"max_tokens", 1}}, 200);
  EXPECT_EQ(engine.last().prompt, encode(server.tokenizer(), text));
}

/// SIGTERM's drain with replies longer than its deadline: admission stops at once, and at the
/// deadline each stream ends with an error event, its finish_reason and [DONE], the whole reply
/// with a 503, and their generations are cancelled.
TEST(HttpServerHostile, TheDrainDeadlineEndsEveryReplyCleanly) {
  FakeEngine engine;
  engine.delayMs = 20; // 300 tokens: 6 s, beyond the 1 s deadline
  Running server(engine);
  std::string longReply = "</think>";
  for (int i = 0; i < 300; ++i) {
    longReply += " word";
  }
  engine.script = encode(server.tokenizer(), longReply);
  std::vector<std::string> streams(2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < streams.size(); ++i) {
    clients.emplace_back([&, i] {
      Json request = chat("Hi");
      request["stream"] = true;
      request["n"] = 2;
      auto res = server.client().Post("/v1/chat/completions", request.dump(), "application/json");
      if (res) {
        streams[i] = res->body;
      }
    });
  }
  int wholeStatus = 0;
  std::string wholeBody;
  clients.emplace_back([&] {
    auto res = server.client().Post("/v1/chat/completions", chatBody(), "application/json");
    if (res) {
      wholeStatus = res->status;
      wholeBody = res->body;
    }
  });
  while (engine.running.load() < 3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::thread late([&] {
    // Once draining, a new request is refused.
    while (true) {
      auto health = server.client().Get("/health");
      if (!health || health->status == 503) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto refused = server.client().Post("/v1/chat/completions", chatBody(), "application/json");
    if (refused) {
      EXPECT_EQ(refused->status, 503);
      EXPECT_EQ(Json::parse(refused->body, nullptr, false)["error"]["code"],
                "server_shutting_down");
    }
  });
  EXPECT_EQ(server.stop(1), 3);
  late.join();
  for (std::thread &t : clients) {
    t.join();
  }
  for (const std::string &body : streams) {
    std::vector<Json> ev = events(body);
    ASSERT_GE(ev.size(), 4u) << body;
    EXPECT_EQ(ev.back(), "[DONE]");
    // The error event, then a finish chunk for each of the two choices.
    const size_t error = ev.size() - 4;
    EXPECT_EQ(ev[error]["error"]["code"], "server_shutting_down") << body;
    std::set<int> finished;
    for (size_t e = error + 1; e + 1 < ev.size(); ++e) {
      EXPECT_EQ(ev[e]["choices"][0]["finish_reason"], "length") << ev[e].dump();
      finished.insert(ev[e]["choices"][0]["index"].get<int>());
    }
    EXPECT_EQ(finished, (std::set<int>{0, 1}));
  }
  EXPECT_EQ(wholeStatus, 503) << wholeBody;
  EXPECT_EQ(Json::parse(wholeBody, nullptr, false)["error"]["code"], "server_shutting_down");
  while (engine.running.load() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine.cancelled.load(), 3);
}

TEST(HttpServerEndToEnd, GreedyRepliesMatchTheEngineAndStreamsRunConcurrently) {
  // The tiny fixture's CPU plan behind the real scheduler: at temperature 0 the reply is the
  // greedy continuation, computed here on a second engine directly.
#ifndef GLM_HAVE_COMPILER
  GTEST_SKIP() << "a server-only build has no glmc compile";
#endif
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
