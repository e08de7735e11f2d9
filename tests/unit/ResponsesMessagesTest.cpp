// In-process tests of /v1/responses and Anthropic's /v1/messages over a scripted fake engine:
// the requests' translation (the prompt equals the chat request's that says the same), the reply
// shapes, the event sequences, the response store, and errors that name the client's fields.
#include "base/Hmac.h"
#include "models/glm53/Config.h"
#include "server/anthropic/ThinkingSignature.h"
#include "server/http/HttpServer.h"
#include "server/openai/Responses.h"
#include "server/tokenizer/Tokenizer.h"
#include "tests/unit/support/FakeEngine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
using testing::FakeEngine;
const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// A server over the tiny fixture's tokenizer and template, on a free loopback port.
class Served {
public:
  explicit Served(runtime::EngineApi &engine, ServerOptions options = {}) {
    tokenizer_ = std::make_unique<Tokenizer>(std::move(Tokenizer::fromModelDir(kTiny)).value());
    template_ = std::make_unique<ChatTemplate>(std::move(loadChatTemplate(kTiny)).value());
    const std::vector<int64_t> eos = std::move(glm53::loadGlm53Config(kTiny)).value().eosTokenIds;
    ServedModel model{tokenizer_.get(), template_.get(),
                      std::move(loadChatTokenizerConfig(kTiny)).value(),
                      std::vector<int32_t>(eos.begin(), eos.end())};
    options.port = 0;
    options.servedNames = {"tiny"};
    options.maxContext = 2048;
    server_ = std::make_unique<HttpServer>(options, engine, model);
    port_ = *server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
  }
  ~Served() {
    server_->stop(5);
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  const Tokenizer &tokenizer() const { return *tokenizer_; }
  std::vector<int32_t> encode(const std::string &text) const {
    return std::move(tokenizer_->encode(text)).value();
  }
  std::string decode(const std::vector<int32_t> &ids) const {
    return std::move(tokenizer_->decode(ids)).value();
  }

private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

struct Reply {
  int status = 0;
  std::string body;
  Json json;
};

Reply post(const Served &server, const std::string &path, const Json &body,
           httplib::Headers headers = {}) {
  httplib::Client c = server.client();
  auto res = c.Post(path.c_str(), headers, body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) {
    return {};
  }
  return Reply{res->status, res->body, Json::parse(res->body, nullptr, false)};
}

/// An SSE body's events: (event name, data).
std::vector<std::pair<std::string, Json>> sse(const std::string &body) {
  std::vector<std::pair<std::string, Json>> out;
  std::istringstream in(body);
  std::string line, name;
  while (std::getline(in, line)) {
    if (line.starts_with("event: ")) {
      name = line.substr(7);
    } else if (line.starts_with("data: ")) {
      out.emplace_back(name, Json::parse(line.substr(6), nullptr, false));
      name.clear();
    }
  }
  return out;
}

std::vector<std::string> typesOf(const std::vector<std::pair<std::string, Json>> &events) {
  std::vector<std::string> types;
  for (const auto &[name, data] : events) {
    EXPECT_EQ(name, data.value("type", "")) << "the event line names the data's type";
    types.push_back(name);
  }
  return types;
}

/// The prompt the engine got for a chat-completions request saying the same.
std::string chatPrompt(const Served &server, FakeEngine &engine, Json chat) {
  chat["model"] = "tiny";
  chat["max_tokens"] = 4;
  Reply r = post(server, "/v1/chat/completions", chat);
  EXPECT_EQ(r.status, 200) << r.body;
  return server.decode(engine.last().prompt);
}

const Json kWeatherParameters = Json::parse(R"({"type": "object", "properties":
    {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]})");
const char *kWeatherCall = "</think>\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>"
                           "Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value>"
                           "</tool_call>";

//===------------------------------------------------------------------------------------------===//
// /v1/responses
//===------------------------------------------------------------------------------------------===//

TEST(Responses, AStringInputGivesReasoningAndAMessage) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Let me think.</think>Hello there");
  Reply r = post(server, "/v1/responses", {{"model", "tiny"}, {"input", "Hi"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json &resp = r.json;
  EXPECT_EQ(resp["object"], "response");
  EXPECT_TRUE(resp["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(resp["status"], "completed");
  EXPECT_TRUE(resp["error"].is_null());
  EXPECT_TRUE(resp["incomplete_details"].is_null());
  EXPECT_EQ(resp["model"], "tiny");
  ASSERT_EQ(resp["output"].size(), 2u) << resp.dump();
  const Json &reasoning = resp["output"][0];
  EXPECT_EQ(reasoning["type"], "reasoning");
  EXPECT_TRUE(reasoning["id"].get<std::string>().starts_with("rs_"));
  EXPECT_EQ(reasoning["summary"], Json::array());
  EXPECT_EQ(reasoning["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(reasoning["content"][0]["text"], "Let me think.");
  EXPECT_FALSE(reasoning.contains("encrypted_content"));
  const Json &message = resp["output"][1];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "completed");
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "Hello there");
  EXPECT_EQ(message["content"][0]["annotations"], Json::array());
  // Usage in Responses' shape: the reasoning tokens are those up to and including </think>.
  const int64_t reasoningTokens =
      static_cast<int64_t>(server.encode("Let me think.</think>").size());
  EXPECT_EQ(resp["usage"]["input_tokens"], engine.last().prompt.size());
  EXPECT_EQ(resp["usage"]["output_tokens"], engine.script.size());
  EXPECT_EQ(resp["usage"]["output_tokens_details"]["reasoning_tokens"], reasoningTokens);
  EXPECT_EQ(resp["usage"]["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(resp["usage"]["total_tokens"],
            resp["usage"]["input_tokens"].get<int64_t>() + engine.script.size());
  // The prompt is the chat template's rendering of the same user message.
  EXPECT_EQ(server.decode(engine.last().prompt),
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
  // The request's settings are echoed, with OpenAI's defaults.
  EXPECT_EQ(resp["temperature"], 1.0);
  EXPECT_EQ(resp["top_p"], 1.0);
  EXPECT_EQ(resp["tool_choice"], "auto");
  EXPECT_EQ(resp["tools"], Json::array());
  EXPECT_EQ(resp["store"], true);
  EXPECT_EQ(resp["text"]["format"]["type"], "text");
  EXPECT_TRUE(resp["previous_response_id"].is_null());
}

TEST(Responses, ItemsTranslateAsTheEquivalentChatRequest) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("</think>Done.");
  const Json tools = Json::array(
      {{{"type", "function"}, {"name", "get_weather"}, {"parameters", kWeatherParameters}}});
  const Json input = Json::parse(R"([
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                 {"type": "input_text", "text": "Paris?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [],
     "content": [{"type": "reasoning_text", "text": "I should call the tool."}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": "{\"city\": \"Paris\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "It is sunny."}]},
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": "Thanks"}])");
  Reply r = post(server, "/v1/responses",
                 {{"model", "tiny"},
                  {"instructions", "You are helpful."},
                  {"input", input},
                  {"tools", tools},
                  {"max_output_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string responsesPrompt = server.decode(engine.last().prompt);
  EXPECT_EQ(engine.last().maxTokens, 4);
  const Json chat = {
      {"messages", Json::parse(R"([
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in "},
                                     {"type": "text", "text": "Paris?"}]},
        {"role": "assistant", "reasoning_content": "I should call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function", "function":
                        {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Thanks"}])")},
      {"tools", Json::array({{{"type", "function"},
                              {"function",
                               {{"name", "get_weather"}, {"parameters", kWeatherParameters}}}}})}};
  EXPECT_EQ(responsesPrompt, chatPrompt(server, engine, chat));
  EXPECT_NE(responsesPrompt.find("sunny"), std::string::npos) << responsesPrompt;
  EXPECT_EQ(r.json["instructions"], "You are helpful.");
  EXPECT_EQ(r.json["tools"][0]["name"], "get_weather");
  EXPECT_EQ(r.json["tools"][0]["type"], "function");
}

TEST(Responses, ToolCallsAreFunctionCallItems) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode(kWeatherCall);
  const Json tools = Json::array(
      {{{"type", "function"}, {"name", "get_weather"}, {"parameters", kWeatherParameters}}});
  Reply r =
      post(server, "/v1/responses", {{"model", "tiny"}, {"input", "Weather?"}, {"tools", tools}});
  ASSERT_EQ(r.status, 200) << r.body;
  // The reasoning is empty (the reply closes the think block at once); the "\n" before the
  // call opens no message.
  const Json &output = r.json["output"];
  ASSERT_EQ(output.size(), 1u) << output.dump();
  const Json &call = output[0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("fc_"));
  EXPECT_TRUE(call["call_id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(Json::parse(call["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 3})"));
}

TEST(Responses, StreamsTheEventSequenceTheSdkReads) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Hmm.</think>Sure.\n<tool_call>get_weather<arg_key>city"
                                "</arg_key><arg_value>Rome</arg_value></tool_call>");
  const Json tools = Json::array(
      {{{"type", "function"}, {"name", "get_weather"}, {"parameters", kWeatherParameters}}});
  Reply r = post(server, "/v1/responses",
                 {{"model", "tiny"}, {"input", "Weather?"}, {"tools", tools}, {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<std::pair<std::string, Json>> events = sse(r.body);
  std::vector<std::string> types = typesOf(events);
  // Deltas collapse to one entry for the comparison.
  std::vector<std::string> shape;
  for (const std::string &t : types) {
    if (shape.empty() || shape.back() != t || !t.ends_with(".delta")) {
      shape.push_back(t);
    }
  }
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added", // reasoning
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added", // message
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added", // function call
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(shape, expected) << r.body;
  // sequence_number counts every event from 0.
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  std::string reasoning, text, arguments;
  for (const auto &[type, e] : events) {
    if (type == "response.reasoning_text.delta") {
      reasoning += e["delta"].get<std::string>();
      EXPECT_EQ(e["output_index"], 0);
    } else if (type == "response.output_text.delta") {
      text += e["delta"].get<std::string>();
      EXPECT_EQ(e["output_index"], 1);
      EXPECT_EQ(e["content_index"], 0);
    } else if (type == "response.function_call_arguments.delta") {
      arguments += e["delta"].get<std::string>();
      EXPECT_EQ(e["output_index"], 2);
    } else if (type == "response.output_text.done") {
      EXPECT_EQ(e["text"], "Sure.\n");
    } else if (type == "response.function_call_arguments.done") {
      EXPECT_EQ(e["name"], "get_weather");
      EXPECT_EQ(e["arguments"], arguments);
    }
  }
  EXPECT_EQ(reasoning, "Hmm.");
  EXPECT_EQ(text, "Sure.\n");
  EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"city": "Rome"})"));
  const Json &created = events.front().second["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(created["output"], Json::array());
  const Json &completed = events.back().second["response"];
  EXPECT_EQ(completed["id"], created["id"]);
  EXPECT_EQ(completed["status"], "completed");
  ASSERT_EQ(completed["output"].size(), 3u);
  EXPECT_EQ(completed["output"][1]["content"][0]["text"], "Sure.\n");
  EXPECT_EQ(completed["output"][2]["call_id"].get<std::string>().substr(0, 5), "call_");
  EXPECT_EQ(completed["usage"]["output_tokens"], engine.script.size());
  // The items' ids are the same in the added, done and completed events.
  EXPECT_EQ(events[2].second["item"]["id"], completed["output"][0]["id"]);
}

TEST(Responses, TheTokenBudgetMakesAnIncompleteResponse) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("</think>one two three four five six");
  Reply r = post(server, "/v1/responses",
                 {{"model", "tiny"}, {"input", "Count"}, {"max_output_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["status"], "incomplete");
  EXPECT_EQ(r.json["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r.json["max_output_tokens"], 3);
  EXPECT_EQ(r.json["output"].back()["status"], "incomplete");
  EXPECT_EQ(r.json["usage"]["output_tokens"], 3);

  Reply streamed =
      post(server, "/v1/responses",
           {{"model", "tiny"}, {"input", "Count"}, {"max_output_tokens", 3}, {"stream", true}});
  const auto events = sse(streamed.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "response.incomplete");
  EXPECT_EQ(events.back().second["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(Responses, PreviousResponseIdContinuesTheConversation) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Thinking.</think>I am Tiny.");
  Reply first = post(server, "/v1/responses",
                     {{"model", "tiny"}, {"instructions", "Be terse."}, {"input", "Who are you?"}});
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string id = first.json["id"];

  // GET gives the stored object back.
  httplib::Client c = server.client();
  auto got = c.Get(("/v1/responses/" + id).c_str());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(Json::parse(got->body), first.json);

  engine.script = server.encode("</think>Fine.");
  Reply second = post(server, "/v1/responses",
                      {{"model", "tiny"}, {"previous_response_id", id}, {"input", "And?"}});
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.json["previous_response_id"], id);
  // The prompt is the whole conversation (the first input, its reply with its reasoning as
  // the template renders an earlier turn's, the new input); the first request's instructions
  // are not carried over (OpenAI's rule).
  const std::string continued = server.decode(engine.last().prompt);
  const Json chat = {{"messages", Json::parse(R"([
      {"role": "user", "content": "Who are you?"},
      {"role": "assistant", "reasoning_content": "Thinking.",
       "content": [{"type": "text", "text": "I am Tiny."}]},
      {"role": "user", "content": "And?"}])")}};
  EXPECT_EQ(continued, chatPrompt(server, engine, chat));
  EXPECT_EQ(continued.find("Be terse."), std::string::npos) << continued;

  // An id the server does not hold: OpenAI's 400, naming the field.
  Reply unknown = post(server, "/v1/responses",
                       {{"model", "tiny"}, {"previous_response_id", "resp_nope"}, {"input", "x"}});
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.json["error"]["code"], "previous_response_not_found");
  EXPECT_EQ(unknown.json["error"]["param"], "previous_response_id");
  auto missing = c.Get("/v1/responses/resp_nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["type"], "invalid_request_error");

  // store: false keeps nothing.
  Reply unstored =
      post(server, "/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"store", false}});
  ASSERT_EQ(unstored.status, 200);
  EXPECT_EQ(unstored.json["store"], false);
  auto notKept = c.Get(("/v1/responses/" + unstored.json["id"].get<std::string>()).c_str());
  ASSERT_TRUE(notKept);
  EXPECT_EQ(notKept->status, 404);
}

TEST(Responses, TheStoreIsBoundedAndEvictsTheLeastRecentlyUsed) {
  ResponseStore store(2, 1 << 20);
  store.put("a", {{"n", 1}}, Json::array());
  store.put("b", {{"n", 2}}, Json::array());
  ASSERT_TRUE(store.response("a")); // a is now the most recently used
  store.put("c", {{"n", 3}}, Json::array());
  EXPECT_TRUE(store.response("a"));
  EXPECT_FALSE(store.response("b"));
  EXPECT_TRUE(store.conversation("c"));
  EXPECT_EQ(store.size(), 2u);

  ResponseStore small(100, 200);
  small.put("x", {{"text", std::string(60, 'x')}}, Json::array());
  small.put("y", {{"text", std::string(60, 'y')}}, Json::array());
  small.put("z", {{"text", std::string(60, 'z')}}, Json::array());
  EXPECT_LE(small.bytes(), 200u);
  EXPECT_FALSE(small.response("x")); // evicted for the bytes
  EXPECT_TRUE(small.response("z"));
  small.put("huge", {{"text", std::string(500, 'h')}}, Json::array());
  EXPECT_FALSE(small.response("huge")); // larger than the whole budget: not kept
  EXPECT_TRUE(small.response("z"));

  // Through the server: the third response pushes out the first.
  FakeEngine engine;
  ServerOptions options;
  options.maxStoredResponses = 2;
  Served server(engine, options);
  engine.script = server.encode("</think>ok");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(post(server, "/v1/responses", {{"model", "tiny"}, {"input", "x"}}).json["id"]);
  }
  httplib::Client c = server.client();
  EXPECT_EQ(c.Get(("/v1/responses/" + ids[0]).c_str())->status, 404);
  EXPECT_EQ(c.Get(("/v1/responses/" + ids[2]).c_str())->status, 200);
}

TEST(Responses, ReasoningEffortAndEncryptedReasoning) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Deep.</think>Answer");
  Reply r = post(server, "/v1/responses",
                 {{"model", "tiny"},
                  {"input", "Q"},
                  {"reasoning", {{"effort", "medium"}}},
                  {"include", {"reasoning.encrypted_content"}},
                  {"store", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(server.decode(engine.last().prompt).find("Reasoning Effort: High"), std::string::npos);
  EXPECT_EQ(r.json["reasoning"]["effort"], "medium");
  // A stateless client sends the reasoning item back; its encrypted_content carries the text.
  const Json item = r.json["output"][0];
  EXPECT_EQ(item["encrypted_content"], "Deep.");
  Json back = item;
  back.erase("content");
  engine.script = server.encode("</think>More");
  Reply next = post(server, "/v1/responses",
                    {{"model", "tiny"},
                     {"input", Json::array({{{"role", "user"}, {"content", "Q"}},
                                            back,
                                            r.json["output"][1],
                                            {{"role", "user"}, {"content", "Again"}}})}});
  ASSERT_EQ(next.status, 200) << next.body;
  const std::string prompt = server.decode(engine.last().prompt);
  EXPECT_NE(prompt.find("Answer"), std::string::npos) << prompt;

  // effort none: no think block, everything is the message.
  engine.script = server.encode("Plain");
  Reply none = post(server, "/v1/responses",
                    {{"model", "tiny"}, {"input", "Q"}, {"reasoning", {{"effort", "none"}}}});
  ASSERT_EQ(none.status, 200);
  ASSERT_EQ(none.json["output"].size(), 1u);
  EXPECT_EQ(none.json["output"][0]["content"][0]["text"], "Plain");
}

struct BadResponsesRequest {
  const char *name;
  const char *fields; // merged into {"model": "tiny", "input": "Hi"}
  int status;
  const char *param;
};

class ResponsesErrors : public ::testing::TestWithParam<BadResponsesRequest> {};

TEST_P(ResponsesErrors, NameTheClientsField) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("</think>ok");
  Json body = {{"model", "tiny"}, {"input", "Hi"}};
  body.update(Json::parse(GetParam().fields));
  Reply r = post(server, "/v1/responses", body);
  EXPECT_EQ(r.status, GetParam().status) << r.body;
  ASSERT_TRUE(r.json.contains("error")) << r.body;
  EXPECT_EQ(r.json["error"]["param"], GetParam().param) << r.body;
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find(GetParam().param), std::string::npos)
      << r.body;
}

INSTANTIATE_TEST_SUITE_P(
    Responses, ResponsesErrors,
    ::testing::Values(
        BadResponsesRequest{"ImagePart",
                            R"({"input": [{"role": "user", "content": [{"type": "input_text",
                                "text": "a"}, {"type": "input_image", "image_url": "x"}]}]})",
                            400, "input[0].content[1].type"},
        BadResponsesRequest{"MissingText",
                            R"({"input": [{"role": "user", "content": "a"},
                                {"role": "user", "content": [{"type": "input_text"}]}]})",
                            400, "input[1].content[0].text"},
        BadResponsesRequest{"BadArguments",
                            R"({"input": [{"role": "user", "content": "a"},
                                {"type": "function_call", "call_id": "c", "name": "f",
                                 "arguments": "not json"}]})",
                            400, "input[1].arguments"},
        BadResponsesRequest{"MissingCallId",
                            R"({"input": [{"type": "function_call_output", "output": "x"}]})", 400,
                            "input[0].call_id"},
        BadResponsesRequest{"UnknownItem", R"({"input": [{"type": "item_reference", "id": "x"}]})",
                            400, "input[0].type"},
        BadResponsesRequest{"BadRole", R"({"input": [{"role": "tool", "content": "x"}]})", 400,
                            "input[0].role"},
        BadResponsesRequest{"NoInput", R"({"input": null})", 400, "input"},
        BadResponsesRequest{"Temperature", R"({"temperature": 5})", 400, "temperature"},
        BadResponsesRequest{"MaxOutputTokens", R"({"max_output_tokens": 0})", 400,
                            "max_output_tokens"},
        BadResponsesRequest{"WebSearchTool", R"({"tools": [{"type": "web_search"}]})", 400,
                            "tools[0].type"},
        BadResponsesRequest{"ToolName", R"({"tools": [{"type": "function", "name": "a b"}]})", 400,
                            "tools[0].name"},
        BadResponsesRequest{"ToolParameters",
                            R"({"tools": [{"type": "function", "name": "f", "parameters": 3}]})",
                            400, "tools[0].parameters"},
        BadResponsesRequest{"TextFormat", R"({"text": {"format": {"type": "yaml"}}})", 400,
                            "text.format.type"},
        BadResponsesRequest{"Effort", R"({"reasoning": {"effort": "extreme"}})", 400,
                            "reasoning.effort"},
        BadResponsesRequest{"Background", R"({"background": true})", 400, "background"},
        BadResponsesRequest{"Truncation", R"({"truncation": "auto"})", 400, "truncation"},
        BadResponsesRequest{"Logprobs", R"({"include": ["message.output_text.logprobs"]})", 400,
                            "include[0]"},
        BadResponsesRequest{"Draft", R"({"draft": "no"})", 400, "draft"},
        BadResponsesRequest{"UnknownModel", R"({"model": "other"})", 404, "model"}),
    [](const ::testing::TestParamInfo<BadResponsesRequest> &info) { return info.param.name; });

/// The chat parser's paths map back onto the Responses request's (for the fields it checks,
/// text.format's schema included).
TEST(Responses, ChatErrorsMapBackToTheRequestsPaths) {
  std::variant<ResponsesRequest, ApiError> parsed = parseResponsesRequest(
      R"({"model": "tiny", "instructions": "s", "input": [{"role": "user", "content": "a"},
          {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}],
          "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}},
          "tools": [{"type": "function", "name": "f"}]})",
      nullptr);
  ASSERT_TRUE(std::holds_alternative<ResponsesRequest>(parsed));
  const ResponsesRequest &request = std::get<ResponsesRequest>(parsed);
  EXPECT_EQ(request.chatBody["response_format"]["type"], "json_schema");
  EXPECT_EQ(request.chatBody["response_format"]["json_schema"]["name"], "n");
  auto mapped = [&](const std::string &chatPath) {
    ApiError e;
    e.param = chatPath;
    e.message = "Invalid '" + chatPath + "': no.";
    ApiError out = request.params.toClient(e, "input");
    EXPECT_EQ(out.message, "Invalid '" + *out.param + "': no.");
    return *out.param;
  };
  EXPECT_EQ(mapped("response_format.json_schema.schema.properties"),
            "text.format.schema.properties");
  EXPECT_EQ(mapped("response_format.type"), "text.format.type");
  EXPECT_EQ(mapped("messages[0].content"), "instructions.content");
  EXPECT_EQ(mapped("messages[1].content"), "input[0].content");
  EXPECT_EQ(mapped("messages[2].tool_calls[0].function.name"), "input[1].name");
  EXPECT_EQ(mapped("tools[0].function.parameters"), "tools[0].parameters");
  EXPECT_EQ(mapped("max_tokens"), "max_output_tokens");
  EXPECT_EQ(mapped("messages"), "input");
  EXPECT_EQ(mapped("top_p"), "top_p");
}

//===------------------------------------------------------------------------------------------===//
// Anthropic /v1/messages
//===------------------------------------------------------------------------------------------===//

Json anthropicRequest(Json fields = Json::object()) {
  Json body = {{"model", "tiny"},
               {"max_tokens", 64},
               {"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  body.update(fields);
  return body;
}

TEST(Messages, ThinkingAndTextBlocks) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Let me see.</think>Hello!");
  Reply r = post(server, "/v1/messages",
                 anthropicRequest({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                                   {"max_tokens", 2000}}),
                 {{"anthropic-version", "2023-06-01"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["type"], "message");
  EXPECT_EQ(r.json["role"], "assistant");
  EXPECT_EQ(r.json["model"], "tiny");
  EXPECT_TRUE(r.json["id"].get<std::string>().starts_with("msg_"));
  ASSERT_EQ(r.json["content"].size(), 2u) << r.body;
  EXPECT_EQ(r.json["content"][0]["type"], "thinking");
  EXPECT_EQ(r.json["content"][0]["thinking"], "Let me see.");
  EXPECT_TRUE(r.json["content"][0]["signature"].is_string());
  EXPECT_EQ(r.json["content"][1], Json({{"type", "text"}, {"text", "Hello!"}}));
  EXPECT_EQ(r.json["stop_reason"], "end_turn");
  EXPECT_TRUE(r.json["stop_sequence"].is_null());
  EXPECT_EQ(r.json["usage"]["input_tokens"], engine.last().prompt.size());
  EXPECT_EQ(r.json["usage"]["output_tokens"], engine.script.size());
  EXPECT_EQ(engine.last().maxTokens, 2000);
  EXPECT_TRUE(server.decode(engine.last().prompt).ends_with("<|assistant|><think>"));
}

TEST(Messages, WithoutThinkingTheThinkBlockIsClosed) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Just text");
  Reply r = post(server, "/v1/messages", anthropicRequest({{"system", "Be kind."}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["content"].size(), 1u);
  EXPECT_EQ(r.json["content"][0]["text"], "Just text");
  const Json chat = {{"messages", Json::parse(R"([{"role": "system", "content": "Be kind."},
      {"role": "user", "content": "Hi"}])")},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const std::string prompt = server.decode(engine.last().prompt);
  EXPECT_TRUE(prompt.ends_with("<think></think>")) << prompt;
  EXPECT_EQ(prompt, chatPrompt(server, engine, chat));
}

TEST(Messages, ToolUseAndToolResultsTranslateAsTheChatRequest) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode(kWeatherCall);
  const Json tools = Json::array({{{"name", "get_weather"},
                                   {"description", "Weather"},
                                   {"input_schema", kWeatherParameters}}});
  Reply r = post(server, "/v1/messages", anthropicRequest({{"tools", tools}}));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["content"].size(), 1u) << r.body;
  const Json &use = r.json["content"][0];
  EXPECT_EQ(use["type"], "tool_use");
  EXPECT_TRUE(use["id"].get<std::string>().starts_with("toolu_"));
  EXPECT_EQ(use["name"], "get_weather");
  EXPECT_EQ(use["input"], Json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(r.json["stop_reason"], "tool_use");

  // The next turn sends the call and its result back.
  const Json messages = Json::array(
      {{{"role", "user"}, {"content", "Weather?"}},
       {{"role", "assistant"},
        {"content",
         Json::array({{{"type", "thinking"}, {"thinking", "Call it."}, {"signature", ""}},
                      {{"type", "text"}, {"text", "Checking."}},
                      use})}},
       {{"role", "user"},
        {"content",
         Json::array({{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "sunny"}},
                      {{"type", "text"}, {"text", "And tomorrow?"}}})}}});
  engine.script = server.encode("</think>Sunny.");
  Reply next =
      post(server, "/v1/messages", anthropicRequest({{"tools", tools}, {"messages", messages}}));
  ASSERT_EQ(next.status, 200) << next.body;
  const std::string prompt = server.decode(engine.last().prompt);
  const Json chat = {
      {"messages",
       Json::array({{{"role", "user"}, {"content", "Weather?"}},
                    {{"role", "assistant"},
                     {"content", "Checking."},
                     {"reasoning_content", "Call it."},
                     {"tool_calls", Json::array({{{"id", use["id"]},
                                                  {"type", "function"},
                                                  {"function",
                                                   {{"name", "get_weather"},
                                                    {"arguments", use["input"].dump()}}}}})}},
                    {{"role", "tool"}, {"tool_call_id", use["id"]}, {"content", "sunny"}},
                    {{"role", "user"},
                     {"content", Json::array({{{"type", "text"}, {"text", "And tomorrow?"}}})}}})},
      {"tools", Json::array({{{"type", "function"},
                              {"function",
                               {{"name", "get_weather"},
                                {"parameters", kWeatherParameters},
                                {"description", "Weather"}}}}})},
      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  EXPECT_EQ(prompt, chatPrompt(server, engine, chat));
  EXPECT_NE(prompt.find("sunny"), std::string::npos);
}

TEST(Messages, StopSequencesAndTheTokenBudget) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("one two three four");
  Reply stopped =
      post(server, "/v1/messages", anthropicRequest({{"stop_sequences", {"zzz", " three"}}}));
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  EXPECT_EQ(stopped.json["content"][0]["text"], "one two");
  EXPECT_EQ(stopped.json["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped.json["stop_sequence"], " three");

  Reply cut = post(server, "/v1/messages", anthropicRequest({{"max_tokens", 2}}));
  ASSERT_EQ(cut.status, 200);
  EXPECT_EQ(cut.json["stop_reason"], "max_tokens");
  EXPECT_EQ(cut.json["usage"]["output_tokens"], 2);
}

TEST(Messages, StreamsAnthropicsEvents) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Plan.</think>Calling.<tool_call>get_weather<arg_key>city"
                                "</arg_key><arg_value>Oslo</arg_value></tool_call>");
  const Json tools = Json::array({{{"name", "get_weather"}, {"input_schema", kWeatherParameters}}});
  Reply r = post(server, "/v1/messages",
                 anthropicRequest({{"tools", tools},
                                   {"stream", true},
                                   {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                                   {"max_tokens", 1500}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = sse(r.body);
  std::vector<std::string> shape;
  for (const auto &[type, e] : events) {
    std::string entry = type;
    if (type == "content_block_delta") {
      entry += ":" + e["delta"]["type"].get<std::string>();
    } else if (type == "content_block_start") {
      entry += ":" + e["content_block"]["type"].get<std::string>();
    }
    if (shape.empty() || shape.back() != entry || !entry.ends_with("_delta")) {
      shape.push_back(entry);
    }
  }
  const std::vector<std::string> expected = {"message_start",
                                             "ping",
                                             "content_block_start:thinking",
                                             "content_block_delta:thinking_delta",
                                             "content_block_delta:signature_delta",
                                             "content_block_stop",
                                             "content_block_start:text",
                                             "content_block_delta:text_delta",
                                             "content_block_stop",
                                             "content_block_start:tool_use",
                                             "content_block_delta:input_json_delta",
                                             "content_block_stop",
                                             "message_delta",
                                             "message_stop"};
  EXPECT_EQ(shape, expected) << r.body;
  std::string thinking, text, json;
  for (const auto &[type, e] : events) {
    if (type == "content_block_delta") {
      const Json &d = e["delta"];
      thinking += d.value("thinking", "");
      text += d.value("text", "");
      json += d.value("partial_json", "");
    }
  }
  EXPECT_EQ(thinking, "Plan.");
  EXPECT_EQ(text, "Calling.");
  EXPECT_EQ(Json::parse(json), Json::parse(R"({"city": "Oslo"})"));
  const Json &start = events[0].second["message"];
  EXPECT_TRUE(start["id"].get<std::string>().starts_with("msg_"));
  EXPECT_EQ(start["content"], Json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], engine.last().prompt.size());
  const Json &delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(delta["usage"]["output_tokens"], engine.script.size());
  // Block indexes count from 0 in order.
  EXPECT_EQ(events[2].second["index"], 0);
  EXPECT_EQ(events[events.size() - 3].second["index"], 2);
}

/// A prompt resumed from a kept state: Responses count it in input_tokens_details.cached_tokens
/// (input_tokens is still the whole prompt, as OpenAI's).
TEST(Responses, CachedInputTokensAreInTheUsage) {
  FakeEngine engine;
  engine.cachedTokens = 4;
  Served server(engine);
  engine.script = server.encode("Hm.</think>Answer");
  Reply r = post(server, "/v1/responses", {{"model", "tiny"}, {"input", "Q"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["input_tokens"], engine.last().prompt.size());
  EXPECT_EQ(r.json["usage"]["input_tokens_details"]["cached_tokens"], 4);
  Reply s = post(server, "/v1/responses", {{"model", "tiny"}, {"input", "Q"}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.body;
  const auto events = sse(s.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "response.completed");
  EXPECT_EQ(events.back().second["response"]["usage"]["input_tokens_details"]["cached_tokens"], 4);
}

/// reasoning.summary: the server writes no summary (that would take a second generation); the
/// reasoning is the item's reasoning_text content, whole, and the summary asked for is echoed.
TEST(Responses, ASummaryAskedForLeavesTheSummaryEmptyAndTheReasoningWhole) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Step one. Step two.</think>Done");
  Reply r = post(server, "/v1/responses",
                 {{"model", "tiny"}, {"input", "Q"}, {"reasoning", {{"summary", "detailed"}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["reasoning"]["summary"], "detailed");
  const Json &item = r.json["output"][0];
  EXPECT_EQ(item["type"], "reasoning");
  EXPECT_EQ(item["summary"], Json::array());
  EXPECT_EQ(item["content"],
            Json::array({{{"type", "reasoning_text"}, {"text", "Step one. Step two."}}}));
}

/// Anthropic counts a prompt in parts: input_tokens the uncached ones, cache_read_input_tokens
/// those resumed from a kept state; in the message, message_start and message_delta alike.
TEST(Messages, CachedPromptTokensAreCacheReads) {
  FakeEngine engine;
  engine.cachedTokens = 4;
  Served server(engine);
  engine.script = server.encode("Just text");
  Reply r = post(server, "/v1/messages", anthropicRequest());
  ASSERT_EQ(r.status, 200) << r.body;
  const int64_t prompt = static_cast<int64_t>(engine.last().prompt.size());
  EXPECT_EQ(r.json["usage"]["input_tokens"], prompt - 4);
  EXPECT_EQ(r.json["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(r.json["usage"]["cache_creation_input_tokens"], 0);
  Reply s = post(server, "/v1/messages", anthropicRequest({{"stream", true}}));
  ASSERT_EQ(s.status, 200) << s.body;
  const auto events = sse(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().second["message"]["usage"]["input_tokens"], prompt - 4);
  EXPECT_EQ(events.front().second["message"]["usage"]["cache_read_input_tokens"], 4);
  const Json &delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["type"], "message_delta");
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(delta["usage"]["input_tokens"], prompt - 4);
}

bool isBase64Digest(const std::string &s) {
  return s.size() == 44 && s.back() == '=' &&
         s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") ==
             43;
}

/// Thinking blocks carry a signature (HMAC-SHA256 of the text under the server's key, base64),
/// the same in a message and in a stream's signature_delta; one sent back is accepted whether it
/// verifies or not, and redacted_thinking blocks are dropped.
TEST(Messages, ThinkingBlocksAreSignedAndReadBackUnverified) {
  FakeEngine engine;
  Served server(engine);
  const Json thinking = {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                         {"max_tokens", 2000}};
  engine.script = server.encode("Let me see.</think>Hello!");
  Reply r = post(server, "/v1/messages", anthropicRequest(thinking));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string signature = r.json["content"][0]["signature"];
  EXPECT_TRUE(isBase64Digest(signature)) << signature;
  Json streamed = anthropicRequest(thinking);
  streamed["stream"] = true;
  Reply s = post(server, "/v1/messages", streamed);
  std::string streamedSignature;
  for (const auto &[type, e] : sse(s.body)) {
    if (type == "content_block_delta" && e["delta"]["type"] == "signature_delta") {
      streamedSignature = e["delta"]["signature"];
    }
  }
  EXPECT_EQ(streamedSignature, signature);
  engine.script = server.encode("Something else.</think>Hello!");
  Reply other = post(server, "/v1/messages", anthropicRequest(thinking));
  const std::string otherSignature = other.json["content"][0]["signature"];
  EXPECT_TRUE(isBase64Digest(otherSignature));
  EXPECT_NE(otherSignature, signature);
  EXPECT_EQ(anthropic::ThinkingSigner("key").sign("text"),
            anthropic::base64(
                std::string(reinterpret_cast<const char *>(hmacSha256("key", "text").data()), 32)));
  EXPECT_EQ(anthropic::base64("ab"), "YWI=");
  EXPECT_EQ(anthropic::base64("abcd"), "YWJjZA==");

  Json back = anthropicRequest(thinking);
  back["messages"] = Json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [
         {"type": "thinking", "thinking": "Earlier thought.", "signature": "forged"},
         {"type": "redacted_thinking", "data": "OPAQUE-DATA"},
         {"type": "text", "text": "Earlier answer."}]},
      {"role": "user", "content": "Again"}])");
  engine.script = server.encode("</think>ok");
  Reply again = post(server, "/v1/messages", back);
  ASSERT_EQ(again.status, 200) << again.body;
  const std::string prompt = server.decode(engine.last().prompt);
  EXPECT_NE(prompt.find("Earlier answer."), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("OPAQUE-DATA"), std::string::npos) << prompt;
}

/// The think block of a request with thinking.budget_tokens ends at the budget: after that many
/// tokens inside it only `</think>` may be sampled; a forced tool call's grammar then holds.
TEST(Messages, TheThinkingBudgetClosesTheThinkBlock) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("Hm.</think>ok");
  const int32_t thinkEnd = static_cast<int32_t>(*server.tokenizer().tokenToId("</think>"));
  const int32_t word = server.encode(" word").front();
  const size_t words = (server.tokenizer().idCount() + 31) / 32;
  auto onlyThinkEnd = [&](const std::vector<uint32_t> &mask) {
    for (size_t i = 0; i < mask.size(); ++i) {
      const uint32_t expected =
          i == static_cast<size_t>(thinkEnd) / 32 ? 1u << (thinkEnd % 32) : 0u;
      if (mask[i] != expected) {
        return false;
      }
    }
    return true;
  };
  ASSERT_EQ(post(server, "/v1/messages",
                 anthropicRequest({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                                   {"max_tokens", 2000}}))
                .status,
            200);
  ASSERT_TRUE(engine.last().constraint);
  std::unique_ptr<runtime::TokenConstraint> c = engine.last().constraint->clone();
  std::vector<uint32_t> mask(words, ~0u);
  for (int i = 0; i < 1024; ++i) {
    ASSERT_FALSE(c->fillAllowed(mask)) << "free while within the budget, token " << i;
    ASSERT_TRUE(c->advance(word));
  }
  ASSERT_TRUE(c->fillAllowed(mask));
  EXPECT_TRUE(onlyThinkEnd(mask));
  ASSERT_TRUE(c->advance(thinkEnd));
  EXPECT_FALSE(c->fillAllowed(mask)) << "the answer is free";
  EXPECT_FALSE(c->complete());
  // The model closing its think block itself leaves the answer free.
  c = engine.last().constraint->clone();
  ASSERT_TRUE(c->advance(word));
  ASSERT_TRUE(c->advance(thinkEnd));
  for (int i = 0; i < 2000; ++i) {
    ASSERT_FALSE(c->fillAllowed(mask));
    ASSERT_TRUE(c->advance(word));
  }

  // With a forced tool call the two compose: the budget inside the think block, then the call.
  const Json tools = Json::array({{{"name", "get_weather"}, {"input_schema", kWeatherParameters}}});
  Reply forced =
      post(server, "/v1/messages",
           anthropicRequest({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
                             {"max_tokens", 1500},
                             {"tools", tools},
                             {"tool_choice", {{"type", "any"}}}}));
  ASSERT_EQ(forced.status, 200) << forced.body;
  ASSERT_TRUE(engine.last().constraint);
  c = engine.last().constraint->clone();
  for (int i = 0; i < 1024; ++i) {
    ASSERT_FALSE(c->fillAllowed(mask));
    ASSERT_TRUE(c->advance(word));
  }
  ASSERT_TRUE(c->fillAllowed(mask));
  EXPECT_TRUE(onlyThinkEnd(mask));
  ASSERT_TRUE(c->advance(thinkEnd));
  ASSERT_TRUE(c->fillAllowed(mask));
  EXPECT_FALSE(onlyThinkEnd(mask));
  EXPECT_FALSE(mask[static_cast<size_t>(word) / 32] & (1u << (word % 32)))
      << "plain text is not a tool call";

  // Adaptive thinking has no budget; without thinking there is no think block.
  for (const char *type : {"adaptive", "disabled"}) {
    ASSERT_EQ(
        post(server, "/v1/messages", anthropicRequest({{"thinking", {{"type", type}}}})).status,
        200);
    EXPECT_FALSE(engine.last().constraint) << type;
  }
}

TEST(Messages, CountTokensIsThePromptsLength) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("ok");
  Json body = anthropicRequest({{"system", "S"}});
  Reply generated = post(server, "/v1/messages", body);
  ASSERT_EQ(generated.status, 200);
  body.erase("max_tokens");
  Reply counted = post(server, "/v1/messages/count_tokens", body);
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(counted.json, Json({{"input_tokens", generated.json["usage"]["input_tokens"]}}));
  EXPECT_EQ(engine.requests.load(), 1); // counting runs nothing
}

TEST(Messages, ErrorsHaveAnthropicsShapeAndNameTheField) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("ok");
  auto expectError = [&](const Json &body, int status, const std::string &type,
                         const std::string &mentions) {
    Reply r = post(server, "/v1/messages", body);
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.json["type"], "error") << r.body;
    EXPECT_EQ(r.json["error"]["type"], type) << r.body;
    EXPECT_NE(r.json["error"]["message"].get<std::string>().find(mentions), std::string::npos)
        << r.body;
  };
  Json noMax = anthropicRequest();
  noMax.erase("max_tokens");
  expectError(noMax, 400, "invalid_request_error", "max_tokens");
  expectError(anthropicRequest({{"messages", Json::parse(R"([{"role": "user", "content": "a"},
                                   {"role": "user", "content": [{"type": "tool_result"}]}])")}}),
              400, "invalid_request_error", "messages[1].content[0].tool_use_id");
  expectError(anthropicRequest({{"messages", Json::parse(R"([{"role": "user", "content":
                                   [{"type": "image", "source": {}}]}])")}}),
              400, "invalid_request_error", "messages[0].content[0].type");
  expectError(anthropicRequest({{"messages", Json::parse(R"([{"role": "user", "content": "a"},
                                   {"role": "assistant", "content": [{"type": "tool_use",
                                    "id": "t", "name": "f", "input": []}]}])")}}),
              400, "invalid_request_error", "messages[1].content[0].input");
  expectError(anthropicRequest({{"tools", Json::parse(R"([{"name": "f",
                                   "input_schema": 7}])")}}),
              400, "invalid_request_error", "tools[0].input_schema");
  expectError(anthropicRequest({{"tools", Json::parse(R"([{"type": "web_search_20250305",
                                   "name": "web_search"}])")}}),
              400, "invalid_request_error", "tools[0].type");
  expectError(anthropicRequest({{"temperature", 1.5}}), 400, "invalid_request_error",
              "temperature");
  expectError(anthropicRequest({{"top_p", 7}}), 400, "invalid_request_error", "top_p");
  expectError(anthropicRequest({{"thinking", {{"type", "enabled"}, {"budget_tokens", 10}}}}), 400,
              "invalid_request_error", "thinking.budget_tokens");
  expectError(anthropicRequest({{"tool_choice", {{"type", "sometimes"}}}}), 400,
              "invalid_request_error", "tool_choice.type");
  expectError(anthropicRequest({{"model", "other"}}), 404, "not_found_error", "other");
  expectError(anthropicRequest({{"draft", 1}}), 400, "invalid_request_error", "'draft'");
  // Malformed JSON too.
  httplib::Client c = server.client();
  auto bad = c.Post("/v1/messages", "{\"model\":", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["type"], "invalid_request_error");
}

TEST(Messages, TheApiKeyComesAsXApiKeyOrBearer) {
  FakeEngine engine;
  ServerOptions options;
  options.apiKeys = {"secret"};
  Served server(engine, options);
  engine.script = server.encode("ok");
  Reply none = post(server, "/v1/messages", anthropicRequest());
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json["type"], "error");
  EXPECT_EQ(none.json["error"]["type"], "authentication_error");
  EXPECT_EQ(post(server, "/v1/messages", anthropicRequest(), {{"x-api-key", "wrong"}}).status, 401);
  EXPECT_EQ(post(server, "/v1/messages", anthropicRequest(), {{"x-api-key", "secret"}}).status,
            200);
  EXPECT_EQ(
      post(server, "/v1/messages", anthropicRequest(), {{"Authorization", "Bearer secret"}}).status,
      200);
  Json count = anthropicRequest();
  count.erase("max_tokens");
  EXPECT_EQ(post(server, "/v1/messages/count_tokens", count).status, 401);
  // /v1/responses answers in OpenAI's shape.
  Reply openai = post(server, "/v1/responses", {{"model", "tiny"}, {"input", "x"}});
  EXPECT_EQ(openai.status, 401);
  EXPECT_EQ(openai.json["error"]["code"], "invalid_api_key");
}

TEST(Messages, AnEngineFailureIsAnErrorEvent) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("one two three");
  engine.failure = Status(StatusCode::Internal, "device lost");
  Reply whole = post(server, "/v1/messages", anthropicRequest());
  EXPECT_EQ(whole.status, 500);
  EXPECT_EQ(whole.json["error"]["type"], "api_error");
  Reply streamed = post(server, "/v1/messages", anthropicRequest({{"stream", true}}));
  const auto events = sse(streamed.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().first, "error");
  EXPECT_EQ(events.back().second["error"]["type"], "api_error");
  Reply response =
      post(server, "/v1/responses", {{"model", "tiny"}, {"input", "x"}, {"stream", true}});
  const auto responseEvents = sse(response.body);
  ASSERT_FALSE(responseEvents.empty());
  EXPECT_EQ(responseEvents.back().first, "response.failed");
  EXPECT_EQ(responseEvents.back().second["response"]["status"], "failed");
}

//===------------------------------------------------------------------------------------------===//
// Stop strings while the model reasons (as vLLM: matched against the reasoning too)
//===------------------------------------------------------------------------------------------===//

TEST(StopStrings, AStopStringInTheReasoningEndsTheReplyThere) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("First I count: one two three.</think>The answer");
  Reply r = post(server, "/v1/chat/completions",
                 {{"model", "tiny"},
                  {"messages", Json::array({{{"role", "user"}, {"content", "Count"}}})},
                  {"stop", {" three"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json &choice = r.json["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "First I count: one two");
  EXPECT_EQ(choice["message"]["content"], "");
  EXPECT_EQ(choice["finish_reason"], "stop");
  // The tokens after the stop string are neither shown nor counted.
  EXPECT_LT(r.json["usage"]["completion_tokens"].get<int64_t>(),
            static_cast<int64_t>(engine.script.size()));

  // Streamed alike, and a stop string spanning two tokens is still caught.
  Reply streamed = post(server, "/v1/chat/completions",
                        {{"model", "tiny"},
                         {"messages", Json::array({{{"role", "user"}, {"content", "Count"}}})},
                         {"stop", {"two thr"}},
                         {"stream", true}});
  std::string reasoning, content;
  for (const auto &[name, e] : sse(streamed.body)) {
    if (e.is_object() && e.contains("choices") && !e["choices"].empty()) {
      reasoning += e["choices"][0]["delta"].value("reasoning_content", "");
      content += e["choices"][0]["delta"].value("content", "");
    }
  }
  EXPECT_EQ(reasoning, "First I count: one ");
  EXPECT_EQ(content, "");

  // A stop string absent from the reasoning still applies to the content after it.
  Reply after = post(server, "/v1/chat/completions",
                     {{"model", "tiny"},
                      {"messages", Json::array({{{"role", "user"}, {"content", "Count"}}})},
                      {"stop", {"answer"}}});
  EXPECT_EQ(after.json["choices"][0]["message"]["reasoning_content"],
            "First I count: one two three.");
  EXPECT_EQ(after.json["choices"][0]["message"]["content"], "The ");
}

/// glmc's `draft` travels through both translations to the engine: false asks for the serial
/// reference, absent or true leaves drafts on.
TEST(Draft, BothApisPassTheFieldToTheEngine) {
  FakeEngine engine;
  Served server(engine);
  engine.script = server.encode("</think>ok");
  const std::pair<const char *, Json> apis[] = {
      {"/v1/responses", {{"model", "tiny"}, {"input", "Hi"}}},
      {"/v1/messages", anthropicRequest()}};
  for (const auto &[path, base] : apis) {
    ASSERT_EQ(post(server, path, base).status, 200) << path;
    EXPECT_TRUE(engine.last().draft) << path;
    for (bool draft : {false, true}) {
      Json request = base;
      request["draft"] = draft;
      Reply r = post(server, path, request);
      ASSERT_EQ(r.status, 200) << path << " " << r.body;
      EXPECT_EQ(engine.last().draft, draft) << path;
    }
  }
}

//===------------------------------------------------------------------------------------------===//
// /metrics
//===------------------------------------------------------------------------------------------===//

/// Every family has its HELP and TYPE lines before its samples; the request phases and the
/// state pool's use are there under vLLM's names.
TEST(Metrics, EveryFamilyIsDescribedAndTheRequestPhasesAreTimed) {
  FakeEngine engine;
  engine.reported.kvCacheUsage = 0.25;
  Served server(engine);
  engine.script = server.encode("</think>ok then");
  ASSERT_EQ(post(server, "/v1/messages", anthropicRequest()).status, 200);
  httplib::Client c = server.client();
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  std::istringstream in(res->body);
  std::string line;
  std::set<std::string> helped, typed, sampled;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first, second, name;
    words >> first >> second >> name;
    if (first == "#" && second == "HELP") {
      EXPECT_TRUE(helped.insert(name).second) << "two HELP lines for " << name;
      continue;
    }
    if (first == "#" && second == "TYPE") {
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP for " << name;
      EXPECT_TRUE(typed.insert(name).second) << "two TYPE lines for " << name;
      continue;
    }
    std::string sample = line.substr(0, line.find('{'));
    for (const char *suffix : {"_bucket", "_sum", "_count"}) {
      if (sample.ends_with(suffix) &&
          typed.count(sample.substr(0, sample.size() - std::strlen(suffix)))) {
        sample = sample.substr(0, sample.size() - std::strlen(suffix));
      }
    }
    EXPECT_TRUE(typed.count(sample)) << "a sample before its family's TYPE: " << line;
    sampled.insert(sample);
  }
  for (const char *family :
       {"vllm:kv_cache_usage_perc", "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
        "vllm:num_requests_running", "vllm:e2e_request_latency_seconds"}) {
    EXPECT_TRUE(sampled.count(family)) << family;
  }
  EXPECT_NE(res->body.find("vllm:kv_cache_usage_perc{model_name=\"tiny\"} 0.25\n"),
            std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("# TYPE vllm:request_queue_time_seconds histogram"), std::string::npos);
  for (const char *phase : {"queue", "prefill", "decode"}) {
    EXPECT_NE(res->body.find(
                  strCat("vllm:request_", phase, "_time_seconds_count{model_name=\"tiny\"} 1\n")),
              std::string::npos)
        << phase << "\n"
        << res->body;
  }
}

} // namespace
} // namespace glm::server
