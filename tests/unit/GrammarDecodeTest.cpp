// Structured outputs end to end: the tiny fixture's random weights behind the real scheduler and
// the HTTP server, sampling at temperature 1 under each kind of constraint. A random model under a
// grammar is the strongest test of the grammar: every reply must parse and validate (checked here
// by a small validator of its own, not by the grammar engine), and bad constraints get 400s that
// name the field.
#include "runtime/engine/CpuEngine.h"
#include "runtime/engine/Scheduler.h"
#include "server/chat/ChatPrompt.h"
#include "server/http/HttpServer.h"
#include "server/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <unistd.h>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;
const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// Whether `v` satisfies `schema` (the keywords these tests use), `root` resolving "#..." refs.
bool validates(const Json &v, const Json &schema, const Json &root, std::string &why) {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    const Json &target = ref == "#" ? root : root.at(Json::json_pointer(ref.substr(1)));
    return validates(v, target, root, why);
  }
  if (schema.contains("anyOf")) {
    for (const Json &alt : schema["anyOf"]) {
      std::string ignored;
      if (validates(v, alt, root, ignored)) {
        return true;
      }
    }
    why = "no anyOf branch matches " + v.dump();
    return false;
  }
  if (schema.contains("enum")) {
    for (const Json &e : schema["enum"]) {
      if (e == v) {
        return true;
      }
    }
    why = v.dump() + " is not in the enum";
    return false;
  }
  const std::string type = schema.value("type", "");
  if (type == "object") {
    if (!v.is_object()) {
      why = "not an object: " + v.dump();
      return false;
    }
    for (const Json &key : schema.value("required", Json::array())) {
      if (!v.contains(key.get<std::string>())) {
        why = "missing " + key.dump();
        return false;
      }
    }
    const Json properties = schema.value("properties", Json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!properties.contains(it.key())) {
        why = "unexpected key " + it.key();
        return false;
      }
      if (!validates(it.value(), properties[it.key()], root, why)) {
        return false;
      }
    }
    return true;
  }
  if (type == "array") {
    if (!v.is_array() || v.size() < schema.value("minItems", 0u) ||
        v.size() > schema.value("maxItems", 1000000u)) {
      why = "bad array " + v.dump();
      return false;
    }
    for (const Json &item : v) {
      if (!validates(item, schema["items"], root, why)) {
        return false;
      }
    }
    return true;
  }
  if (type == "string") {
    if (!v.is_string()) {
      why = "not a string: " + v.dump();
      return false;
    }
    if (schema.contains("maxLength")) {
      size_t chars = 0;
      for (unsigned char c : v.get<std::string>()) {
        chars += (c & 0xC0) != 0x80;
      }
      if (chars > schema["maxLength"].get<size_t>()) {
        why = "too long: " + v.dump();
        return false;
      }
    }
    return true;
  }
  if (type == "integer") {
    return v.is_number_integer() || (why = "not an integer: " + v.dump(), false);
  }
  if (type == "boolean") {
    return v.is_boolean() || (why = "not a boolean: " + v.dump(), false);
  }
  if (type == "null") {
    return v.is_null() || (why = "not null", false);
  }
  return true;
}

/// The tiny fixture's CPU plan behind the scheduler and a server on a loopback port.
class TinyServer {
public:
  TinyServer() {
    const auto plan = std::filesystem::temp_directory_path() /
                      ("grammar_e2e_" + std::to_string(::getpid()) + ".glmp");
    const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                                plan.string() +
                                " --target cpu --precision f32 --tp 1 --max-seqs 4 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    checkpoint_ = std::move(Checkpoint::open(kTiny)).value();
    auto engine = std::move(runtime::CpuEngine::create(
                                std::move(runtime::PlanFile::open(plan)).value(), *checkpoint_))
                      .value();
    std::filesystem::remove(plan);
    scheduler_ = std::make_unique<runtime::Scheduler>(std::move(engine), 16);
    tokenizer_ = std::make_unique<Tokenizer>(std::move(Tokenizer::fromModelDir(kTiny)).value());
    template_ = std::make_unique<ChatTemplate>(std::move(loadChatTemplate(kTiny)).value());
    std::vector<int32_t> eos;
    for (const char *t : {"<|user|>", "<|observation|>", "<|endoftext|>"}) {
      eos.push_back(*tokenizer_->tokenToId(t));
    }
    ServedModel model{tokenizer_.get(), template_.get(),
                      std::move(loadChatTokenizerConfig(kTiny)).value(), eos};
    ServerOptions options;
    options.port = 0;
    options.servedNames = {"tiny"};
    options.maxContext = 2048;
    server_ = std::make_unique<HttpServer>(options, *scheduler_, model);
    port_ = *server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
  }
  ~TinyServer() {
    server_->stop(5);
    thread_.join();
  }
  Json post(const std::string &path, const Json &body, int status = 200) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(120, 0);
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) {
      return {};
    }
    EXPECT_EQ(res->status, status) << res->body;
    return Json::parse(res->body, nullptr, false);
  }
  const Tokenizer &tokenizer() const { return *tokenizer_; }

private:
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<runtime::Scheduler> scheduler_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

TinyServer &server() {
  static TinyServer s;
  return s;
}

/// A chat request without reasoning (the grammar holds from the first token), sampled at
/// temperature 1 with `seed`.
Json chat(uint64_t seed, int maxTokens = 800) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", "Write the record."}}}},
          {"temperature", 1.0},
          {"seed", seed},
          {"max_tokens", maxTokens},
          {"chat_template_kwargs", {{"enable_thinking", false}}}};
}

const char *kRecord = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string", "maxLength": 8},
    "kind": {"enum": ["alpha", "beta", 7, null]},
    "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1,
             "maxItems": 2},
    "next": {"anyOf": [{"$ref": "#/$defs/link"}, {"type": "null"}]}
  },
  "required": ["id", "kind", "tags"],
  "$defs": {"link": {"type": "object",
                     "properties": {"v": {"type": "integer"},
                                    "next": {"anyOf": [{"$ref": "#/$defs/link"},
                                                       {"type": "null"}]}},
                     "required": ["v", "next"]}}
})";

TEST(GrammarDecode, JsonSchemaRepliesParseAndValidate) {
  const Json schema = Json::parse(kRecord);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Json body = chat(seed);
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "record"}, {"schema", schema}, {"strict", true}}}};
    Json r = server().post("/v1/chat/completions", body);
    const Json &choice = r["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "stop") << r.dump();
    const std::string content = choice["message"]["content"];
    Json value = Json::parse(content, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << content;
    std::string why;
    EXPECT_TRUE(validates(value, schema, schema, why)) << why << " in " << content;
  }
}

TEST(GrammarDecode, JsonObjectAndGuidedJsonWithChoices) {
  // vLLM's guided_json with n = 2: each choice runs its own clone of the constraint.
  const Json schema = {
      {"type", "array"}, {"items", {{"enum", {"x", "yy", 3}}}}, {"minItems", 2}, {"maxItems", 4}};
  Json body = chat(11);
  body["guided_json"] = schema;
  body["n"] = 2;
  Json r = server().post("/v1/chat/completions", body);
  ASSERT_EQ(r["choices"].size(), 2u);
  for (const Json &choice : r["choices"]) {
    Json value = Json::parse(choice["message"]["content"].get<std::string>(), nullptr, false);
    std::string why;
    EXPECT_TRUE(validates(value, schema, schema, why)) << why << " in " << choice.dump();
  }
  Json object = chat(12, 200);
  object["response_format"] = {{"type", "json_object"}};
  r = server().post("/v1/chat/completions", object);
  // Any object may run past a small budget; when it stops, it is an object.
  if (r["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(
        Json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false)
            .is_object())
        << r.dump();
  }
}

TEST(GrammarDecode, RegexChoiceAndGrammarReplies) {
  const std::string pattern = "(ab|c[0-9]){1,3}-[a-z]{2,5}(!|\\?)";
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Json body = chat(seed);
    body["guided_regex"] = pattern;
    Json r = server().post("/v1/chat/completions", body);
    const std::string content = r["choices"][0]["message"]["content"];
    EXPECT_TRUE(std::regex_match(content, std::regex(pattern))) << content;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");

    Json pick = chat(seed);
    pick["structured_outputs"] = {{"choice", {"red", "green", "blue sky"}}};
    r = server().post("/v1/chat/completions", pick);
    const std::string picked = r["choices"][0]["message"]["content"];
    EXPECT_TRUE(picked == "red" || picked == "green" || picked == "blue sky") << picked;
  }
  // GBNF through /v1/completions.
  Json body = {{"model", "tiny"},
               {"prompt", "List:"},
               {"temperature", 1.0},
               {"seed", 5},
               {"max_tokens", 300},
               {"guided_grammar", "root ::= item (\", \" item){0,2} \".\"\n"
                                  "item ::= [a-z]{1,4} | [0-9]{2}"}};
  Json r = server().post("/v1/completions", body);
  const std::string text = r["choices"][0]["text"];
  EXPECT_TRUE(
      std::regex_match(text, std::regex("([a-z]{1,4}|[0-9]{2})(, ([a-z]{1,4}|[0-9]{2})){0,2}\\.")))
      << text;
}

TEST(GrammarDecode, TheStructureStartsAfterTheReasoning) {
  // Reasoning on: free text until </think>, which a bias brings soon, then the schema.
  const Json schema = {
      {"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}}};
  Json body = chat(3);
  body.erase("chat_template_kwargs");
  body["logit_bias"] = {{std::to_string(*server().tokenizer().tokenToId("</think>")), 8}};
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "o"}, {"schema", schema}}}};
  Json r = server().post("/v1/chat/completions", body);
  const Json &message = r["choices"][0]["message"];
  ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
  Json value = Json::parse(message["content"].get<std::string>(), nullptr, false);
  std::string why;
  EXPECT_TRUE(validates(value, schema, schema, why)) << why << " in " << message.dump();

  // A budget that ends inside the structure ends with "length".
  Json cut = chat(4, 3);
  cut["response_format"] = body["response_format"];
  r = server().post("/v1/chat/completions", cut);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
}

TEST(GrammarDecode, ForcedToolCallsHaveValidArguments) {
  const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                     "days": {"type": "integer"},
                     "note": {"type": "string", "maxLength": 6}},
      "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "time", "parameters": {"type": "object",
      "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
  ])");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Json body = chat(seed);
    body["tools"] = tools;
    body["tool_choice"] =
        seed % 2 ? Json("required") : Json{{"type", "function"}, {"function", {{"name", "time"}}}};
    body["parallel_tool_calls"] = false;
    Json r = server().post("/v1/chat/completions", body);
    const Json &choice = r["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
    const Json &call = choice["message"]["tool_calls"][0]["function"];
    const std::string name = call["name"];
    if (seed % 2 == 0) {
      EXPECT_EQ(name, "time");
    }
    const Json args = Json::parse(call["arguments"].get<std::string>());
    const Json &schema =
        name == "weather" ? tools[0]["function"]["parameters"] : tools[1]["function"]["parameters"];
    std::string why;
    EXPECT_TRUE(validates(args, schema, schema, why)) << why << " in " << call.dump();
  }
}

TEST(GrammarDecode, BadConstraintsAre400sNamingTheField) {
  Json body = chat(1);
  body["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "x"},
        {"schema", {{"type", "object"}, {"properties", {{"a", {{"type", "strng"}}}}}}}}}};
  Json r = server().post("/v1/chat/completions", body, 400);
  EXPECT_EQ(r["error"]["param"], "response_format.json_schema.schema.properties.a.type");

  body = chat(1);
  body["guided_regex"] = "(unclosed";
  r = server().post("/v1/chat/completions", body, 400);
  EXPECT_EQ(r["error"]["param"], "guided_regex");

  body = chat(1);
  Json huge = Json::array();
  for (int i = 0; i < 10000; ++i) {
    huge.push_back(i);
  }
  body["guided_json"] = {{"enum", huge}};
  r = server().post("/v1/chat/completions", body, 400);
  EXPECT_EQ(r["error"]["param"], "guided_json.enum");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("grammar.maxAlternatives"),
            std::string::npos);

  body = chat(1);
  body["guided_grammar"] = "root ::= root \"a\"";
  r = server().post("/v1/completions",
                    Json{{"model", "tiny"}, {"prompt", "x"}, {"guided_grammar", "root ::= root"}},
                    400);
  EXPECT_EQ(r["error"]["param"], "guided_grammar");

  body = chat(1);
  body["guided_choice"] = {"a"};
  body["guided_regex"] = "a";
  r = server().post("/v1/chat/completions", body, 400);
  EXPECT_EQ(r["error"]["code"], "invalid_value");

  body = chat(1);
  body["tool_choice"] = "required";
  r = server().post("/v1/chat/completions", body, 400);
  EXPECT_EQ(r["error"]["param"], "tool_choice");
}

} // namespace
} // namespace glm::server
