// Fuzzes chat_template.jinja: ChatTemplate::parse, then rendering one of a fixed set of
// conversations through renderChatRequest, as `glmc serve` and `render-chat` do per request. One
// per input (picked by a hash of the template): a render may run to the interpreter's step budget
// (JinjaLimits.h, about a second in a release build, tens under ASan), so all of them per input
// would turn bounded templates into libFuzzer timeouts.
#include "server/chat/ChatPrompt.h"
#include "server/chat/ChatTemplate.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace {

using Json = nlohmann::ordered_json;

// The shapes of shared/tools/conversations.json (the golden renders): system prompts, several
// turns, reasoning, tool calls with object arguments and tool results, tools, content parts,
// template kwargs, multi-byte text.
constexpr std::string_view kRequests = R"([
 {"messages": [{"role": "user", "content": "Hello! Explain tensor parallelism briefly."}]},
 {"messages": [{"role": "system", "content": "You are a terse assistant."},
               {"role": "user", "content": "Write a Python fibonacci function."}],
  "reasoning_effort": "low", "add_generation_prompt": false},
 {"messages": [{"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "4", "reasoning_content": "2+2=4."},
               {"role": "user", "content": "And times 3?"}],
  "chat_template_kwargs": {"reasoning_effort": "high", "clear_thinking": true}},
 {"messages": [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "<think>greet back</think>  Hello there!  "},
               {"role": "user", "content": "Bye"}],
  "chat_template_kwargs": {"enable_thinking": false}},
 {"messages": [{"role": "user", "content": "What's the weather in Paris?"},
               {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                  "arguments": "{\"city\": \"Paris\", \"days\": 2, \"units\": [\"c\"]}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"},
             "days": {"type": "integer"}, "units": {"type": "array", "items": {"type": "string"}}},
             "required": ["city"]}}}]},
 {"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe "},
                                            {"type": "text", "text": "this picture."}]}],
  "reasoning_effort": "none"},
 {"messages": [{"role": "user", "content": "日本語で答えて: 🙂 naïve café — ½?\n\n  indented\tTab"}]}
])";

struct Fixed {
  std::vector<Json> requests;
  glm::server::ChatTokenizerConfig tokenizer;
};

const Fixed &fixed() {
  static const Fixed f = [] {
    Fixed out;
    for (const Json &r : Json::parse(kRequests)) {
      out.requests.push_back(r);
    }
    out.tokenizer.specialTokens = {{"eos_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"}};
    return out;
  }();
  return f;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const Fixed &f = fixed();
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    hash = (hash ^ data[i]) * 1099511628211ull;
  }
  const Json &request = f.requests[hash % f.requests.size()];
  // The parser and renderer recurse (within their bounds): see runWithStack.
  glm::fuzz::runWithStack(glm::fuzz::kReleaseLikeStack, [&] {
    glm::Expected<glm::server::ChatTemplate> parsed =
        glm::server::ChatTemplate::parse(text, "chat_template.jinja");
    if (!parsed.ok()) {
      return;
    }
    glm::Expected<glm::server::ChatPrompt> prompt =
        glm::server::renderChatRequest(*parsed, request, f.tokenizer);
    (void)prompt;
  });
  return 0;
}
