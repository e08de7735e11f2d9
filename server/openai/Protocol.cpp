// The OpenAI wire protocol: request validation and the JSON of responses (reference/server.md §1).
#include "server/openai/Protocol.h"

#include "base/JsonChecker.h"
#include "base/Status.h"
#include "runtime/api/SamplingParams.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <new>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

/// Deeper bodies are refused before a DOM is built: nothing a client legitimately sends (tool
/// schemas included) comes near, and a 100k-deep body must not reach recursive code.
constexpr int kMaxJsonDepth = 64;
/// vLLM's observed limit (server.md §1.2); the spec says 4.
constexpr size_t kMaxStopStrings = 8;
/// Stop strings are matched against every decoded step, so their length is bounded too.
constexpr size_t kMaxStopBytes = 1024;
/// OpenAI's own limit on tools per request.
constexpr size_t kMaxTools = 128;
/// OpenAI's limit on function names.
constexpr size_t kMaxToolNameBytes = 64;
/// A 404 names the requested model; a huge name must not make a huge error.
constexpr size_t kMaxEchoedModelBytes = 256;

//===------------------------------------------------------------------------------------------===//
// Errors
//===------------------------------------------------------------------------------------------===//

ApiError makeError(int status, std::string code, std::string message,
                   std::optional<std::string> param) {
  ApiError error;
  error.status = status;
  error.code = std::move(code);
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

ApiError unsupportedParameter(const std::string &param, std::string_view detail) {
  return makeError(400, "unsupported_parameter",
                   strCat("Unsupported parameter: '", param, "': ", detail, "."), param);
}

/// Numbers are short enough to quote back; strings and structures from the body never are.
std::string quoteNumber(const Json &v) { return v.dump(); }

/// The first `maxBytes` bytes of valid UTF-8 text, never cutting a character in two.
std::string truncateUtf8(const std::string &text, size_t maxBytes) {
  if (text.size() <= maxBytes) {
    return text;
  }
  size_t end = maxBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return text.substr(0, end) + "...";
}

//===------------------------------------------------------------------------------------------===//
// Parsing the body
//===------------------------------------------------------------------------------------------===//

/// nlohmann's message without its prefix ("[json.exception.parse_error.101] parse error at line
/// 1, column 9: ") and without what it quotes of the input ("; last read: '...'", "parsing
/// '...'"), which may be long, binary or not UTF-8: the error must never echo the body.
std::string describeParseError(const std::string &what) {
  std::string text = what;
  if (size_t bracket = text.find("] ");
      text.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) {
    text.erase(0, bracket + 2);
  }
  if (text.rfind("parse error", 0) == 0) {
    if (size_t colon = text.find(": "); colon != std::string::npos) {
      text.erase(0, colon + 2);
    }
  }
  for (std::string_view quote : {"; last read", " parsing '", ": '"}) {
    if (size_t at = text.find(quote); at != std::string::npos) {
      text.erase(at);
    }
  }
  // What is left is nlohmann's own wording; bound it anyway.
  return truncateUtf8(text, 200);
}

std::variant<Json, ApiError> parseBody(std::string_view body) {
  JsonChecker checker(kMaxJsonDepth);
  if (!Json::sax_parse(body.begin(), body.end(), &checker)) {
    if (checker.tooDeep()) {
      return makeError(400, "invalid_json",
                       strCat("Invalid JSON body: nested deeper than ", kMaxJsonDepth, " levels."),
                       std::nullopt);
    }
    // The position counts bytes from 1, as nlohmann does (its columns do too).
    return makeError(400, "invalid_json",
                     strCat("Invalid JSON body at byte ", checker.errorByte(), ": ",
                            checker.error().empty() ? std::string("parse error")
                                                    : describeParseError(checker.error()),
                            "."),
                     std::nullopt);
  }
  Json root = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return makeError(400, "invalid_json", "Invalid JSON body.", std::nullopt);
  }
  if (!root.is_object()) {
    return makeError(
        400, "invalid_type",
        strCat("The request body must be a JSON object, but got ", jsonTypeName(root), "."),
        std::nullopt);
  }
  return root;
}

//===------------------------------------------------------------------------------------------===//
// Field readers. Each returns the error, if any; an absent or null field keeps the default.
//===------------------------------------------------------------------------------------------===//

using MaybeError = std::optional<ApiError>;

/// The field, or nullptr when it is absent or null (clients send null for "not set").
const Json *field(const Json &object, const char *key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

/// An integral value within int64: JSON integers, and floats with no fractional part (1.0), as
/// lenient OpenAI servers accept them.
std::optional<int64_t> asInt64(const Json &v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is exactly representable; anything at or beyond it does not fit.
    if (std::isfinite(d) && d == std::trunc(d) && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> asUint64(const Json &v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>();
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) {
      return std::nullopt;
    }
    return static_cast<uint64_t>(i);
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= 0.0 && d < 18446744073709551616.0) {
      return static_cast<uint64_t>(d);
    }
  }
  return std::nullopt;
}

MaybeError readBool(const Json &object, const char *key, bool &out) {
  const Json *v = field(object, key);
  if (!v) {
    return std::nullopt;
  }
  if (!v->is_boolean()) {
    return fieldTypeError(key, "a boolean", *v);
  }
  out = v->get<bool>();
  return std::nullopt;
}

/// A finite number in [lo, hi] (an open end excludes the bound).
struct Range {
  double lo;
  double hi;
  bool loOpen = false;
  bool hiOpen = false;
  std::string_view text; // how the message states it
};

MaybeError readNumber(const Json &object, const char *key, const Range &range, double &out) {
  const Json *v = field(object, key);
  if (!v) {
    return std::nullopt;
  }
  if (!v->is_number()) {
    return fieldTypeError(key, "a number", *v);
  }
  double d = v->get<double>();
  bool below = range.loOpen ? !(d > range.lo) : !(d >= range.lo);
  bool above = range.hiOpen ? !(d < range.hi) : !(d <= range.hi);
  if (!std::isfinite(d) || below || above) {
    return fieldValueError(key, strCat("must be ", range.text, ", got ", quoteNumber(*v)));
  }
  out = d;
  return std::nullopt;
}

/// An integer in [lo, hi]; absent or null leaves `out` as it is.
MaybeError readInteger(const Json &object, const char *key, int64_t lo, int64_t hi,
                       std::optional<int64_t> &out) {
  const Json *v = field(object, key);
  if (!v) {
    return std::nullopt;
  }
  if (!v->is_number()) {
    return fieldTypeError(key, "an integer", *v);
  }
  std::optional<int64_t> i = asInt64(*v);
  if (!i) {
    return fieldValueError(
        key, strCat("must be an integer between ", lo, " and ", hi, ", got ", quoteNumber(*v)));
  }
  if (*i < lo || *i > hi) {
    return fieldValueError(key,
                           strCat("must be between ", lo, " and ", hi, ", got ", quoteNumber(*v)));
  }
  out = *i;
  return std::nullopt;
}

/// max_tokens and friends: at least 1; beyond the context it is context_length_exceeded, which
/// clients recognise (server.md §1.6).
MaybeError readMaxTokens(const Json &object, const char *key, const ProtocolLimits &limits,
                         std::optional<int64_t> &out) {
  std::optional<int64_t> value;
  if (MaybeError e = readInteger(object, key, 1, std::numeric_limits<int64_t>::max(), value)) {
    return e;
  }
  if (value && limits.maxContext > 0 && *value > limits.maxContext) {
    return makeError(400, "context_length_exceeded",
                     strCat("This model's maximum context length is ", limits.maxContext,
                            " tokens. However, you requested ", *value, " output tokens ('", key,
                            "')."),
                     std::string(key));
  }
  if (value) {
    out = value;
  }
  return std::nullopt;
}

MaybeError readStop(const Json &object, std::vector<std::string> &out) {
  const Json *v = field(object, "stop");
  if (!v) {
    return std::nullopt;
  }
  auto checkOne = [](const Json &s, const std::string &param) -> MaybeError {
    if (!s.is_string()) {
      return fieldTypeError(param, "a string", s);
    }
    const std::string &text = s.get_ref<const std::string &>();
    if (text.empty()) {
      return fieldValueError(param, "stop strings must not be empty");
    }
    if (text.size() > kMaxStopBytes) {
      return fieldValueError(param,
                             strCat("stop strings are limited to ", kMaxStopBytes, " bytes"));
    }
    return std::nullopt;
  };
  if (v->is_string()) {
    if (MaybeError e = checkOne(*v, "stop")) {
      return e;
    }
    out = {v->get<std::string>()};
    return std::nullopt;
  }
  if (!v->is_array()) {
    return fieldTypeError("stop", "a string or an array of strings", *v);
  }
  if (v->size() > kMaxStopStrings) {
    return fieldValueError(
        "stop", strCat("at most ", kMaxStopStrings, " stop strings are allowed, got ", v->size()));
  }
  std::vector<std::string> stops;
  for (size_t i = 0; i < v->size(); ++i) {
    if (MaybeError e = checkOne((*v)[i], strCat("stop[", i, "]"))) {
      return e;
    }
    stops.push_back((*v)[i].get<std::string>());
  }
  out = std::move(stops);
  return std::nullopt;
}

/// A logit_bias key: a token id in decimal, from 0 to int32's max, with no sign, space or
/// leading zero, so that distinct keys are distinct ids.
std::optional<int32_t> parseTokenIdKey(std::string_view key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key.front() == '0')) {
    return std::nullopt;
  }
  int64_t value = 0;
  for (char c : key) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  if (value > std::numeric_limits<int32_t>::max()) {
    return std::nullopt;
  }
  return static_cast<int32_t>(value);
}

/// logit_bias: {"token id": bias in [-100, 100]}, at most runtime::kMaxLogitBias entries. Every
/// error names logit_bias; ids beyond the vocabulary are the engine's to refuse (it knows the
/// vocabulary; submit() answers InvalidArgument).
MaybeError readLogitBias(const Json &body, std::vector<std::pair<int32_t, double>> &out) {
  const Json *v = field(body, "logit_bias");
  if (!v) {
    return std::nullopt;
  }
  if (!v->is_object()) {
    return fieldTypeError("logit_bias", "an object", *v);
  }
  if (v->size() > static_cast<size_t>(runtime::kMaxLogitBias)) {
    return fieldValueError("logit_bias", strCat("at most ", runtime::kMaxLogitBias,
                                                " tokens may be biased, got ", v->size()));
  }
  std::vector<std::pair<int32_t, double>> bias;
  bias.reserve(v->size());
  for (const auto &[key, value] : v->items()) {
    // The key is not quoted back: it comes from the body and may be anything.
    std::optional<int32_t> id = parseTokenIdKey(key);
    if (!id) {
      return fieldValueError("logit_bias",
                             "keys must be token ids, integers from 0 written in decimal");
    }
    if (!value.is_number()) {
      return fieldTypeError("logit_bias", strCat("a number as the bias of token ", *id), value);
    }
    const double d = value.get<double>();
    if (!std::isfinite(d) || d < -100.0 || d > 100.0) {
      return fieldValueError("logit_bias",
                             strCat("the bias of token ", *id,
                                    " must be between -100 and 100, got ", quoteNumber(value)));
    }
    bias.emplace_back(*id, d);
  }
  out = std::move(bias);
  return std::nullopt;
}

/// Chat's logprobs (a boolean) and top_logprobs (0 to 20 alternatives a token). As OpenAI and
/// vLLM: top_logprobs above 0 needs logprobs true; 0 without it asks for nothing and is accepted.
MaybeError readChatLogprobs(const Json &body, int32_t &out) {
  bool logprobs = false;
  if (MaybeError e = readBool(body, "logprobs", logprobs)) {
    return e;
  }
  std::optional<int64_t> top;
  if (MaybeError e = readInteger(body, "top_logprobs", 0, runtime::kMaxTopLogprobs, top)) {
    return e;
  }
  if (top.value_or(0) > 0 && !logprobs) {
    return fieldValueError("top_logprobs", "'logprobs' must be true to use 'top_logprobs'");
  }
  out = logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
  return std::nullopt;
}

/// The legacy endpoint's logprobs is a count of alternatives, and even 0 asks for the sampled
/// token's. Up to 20, as vLLM (OpenAI's own cap is 5). `false` reads as absent: lenient clients
/// send it for "none".
MaybeError readCompletionLogprobs(const Json &body, int32_t &out) {
  const Json *v = field(body, "logprobs");
  if (!v || (v->is_boolean() && !v->get<bool>())) {
    return std::nullopt;
  }
  std::optional<int64_t> count;
  if (MaybeError e = readInteger(body, "logprobs", 0, runtime::kMaxTopLogprobs, count)) {
    return e;
  }
  out = static_cast<int32_t>(*count);
  return std::nullopt;
}

/// Fields both endpoints take for sampling and stopping. `chat` adds max_completion_tokens,
/// which wins over max_tokens (vLLM and OpenAI both).
MaybeError readSampling(const Json &body, const ProtocolLimits &limits, bool chat,
                        SamplingOptions &out) {
  if (MaybeError e = readNumber(body, "temperature", {0.0, 2.0, false, false, "between 0 and 2"},
                                out.temperature)) {
    return e;
  }
  if (MaybeError e = readNumber(body, "top_p", {0.0, 1.0, true, false, "in (0, 1]"}, out.topP)) {
    return e;
  }
  std::optional<int64_t> topK;
  if (MaybeError e = readInteger(body, "top_k", -1, std::numeric_limits<int64_t>::max(), topK)) {
    return e;
  }
  // vLLM's -1 and 0 both mean "off".
  out.topK = topK && *topK > 0 ? *topK : 0;
  if (MaybeError e =
          readNumber(body, "min_p", {0.0, 1.0, false, false, "between 0 and 1"}, out.minP)) {
    return e;
  }
  if (const Json *seed = field(body, "seed")) {
    if (!seed->is_number()) {
      return fieldTypeError("seed", "an integer", *seed);
    }
    std::optional<uint64_t> value = asUint64(*seed);
    if (!value) {
      return fieldValueError("seed", strCat("must be an integer between 0 and ",
                                            std::numeric_limits<uint64_t>::max(), ", got ",
                                            quoteNumber(*seed)));
    }
    out.seed = value;
  }
  if (MaybeError e =
          readNumber(body, "presence_penalty", {-2.0, 2.0, false, false, "between -2 and 2"},
                     out.presencePenalty)) {
    return e;
  }
  if (MaybeError e =
          readNumber(body, "frequency_penalty", {-2.0, 2.0, false, false, "between -2 and 2"},
                     out.frequencyPenalty)) {
    return e;
  }
  // vLLM's rule: finite and above 0, no upper bound (it divides positive logits, multiplies
  // negative ones).
  if (MaybeError e =
          readNumber(body, "repetition_penalty",
                     {0.0, std::numeric_limits<double>::max(), true, false, "greater than 0"},
                     out.repetitionPenalty)) {
    return e;
  }
  if (MaybeError e = readLogitBias(body, out.logitBias)) {
    return e;
  }
  if (MaybeError e = chat ? readChatLogprobs(body, out.logprobs)
                          : readCompletionLogprobs(body, out.logprobs)) {
    return e;
  }
  std::optional<int64_t> n;
  if (MaybeError e = readInteger(body, "n", 1, kMaxChoices, n)) {
    return e;
  }
  out.n = n.value_or(1);

  std::optional<int64_t> maxTokens;
  if (MaybeError e = readMaxTokens(body, "max_tokens", limits, maxTokens)) {
    return e;
  }
  const char *maxTokensKey = "max_tokens";
  if (chat) {
    std::optional<int64_t> maxCompletionTokens;
    if (MaybeError e = readMaxTokens(body, "max_completion_tokens", limits, maxCompletionTokens)) {
      return e;
    }
    if (maxCompletionTokens) {
      maxTokens = maxCompletionTokens;
      maxTokensKey = "max_completion_tokens";
    }
  }
  out.maxTokens = maxTokens;

  std::optional<int64_t> minTokens;
  int64_t minTokensCap =
      limits.maxContext > 0 ? limits.maxContext : std::numeric_limits<int64_t>::max();
  if (MaybeError e = readInteger(body, "min_tokens", 0, minTokensCap, minTokens)) {
    return e;
  }
  if (minTokens && maxTokens && *minTokens > *maxTokens) {
    return fieldValueError("min_tokens", strCat("must not exceed '", maxTokensKey, "' (",
                                                *maxTokens, "), got ", *minTokens));
  }
  out.minTokens = minTokens.value_or(0);

  if (MaybeError e = readBool(body, "ignore_eos", out.ignoreEos)) {
    return e;
  }
  if (MaybeError e = readBool(body, "draft", out.draft)) {
    return e;
  }
  return readStop(body, out.stop);
}

//===------------------------------------------------------------------------------------------===//
// Fields we refuse rather than ignore
//===------------------------------------------------------------------------------------------===//

MaybeError refuseTrue(const Json &body, const char *key, std::string_view why) {
  bool value = false;
  if (MaybeError e = readBool(body, key, value)) {
    return e;
  }
  if (value) {
    return fieldUnsupported(key, why);
  }
  return std::nullopt;
}

/// An array field that is fine empty and unsupported otherwise.
MaybeError refuseNonEmpty(const Json &body, const char *key, std::string_view why) {
  const Json *v = field(body, key);
  if (!v) {
    return std::nullopt;
  }
  if (!v->is_array()) {
    return fieldTypeError(key, "an array", *v);
  }
  if (!v->empty()) {
    return fieldUnsupported(key, why);
  }
  return std::nullopt;
}

/// Any non-null value is refused.
MaybeError refusePresent(const Json &body, const char *key, std::string_view why) {
  if (field(body, key)) {
    return unsupportedParameter(key, why);
  }
  return std::nullopt;
}

/// Outputs we do not implement. Silently ignoring a field would return something else than asked
/// as if it were it (vLLM's "fails open", server.md §0 item 3). Constraints (response_format,
/// guided_*, structured_outputs) are read by readOutputConstraint.
MaybeError refuseUnsupported(const Json &body, bool chat) {
  if (const Json *bestOf = field(body, "best_of")) {
    if (!bestOf->is_number()) {
      return fieldTypeError("best_of", "an integer", *bestOf);
    }
    if (asInt64(*bestOf) != std::optional<int64_t>(1)) {
      return fieldUnsupported("best_of", "only best_of = 1 is supported; use 'n' for several "
                                         "choices");
    }
  }
  if (MaybeError e = refusePresent(body, "prompt_logprobs", "prompt logprobs are not supported")) {
    return e;
  }
  for (const char *key : {"stop_token_ids", "bad_words", "allowed_token_ids"}) {
    if (MaybeError e = refuseNonEmpty(body, key, strCat(key, " is not supported yet"))) {
      return e;
    }
  }
  if (MaybeError e = refuseTrue(body, "include_stop_str_in_output",
                                "stop strings are always removed from the output")) {
    return e;
  }
  if (MaybeError e =
          refusePresent(body, "truncate_prompt_tokens", "prompt truncation is not supported")) {
    return e;
  }

  if (chat) {
    if (MaybeError e = refuseTrue(body, "echo", "echo is not supported on chat completions")) {
      return e;
    }
    if (MaybeError e = refuseTrue(body, "continue_final_message",
                                  "continue_final_message is not supported yet")) {
      return e;
    }
    if (MaybeError e = refusePresent(body, "chat_template",
                                     "the server uses the checkpoint's chat template")) {
      return e;
    }
    if (MaybeError e = refusePresent(body, "audio", "audio output is not supported")) {
      return e;
    }
    if (MaybeError e = refusePresent(body, "web_search_options", "web search is not supported")) {
      return e;
    }
    if (const Json *modalities = field(body, "modalities")) {
      if (!modalities->is_array()) {
        return fieldTypeError("modalities", "an array", *modalities);
      }
      for (const Json &m : *modalities) {
        if (!m.is_string() || m.get_ref<const std::string &>() != "text") {
          return fieldUnsupported("modalities", "only text output is supported");
        }
      }
    }
  } else if (const Json *suffix = field(body, "suffix")) {
    if (!suffix->is_string()) {
      return fieldTypeError("suffix", "a string", *suffix);
    }
    if (!suffix->get_ref<const std::string &>().empty()) {
      return fieldUnsupported("suffix", "suffix is not supported");
    }
  }
  return std::nullopt;
}

//===------------------------------------------------------------------------------------------===//
// Shared top-level fields
//===------------------------------------------------------------------------------------------===//

MaybeError readModel(const Json &body, const ProtocolLimits &limits, std::string &out) {
  const Json *model = field(body, "model");
  if (!model) {
    return fieldMissing("model");
  }
  if (!model->is_string()) {
    return fieldTypeError("model", "a string", *model);
  }
  const std::string &name = model->get_ref<const std::string &>();
  if (std::find(limits.modelNames.begin(), limits.modelNames.end(), name) ==
      limits.modelNames.end()) {
    // vLLM's wording, OpenAI's code (server.md §1.6).
    return makeError(
        404, "model_not_found",
        strCat("The model `", truncateUtf8(name, kMaxEchoedModelBytes), "` does not exist."),
        "model");
  }
  out = name;
  return std::nullopt;
}

/// stream, stream_options.include_usage.
MaybeError readStreaming(const Json &body, bool &stream, bool &includeUsage) {
  if (MaybeError e = readBool(body, "stream", stream)) {
    return e;
  }
  const Json *options = field(body, "stream_options");
  if (!options) {
    return std::nullopt;
  }
  if (!options->is_object()) {
    return fieldTypeError("stream_options", "an object", *options);
  }
  if (!stream) {
    // As OpenAI and vLLM: options for a stream that is not one are a client bug.
    return fieldValueError("stream_options",
                           "stream options can only be set when 'stream' is true");
  }
  if (const Json *usage = field(*options, "include_usage")) {
    if (!usage->is_boolean()) {
      return fieldTypeError("stream_options.include_usage", "a boolean", *usage);
    }
    includeUsage = usage->get<bool>();
  }
  if (const Json *continuous = field(*options, "continuous_usage_stats")) {
    if (!continuous->is_boolean()) {
      return fieldTypeError("stream_options.continuous_usage_stats", "a boolean", *continuous);
    }
    if (continuous->get<bool>()) {
      return fieldUnsupported("stream_options.continuous_usage_stats",
                              "usage in every chunk is not supported yet");
    }
  }
  return std::nullopt;
}

//===------------------------------------------------------------------------------------------===//
// Chat messages and tools
//===------------------------------------------------------------------------------------------===//

bool isKnownRole(std::string_view role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" ||
         role == "developer";
}

MaybeError checkContentParts(const Json &parts, const std::string &param) {
  for (size_t j = 0; j < parts.size(); ++j) {
    const Json &part = parts[j];
    std::string partParam = strCat(param, "[", j, "]");
    if (!part.is_object()) {
      return fieldTypeError(partParam, "an object", part);
    }
    const Json *type = field(part, "type");
    if (!type) {
      return fieldMissing(partParam + ".type");
    }
    if (!type->is_string()) {
      return fieldTypeError(partParam + ".type", "a string", *type);
    }
    if (type->get_ref<const std::string &>() != "text") {
      // The model reads text only; dropping an image would answer a different question.
      return fieldUnsupported(partParam + ".type", "only text content parts are supported");
    }
    const Json *text = field(part, "text");
    if (!text) {
      return fieldMissing(partParam + ".text");
    }
    if (!text->is_string()) {
      return fieldTypeError(partParam + ".text", "a string", *text);
    }
  }
  return std::nullopt;
}

MaybeError checkMessageToolCalls(const Json &calls, const std::string &param) {
  if (!calls.is_array()) {
    return fieldTypeError(param, "an array", calls);
  }
  for (size_t j = 0; j < calls.size(); ++j) {
    const Json &call = calls[j];
    std::string callParam = strCat(param, "[", j, "]");
    if (!call.is_object()) {
      return fieldTypeError(callParam, "an object", call);
    }
    if (const Json *type = field(call, "type");
        type && (!type->is_string() || type->get_ref<const std::string &>() != "function")) {
      return fieldValueError(callParam + ".type", "must be \"function\"");
    }
    const Json *function = field(call, "function");
    if (!function) {
      return fieldMissing(callParam + ".function");
    }
    if (!function->is_object()) {
      return fieldTypeError(callParam + ".function", "an object", *function);
    }
    const Json *name = field(*function, "name");
    if (!name) {
      return fieldMissing(callParam + ".function.name");
    }
    if (!name->is_string()) {
      return fieldTypeError(callParam + ".function.name", "a string", *name);
    }
    // OpenAI sends a JSON string; some clients send the object itself. The chat template
    // code takes both (server/chat/ChatPrompt.h).
    if (const Json *arguments = field(*function, "arguments");
        arguments && !arguments->is_string() && !arguments->is_object()) {
      return fieldTypeError(callParam + ".function.arguments", "a string", *arguments);
    }
  }
  return std::nullopt;
}

MaybeError checkMessages(const Json &body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return fieldMissing("messages");
  }
  const Json &messages = *it;
  if (!messages.is_array()) {
    return fieldTypeError("messages", "an array", messages);
  }
  if (messages.empty()) {
    return fieldValueError("messages", "must contain at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json &message = messages[i];
    std::string param = strCat("messages[", i, "]");
    if (!message.is_object()) {
      return fieldTypeError(param, "an object", message);
    }
    const Json *role = field(message, "role");
    if (!role) {
      return fieldMissing(param + ".role");
    }
    if (!role->is_string()) {
      return fieldTypeError(param + ".role", "a string", *role);
    }
    const std::string &roleName = role->get_ref<const std::string &>();
    if (!isKnownRole(roleName)) {
      return fieldValueError(param + ".role",
                             "must be one of \"system\", \"developer\", \"user\", \"assistant\", "
                             "\"tool\"");
    }
    bool assistant = roleName == "assistant";

    const Json *toolCalls = field(message, "tool_calls");
    if (toolCalls) {
      if (!assistant) {
        return fieldValueError(param + ".tool_calls", "only assistant messages carry tool calls");
      }
      if (MaybeError e = checkMessageToolCalls(*toolCalls, param + ".tool_calls")) {
        return e;
      }
    }

    const Json *content = field(message, "content");
    if (!content) {
      // Only an assistant turn that called tools may have no content (OpenAI's rule).
      if (!(assistant && toolCalls && !toolCalls->empty())) {
        return fieldMissing(param + ".content");
      }
    } else if (content->is_array()) {
      if (MaybeError e = checkContentParts(*content, param + ".content")) {
        return e;
      }
    } else if (!content->is_string()) {
      return fieldTypeError(param + ".content", "a string or an array of content parts", *content);
    }

    for (const char *key : {"name", "tool_call_id", "reasoning_content", "reasoning"}) {
      if (const Json *v = field(message, key); v && !v->is_string()) {
        return fieldTypeError(strCat(param, ".", key), "a string", *v);
      }
    }
  }
  return std::nullopt;
}

/// Names go into the model's text between XML-like tags, so they keep to OpenAI's characters
/// (letters, digits, '_' and '-') plus '.' and ':' that MCP-style names use.
bool isValidToolName(const std::string &name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
  });
}

/// Returns the tools array (null when none).
MaybeError checkTools(const Json &body, Json &out) {
  const Json *tools = field(body, "tools");
  out = nullptr;
  if (!tools) {
    return std::nullopt;
  }
  if (!tools->is_array()) {
    return fieldTypeError("tools", "an array", *tools);
  }
  if (tools->size() > kMaxTools) {
    return fieldValueError(
        "tools", strCat("at most ", kMaxTools, " tools are allowed, got ", tools->size()));
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json &tool = (*tools)[i];
    std::string param = strCat("tools[", i, "]");
    if (!tool.is_object()) {
      return fieldTypeError(param, "an object", tool);
    }
    const Json *type = field(tool, "type");
    if (!type) {
      return fieldMissing(param + ".type");
    }
    if (!type->is_string()) {
      return fieldTypeError(param + ".type", "a string", *type);
    }
    if (type->get_ref<const std::string &>() != "function") {
      return fieldUnsupported(param + ".type", "only function tools are supported");
    }
    const Json *function = field(tool, "function");
    if (!function) {
      return fieldMissing(param + ".function");
    }
    if (!function->is_object()) {
      return fieldTypeError(param + ".function", "an object", *function);
    }
    const Json *name = field(*function, "name");
    if (!name) {
      return fieldMissing(param + ".function.name");
    }
    if (!name->is_string()) {
      return fieldTypeError(param + ".function.name", "a string", *name);
    }
    const std::string &nameText = name->get_ref<const std::string &>();
    if (!isValidToolName(nameText)) {
      return fieldValueError(param + ".function.name",
                             strCat("must be 1 to ", kMaxToolNameBytes,
                                    " characters of a-z, A-Z, 0-9, '_', '-', '.' or ':'"));
    }
    if (std::find(names.begin(), names.end(), nameText) != names.end()) {
      return fieldValueError(param + ".function.name", "tool names must be unique");
    }
    names.push_back(nameText);
    if (const Json *description = field(*function, "description");
        description && !description->is_string()) {
      return fieldTypeError(param + ".function.description", "a string", *description);
    }
    if (const Json *parameters = field(*function, "parameters");
        parameters && !parameters->is_object()) {
      return fieldTypeError(param + ".function.parameters", "an object", *parameters);
    }
    // `strict` is accepted and not enforced: the GLM parser types arguments by the schema but
    // does not constrain decoding. Refusing it would break SDKs that set it by default.
    if (const Json *strict = field(*function, "strict"); strict && !strict->is_boolean()) {
      return fieldTypeError(param + ".function.strict", "a boolean", *strict);
    }
  }
  out = tools->empty() ? Json(nullptr) : *tools;
  return std::nullopt;
}

/// tool_choice: "auto", "none", "required" or {"type": "function", "function": {"name"}}; a forced
/// call needs tools, and a named one must be among them.
MaybeError checkToolChoice(const Json &body, const Json &tools, ToolChoice &out,
                           std::string &name) {
  out = ToolChoice::Auto;
  const Json *choice = field(body, "tool_choice");
  if (!choice) {
    return std::nullopt;
  }
  if (choice->is_string()) {
    const std::string &text = choice->get_ref<const std::string &>();
    if (text == "auto") {
      return std::nullopt;
    }
    if (text == "none") {
      out = ToolChoice::None;
      return std::nullopt;
    }
    if (text == "required") {
      if (tools.is_null()) {
        return fieldValueError("tool_choice", "\"required\" needs a non-empty 'tools' array");
      }
      out = ToolChoice::Required;
      return std::nullopt;
    }
    return fieldValueError("tool_choice", "must be \"auto\", \"none\" or \"required\"");
  }
  if (choice->is_object()) {
    const Json *type = field(*choice, "type");
    if (!type || !type->is_string() || type->get_ref<const std::string &>() != "function") {
      return fieldValueError("tool_choice.type", "must be \"function\"");
    }
    const Json *function = field(*choice, "function");
    if (!function) {
      return fieldMissing("tool_choice.function");
    }
    if (!function->is_object()) {
      return fieldTypeError("tool_choice.function", "an object", *function);
    }
    const Json *named = field(*function, "name");
    if (!named) {
      return fieldMissing("tool_choice.function.name");
    }
    if (!named->is_string()) {
      return fieldTypeError("tool_choice.function.name", "a string", *named);
    }
    bool found = false;
    for (const Json &tool : tools.is_array() ? tools : Json::array()) {
      found = found || tool["function"]["name"] == *named;
    }
    if (!found) {
      return fieldValueError("tool_choice.function.name", "names no tool in 'tools'");
    }
    out = ToolChoice::Named;
    name = named->get<std::string>();
    return std::nullopt;
  }
  return fieldTypeError("tool_choice", "a string or an object", *choice);
}

MaybeError checkChatExtras(const Json &body) {
  if (const Json *effort = field(body, "reasoning_effort")) {
    if (!effort->is_string()) {
      return fieldTypeError("reasoning_effort", "a string", *effort);
    }
    static constexpr std::string_view kEfforts[] = {"none", "minimal", "low", "medium",
                                                    "high", "xhigh",   "max"};
    const std::string &text = effort->get_ref<const std::string &>();
    if (std::find(std::begin(kEfforts), std::end(kEfforts), text) == std::end(kEfforts)) {
      return fieldValueError("reasoning_effort", "must be one of \"none\", \"minimal\", \"low\", "
                                                 "\"medium\", \"high\", \"xhigh\", \"max\"");
    }
  }
  if (const Json *kwargs = field(body, "chat_template_kwargs"); kwargs && !kwargs->is_object()) {
    return fieldTypeError("chat_template_kwargs", "an object", *kwargs);
  }
  for (const char *key : {"add_generation_prompt", "parallel_tool_calls", "include_reasoning",
                          "skip_special_tokens"}) {
    bool ignored = false;
    if (MaybeError e = readBool(body, key, ignored)) {
      return e;
    }
  }
  return std::nullopt;
}

//===------------------------------------------------------------------------------------------===//
// Completion prompts
//===------------------------------------------------------------------------------------------===//

MaybeError readTokenIds(const Json &ids, const std::string &param, std::vector<int32_t> &out) {
  if (ids.empty()) {
    return fieldValueError(param, "the prompt must not be empty");
  }
  std::vector<int32_t> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json &id = ids[i];
    std::string idParam = strCat(param, "[", i, "]");
    if (!id.is_number()) {
      return fieldTypeError(idParam, "an integer token id", id);
    }
    std::optional<int64_t> value = asInt64(id);
    if (!value || *value < 0 || *value > std::numeric_limits<int32_t>::max()) {
      return fieldValueError(idParam, "token ids are integers from 0");
    }
    tokens.push_back(static_cast<int32_t>(*value));
  }
  out = std::move(tokens);
  return std::nullopt;
}

MaybeError readPrompt(const Json &body, CompletionRequest &out) {
  const Json *prompt = field(body, "prompt");
  if (!prompt) {
    return fieldMissing("prompt");
  }
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string &>().empty()) {
      return fieldValueError("prompt", "the prompt must not be empty");
    }
    out.prompt = prompt->get<std::string>();
    return std::nullopt;
  }
  if (!prompt->is_array()) {
    return fieldTypeError("prompt", "a string or an array of token ids", *prompt);
  }
  if (prompt->empty()) {
    return fieldValueError("prompt", "the prompt must not be empty");
  }
  const Json &first = prompt->front();
  if (first.is_number()) {
    return readTokenIds(*prompt, "prompt", out.promptIds);
  }
  if (!first.is_string() && !first.is_array()) {
    return fieldTypeError("prompt[0]", "a string, a token id or an array of token ids", first);
  }
  // string[] and int[][]: a batch of prompts, fine when it holds one.
  if (prompt->size() > 1) {
    return fieldUnsupported("prompt", "batched prompts are not supported; send one prompt per "
                                      "request");
  }
  if (first.is_string()) {
    if (first.get_ref<const std::string &>().empty()) {
      return fieldValueError("prompt[0]", "the prompt must not be empty");
    }
    out.prompt = first.get<std::string>();
    return std::nullopt;
  }
  return readTokenIds(first, "prompt[0]", out.promptIds);
}

//===------------------------------------------------------------------------------------------===//
// Responses
//===------------------------------------------------------------------------------------------===//

Json usageJson(const Usage &usage) {
  return Json{{"prompt_tokens", usage.promptTokens},
              {"completion_tokens", usage.completionTokens},
              {"total_tokens", usage.promptTokens + usage.completionTokens},
              {"prompt_tokens_details", Json{{"cached_tokens", usage.cachedTokens}}}};
}

Json toolCallJson(const ToolCall &call) {
  return Json{{"id", call.id},
              {"type", "function"},
              {"function", Json{{"name", call.name}, {"arguments", call.argumentsJson}}}};
}

Json finishReasonJson(const std::optional<std::string> &finishReason) {
  return finishReason ? Json(*finishReason) : Json(nullptr);
}

/// A logprob as OpenAI writes it: -9999.0 for "very unlikely" (JSON has no -inf: nlohmann would
/// write null), otherwise the float's shortest decimal (-0.1, not the -0.10000000149011612 that
/// widening the float to a double gives).
Json logprobJson(float logprob) {
  if (!std::isfinite(logprob) || logprob <= -9999.0f) {
    return -9999.0;
  }
  char text[32];
  const std::to_chars_result end = std::to_chars(std::begin(text), std::end(text), logprob);
  return std::strtod(std::string(text, end.ptr).c_str(), nullptr);
}

Json tokenTextJson(const TokenText &t) {
  Json bytes = nullptr;
  if (t.bytes) {
    bytes = Json::array();
    for (unsigned char byte : *t.bytes) {
      bytes.push_back(byte);
    }
  }
  return Json{{"token", t.token}, {"logprob", logprobJson(t.logprob)}, {"bytes", std::move(bytes)}};
}

/// Exceptions never leave the parsers: JSON access is type-checked, so what remains is memory.
template <typename Request, typename Parse> std::variant<Request, ApiError> guarded(Parse &&parse) {
  try {
    return parse();
  } catch (const std::bad_alloc &) {
    return makeError(500, "server_error", "Out of memory while reading the request.", std::nullopt);
  } catch (const std::exception &) {
    return makeError(500, "server_error", "Internal error while reading the request.",
                     std::nullopt);
  }
}

} // namespace

std::string_view jsonTypeName(const nlohmann::ordered_json &v) {
  if (v.is_boolean()) {
    return "a boolean";
  }
  if (v.is_number()) {
    return "a number";
  }
  if (v.is_string()) {
    return "a string";
  }
  if (v.is_array()) {
    return "an array";
  }
  if (v.is_object()) {
    return "an object";
  }
  return "null";
}

ApiError fieldTypeError(const std::string &param, std::string_view expected,
                        const nlohmann::ordered_json &got) {
  return makeError(400, "invalid_type",
                   strCat("Invalid type for '", param, "': expected ", expected, ", but got ",
                          jsonTypeName(got), " instead."),
                   param);
}

ApiError fieldValueError(const std::string &param, std::string_view detail) {
  return makeError(400, "invalid_value", strCat("Invalid '", param, "': ", detail, "."), param);
}

ApiError fieldMissing(const std::string &param) {
  return makeError(400, "missing_required_parameter",
                   strCat("Missing required parameter: '", param, "'."), param);
}

ApiError fieldUnsupported(const std::string &param, std::string_view detail) {
  return makeError(400, "unsupported_value",
                   strCat("Unsupported value for '", param, "': ", detail, "."), param);
}

nlohmann::ordered_json ApiError::toJson() const {
  Json error{{"message", message},
             {"type", type},
             {"param", param ? Json(*param) : Json(nullptr)},
             {"code", code.empty() ? Json(nullptr) : Json(code)}};
  return Json{{"error", std::move(error)}};
}

std::variant<ChatRequest, ApiError> parseChatRequest(std::string_view body,
                                                     const ProtocolLimits &limits) {
  return guarded<ChatRequest>([&]() -> std::variant<ChatRequest, ApiError> {
    std::variant<Json, ApiError> parsed = parseBody(body);
    if (ApiError *error = std::get_if<ApiError>(&parsed)) {
      return std::move(*error);
    }
    Json &root = std::get<Json>(parsed);
    ChatRequest request;
    if (MaybeError e = readModel(root, limits, request.model)) {
      return *e;
    }
    if (MaybeError e = checkMessages(root)) {
      return *e;
    }
    if (MaybeError e = checkTools(root, request.tools)) {
      return *e;
    }
    if (MaybeError e =
            checkToolChoice(root, request.tools, request.toolChoice, request.toolChoiceName)) {
      return *e;
    }
    if (request.toolChoice == ToolChoice::None) {
      request.tools = nullptr;
    }
    if (MaybeError e = readBool(root, "parallel_tool_calls", request.parallelToolCalls)) {
      return *e;
    }
    if (MaybeError e = readOutputConstraint(root, request.constraint)) {
      return *e;
    }
    if (request.constraint.kind != OutputConstraint::Kind::None &&
        (request.toolChoice == ToolChoice::Required || request.toolChoice == ToolChoice::Named)) {
      return fieldValueError(request.constraint.param,
                             "a forced tool call (tool_choice) already constrains the reply");
    }
    if (MaybeError e = checkChatExtras(root)) {
      return *e;
    }
    if (MaybeError e = readStreaming(root, request.stream, request.includeUsage)) {
      return *e;
    }
    if (MaybeError e = readSampling(root, limits, /*chat=*/true, request.sampling)) {
      return *e;
    }
    if (MaybeError e = refuseUnsupported(root, /*chat=*/true)) {
      return *e;
    }
    request.body = std::move(root);
    return request;
  });
}

std::variant<CompletionRequest, ApiError> parseCompletionRequest(std::string_view body,
                                                                 const ProtocolLimits &limits) {
  return guarded<CompletionRequest>([&]() -> std::variant<CompletionRequest, ApiError> {
    std::variant<Json, ApiError> parsed = parseBody(body);
    if (ApiError *error = std::get_if<ApiError>(&parsed)) {
      return std::move(*error);
    }
    const Json &root = std::get<Json>(parsed);
    CompletionRequest request;
    if (MaybeError e = readModel(root, limits, request.model)) {
      return *e;
    }
    if (MaybeError e = readPrompt(root, request)) {
      return *e;
    }
    if (MaybeError e = readBool(root, "echo", request.echo)) {
      return *e;
    }
    if (MaybeError e = readStreaming(root, request.stream, request.includeUsage)) {
      return *e;
    }
    if (MaybeError e = readSampling(root, limits, /*chat=*/false, request.sampling)) {
      return *e;
    }
    if (request.echo && request.sampling.logprobs >= 0) {
      // With echo, OpenAI's logprobs cover the prompt's tokens too.
      return fieldUnsupported("echo", "echo with logprobs asks for the prompt's logprobs, and "
                                      "prompt logprobs are not supported");
    }
    if (MaybeError e = refuseUnsupported(root, /*chat=*/false)) {
      return *e;
    }
    if (MaybeError e = readOutputConstraint(root, request.constraint)) {
      return *e;
    }
    return request;
  });
}

nlohmann::ordered_json chatLogprobsJson(const std::vector<TokenLogprobs> &tokens) {
  Json content = Json::array();
  for (const TokenLogprobs &t : tokens) {
    Json entry = tokenTextJson(t.sampled);
    Json top = Json::array();
    for (const TokenText &alternative : t.top) {
      top.push_back(tokenTextJson(alternative));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

nlohmann::ordered_json completionLogprobsJson(const std::vector<TokenLogprobs> &tokens) {
  Json texts = Json::array(), logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (const TokenLogprobs &t : tokens) {
    texts.push_back(t.sampled.token);
    logprobs.push_back(logprobJson(t.sampled.logprob));
    Json alternatives = Json::object();
    for (const TokenText &alternative : t.top) {
      if (!alternatives.contains(alternative.token)) {
        alternatives[alternative.token] = logprobJson(alternative.logprob);
      }
    }
    if (!alternatives.contains(t.sampled.token)) {
      alternatives[t.sampled.token] = logprobJson(t.sampled.logprob);
    }
    top.push_back(std::move(alternatives));
    offsets.push_back(t.textOffset);
  }
  return Json{{"tokens", std::move(texts)},
              {"token_logprobs", std::move(logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

nlohmann::ordered_json chatCompletionJson(const std::string &id, int64_t created,
                                          const std::string &model,
                                          const std::vector<ChatChoice> &choices,
                                          const Usage &usage) {
  Json list = Json::array();
  for (const ChatChoice &choice : choices) {
    Json message{{"role", "assistant"}};
    // A reply that only calls tools has null content, as OpenAI's.
    message["content"] =
        choice.content.empty() && !choice.toolCalls.empty() ? Json(nullptr) : Json(choice.content);
    message["refusal"] = nullptr; // required by the schema, nullable
    if (choice.reasoning) {
      message["reasoning_content"] = *choice.reasoning;
      message["reasoning"] = *choice.reasoning;
    }
    if (!choice.toolCalls.empty()) {
      Json calls = Json::array();
      for (const ToolCall &call : choice.toolCalls) {
        calls.push_back(toolCallJson(call));
      }
      message["tool_calls"] = std::move(calls);
    }
    list.push_back(Json{{"index", list.size()},
                        {"message", std::move(message)},
                        {"logprobs", choice.logprobs},
                        {"finish_reason", choice.finishReason}});
  }
  return Json{{"id", id},       {"object", "chat.completion"}, {"created", created},
              {"model", model}, {"choices", std::move(list)},  {"usage", usageJson(usage)}};
}

nlohmann::ordered_json chatDeltaJson(bool role, const std::optional<std::string> &content,
                                     const std::optional<std::string> &reasoning,
                                     const std::vector<ToolCall> &toolCalls,
                                     int64_t firstToolIndex) {
  Json delta = Json::object();
  if (role) {
    delta["role"] = "assistant";
    delta["content"] = content.value_or("");
  }
  // Reasoning before content: a delta holds both only where a think block closes, and then the
  // model wrote the reasoning first.
  if (reasoning) {
    delta["reasoning_content"] = *reasoning;
    delta["reasoning"] = *reasoning;
  }
  if (!role && content) {
    delta["content"] = *content;
  }
  if (!toolCalls.empty()) {
    Json calls = Json::array();
    for (size_t i = 0; i < toolCalls.size(); ++i) {
      // The stream's tool-call shape is the message's with `index` first.
      Json call{{"index", firstToolIndex + static_cast<int64_t>(i)}};
      Json whole = toolCallJson(toolCalls[i]);
      for (auto &[key, value] : whole.items()) {
        call[key] = std::move(value);
      }
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  return delta;
}

nlohmann::ordered_json chatCompletionChunkJson(const std::string &id, int64_t created,
                                               const std::string &model, int64_t index,
                                               const nlohmann::ordered_json &delta,
                                               const std::optional<std::string> &finishReason,
                                               const nlohmann::ordered_json &logprobs) {
  Json choice{{"index", index},
              {"delta", delta.is_object() ? delta : Json::object()},
              {"logprobs", logprobs},
              {"finish_reason", finishReasonJson(finishReason)}};
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({std::move(choice)})}};
}

nlohmann::ordered_json chatUsageChunkJson(const std::string &id, int64_t created,
                                          const std::string &model, const Usage &usage) {
  return Json{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
              {"model", model}, {"choices", Json::array()},          {"usage", usageJson(usage)}};
}

nlohmann::ordered_json completionJson(const std::string &id, int64_t created,
                                      const std::string &model,
                                      const std::vector<CompletionChoice> &choices,
                                      const Usage &usage) {
  Json list = Json::array();
  for (const CompletionChoice &choice : choices) {
    list.push_back(Json{{"index", list.size()},
                        {"text", choice.text},
                        {"logprobs", choice.logprobs},
                        {"finish_reason", choice.finishReason}});
  }
  return Json{{"id", id},       {"object", "text_completion"}, {"created", created},
              {"model", model}, {"choices", std::move(list)},  {"usage", usageJson(usage)}};
}

nlohmann::ordered_json completionChunkJson(const std::string &id, int64_t created,
                                           const std::string &model, int64_t index,
                                           const std::string &text,
                                           const std::optional<std::string> &finishReason,
                                           const nlohmann::ordered_json &logprobs) {
  Json choice{{"index", index},
              {"text", text},
              {"logprobs", logprobs},
              {"finish_reason", finishReasonJson(finishReason)}};
  return Json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({std::move(choice)})}};
}

nlohmann::ordered_json completionUsageChunkJson(const std::string &id, int64_t created,
                                                const std::string &model, const Usage &usage) {
  return Json{{"id", id},       {"object", "text_completion"}, {"created", created},
              {"model", model}, {"choices", Json::array()},    {"usage", usageJson(usage)}};
}

nlohmann::ordered_json modelJson(const std::string &name, int64_t created) {
  return Json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "glmc"}};
}

nlohmann::ordered_json modelsJson(const std::vector<std::string> &names, int64_t created) {
  Json data = Json::array();
  for (const std::string &name : names) {
    data.push_back(modelJson(name, created));
  }
  return Json{{"object", "list"}, {"data", std::move(data)}};
}

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sseData(const nlohmann::ordered_json &json) {
  // `replace` keeps a stray invalid UTF-8 byte (from a partial token) from throwing mid-stream.
  return strCat("data: ", json.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

} // namespace glm::server
