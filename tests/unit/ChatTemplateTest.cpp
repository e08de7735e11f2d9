// Tests for GLM-5.3 chat prompts: byte-equal to transformers' goldens, and the request rules.
#include "server/chat/ChatTemplate.h"
#include "server/chat/ChatPrompt.h"
#include "tools/synth/SynthTokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

const std::filesystem::path kTinyDir = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";
// The conversations the golden renders were made from (shared/tools, beside shared/fixtures).
const std::filesystem::path kConversations =
    std::filesystem::path(GLM_FIXTURES_DIR) / ".." / "tools" / "conversations.json";

Json readJson(const std::filesystem::path &path) {
  Expected<std::string> text = readChatFile(path);
  EXPECT_TRUE(text.ok()) << text.status().toString();
  if (!text.ok()) {
    return Json();
  }
  Expected<Json> json = parseJsonText(*text, path.string());
  EXPECT_TRUE(json.ok()) << json.status().toString();
  return json.ok() ? *json : Json();
}

/// The request a client would send for a golden case: the conversation's messages and tools,
/// its template kwargs as chat_template_kwargs, and the case's add_generation_prompt.
Json requestFor(const Json &conversation, bool addGenerationPrompt) {
  Json request = {{"messages", conversation["messages"]}};
  if (conversation.contains("tools")) {
    request["tools"] = conversation["tools"];
  }
  request["add_generation_prompt"] = addGenerationPrompt;
  request["chat_template_kwargs"] = conversation.value("kwargs", Json::object());
  return request;
}

class ChatTemplateGoldenTest : public ::testing::Test {
protected:
  void SetUp() override {
    golden_ = readJson(kTinyDir / "chat_template_golden.json");
    conversations_ = readJson(kConversations);
    Expected<ChatTokenizerConfig> tokenizer = loadChatTokenizerConfig(kTinyDir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().toString();
    tokenizer_ = *tokenizer;
    ASSERT_TRUE(golden_.contains("cases"));
    ASSERT_FALSE(golden_["cases"].empty());
  }

  /// Renders every golden case with `tmpl` (template variables only: no thinking-off rule, as
  /// transformers has none) and returns how many match byte for byte.
  size_t expectAllCasesMatch(const ChatTemplate &tmpl) {
    size_t matched = 0;
    for (const Json &c : golden_["cases"]) {
      const std::string name = c["conversation"].get<std::string>();
      const bool addGenerationPrompt = c["add_generation_prompt"].get<bool>();
      SCOPED_TRACE(name + (addGenerationPrompt ? " +generation prompt" : ""));
      EXPECT_EQ(Json(conversations_[name].value("kwargs", Json::object())), c["kwargs"]);
      Expected<Json> variables =
          chatTemplateVariables(requestFor(conversations_[name], addGenerationPrompt), tokenizer_);
      if (!variables.ok()) {
        ADD_FAILURE() << variables.status().toString();
        continue;
      }
      Expected<std::string> rendered = tmpl.render(*variables);
      if (!rendered.ok()) {
        ADD_FAILURE() << rendered.status().toString();
        continue;
      }
      EXPECT_EQ(*rendered, c["rendered"].get<std::string>());
      matched += *rendered == c["rendered"].get<std::string>() ? 1 : 0;
    }
    return matched;
  }

  Json golden_;
  Json conversations_;
  ChatTokenizerConfig tokenizer_;
};

TEST_F(ChatTemplateGoldenTest, CheckpointTemplateMatchesEveryGoldenCase) {
  Expected<ChatTemplate> tmpl = loadChatTemplate(kTinyDir);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  EXPECT_EQ(expectAllCasesMatch(*tmpl), golden_["cases"].size());
}

TEST_F(ChatTemplateGoldenTest, SynthTemplateMatchesEveryGoldenCase) {
  Expected<ChatTemplate> tmpl =
      ChatTemplate::parse(glm53::glm53ChatTemplate(), "synth/chat_template.jinja");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  EXPECT_EQ(expectAllCasesMatch(*tmpl), golden_["cases"].size());
}

TEST_F(ChatTemplateGoldenTest, RenderChatPromptMatchesWhenThinkingIsOn) {
  Expected<ChatTemplate> tmpl = loadChatTemplate(kTinyDir);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  for (const Json &c : golden_["cases"]) {
    const std::string name = c["conversation"].get<std::string>();
    const Json request = requestFor(conversations_[name], c["add_generation_prompt"].get<bool>());
    Expected<std::string> prompt = renderChatPrompt(*tmpl, request, tokenizer_);
    ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
    std::string expected = c["rendered"].get<std::string>();
    // The one golden case with reasoning_effort "none" turns thinking off.
    if (c["kwargs"].value("reasoning_effort", "") == "none" &&
        c["add_generation_prompt"].get<bool>()) {
      expected += "</think>";
    }
    EXPECT_EQ(*prompt, expected) << name;
  }
}

TEST_F(ChatTemplateGoldenTest, ToolCallArgumentsSentAsJsonStrings) {
  // OpenAI clients send function.arguments as a string; it must render like the object.
  Expected<ChatTemplate> tmpl = loadChatTemplate(kTinyDir);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  Json conversation = conversations_["tools"];
  for (Json &message : conversation["messages"]) {
    if (message.contains("tool_calls")) {
      for (Json &call : message["tool_calls"]) {
        call["function"]["arguments"] = call["function"]["arguments"].dump();
      }
    }
  }
  for (const Json &c : golden_["cases"]) {
    if (c["conversation"] != "tools") {
      continue;
    }
    Expected<std::string> prompt = renderChatPrompt(
        *tmpl, requestFor(conversation, c["add_generation_prompt"].get<bool>()), tokenizer_);
    ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
    EXPECT_EQ(*prompt, c["rendered"].get<std::string>());
  }
}

class ChatPromptTest : public ::testing::Test {
protected:
  void SetUp() override {
    Expected<ChatTemplate> tmpl = loadChatTemplate(kTinyDir);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
    tmpl_ = std::make_unique<ChatTemplate>(std::move(tmpl).value());
  }

  Expected<std::string> render(const Json &request) {
    return renderChatPrompt(*tmpl_, request, ChatTokenizerConfig{});
  }

  static Json hello() { return {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}; }

  std::unique_ptr<ChatTemplate> tmpl_;
};

TEST_F(ChatPromptTest, ThinkingOnByDefault) {
  Expected<std::string> prompt = render(hello());
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
}

TEST_F(ChatPromptTest, ReasoningEffortNoneClosesTheThinkBlock) {
  Json request = hello();
  request["reasoning_effort"] = "none";
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt,
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think></think>");
}

TEST_F(ChatPromptTest, EnableThinkingFalseClosesTheThinkBlock) {
  Json request = hello();
  request["reasoning_effort"] = "high";
  request["chat_template_kwargs"] = {{"enable_thinking", false}};
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt,
            "[gMASK]<sop><|system|>Reasoning Effort: High<|user|>Hi<|assistant|><think></think>");

  request["chat_template_kwargs"] = {{"thinking", false}};
  prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_TRUE(prompt->ends_with("<|assistant|><think></think>")) << *prompt;
}

/// OpenAI's effort levels the template does not know render as the nearest it does (the peers'
/// mapping), not as its fallback "Max"; top level or in chat_template_kwargs alike.
TEST_F(ChatPromptTest, ReasoningEffortLevelsMapToTheTemplates) {
  for (const auto &[level, shown] : {std::pair{"low", "Low"},
                                     {"minimal", "Low"},
                                     {"medium", "High"},
                                     {"high", "High"},
                                     {"xhigh", "Max"},
                                     {"max", "Max"}}) {
    Json request = hello();
    request["reasoning_effort"] = level;
    Expected<std::string> prompt = render(request);
    ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
    EXPECT_EQ(*prompt, strCat("[gMASK]<sop><|system|>Reasoning Effort: ", shown,
                              "<|user|>Hi<|assistant|><think>"))
        << level;
    Json viaKwargs = hello();
    viaKwargs["chat_template_kwargs"] = {{"reasoning_effort", level}};
    prompt = render(viaKwargs);
    ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
    EXPECT_NE(prompt->find(strCat("Reasoning Effort: ", shown, "<")), std::string::npos)
        << level << ": " << *prompt;
  }
}

TEST_F(ChatPromptTest, EnableThinkingTrueWinsOverEffortNone) {
  Json request = hello();
  request["reasoning_effort"] = "none";
  request["chat_template_kwargs"] = {{"enable_thinking", true}};
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_TRUE(prompt->ends_with("<|assistant|><think>")) << *prompt;
}

TEST_F(ChatPromptTest, RenderChatRequestSaysWhetherThinkingIsOff) {
  // The server learns both the prompt and where the reply starts from one rendering.
  Expected<ChatPrompt> on = renderChatRequest(*tmpl_, hello(), ChatTokenizerConfig{});
  ASSERT_TRUE(on.ok()) << on.status().toString();
  EXPECT_FALSE(on->thinkingDisabled);
  EXPECT_EQ(on->text, *render(hello()));

  Json request = hello();
  request["chat_template_kwargs"] = {{"enable_thinking", false}};
  Expected<ChatPrompt> off = renderChatRequest(*tmpl_, request, ChatTokenizerConfig{});
  ASSERT_TRUE(off.ok()) << off.status().toString();
  EXPECT_TRUE(off->thinkingDisabled);
  EXPECT_EQ(off->text, *render(request));
  EXPECT_TRUE(off->text.ends_with("<|assistant|><think></think>")) << off->text;
}

TEST_F(ChatPromptTest, ThinkingOffWithoutGenerationPromptChangesNothing) {
  Json request = hello();
  request["reasoning_effort"] = "none";
  request["add_generation_prompt"] = false;
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi");
}

TEST_F(ChatPromptTest, KwargsOverrideTopLevelReasoningEffort) {
  Json request = hello();
  request["reasoning_effort"] = "high";
  request["chat_template_kwargs"] = {{"reasoning_effort", "low"}};
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "[gMASK]<sop><|system|>Reasoning Effort: Low<|user|>Hi<|assistant|><think>");
}

TEST_F(ChatPromptTest, ReasoningFieldIsReasoningContent) {
  Json request = {{"messages",
                   {{{"role", "user"}, {"content", "Q"}},
                    {{"role", "assistant"}, {"content", "A"}, {"reasoning", "R"}},
                    {{"role", "user"}, {"content", "Q2"}}}}};
  Expected<std::string> prompt = render(request);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q<|assistant|><think>R"
                     "</think>A<|user|>Q2<|assistant|><think>");
}

Json assistantCall(Json arguments) {
  return {{"messages",
           {{{"role", "user"}, {"content", "Q"}},
            {{"role", "assistant"},
             {"content", nullptr},
             {"tool_calls",
              {{{"id", "call_1"},
                {"type", "function"},
                {"function", {{"name", "f"}, {"arguments", std::move(arguments)}}}}}}}}}};
}

TEST_F(ChatPromptTest, ToolCallArgumentsStringIsParsed) {
  Expected<std::string> prompt = render(assistantCall("{\"b\": [1, \"x\"], \"a\": \"raw\"}"));
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Q<|assistant|>"
                     "<think></think><tool_call>f<arg_key>b</arg_key><arg_value>[1, \"x\"]"
                     "</arg_value><arg_key>a</arg_key><arg_value>raw</arg_value></tool_call>"
                     "<|assistant|><think>");
}

TEST_F(ChatPromptTest, EmptyToolCallArgumentsStringIsNoArguments) {
  Expected<std::string> prompt = render(assistantCall(""));
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_NE(prompt->find("<tool_call>f</tool_call>"), std::string::npos) << *prompt;
}

TEST_F(ChatPromptTest, ToolCallArgumentsMustBeAnObject) {
  Expected<std::string> prompt = render(assistantCall("[1, 2]"));
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(prompt.status().message(),
            "messages[1].tool_calls[0].function.arguments must be a JSON object, got array");

  prompt = render(assistantCall("{\"a\": "));
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(prompt.status().message().starts_with(
      "messages[1].tool_calls[0].function.arguments: not valid JSON ("))
      << prompt.status().message();
}

TEST_F(ChatPromptTest, RequestShapeErrors) {
  Expected<std::string> prompt = render(Json{{"model", "x"}});
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().message(), "the request needs 'messages', an array of messages");

  prompt = render(Json{{"messages", {"hi"}}});
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().message(), "messages[0] must be an object");

  Json request = hello();
  request["chat_template_kwargs"] = {{"messages", Json::array()}};
  prompt = render(request);
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().message(),
            "chat_template_kwargs may not set 'messages' (it is a request field of its own)");

  request = hello();
  request["tools"] = "nope";
  prompt = render(request);
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().message(), "'tools' must be an array");
}

TEST(ChatTokenizerConfigTest, SpecialTokensBecomeVariables) {
  Expected<ChatTokenizerConfig> config = parseChatTokenizerConfig(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
          "pad_token": null, "chat_template": "ignored"})",
      "tokenizer_config.json");
  ASSERT_TRUE(config.ok()) << config.status().toString();
  Expected<ChatTemplate> tmpl =
      ChatTemplate::parse("{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}", "t");
  ASSERT_TRUE(tmpl.ok());
  Expected<std::string> prompt =
      renderChatPrompt(*tmpl, Json{{"messages", Json::array()}}, *config);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "<s>|</s>|False");

  // The fixture's tokenizer_config.json sets eos_token and pad_token.
  Expected<ChatTokenizerConfig> tiny = loadChatTokenizerConfig(kTinyDir);
  ASSERT_TRUE(tiny.ok()) << tiny.status().toString();
  Expected<ChatTemplate> eos = ChatTemplate::parse("{{ eos_token }}", "t");
  ASSERT_TRUE(eos.ok());
  prompt = renderChatPrompt(*eos, Json{{"messages", Json::array()}}, *tiny);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "<|endoftext|>");
}

TEST(ChatTokenizerConfigTest, BadConfigNamesTheFile) {
  Expected<ChatTokenizerConfig> config = parseChatTokenizerConfig("{", "dir/tokenizer_config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(config.status().message().starts_with("dir/tokenizer_config.json: not valid JSON"))
      << config.status().message();
}

/// A scratch model directory, removed afterwards.
class ScratchDir {
public:
  ScratchDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("glm_chat_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path &path() const { return path_; }
  void write(const std::string &name, const std::string &text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(LoadChatTemplateTest, UnsupportedConstructFailsAtLoadWithLineAndColumn) {
  // The checkpoint's template with an include on line 12.
  Expected<std::string> text = readChatFile(kTinyDir / "chat_template.jinja");
  ASSERT_TRUE(text.ok()) << text.status().toString();
  std::string edited;
  size_t line = 1;
  for (char c : *text) {
    edited += c;
    if (c == '\n' && ++line == 12) {
      edited += "{% include 'other.jinja' %}\n";
    }
  }
  ScratchDir dir;
  dir.write("chat_template.jinja", edited);
  Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), StatusCode::Unimplemented);
  EXPECT_EQ(tmpl.status().message(),
            (dir.path() / "chat_template.jinja").string() + ":12:4: unsupported tag 'include'");
}

TEST(LoadChatTemplateTest, FallsBackToTokenizerConfig) {
  ScratchDir dir;
  dir.write(
      "tokenizer_config.json",
      R"({"eos_token": "</s>", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"})");
  Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().toString();
  Expected<ChatTokenizerConfig> config = loadChatTokenizerConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.status().toString();
  Expected<std::string> prompt =
      renderChatPrompt(*tmpl, Json{{"messages", {{{"role", "user"}, {"content", "a"}}}}}, *config);
  ASSERT_TRUE(prompt.ok()) << prompt.status().toString();
  EXPECT_EQ(*prompt, "a</s>");
}

TEST(LoadChatTemplateTest, MissingTemplateIsNotFound) {
  ScratchDir dir;
  Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), StatusCode::NotFound);
  EXPECT_TRUE(tmpl.status().message().starts_with((dir.path() / "chat_template.jinja").string()))
      << tmpl.status().message();
}

TEST(LoadChatTemplateTest, NonRegularAndOversizeTemplatesAreRefusedByName) {
  {
    // A FIFO would block serve's start forever.
    ScratchDir dir;
    ASSERT_EQ(::mkfifo((dir.path() / "chat_template.jinja").c_str(), 0600), 0);
    Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
    ASSERT_FALSE(tmpl.ok());
    EXPECT_NE(tmpl.status().message().find("chat template is not a regular file (a FIFO)"),
              std::string::npos)
        << tmpl.status().message();
  }
  {
    ScratchDir dir;
    ASSERT_EQ(::mkfifo((dir.path() / "tokenizer_config.json").c_str(), 0600), 0);
    Expected<ChatTokenizerConfig> config = loadChatTokenizerConfig(dir.path());
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find("tokenizer config is not a regular file (a FIFO)"),
              std::string::npos)
        << config.status().message();
  }
  {
    ScratchDir dir;
    dir.write("chat_template.jinja", std::string((1u << 20) + 1, 'x'));
    Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
    ASSERT_FALSE(tmpl.ok());
    EXPECT_NE(tmpl.status().message().find("chat template is 1048577 bytes, more than the 1048576"),
              std::string::npos)
        << tmpl.status().message();
  }
}

TEST(LoadChatTemplateTest, HostileTemplateFailsAtLoadNotAtServeStart) {
  // 6000 nested parentheses crashed the parser (so `serve` died at start); now a clear error.
  ScratchDir dir;
  dir.write("chat_template.jinja",
            "{{ " + std::string(6000, '(') + "1" + std::string(6000, ')') + " }}");
  Expected<ChatTemplate> tmpl = loadChatTemplate(dir.path());
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), StatusCode::FormatError);
  EXPECT_NE(tmpl.status().message().find(
                "nested deeper than 128 levels (the template parser's nesting limit)"),
            std::string::npos)
      << tmpl.status().message();
}

TEST(ParseJsonTextTest, RefusesMalformedAndTooDeepDocumentsNamingTheSource) {
  Expected<Json> bad = parseJsonText("{\"messages\": [", "request.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("request.json: not valid JSON"), std::string::npos)
      << bad.status().message();
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  Expected<Json> tooDeep = parseJsonText(deep, "request.json");
  ASSERT_FALSE(tooDeep.ok());
  EXPECT_EQ(tooDeep.status().message(), "request.json: nests deeper than 64 levels");
  const std::string deepest = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(parseJsonText(deepest, "request.json").ok());
}

} // namespace
} // namespace glm::server
