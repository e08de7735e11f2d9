// Tests for the OpenAI wire protocol: request validation, error bodies and response JSON.
#include "server/openai/Protocol.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

const ProtocolLimits kLimits{{"glm-5.3", "glm-alias"}, 4096};

constexpr std::string_view kChatBase =
    R"({"model": "glm-5.3", "messages": [{"role": "user", "content": "Hi"}]})";
constexpr std::string_view kCompletionBase = R"({"model": "glm-5.3", "prompt": "Once upon"})";

/// The base body with each field of `patch` (a JSON object) set, replacing the base's own.
std::string withFields(std::string_view base, std::string_view patch) {
  Json body = Json::parse(base);
  Json fields = Json::parse(patch); // named: items() must not outlive it
  for (auto &[key, value] : fields.items()) {
    body[key] = value;
  }
  return body.dump();
}

std::string without(std::string_view base, const std::string &key) {
  Json body = Json::parse(base);
  body.erase(key);
  return body.dump();
}

/// The error of a parse that must fail; its JSON must serialise.
template <typename Request> ApiError errorOf(const std::variant<Request, ApiError> &result) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(result)) << "the request was accepted";
  if (!std::holds_alternative<ApiError>(result)) {
    return ApiError{};
  }
  const ApiError &error = std::get<ApiError>(result);
  EXPECT_NO_THROW((void)error.toJson().dump());
  EXPECT_EQ(error.type, "invalid_request_error");
  return error;
}

template <typename Request> Request valueOf(const std::variant<Request, ApiError> &result) {
  if (const ApiError *error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << "refused: " << error->toJson().dump();
    return Request{};
  }
  return std::get<Request>(result);
}

ChatRequest parseChatOk(const std::string &body) {
  return valueOf(parseChatRequest(body, kLimits));
}
ApiError parseChatError(const std::string &body) {
  return errorOf(parseChatRequest(body, kLimits));
}
CompletionRequest parseCompletionOk(const std::string &body) {
  return valueOf(parseCompletionRequest(body, kLimits));
}
ApiError parseCompletionError(const std::string &body) {
  return errorOf(parseCompletionRequest(body, kLimits));
}

//===------------------------------------------------------------------------------------------===//
// Field validation, table-driven: every field with a wrong type, out of range, and its bounds.
//===------------------------------------------------------------------------------------------===//

struct FieldCase {
  const char *name;
  const char *patch; // fields set on the base body
  const char *param; // expected param; nullptr: the request is accepted
  const char *code;  // expected code
  int status = 400;
};

constexpr const char *kOk = nullptr;

const FieldCase kSharedCases[] = {
    // model
    {"ModelWrongType", R"({"model": 5})", "model", "invalid_type"},
    {"ModelNull", R"({"model": null})", "model", "missing_required_parameter"},
    {"ModelUnknown", R"({"model": "gpt-4o"})", "model", "model_not_found", 404},
    {"ModelAlias", R"({"model": "glm-alias"})", kOk, nullptr},
    // stream and stream_options
    {"StreamString", R"({"stream": "yes"})", "stream", "invalid_type"},
    {"StreamNumber", R"({"stream": 1})", "stream", "invalid_type"},
    {"StreamNull", R"({"stream": null})", kOk, nullptr},
    {"StreamOptionsWithoutStream", R"({"stream_options": {"include_usage": true}})",
     "stream_options", "invalid_value"},
    {"StreamOptionsWrongType", R"({"stream": true, "stream_options": 5})", "stream_options",
     "invalid_type"},
    {"IncludeUsageWrongType", R"({"stream": true, "stream_options": {"include_usage": "true"}})",
     "stream_options.include_usage", "invalid_type"},
    {"ContinuousUsageStats",
     R"({"stream": true, "stream_options": {"continuous_usage_stats": true}})",
     "stream_options.continuous_usage_stats", "unsupported_value"},
    // temperature
    {"TemperatureString", R"({"temperature": "1"})", "temperature", "invalid_type"},
    {"TemperatureBool", R"({"temperature": true})", "temperature", "invalid_type"},
    {"TemperatureNegative", R"({"temperature": -0.1})", "temperature", "invalid_value"},
    {"TemperatureAboveTwo", R"({"temperature": 2.01})", "temperature", "invalid_value"},
    {"TemperatureHuge", R"({"temperature": 1e308})", "temperature", "invalid_value"},
    {"TemperatureZero", R"({"temperature": 0})", kOk, nullptr},
    {"TemperatureTwo", R"({"temperature": 2})", kOk, nullptr},
    // top_p
    {"TopPString", R"({"top_p": "0.5"})", "top_p", "invalid_type"},
    {"TopPZero", R"({"top_p": 0})", "top_p", "invalid_value"},
    {"TopPAboveOne", R"({"top_p": 1.01})", "top_p", "invalid_value"},
    {"TopPTiny", R"({"top_p": 1e-9})", kOk, nullptr},
    {"TopPOne", R"({"top_p": 1})", kOk, nullptr},
    // top_k
    {"TopKString", R"({"top_k": "40"})", "top_k", "invalid_type"},
    {"TopKBool", R"({"top_k": true})", "top_k", "invalid_type"},
    {"TopKBelowMinusOne", R"({"top_k": -2})", "top_k", "invalid_value"},
    {"TopKFraction", R"({"top_k": 1.5})", "top_k", "invalid_value"},
    {"TopKMinusOne", R"({"top_k": -1})", kOk, nullptr},
    {"TopKIntegralFloat", R"({"top_k": 40.0})", kOk, nullptr},
    // min_p
    {"MinPString", R"({"min_p": "0"})", "min_p", "invalid_type"},
    {"MinPNegative", R"({"min_p": -0.01})", "min_p", "invalid_value"},
    {"MinPAboveOne", R"({"min_p": 1.5})", "min_p", "invalid_value"},
    {"MinPOne", R"({"min_p": 1})", kOk, nullptr},
    // seed
    {"SeedString", R"({"seed": "1"})", "seed", "invalid_type"},
    {"SeedNegative", R"({"seed": -1})", "seed", "invalid_value"},
    {"SeedFraction", R"({"seed": 1.5})", "seed", "invalid_value"},
    {"SeedBeyondUint64", R"({"seed": 18446744073709551616})", "seed", "invalid_value"},
    {"SeedMaxUint64", R"({"seed": 18446744073709551615})", kOk, nullptr},
    // max_tokens
    {"MaxTokensString", R"({"max_tokens": "10"})", "max_tokens", "invalid_type"},
    {"MaxTokensBool", R"({"max_tokens": false})", "max_tokens", "invalid_type"},
    {"MaxTokensZero", R"({"max_tokens": 0})", "max_tokens", "invalid_value"},
    {"MaxTokensNegative", R"({"max_tokens": -5})", "max_tokens", "invalid_value"},
    {"MaxTokensHugeFloat", R"({"max_tokens": 1e30})", "max_tokens", "invalid_value"},
    {"MaxTokensBeyondContext", R"({"max_tokens": 4097})", "max_tokens", "context_length_exceeded"},
    {"MaxTokensHuge", R"({"max_tokens": 9223372036854775807})", "max_tokens",
     "context_length_exceeded"},
    {"MaxTokensOne", R"({"max_tokens": 1})", kOk, nullptr},
    {"MaxTokensContext", R"({"max_tokens": 4096})", kOk, nullptr},
    // min_tokens
    {"MinTokensNegative", R"({"min_tokens": -1})", "min_tokens", "invalid_value"},
    {"MinTokensString", R"({"min_tokens": "1"})", "min_tokens", "invalid_type"},
    {"MinTokensAboveMax", R"({"max_tokens": 4, "min_tokens": 5})", "min_tokens", "invalid_value"},
    {"MinTokensEqualMax", R"({"max_tokens": 4, "min_tokens": 4})", kOk, nullptr},
    {"MinTokensZero", R"({"min_tokens": 0})", kOk, nullptr},
    // ignore_eos
    {"IgnoreEosNumber", R"({"ignore_eos": 1})", "ignore_eos", "invalid_type"},
    {"IgnoreEosTrue", R"({"ignore_eos": true})", kOk, nullptr},
    // draft (glmc: false decodes without speculative drafts)
    {"DraftNumber", R"({"draft": 0})", "draft", "invalid_type"},
    {"DraftString", R"({"draft": "false"})", "draft", "invalid_type"},
    {"DraftFalse", R"({"draft": false})", kOk, nullptr},
    {"DraftTrue", R"({"draft": true})", kOk, nullptr},
    // stop
    {"StopNumber", R"({"stop": 5})", "stop", "invalid_type"},
    {"StopEmptyString", R"({"stop": ""})", "stop", "invalid_value"},
    {"StopEmptyInArray", R"({"stop": ["a", ""]})", "stop[1]", "invalid_value"},
    {"StopNumberInArray", R"({"stop": [1]})", "stop[0]", "invalid_type"},
    {"StopNine", R"({"stop": ["1","2","3","4","5","6","7","8","9"]})", "stop", "invalid_value"},
    {"StopEight", R"({"stop": ["1","2","3","4","5","6","7","8"]})", kOk, nullptr},
    {"StopEmptyArray", R"({"stop": []})", kOk, nullptr},
    // n and best_of
    {"NTwo", R"({"n": 2})", kOk, nullptr},
    {"NMax", R"({"n": 128})", kOk, nullptr},
    {"NAboveMax", R"({"n": 129})", "n", "invalid_value"},
    {"NZero", R"({"n": 0})", "n", "invalid_value"},
    {"NNegative", R"({"n": -3})", "n", "invalid_value"},
    {"NFraction", R"({"n": 1.5})", "n", "invalid_value"},
    {"NString", R"({"n": "1"})", "n", "invalid_type"},
    {"NBool", R"({"n": true})", "n", "invalid_type"},
    {"NOne", R"({"n": 1})", kOk, nullptr},
    {"NOneFloat", R"({"n": 1.0})", kOk, nullptr},
    {"NNull", R"({"n": null})", kOk, nullptr},
    {"BestOfTwo", R"({"best_of": 2})", "best_of", "unsupported_value"},
    {"BestOfOne", R"({"best_of": 1, "n": 3})", kOk, nullptr},
    // response_format and constrained decoding: read here, compiled when prepared
    {"ResponseFormatJsonObject", R"({"response_format": {"type": "json_object"}})", kOk, nullptr},
    {"ResponseFormatJsonSchema",
     R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}})",
     kOk, nullptr},
    {"ResponseFormatUnknown", R"({"response_format": {"type": "yaml"}})", "response_format.type",
     "invalid_value"},
    {"ResponseFormatString", R"({"response_format": "text"})", "response_format", "invalid_type"},
    {"ResponseFormatNoType", R"({"response_format": {}})", "response_format.type",
     "missing_required_parameter"},
    {"ResponseFormatText", R"({"response_format": {"type": "text"}})", kOk, nullptr},
    {"GuidedJson", R"({"guided_json": {"type": "object"}})", kOk, nullptr},
    {"GuidedRegex", R"({"guided_regex": "a+"})", kOk, nullptr},
    {"GuidedRegexNumber", R"({"guided_regex": 3})", "guided_regex", "invalid_type"},
    {"GuidedChoice", R"({"guided_choice": ["a", "b"]})", kOk, nullptr},
    {"GuidedGrammar", R"({"guided_grammar": "root ::= \"a\""})", kOk, nullptr},
    {"StructuredOutputs", R"({"structured_outputs": {"regex": "a+"}})", kOk, nullptr},
    {"TwoConstraints", R"({"guided_regex": "a", "guided_choice": ["a"]})", "guided_choice",
     "invalid_value"},
    {"GuidedJsonNull", R"({"guided_json": null})", kOk, nullptr},
    // penalties
    {"FrequencyPenalty", R"({"frequency_penalty": 0.5})", kOk, nullptr},
    {"FrequencyPenaltyTwo", R"({"frequency_penalty": 2})", kOk, nullptr},
    {"FrequencyPenaltyMinusTwo", R"({"frequency_penalty": -2})", kOk, nullptr},
    {"FrequencyPenaltyAboveTwo", R"({"frequency_penalty": 2.01})", "frequency_penalty",
     "invalid_value"},
    {"FrequencyPenaltyHuge", R"({"frequency_penalty": 1e308})", "frequency_penalty",
     "invalid_value"},
    {"FrequencyPenaltyString", R"({"frequency_penalty": "0"})", "frequency_penalty",
     "invalid_type"},
    {"PresencePenalty", R"({"presence_penalty": -0.1})", kOk, nullptr},
    {"PresencePenaltyBelowMinusTwo", R"({"presence_penalty": -2.5})", "presence_penalty",
     "invalid_value"},
    {"PresencePenaltyBool", R"({"presence_penalty": true})", "presence_penalty", "invalid_type"},
    {"RepetitionPenalty", R"({"repetition_penalty": 1.1})", kOk, nullptr},
    {"RepetitionPenaltyBelowOne", R"({"repetition_penalty": 0.01})", kOk, nullptr},
    {"RepetitionPenaltyLarge", R"({"repetition_penalty": 10})", kOk, nullptr},
    {"RepetitionPenaltyOne", R"({"repetition_penalty": 1.0})", kOk, nullptr},
    {"RepetitionPenaltyZero", R"({"repetition_penalty": 0})", "repetition_penalty",
     "invalid_value"},
    {"RepetitionPenaltyNegative", R"({"repetition_penalty": -1})", "repetition_penalty",
     "invalid_value"},
    {"RepetitionPenaltyString", R"({"repetition_penalty": "1"})", "repetition_penalty",
     "invalid_type"},
    // logit_bias
    {"LogitBias", R"({"logit_bias": {"42": 10}})", kOk, nullptr},
    {"LogitBiasBounds", R"({"logit_bias": {"0": -100, "7": 100, "2147483647": 0.5}})", kOk,
     nullptr},
    {"LogitBiasEmpty", R"({"logit_bias": {}})", kOk, nullptr},
    {"LogitBiasNull", R"({"logit_bias": null})", kOk, nullptr},
    {"LogitBiasArray", R"({"logit_bias": []})", "logit_bias", "invalid_type"},
    {"LogitBiasString", R"({"logit_bias": "42"})", "logit_bias", "invalid_type"},
    {"LogitBiasAboveHundred", R"({"logit_bias": {"1": 100.5}})", "logit_bias", "invalid_value"},
    {"LogitBiasBelowMinusHundred", R"({"logit_bias": {"1": -101}})", "logit_bias", "invalid_value"},
    {"LogitBiasValueString", R"({"logit_bias": {"1": "5"}})", "logit_bias", "invalid_type"},
    {"LogitBiasValueNull", R"({"logit_bias": {"1": null}})", "logit_bias", "invalid_type"},
    {"LogitBiasValueObject", R"({"logit_bias": {"1": {}}})", "logit_bias", "invalid_type"},
    {"LogitBiasNegativeKey", R"({"logit_bias": {"-1": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasWordKey", R"({"logit_bias": {"hello": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasSignedKey", R"({"logit_bias": {"+5": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasSpacedKey", R"({"logit_bias": {" 5": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasTrailingJunkKey", R"({"logit_bias": {"5x": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasFractionKey", R"({"logit_bias": {"1.0": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasLeadingZeroKey", R"({"logit_bias": {"05": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasEmptyKey", R"({"logit_bias": {"": 1}})", "logit_bias", "invalid_value"},
    {"LogitBiasKeyBeyondInt32", R"({"logit_bias": {"2147483648": 1}})", "logit_bias",
     "invalid_value"},
    {"LogitBiasHugeKey", R"({"logit_bias": {"99999999999999999999": 1}})", "logit_bias",
     "invalid_value"},
    // token-level controls: only their defaults
    {"StopTokenIds", R"({"stop_token_ids": [7]})", "stop_token_ids", "unsupported_value"},
    {"StopTokenIdsEmpty", R"({"stop_token_ids": []})", kOk, nullptr},
    {"BadWords", R"({"bad_words": ["x"]})", "bad_words", "unsupported_value"},
    {"IncludeStopStr", R"({"include_stop_str_in_output": true})", "include_stop_str_in_output",
     "unsupported_value"},
    {"PromptLogprobs", R"({"prompt_logprobs": 1})", "prompt_logprobs", "unsupported_parameter"},
    {"TruncatePromptTokens", R"({"truncate_prompt_tokens": 10})", "truncate_prompt_tokens",
     "unsupported_parameter"},
    // fields we do not know are ignored
    {"UnknownFields", R"({"user": "u1", "metadata": {"a": "b"}, "store": false, "x_custom": [1]})",
     kOk, nullptr},
};

const FieldCase kChatCases[] = {
    // messages
    {"MessagesString", R"({"messages": "hi"})", "messages", "invalid_type"},
    {"MessagesEmpty", R"({"messages": []})", "messages", "invalid_value"},
    {"MessagesNull", R"({"messages": null})", "messages", "missing_required_parameter"},
    {"MessageNotObject", R"({"messages": [1]})", "messages[0]", "invalid_type"},
    {"MessageNoRole", R"({"messages": [{"content": "x"}]})", "messages[0].role",
     "missing_required_parameter"},
    {"MessageRoleNumber", R"({"messages": [{"role": 5, "content": "x"}]})", "messages[0].role",
     "invalid_type"},
    {"MessageRoleUnknown", R"({"messages": [{"role": "wizard", "content": "x"}]})",
     "messages[0].role", "invalid_value"},
    {"MessageNoContent", R"({"messages": [{"role": "user"}]})", "messages[0].content",
     "missing_required_parameter"},
    {"MessageContentNumber", R"({"messages": [{"role": "user", "content": 5}]})",
     "messages[0].content", "invalid_type"},
    {"MessageImagePart",
     R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
     "messages[0].content[0].type", "unsupported_value"},
    {"MessagePartNoText", R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
     "messages[0].content[0].text", "missing_required_parameter"},
    {"MessagePartNotObject", R"({"messages": [{"role": "user", "content": ["x"]}]})",
     "messages[0].content[0]", "invalid_type"},
    {"AssistantNullContentNoCalls",
     R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}]})",
     "messages[1].content", "missing_required_parameter"},
    {"UserWithToolCalls", R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
     "messages[0].tool_calls", "invalid_value"},
    {"ToolCallsNotArray",
     R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]})",
     "messages[0].tool_calls", "invalid_type"},
    {"ToolCallNoName",
     R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}]})",
     "messages[0].tool_calls[0].function.name", "missing_required_parameter"},
    {"ToolCallArgumentsNumber",
     R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": 5}}]}]})",
     "messages[0].tool_calls[0].function.arguments", "invalid_type"},
    {"MessageNameNumber", R"({"messages": [{"role": "user", "content": "x", "name": 1}]})",
     "messages[0].name", "invalid_type"},
    {"AllRolesAndShapes",
     R"({"messages": [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "reasoning_content": "r",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": [{"type": "text", "text": "43"}]}]})",
     kOk, nullptr},
    // tools
    {"ToolsObject", R"({"tools": {}})", "tools", "invalid_type"},
    {"ToolNotObject", R"({"tools": ["f"]})", "tools[0]", "invalid_type"},
    {"ToolTypeRetrieval", R"({"tools": [{"type": "retrieval"}]})", "tools[0].type",
     "unsupported_value"},
    {"ToolNoType", R"({"tools": [{"function": {"name": "f"}}]})", "tools[0].type",
     "missing_required_parameter"},
    {"ToolNoFunction", R"({"tools": [{"type": "function"}]})", "tools[0].function",
     "missing_required_parameter"},
    {"ToolNoName", R"({"tools": [{"type": "function", "function": {}}]})", "tools[0].function.name",
     "missing_required_parameter"},
    {"ToolNameWithSpace",
     R"({"tools": [{"type": "function", "function": {"name": "get weather"}}]})",
     "tools[0].function.name", "invalid_value"},
    {"ToolNameWithTag", R"({"tools": [{"type": "function", "function": {"name": "a<b"}}]})",
     "tools[0].function.name", "invalid_value"},
    {"ToolNameDuplicate",
     R"({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})",
     "tools[1].function.name", "invalid_value"},
    {"ToolParametersArray",
     R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]})",
     "tools[0].function.parameters", "invalid_type"},
    {"ToolStrictString",
     R"({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]})",
     "tools[0].function.strict", "invalid_type"},
    {"ToolsEmpty", R"({"tools": []})", kOk, nullptr},
    {"ToolsOk",
     R"({"tools": [{"type": "function", "function": {"name": "mcp.get_weather-v2", "description": "d", "strict": true,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})",
     kOk, nullptr},
    // tool_choice
    {"ToolChoiceAuto", R"({"tool_choice": "auto"})", kOk, nullptr},
    {"ToolChoiceNone", R"({"tool_choice": "none"})", kOk, nullptr},
    {"ToolChoiceRequiredWithoutTools", R"({"tool_choice": "required"})", "tool_choice",
     "invalid_value"},
    {"ToolChoiceNamedWithoutTools",
     R"({"tool_choice": {"type": "function", "function": {"name": "f"}}})",
     "tool_choice.function.name", "invalid_value"},
    {"ToolChoiceUnknown", R"({"tool_choice": "sometimes"})", "tool_choice", "invalid_value"},
    {"ToolChoiceNumber", R"({"tool_choice": 1})", "tool_choice", "invalid_type"},
    // max_completion_tokens
    {"MaxCompletionTokensZero", R"({"max_completion_tokens": 0})", "max_completion_tokens",
     "invalid_value"},
    {"MaxCompletionTokensBeyondContext", R"({"max_completion_tokens": 4097})",
     "max_completion_tokens", "context_length_exceeded"},
    {"MaxCompletionTokensString", R"({"max_completion_tokens": "5"})", "max_completion_tokens",
     "invalid_type"},
    {"MinTokensAboveMaxCompletion",
     R"({"max_tokens": 100, "max_completion_tokens": 4, "min_tokens": 5})", "min_tokens",
     "invalid_value"},
    // logprobs and top_logprobs
    {"LogprobsTrue", R"({"logprobs": true})", kOk, nullptr},
    {"LogprobsFalse", R"({"logprobs": false})", kOk, nullptr},
    {"LogprobsString", R"({"logprobs": "true"})", "logprobs", "invalid_type"},
    {"LogprobsNumber", R"({"logprobs": 1})", "logprobs", "invalid_type"},
    {"TopLogprobs", R"({"logprobs": true, "top_logprobs": 5})", kOk, nullptr},
    {"TopLogprobsTwenty", R"({"logprobs": true, "top_logprobs": 20})", kOk, nullptr},
    {"TopLogprobsZero", R"({"top_logprobs": 0})", kOk, nullptr},
    {"TopLogprobsNull", R"({"logprobs": true, "top_logprobs": null})", kOk, nullptr},
    {"TopLogprobsWithoutLogprobs", R"({"top_logprobs": 5})", "top_logprobs", "invalid_value"},
    {"TopLogprobsLogprobsFalse", R"({"logprobs": false, "top_logprobs": 1})", "top_logprobs",
     "invalid_value"},
    {"TopLogprobsOutOfRange", R"({"logprobs": true, "top_logprobs": 21})", "top_logprobs",
     "invalid_value"},
    {"TopLogprobsNegative", R"({"logprobs": true, "top_logprobs": -1})", "top_logprobs",
     "invalid_value"},
    {"TopLogprobsFraction", R"({"logprobs": true, "top_logprobs": 2.5})", "top_logprobs",
     "invalid_value"},
    {"TopLogprobsString", R"({"logprobs": true, "top_logprobs": "5"})", "top_logprobs",
     "invalid_type"},
    // chat extras
    {"ReasoningEffortHigh", R"({"reasoning_effort": "high"})", kOk, nullptr},
    {"ReasoningEffortUnknown", R"({"reasoning_effort": "extreme"})", "reasoning_effort",
     "invalid_value"},
    {"ReasoningEffortNumber", R"({"reasoning_effort": 5})", "reasoning_effort", "invalid_type"},
    {"ChatTemplateKwargsArray", R"({"chat_template_kwargs": []})", "chat_template_kwargs",
     "invalid_type"},
    {"ChatTemplateKwargs", R"({"chat_template_kwargs": {"enable_thinking": false}})", kOk, nullptr},
    {"AddGenerationPromptString", R"({"add_generation_prompt": "no"})", "add_generation_prompt",
     "invalid_type"},
    {"ParallelToolCalls", R"({"parallel_tool_calls": false})", kOk, nullptr},
    {"ChatEcho", R"({"echo": true})", "echo", "unsupported_value"},
    {"ChatTemplate", R"({"chat_template": "{{ x }}"})", "chat_template", "unsupported_parameter"},
    {"ContinueFinalMessage", R"({"continue_final_message": true})", "continue_final_message",
     "unsupported_value"},
    {"AudioModality", R"({"modalities": ["text", "audio"]})", "modalities", "unsupported_value"},
    {"TextModality", R"({"modalities": ["text"]})", kOk, nullptr},
    {"WebSearch", R"({"web_search_options": {}})", "web_search_options", "unsupported_parameter"},
};

const FieldCase kCompletionCases[] = {
    {"PromptNumber", R"({"prompt": 5})", "prompt", "invalid_type"},
    {"PromptNull", R"({"prompt": null})", "prompt", "missing_required_parameter"},
    {"PromptEmptyString", R"({"prompt": ""})", "prompt", "invalid_value"},
    {"PromptEmptyArray", R"({"prompt": []})", "prompt", "invalid_value"},
    {"PromptBatchStrings", R"({"prompt": ["a", "b"]})", "prompt", "unsupported_value"},
    {"PromptBatchIds", R"({"prompt": [[1], [2]]})", "prompt", "unsupported_value"},
    {"PromptMixed", R"({"prompt": [1, "a"]})", "prompt[1]", "invalid_type"},
    {"PromptBoolId", R"({"prompt": [1, true]})", "prompt[1]", "invalid_type"},
    {"PromptNegativeId", R"({"prompt": [-1]})", "prompt[0]", "invalid_value"},
    {"PromptIdBeyondInt32", R"({"prompt": [2147483648]})", "prompt[0]", "invalid_value"},
    {"PromptFractionalId", R"({"prompt": [1.5]})", "prompt[0]", "invalid_value"},
    {"PromptObjectInArray", R"({"prompt": [{}]})", "prompt[0]", "invalid_type"},
    {"PromptInnerEmpty", R"({"prompt": [[]]})", "prompt[0]", "invalid_value"},
    {"EchoString", R"({"echo": "yes"})", "echo", "invalid_type"},
    {"EchoTrue", R"({"echo": true})", kOk, nullptr},
    // logprobs: a count of alternatives
    {"LogprobsZero", R"({"logprobs": 0})", kOk, nullptr},
    {"LogprobsTwenty", R"({"logprobs": 20})", kOk, nullptr},
    {"LogprobsIntegralFloat", R"({"logprobs": 3.0})", kOk, nullptr},
    {"LogprobsNull", R"({"logprobs": null})", kOk, nullptr},
    {"LogprobsFalse", R"({"logprobs": false})", kOk, nullptr},
    {"LogprobsAboveTwenty", R"({"logprobs": 21})", "logprobs", "invalid_value"},
    {"LogprobsNegative", R"({"logprobs": -1})", "logprobs", "invalid_value"},
    {"LogprobsFraction", R"({"logprobs": 1.5})", "logprobs", "invalid_value"},
    {"LogprobsTrue", R"({"logprobs": true})", "logprobs", "invalid_type"},
    {"LogprobsString", R"({"logprobs": "1"})", "logprobs", "invalid_type"},
    // echo with logprobs would need the prompt's logprobs
    {"EchoWithLogprobs", R"({"echo": true, "logprobs": 0})", "echo", "unsupported_value"},
    {"EchoWithNullLogprobs", R"({"echo": true, "logprobs": null})", kOk, nullptr},
    {"Suffix", R"({"suffix": "end"})", "suffix", "unsupported_value"},
    {"SuffixEmpty", R"({"suffix": ""})", kOk, nullptr},
    {"SuffixNumber", R"({"suffix": 1})", "suffix", "invalid_type"},
};

void checkCase(const FieldCase &c, const std::variant<ChatRequest, ApiError> &result) {
  if (!c.param) {
    valueOf(result);
    return;
  }
  ApiError error = errorOf(result);
  EXPECT_EQ(error.status, c.status);
  EXPECT_EQ(error.param.value_or("<none>"), c.param);
  EXPECT_EQ(error.code, c.code);
  EXPECT_FALSE(error.message.empty());
}

void checkCase(const FieldCase &c, const std::variant<CompletionRequest, ApiError> &result) {
  if (!c.param) {
    valueOf(result);
    return;
  }
  ApiError error = errorOf(result);
  EXPECT_EQ(error.status, c.status);
  EXPECT_EQ(error.param.value_or("<none>"), c.param);
  EXPECT_EQ(error.code, c.code);
  EXPECT_FALSE(error.message.empty());
}

std::string caseName(const ::testing::TestParamInfo<FieldCase> &info) { return info.param.name; }

class SharedFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(SharedFieldTest, Chat) {
  const FieldCase &c = GetParam();
  checkCase(c, parseChatRequest(withFields(kChatBase, c.patch), kLimits));
}

TEST_P(SharedFieldTest, Completion) {
  const FieldCase &c = GetParam();
  checkCase(c, parseCompletionRequest(withFields(kCompletionBase, c.patch), kLimits));
}

INSTANTIATE_TEST_SUITE_P(Protocol, SharedFieldTest, ::testing::ValuesIn(kSharedCases), caseName);

class ChatFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(ChatFieldTest, Validates) {
  const FieldCase &c = GetParam();
  checkCase(c, parseChatRequest(withFields(kChatBase, c.patch), kLimits));
}

INSTANTIATE_TEST_SUITE_P(Protocol, ChatFieldTest, ::testing::ValuesIn(kChatCases), caseName);

class CompletionFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(CompletionFieldTest, Validates) {
  const FieldCase &c = GetParam();
  checkCase(c, parseCompletionRequest(withFields(kCompletionBase, c.patch), kLimits));
}

INSTANTIATE_TEST_SUITE_P(Protocol, CompletionFieldTest, ::testing::ValuesIn(kCompletionCases),
                         caseName);

//===------------------------------------------------------------------------------------------===//
// Required fields, limits and accepted values
//===------------------------------------------------------------------------------------------===//

TEST(ProtocolRequestTest, MissingRequiredFields) {
  ApiError noModel = parseChatError(without(kChatBase, "model"));
  EXPECT_EQ(noModel.param, "model");
  EXPECT_EQ(noModel.code, "missing_required_parameter");
  ApiError noMessages = parseChatError(without(kChatBase, "messages"));
  EXPECT_EQ(noMessages.param, "messages");
  EXPECT_EQ(noMessages.code, "missing_required_parameter");
  ApiError noPrompt = parseCompletionError(without(kCompletionBase, "prompt"));
  EXPECT_EQ(noPrompt.param, "prompt");
  EXPECT_EQ(noPrompt.code, "missing_required_parameter");
}

TEST(ProtocolRequestTest, ModelNotFoundIs404WithOpenAIShape) {
  ApiError error = parseChatError(withFields(kChatBase, R"({"model": "gpt-4o"})"));
  EXPECT_EQ(error.status, 404);
  EXPECT_EQ(error.toJson().dump(),
            R"({"error":{"message":"The model `gpt-4o` does not exist.",)"
            R"("type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  // Checked before the rest of the body.
  EXPECT_EQ(parseCompletionError(R"({"model": "x", "prompt": 5})").status, 404);
}

TEST(ProtocolRequestTest, ModelNotFoundBoundsTheEchoedName) {
  Json body = Json::parse(kChatBase);
  body["model"] = std::string(100000, 'm');
  ApiError error = parseChatError(body.dump());
  EXPECT_EQ(error.status, 404);
  EXPECT_LT(error.message.size(), 400u);
}

TEST(ProtocolRequestTest, SamplingControlsAreRead) {
  for (std::string_view base : {kChatBase, kCompletionBase}) {
    const std::string body = withFields(base, R"({"n": 3, "presence_penalty": 0.5,
        "frequency_penalty": -1.25, "repetition_penalty": 1.2,
        "logit_bias": {"42": 10, "7": -100, "0": 0.5}})");
    const SamplingOptions sampling =
        base == kChatBase ? parseChatOk(body).sampling : parseCompletionOk(body).sampling;
    EXPECT_EQ(sampling.n, 3);
    EXPECT_EQ(sampling.presencePenalty, 0.5);
    EXPECT_EQ(sampling.frequencyPenalty, -1.25);
    EXPECT_EQ(sampling.repetitionPenalty, 1.2);
    // In the body's order.
    EXPECT_EQ(sampling.logitBias,
              (std::vector<std::pair<int32_t, double>>{{42, 10.0}, {7, -100.0}, {0, 0.5}}));
  }
}

TEST(ProtocolRequestTest, LogprobsAreRead) {
  EXPECT_EQ(parseChatOk(std::string(kChatBase)).sampling.logprobs, -1);
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"logprobs": false})")).sampling.logprobs, -1);
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"top_logprobs": 0})")).sampling.logprobs, -1);
  // logprobs alone: the sampled token's only.
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"logprobs": true})")).sampling.logprobs, 0);
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"logprobs": true, "top_logprobs": 7})"))
                .sampling.logprobs,
            7);
  EXPECT_EQ(parseCompletionOk(std::string(kCompletionBase)).sampling.logprobs, -1);
  EXPECT_EQ(
      parseCompletionOk(withFields(kCompletionBase, R"({"logprobs": false})")).sampling.logprobs,
      -1);
  EXPECT_EQ(parseCompletionOk(withFields(kCompletionBase, R"({"logprobs": 0})")).sampling.logprobs,
            0);
  EXPECT_EQ(parseCompletionOk(withFields(kCompletionBase, R"({"logprobs": 20})")).sampling.logprobs,
            20);
}

TEST(ProtocolRequestTest, LogitBiasHoldsAtMost300Tokens) {
  Json body = Json::parse(kChatBase);
  body["logit_bias"] = Json::object();
  for (int i = 0; i < 300; ++i) {
    body["logit_bias"][std::to_string(i)] = -1;
  }
  EXPECT_EQ(parseChatOk(body.dump()).sampling.logitBias.size(), 300u);
  body["logit_bias"]["300"] = -1;
  ApiError error = parseChatError(body.dump());
  EXPECT_EQ(error.param, "logit_bias");
  EXPECT_EQ(error.code, "invalid_value");
  EXPECT_EQ(error.message, "Invalid 'logit_bias': at most 300 tokens may be biased, got 301.");
}

TEST(ProtocolRequestTest, NewFieldsMessages) {
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"n": 0})")).message,
            "Invalid 'n': must be between 1 and 128, got 0.");
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"top_logprobs": 2})")).message,
            "Invalid 'top_logprobs': 'logprobs' must be true to use 'top_logprobs'.");
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"presence_penalty": 3})")).message,
            "Invalid 'presence_penalty': must be between -2 and 2, got 3.");
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"repetition_penalty": 0})")).message,
            "Invalid 'repetition_penalty': must be greater than 0, got 0.");
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"logit_bias": {"9": 101}})")).message,
            "Invalid 'logit_bias': the bias of token 9 must be between -100 and 100, got 101.");
  EXPECT_EQ(parseChatError(withFields(kChatBase, R"({"logit_bias": {"9": "x"}})")).message,
            "Invalid type for 'logit_bias': expected a number as the bias of token 9, but got a "
            "string instead.");
  // A bad key is not quoted back: it comes from the body.
  ApiError key = parseChatError(withFields(kChatBase, R"({"logit_bias": {"<script>": 1}})"));
  EXPECT_EQ(key.message,
            "Invalid 'logit_bias': keys must be token ids, integers from 0 written in decimal.");
  ApiError echo =
      parseCompletionError(withFields(kCompletionBase, R"({"echo": true, "logprobs": 2})"));
  EXPECT_NE(echo.message.find("prompt logprobs are not supported"), std::string::npos)
      << echo.message;
}

TEST(ProtocolRequestTest, TooManyTools) {
  Json body = Json::parse(kChatBase);
  body["tools"] = Json::array();
  for (int i = 0; i < 129; ++i) {
    body["tools"].push_back(
        {{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  }
  ApiError error = parseChatError(body.dump());
  EXPECT_EQ(error.param, "tools");
  EXPECT_EQ(error.code, "invalid_value");
  body["tools"].erase(body["tools"].size() - 1);
  parseChatOk(body.dump());
}

TEST(ProtocolRequestTest, LongStopStringIsRefused) {
  Json body = Json::parse(kChatBase);
  body["stop"] = std::string(1025, 's');
  EXPECT_EQ(parseChatError(body.dump()).param, "stop");
  body["stop"] = Json::array({std::string(1024, 's')});
  EXPECT_EQ(parseChatOk(body.dump()).sampling.stop.size(), 1u);
}

TEST(ProtocolRequestTest, ChatDefaults) {
  ChatRequest request = parseChatOk(std::string(kChatBase));
  EXPECT_EQ(request.model, "glm-5.3");
  EXPECT_FALSE(request.stream);
  EXPECT_FALSE(request.includeUsage);
  EXPECT_TRUE(request.tools.is_null());
  EXPECT_EQ(request.sampling.temperature, 1.0);
  EXPECT_EQ(request.sampling.topP, 1.0);
  EXPECT_EQ(request.sampling.topK, 0);
  EXPECT_EQ(request.sampling.minP, 0.0);
  EXPECT_FALSE(request.sampling.seed.has_value());
  EXPECT_FALSE(request.sampling.maxTokens.has_value());
  EXPECT_EQ(request.sampling.minTokens, 0);
  EXPECT_FALSE(request.sampling.ignoreEos);
  EXPECT_TRUE(request.sampling.draft);
  EXPECT_TRUE(request.sampling.stop.empty());
  EXPECT_EQ(request.sampling.presencePenalty, 0.0);
  EXPECT_EQ(request.sampling.frequencyPenalty, 0.0);
  EXPECT_EQ(request.sampling.repetitionPenalty, 1.0);
  EXPECT_TRUE(request.sampling.logitBias.empty());
  EXPECT_EQ(request.sampling.n, 1);
  EXPECT_EQ(request.sampling.logprobs, -1);
  EXPECT_EQ(request.body.dump(), Json::parse(kChatBase).dump());
}

TEST(ProtocolRequestTest, ChatFieldsAreRead) {
  ChatRequest request = parseChatOk(withFields(kChatBase, R"({
      "model": "glm-alias", "stream": true, "stream_options": {"include_usage": true},
      "temperature": 0.6, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "seed": 18446744073709551615,
      "max_tokens": 100, "min_tokens": 3, "ignore_eos": true, "draft": false,
      "stop": ["</s>", "\n\n"],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                 "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}}],
      "tool_choice": "auto"})"));
  EXPECT_EQ(request.model, "glm-alias");
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.includeUsage);
  EXPECT_EQ(request.sampling.temperature, 0.6);
  EXPECT_EQ(request.sampling.topP, 0.95);
  EXPECT_EQ(request.sampling.topK, 40);
  EXPECT_EQ(request.sampling.minP, 0.05);
  EXPECT_EQ(request.sampling.seed, std::optional<uint64_t>(18446744073709551615ull));
  EXPECT_EQ(request.sampling.maxTokens, std::optional<int64_t>(100));
  EXPECT_EQ(request.sampling.minTokens, 3);
  EXPECT_TRUE(request.sampling.ignoreEos);
  EXPECT_FALSE(request.sampling.draft);
  EXPECT_EQ(request.sampling.stop, (std::vector<std::string>{"</s>", "\n\n"}));
  // The tools keep their key order (the template renders the schemas as written).
  EXPECT_EQ(request.tools.dump(),
            R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
            R"("properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}}])");
  EXPECT_EQ(request.body["tools"], request.tools);
}

TEST(ProtocolRequestTest, IncludeUsageFalseAndTopKOff) {
  ChatRequest request = parseChatOk(withFields(
      kChatBase, R"({"stream": true, "stream_options": {"include_usage": false}, "top_k": -1})"));
  EXPECT_TRUE(request.stream);
  EXPECT_FALSE(request.includeUsage);
  EXPECT_EQ(request.sampling.topK, 0);
}

TEST(ProtocolRequestTest, StopAsStringOrArray) {
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"stop": "END"})")).sampling.stop,
            (std::vector<std::string>{"END"}));
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"stop": ["a", "b"]})")).sampling.stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parseChatOk(withFields(kChatBase, R"({"stop": null})")).sampling.stop.empty());
  EXPECT_EQ(parseCompletionOk(withFields(kCompletionBase, R"({"stop": "\n"})")).sampling.stop,
            (std::vector<std::string>{"\n"}));
}

TEST(ProtocolRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"max_tokens": 10, "max_completion_tokens": 20})"))
                .sampling.maxTokens,
            std::optional<int64_t>(20));
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"max_completion_tokens": 20, "max_tokens": 30})"))
                .sampling.maxTokens,
            std::optional<int64_t>(20));
  EXPECT_EQ(parseChatOk(withFields(kChatBase, R"({"max_tokens": 10})")).sampling.maxTokens,
            std::optional<int64_t>(10));
  EXPECT_EQ(
      parseChatOk(withFields(kChatBase, R"({"max_completion_tokens": 7, "max_tokens": null})"))
          .sampling.maxTokens,
      std::optional<int64_t>(7));
  // Both are validated, even the one that loses.
  EXPECT_EQ(
      parseChatError(withFields(kChatBase, R"({"max_tokens": 0, "max_completion_tokens": 5})"))
          .param,
      "max_tokens");
  // The legacy endpoint has max_tokens only.
  EXPECT_EQ(parseCompletionOk(
                withFields(kCompletionBase, R"({"max_tokens": 10, "max_completion_tokens": 20})"))
                .sampling.maxTokens,
            std::optional<int64_t>(10));
}

TEST(ProtocolRequestTest, MaxTokensBeyondContextMessage) {
  ApiError error = parseChatError(withFields(kChatBase, R"({"max_tokens": 5000})"));
  EXPECT_EQ(error.code, "context_length_exceeded");
  EXPECT_EQ(error.message.rfind("This model's maximum context length is 4096 tokens.", 0), 0u)
      << error.message;
}

TEST(ProtocolRequestTest, ZeroMaxContextIsUnchecked) {
  ProtocolLimits limits{{"glm-5.3"}, 0};
  auto result = parseChatRequest(withFields(kChatBase, R"({"max_tokens": 1000000})"), limits);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(result));
  EXPECT_EQ(std::get<ChatRequest>(result).sampling.maxTokens, std::optional<int64_t>(1000000));
}

TEST(ProtocolRequestTest, ToolChoiceNoneKeepsToolsForTheTemplateOnly) {
  ChatRequest request = parseChatOk(withFields(
      kChatBase,
      R"({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})"));
  EXPECT_TRUE(request.tools.is_null());
  EXPECT_TRUE(request.body["tools"].is_array());
  ChatRequest autoRequest = parseChatOk(
      withFields(kChatBase, R"({"tools": [{"type": "function", "function": {"name": "f"}}]})"));
  EXPECT_EQ(autoRequest.tools.size(), 1u);
  EXPECT_TRUE(parseChatOk(withFields(kChatBase, R"({"tools": []})")).tools.is_null());
}

TEST(ProtocolRequestTest, CompletionPromptForms) {
  CompletionRequest text = parseCompletionOk(std::string(kCompletionBase));
  EXPECT_EQ(text.prompt, "Once upon");
  EXPECT_TRUE(text.promptIds.empty());

  CompletionRequest ids =
      parseCompletionOk(withFields(kCompletionBase, R"({"prompt": [1, 2, 2147483647]})"));
  EXPECT_TRUE(ids.prompt.empty());
  EXPECT_EQ(ids.promptIds, (std::vector<int32_t>{1, 2, 2147483647}));

  CompletionRequest oneString =
      parseCompletionOk(withFields(kCompletionBase, R"({"prompt": ["a time"]})"));
  EXPECT_EQ(oneString.prompt, "a time");
  EXPECT_TRUE(oneString.promptIds.empty());

  CompletionRequest oneIdList =
      parseCompletionOk(withFields(kCompletionBase, R"({"prompt": [[5, 6]]})"));
  EXPECT_EQ(oneIdList.promptIds, (std::vector<int32_t>{5, 6}));

  CompletionRequest fields = parseCompletionOk(withFields(
      kCompletionBase,
      R"({"echo": true, "stream": true, "stream_options": {"include_usage": true}, "seed": 7})"));
  EXPECT_TRUE(fields.echo);
  EXPECT_TRUE(fields.stream);
  EXPECT_TRUE(fields.includeUsage);
  EXPECT_EQ(fields.sampling.seed, std::optional<uint64_t>(7));

  ApiError batch = parseCompletionError(withFields(kCompletionBase, R"({"prompt": ["a", "b"]})"));
  EXPECT_NE(batch.message.find("batched prompts are not supported"), std::string::npos);
}

//===------------------------------------------------------------------------------------------===//
// Malformed bodies
//===------------------------------------------------------------------------------------------===//

ApiError bodyError(std::string_view body) {
  ApiError error = errorOf(parseChatRequest(body, kLimits));
  EXPECT_EQ(error.status, 400);
  EXPECT_FALSE(error.param.has_value());
  // Parse errors never quote the body back.
  EXPECT_LT(error.message.size(), 300u);
  return error;
}

TEST(ProtocolMalformedTest, NotJson) {
  EXPECT_EQ(bodyError("").code, "invalid_json");
  EXPECT_EQ(bodyError("{").code, "invalid_json");
  EXPECT_EQ(bodyError("hello").code, "invalid_json");
  EXPECT_EQ(bodyError("{} trailing").code, "invalid_json");
  EXPECT_EQ(bodyError(R"({"model": NaN})").code, "invalid_json");
  EXPECT_EQ(bodyError(R"({"model": Infinity})").code, "invalid_json");
}

TEST(ProtocolMalformedTest, TruncatedBodyGivesBytePosition) {
  std::string body(kChatBase);
  body.resize(30);
  ApiError error = bodyError(body);
  EXPECT_EQ(error.code, "invalid_json");
  // Positions count from 1, as nlohmann's: the end of 30 bytes is byte 31.
  EXPECT_NE(error.message.find("at byte 31"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("missing closing quote"), std::string::npos) << error.message;
  ApiError atValue = bodyError(R"({"model": "glm-5.3", )");
  EXPECT_NE(atValue.message.find("unexpected end of input"), std::string::npos) << atValue.message;
}

TEST(ProtocolMalformedTest, EveryTruncationIsRefusedCleanly) {
  std::string full(kChatBase);
  for (size_t n = 0; n < full.size(); ++n) {
    auto result = parseChatRequest(std::string_view(full).substr(0, n), kLimits);
    ASSERT_TRUE(std::holds_alternative<ApiError>(result)) << n;
    EXPECT_EQ(std::get<ApiError>(result).status, 400) << n;
  }
}

TEST(ProtocolMalformedTest, NotAnObject) {
  for (std::string_view body : {"[]", "\"text\"", "42", "null", "true"}) {
    ApiError error = bodyError(body);
    EXPECT_EQ(error.code, "invalid_type") << body;
    EXPECT_NE(error.message.find("must be a JSON object"), std::string::npos) << error.message;
  }
}

TEST(ProtocolMalformedTest, InvalidUtf8InsideAString) {
  std::string body = R"({"model": "glm-5.3", "messages": [{"role": "user", "content": "a)";
  body += "\xff\xfe";
  body += R"("}]})";
  ApiError error = bodyError(body);
  EXPECT_EQ(error.code, "invalid_json");
  EXPECT_NE(error.message.find("ill-formed UTF-8 byte"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("at byte 65"), std::string::npos) << error.message; // the 0xff
  // The message itself is valid UTF-8: it serialises with the default (strict) handler.
  EXPECT_NO_THROW((void)error.toJson().dump());
}

TEST(ProtocolMalformedTest, NumberOverflowDoesNotQuoteTheNumber) {
  std::string digits = "1" + std::string(500, '0');
  ApiError error = bodyError(R"({"model": "glm-5.3", "temperature": )" + digits + "e400}");
  EXPECT_EQ(error.code, "invalid_json");
  EXPECT_NE(error.message.find("number overflow"), std::string::npos) << error.message;
  EXPECT_EQ(error.message.find("00000"), std::string::npos) << error.message;
}

TEST(ProtocolMalformedTest, UnterminatedLongStringIsNotEchoed) {
  std::string body = R"({"model": "glm-5.3", "messages": [{"role": "user", "content": ")" +
                     std::string(100000, 'A');
  ApiError error = bodyError(body);
  EXPECT_EQ(error.code, "invalid_json");
  EXPECT_EQ(error.message.find("AAAA"), std::string::npos) << error.message;
}

TEST(ProtocolMalformedTest, DeepNestingIsRefusedWithoutCrashing) {
  ApiError arrays = bodyError(std::string(100000, '['));
  EXPECT_EQ(arrays.code, "invalid_json");
  EXPECT_NE(arrays.message.find("nested deeper than 64 levels"), std::string::npos);

  std::string objects;
  for (int i = 0; i < 100000; ++i) {
    objects += R"({"a":)";
  }
  EXPECT_EQ(bodyError(objects).code, "invalid_json");

  // A well-formed but deep document is refused the same way, and so is the other endpoint.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(bodyError(deep).code, "invalid_json");
  EXPECT_EQ(errorOf(parseCompletionRequest(deep, kLimits)).code, "invalid_json");
}

TEST(ProtocolMalformedTest, NestingLimitBoundary) {
  // The body object is level 1, so metadata nested k deep reaches level k + 1.
  auto nested = [](int levels) {
    return withFields(kChatBase, "{}").substr(0, withFields(kChatBase, "{}").size() - 1) +
           R"(, "metadata": )" + std::string(levels, '[') + std::string(levels, ']') + "}";
  };
  parseChatOk(nested(63));
  EXPECT_EQ(bodyError(nested(64)).code, "invalid_json");
}

TEST(ProtocolMalformedTest, MutatedBodiesNeverThrow) {
  std::string full = withFields(
      kChatBase, R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                     "temperature": 0.5, "stop": ["x"], "max_tokens": 10, "stream": true})");
  const char replacements[] = {'"', '{', '[', ']', '}', ':', ',', '1', '-', 'n', '\\', '\xff'};
  for (size_t i = 0; i < full.size(); ++i) {
    for (char c : replacements) {
      std::string mutated = full;
      mutated[i] = c;
      EXPECT_NO_THROW({
        auto chat = parseChatRequest(mutated, kLimits);
        if (const ApiError *error = std::get_if<ApiError>(&chat)) {
          (void)error->toJson().dump();
        }
        (void)parseCompletionRequest(mutated, kLimits);
      });
    }
  }
}

//===------------------------------------------------------------------------------------------===//
// Response JSON, compared with the exact text (key order included)
//===------------------------------------------------------------------------------------------===//

TEST(ProtocolResponseTest, ApiErrorJson) {
  ApiError error;
  error.code = "invalid_value";
  error.message = "Invalid 'temperature': must be between 0 and 2, got 3.";
  error.param = "temperature";
  EXPECT_EQ(error.toJson().dump(),
            R"({"error":{"message":"Invalid 'temperature': must be between 0 and 2, got 3.",)"
            R"("type":"invalid_request_error","param":"temperature","code":"invalid_value"}})");
  ApiError bare;
  bare.status = 500;
  bare.type = "server_error";
  bare.message = "boom";
  EXPECT_EQ(bare.toJson().dump(),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
}

TEST(ProtocolResponseTest, ChatCompletionWithContent) {
  EXPECT_EQ(chatCompletionJson("chatcmpl-1", 1764400000, "glm-5.3",
                               {ChatChoice{.content = "Hello!", .finishReason = "stop"}},
                               Usage{10, 3})
                .dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1764400000,)"
            R"("model":"glm-5.3","choices":[{"index":0,"message":{"role":"assistant",)"
            R"("content":"Hello!","refusal":null},"logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(ProtocolResponseTest, ChatCompletionWithReasoningAndToolCalls) {
  std::vector<ToolCall> calls = {{"call_1", "get_weather", R"({"city":"Paris"})"},
                                 {"call_2", "get_time", "{}"}};
  EXPECT_EQ(
      chatCompletionJson(
          "chatcmpl-2", 5, "glm-5.3",
          {ChatChoice{.reasoning = "Think.", .toolCalls = calls, .finishReason = "tool_calls"}},
          Usage{212, 57})
          .dump(),
      R"({"id":"chatcmpl-2","object":"chat.completion","created":5,"model":"glm-5.3",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":null,)"
      R"("refusal":null,"reasoning_content":"Think.","reasoning":"Think.",)"
      R"("tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather",)"
      R"("arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function",)"
      R"("function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,)"
      R"("finish_reason":"tool_calls"}],)"
      R"("usage":{"prompt_tokens":212,"completion_tokens":57,"total_tokens":269,)"
      R"("prompt_tokens_details":{"cached_tokens":0}}})");
  // Content beside calls stays a string; empty content without calls is "" (not null).
  Json withText = chatCompletionJson(
      "c", 5, "m",
      {ChatChoice{.content = "Sure.", .toolCalls = calls, .finishReason = "tool_calls"}}, {});
  EXPECT_EQ(withText["choices"][0]["message"]["content"], "Sure.");
  Json empty = chatCompletionJson("c", 5, "m", {ChatChoice{.finishReason = "length"}}, {});
  EXPECT_EQ(empty["choices"][0]["message"]["content"], "");
}

TEST(ProtocolResponseTest, ChatCompletionChoicesAreIndexed) {
  const Json logprobs = chatLogprobsJson({TokenLogprobs{.sampled = {"b", "b", -0.5f}}});
  Json r = chatCompletionJson("c", 5, "m",
                              {ChatChoice{.content = "a", .finishReason = "length"},
                               ChatChoice{.content = "b", .logprobs = logprobs},
                               ChatChoice{.content = "c"}},
                              Usage{4, 9});
  ASSERT_EQ(r["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["message"]["content"], std::string(1, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][1]["logprobs"], logprobs);
  EXPECT_EQ(r["usage"]["completion_tokens"], 9);
}

TEST(ProtocolResponseTest, ChatLogprobs) {
  const std::vector<TokenLogprobs> tokens = {
      {.sampled = {"Hi", "Hi", -0.25f}, .top = {{"Hi", "Hi", -0.25f}, {"Hey", "Hey", -1.5f}}},
      // A token that is half of "é" (0xC3 0xA9): its text is the replacement character, its
      // bytes the one byte; an id without a token has no bytes.
      {.sampled = {"\ufffd", std::string("\xc3"), -0.1f}, .top = {{"", std::nullopt, -3.0f}}},
  };
  EXPECT_EQ(chatLogprobsJson(tokens).dump(),
            R"({"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[)"
            R"({"token":"Hi","logprob":-0.25,"bytes":[72,105]},)"
            R"({"token":"Hey","logprob":-1.5,"bytes":[72,101,121]}]},)"
            R"({"token":")"
            "\ufffd"
            R"(","logprob":-0.1,"bytes":[195],"top_logprobs":[)"
            R"({"token":"","logprob":-3.0,"bytes":null}]}],"refusal":null})");
  EXPECT_EQ(chatLogprobsJson({}).dump(), R"({"content":[],"refusal":null})");
}

TEST(ProtocolResponseTest, LogprobsAreFiniteAndShort) {
  const Json json = chatLogprobsJson(
      {{.sampled = {"a", "a", -INFINITY}, .top = {{"b", "b", NAN}, {"c", "c", -12345.0f}}},
       {.sampled = {"d", "d", -0.1f}}});
  // JSON has no -inf: very unlikely is OpenAI's -9999.0.
  EXPECT_EQ(json["content"][0]["logprob"], -9999.0);
  EXPECT_EQ(json["content"][0]["top_logprobs"][0]["logprob"], -9999.0);
  EXPECT_EQ(json["content"][0]["top_logprobs"][1]["logprob"], -9999.0);
  // The float's shortest decimal, not its exact double.
  EXPECT_EQ(json["content"][1]["logprob"].dump(), "-0.1");
}

TEST(ProtocolResponseTest, CompletionLogprobs) {
  const std::vector<TokenLogprobs> tokens = {
      {.sampled = {" a", " a", -0.5f}, .top = {{" a", " a", -0.5f}, {" b", " b", -1.0f}}},
      // The sampled token outside the alternatives joins them (OpenAI: up to logprobs + 1).
      {.sampled = {" c", " c", -4.0f}, .top = {{" d", " d", -0.25f}}, .textOffset = 2},
  };
  EXPECT_EQ(completionLogprobsJson(tokens).dump(),
            R"({"tokens":[" a"," c"],"token_logprobs":[-0.5,-4.0],)"
            R"("top_logprobs":[{" a":-0.5," b":-1.0},{" d":-0.25," c":-4.0}],)"
            R"("text_offset":[0,2]})");
  // Tokens with the same text keep the most likely one's logprob.
  EXPECT_EQ(completionLogprobsJson({{.sampled = {"\ufffd", "\xe2", -2.0f},
                                     .top = {{"\ufffd", "\xe2\x82", -1.0f},
                                             {"\ufffd", "\xe2", -2.0f}}}})["top_logprobs"]
                .dump(),
            "[{\"\ufffd\":-1.0}]");
  EXPECT_EQ(completionLogprobsJson({}).dump(),
            R"({"tokens":[],"token_logprobs":[],"top_logprobs":[],"text_offset":[]})");
}

TEST(ProtocolResponseTest, ChatDeltas) {
  EXPECT_EQ(chatDeltaJson(true, std::nullopt, std::nullopt).dump(),
            R"({"role":"assistant","content":""})");
  EXPECT_EQ(chatDeltaJson(true, std::string("Hi"), std::nullopt).dump(),
            R"({"role":"assistant","content":"Hi"})");
  EXPECT_EQ(chatDeltaJson(false, std::string("lo"), std::nullopt).dump(), R"({"content":"lo"})");
  EXPECT_EQ(chatDeltaJson(false, std::nullopt, std::string("Let me")).dump(),
            R"({"reasoning_content":"Let me","reasoning":"Let me"})");
  EXPECT_EQ(chatDeltaJson(false, std::nullopt, std::nullopt).dump(), "{}");
  // The piece that closes a think block holds both, in the order the model wrote them.
  EXPECT_EQ(chatDeltaJson(false, std::string("Hi"), std::string("done")).dump(),
            R"({"reasoning_content":"done","reasoning":"done","content":"Hi"})");
  EXPECT_EQ(chatDeltaJson(false, std::nullopt, std::nullopt,
                          {{"call_a", "f", R"({"x":1})"}, {"call_b", "g", "{}"}}, 2)
                .dump(),
            R"({"tool_calls":[{"index":2,"id":"call_a","type":"function",)"
            R"("function":{"name":"f","arguments":"{\"x\":1}"}},)"
            R"({"index":3,"id":"call_b","type":"function",)"
            R"("function":{"name":"g","arguments":"{}"}}]})");
}

TEST(ProtocolResponseTest, ChatChunks) {
  EXPECT_EQ(chatCompletionChunkJson("chatcmpl-X", 7, "glm-5.3", 0,
                                    chatDeltaJson(true, std::nullopt, std::nullopt), std::nullopt)
                .dump(),
            R"({"id":"chatcmpl-X","object":"chat.completion.chunk","created":7,"model":"glm-5.3",)"
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,)"
            R"("finish_reason":null}]})");
  EXPECT_EQ(
      chatCompletionChunkJson("chatcmpl-X", 7, "glm-5.3", 0, Json::object(), std::string("stop"))
          .dump(),
      R"({"id":"chatcmpl-X","object":"chat.completion.chunk","created":7,"model":"glm-5.3",)"
      R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})");
  // Another choice's chunk, with the logprobs of its tokens.
  const Json logprobs = chatLogprobsJson({{.sampled = {"x", "x", -1.0f}}});
  EXPECT_EQ(chatCompletionChunkJson("chatcmpl-X", 7, "glm-5.3", 2,
                                    chatDeltaJson(false, std::string("x"), std::nullopt),
                                    std::nullopt, logprobs)
                .dump(),
            R"({"id":"chatcmpl-X","object":"chat.completion.chunk","created":7,"model":"glm-5.3",)"
            R"("choices":[{"index":2,"delta":{"content":"x"},"logprobs":{"content":[{"token":"x",)"
            R"("logprob":-1.0,"bytes":[120],"top_logprobs":[]}],"refusal":null},)"
            R"("finish_reason":null}]})");
  EXPECT_EQ(chatUsageChunkJson("chatcmpl-X", 7, "glm-5.3", Usage{10, 5, 4}).dump(),
            R"({"id":"chatcmpl-X","object":"chat.completion.chunk","created":7,"model":"glm-5.3",)"
            R"("choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,)"
            R"("prompt_tokens_details":{"cached_tokens":4}}})");
}

TEST(ProtocolResponseTest, TextCompletion) {
  EXPECT_EQ(completionJson("cmpl-1", 9, "glm-5.3",
                           {CompletionChoice{.text = " a time", .finishReason = "length"}},
                           Usage{2, 3})
                .dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"glm-5.3",)"
            R"("choices":[{"index":0,"text":" a time","logprobs":null,"finish_reason":"length"}],)"
            R"("usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
  EXPECT_EQ(completionChunkJson("cmpl-1", 9, "glm-5.3", 0, " a", std::nullopt).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"glm-5.3",)"
            R"("choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(completionChunkJson("cmpl-1", 9, "glm-5.3", 1, " b", std::nullopt,
                                completionLogprobsJson({{.sampled = {" b", " b", -2.0f}}}))
                .dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"glm-5.3",)"
            R"("choices":[{"index":1,"text":" b","logprobs":{"tokens":[" b"],)"
            R"("token_logprobs":[-2.0],"top_logprobs":[{" b":-2.0}],"text_offset":[0]},)"
            R"("finish_reason":null}]})");
  Json two = completionJson(
      "cmpl-1", 9, "glm-5.3",
      {CompletionChoice{.text = "x"}, CompletionChoice{.text = "y", .finishReason = "length"}},
      Usage{2, 6});
  EXPECT_EQ(two["choices"][1]["index"], 1);
  EXPECT_EQ(two["choices"][1]["text"], "y");
  EXPECT_EQ(two["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(completionChunkJson("cmpl-1", 9, "glm-5.3", 0, "", std::string("stop")).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"glm-5.3",)"
            R"("choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]})");
  EXPECT_EQ(completionUsageChunkJson("cmpl-1", 9, "glm-5.3", Usage{2, 3}).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":9,"model":"glm-5.3",)"
            R"("choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(ProtocolResponseTest, Models) {
  EXPECT_EQ(modelsJson({"glm-5.3", "glm"}, 100).dump(),
            R"({"object":"list","data":[)"
            R"({"id":"glm-5.3","object":"model","created":100,"owned_by":"glmc"},)"
            R"({"id":"glm","object":"model","created":100,"owned_by":"glmc"}]})");
  EXPECT_EQ(modelsJson({}, 100).dump(), R"({"object":"list","data":[]})");
  EXPECT_EQ(modelJson("glm", 1).dump(),
            R"({"id":"glm","object":"model","created":1,"owned_by":"glmc"})");
}

TEST(ProtocolResponseTest, SseData) {
  EXPECT_EQ(sseData(Json{{"a", "é"}, {"b", Json::array({1, 2})}}),
            "data: {\"a\":\"é\",\"b\":[1,2]}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // A partial UTF-8 sequence (a token cut mid-character) is replaced, not thrown.
  std::string out;
  EXPECT_NO_THROW(out = sseData(Json{{"content", std::string("a\xe2\x82")}}));
  EXPECT_EQ(out, "data: {\"content\":\"a\xef\xbf\xbd\"}\n\n");
  // An error after the stream started is an ordinary data event.
  ApiError error;
  error.status = 500;
  error.type = "server_error";
  error.message = "engine failed";
  EXPECT_EQ(sseData(error.toJson()),
            "data: {\"error\":{\"message\":\"engine failed\",\"type\":\"server_error\","
            "\"param\":null,\"code\":null}}\n\n");
}

} // namespace
} // namespace glm::server
