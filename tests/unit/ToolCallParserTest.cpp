// Tests of ToolCallParser: GLM <tool_call> blocks out of streamed content, typed by the tools.
#include "server/openai/ToolCallParser.h"

#include "base/Random.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

struct Result {
  std::string content;
  std::vector<ToolCall> calls;
};

/// Calls as one comparable, readable string.
std::string describe(const std::vector<ToolCall> &calls) {
  std::string out;
  for (const ToolCall &c : calls) {
    out += c.id + " " + c.name + " " + c.argumentsJson + "\n";
  }
  return out;
}

/// "call_" + 24 lowercase hex digits.
bool isCallId(std::string_view id) {
  return id.size() == 29 && id.starts_with("call_") &&
         id.find_first_not_of("0123456789abcdef", 5) == std::string_view::npos;
}

Result run(const Json &tools, const std::vector<std::string_view> &pieces, uint64_t seed = 0) {
  ToolCallParser parser(tools, seed);
  Result total;
  auto add = [&](ToolCallParser::Delta d) {
    total.content += d.content;
    for (ToolCall &c : d.calls) {
      total.calls.push_back(std::move(c));
    }
  };
  for (std::string_view piece : pieces) {
    add(parser.feed(piece));
  }
  add(parser.finish());
  return total;
}

Result runWhole(const Json &tools, std::string_view text) { return run(tools, {text}); }

std::vector<std::string_view> cut(std::string_view text, const std::vector<size_t> &at) {
  std::vector<std::string_view> pieces;
  size_t from = 0;
  for (size_t pos : at) {
    pieces.push_back(text.substr(from, pos - from));
    from = pos;
  }
  pieces.push_back(text.substr(from));
  return pieces;
}

Json weatherTools() {
  return Json::parse(R"([
    {"type": "function", "function": {
      "name": "get_weather",
      "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "units": {"type": "string", "enum": ["c", "f"]}
      }, "required": ["city"]}}},
    {"type": "function", "function": {
      "name": "typed",
      "parameters": {"type": "object", "properties": {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "o": {"type": "object"},
        "a": {"type": "array"},
        "z": {"type": "null"},
        "iOrNull": {"type": ["integer", "null"]},
        "sOrI": {"type": ["string", "integer"]},
        "literal": {"enum": ["1", "2"]},
        "numEnum": {"enum": [1, 2.5]},
        "optional": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "optionalInt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "weird": {"type": "int"},
        "noType": {"description": "anything"}
      }}}}
  ])");
}

std::string call(std::string_view name,
                 const std::vector<std::pair<std::string_view, std::string_view>> &args) {
  std::string out = "<tool_call>" + std::string(name);
  for (auto [k, v] : args) {
    out += "<arg_key>" + std::string(k) + "</arg_key><arg_value>" + std::string(v) + "</arg_value>";
  }
  return out + "</tool_call>";
}

/// The arguments JSON of the single call `typed` with one argument key = raw.
std::string typedArg(std::string_view key, std::string_view raw) {
  Result r = runWhole(weatherTools(), call("typed", {{key, raw}}));
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls.size(), 1u);
  return r.calls.empty() ? "" : r.calls[0].argumentsJson;
}

TEST(ToolCallParser, SingleCall) {
  Result r = runWhole(weatherTools(), "<tool_call>get_weather<arg_key>city</arg_key><arg_value>"
                                      "Paris</arg_value><arg_key>days</arg_key><arg_value>3</"
                                      "arg_value></tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"Paris","days":3})");
  EXPECT_TRUE(isCallId(r.calls[0].id)) << r.calls[0].id;
}

TEST(ToolCallParser, CallWithoutArguments) {
  Result r = runWhole(Json(), "<tool_call>get_time</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  EXPECT_EQ(r.calls[0].argumentsJson, "{}");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, TwoCallsGetDistinctIds) {
  Result r = runWhole(weatherTools(), call("get_weather", {{"city", "Paris"}}) +
                                          call("get_weather", {{"city", "Rome"}, {"days", "2"}}));
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].argumentsJson, R"({"city":"Rome","days":2})");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, ContentAroundCallsPassesThrough) {
  Result r =
      runWhole(weatherTools(), "Let me check.\n" + call("get_weather", {{"city", "Oslo"}}) + "\n" +
                                   call("get_weather", {{"city", "Bergen"}}) + "\nDone.");
  EXPECT_EQ(r.content, "Let me check.\n\n\nDone.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"Oslo"})");
  EXPECT_EQ(r.calls[1].argumentsJson, R"({"city":"Bergen"})");
}

TEST(ToolCallParser, NewlineSeparatedLayoutOfGlm45) {
  Result r = runWhole(weatherTools(), "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                                      "<arg_value>Paris</arg_value>\n<arg_key> days </arg_key> "
                                      "<arg_value>3</arg_value>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"Paris","days":3})");
}

TEST(ToolCallParser, StringValuesAreVerbatim) {
  // Newlines (leading and trailing too), quotes, backslashes and tag-like text all survive; the
  // JSON escapes them.
  Result r = runWhole(weatherTools(),
                      call("get_weather", {{"city", "\nline \"1\"\\\n<b>x</b> <tool_call>\n"}}));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"\nline \"1\"\\\n<b>x</b> <tool_call>\n"})");
  Json args = Json::parse(r.calls[0].argumentsJson);
  EXPECT_EQ(args["city"], "\nline \"1\"\\\n<b>x</b> <tool_call>\n");
}

TEST(ToolCallParser, StringThatLooksLikeAnotherTypeStaysAString) {
  EXPECT_EQ(typedArg("s", "123"), R"({"s":"123"})");
  EXPECT_EQ(typedArg("s", "true"), R"({"s":"true"})");
  EXPECT_EQ(typedArg("s", "null"), R"({"s":"null"})");
  EXPECT_EQ(typedArg("s", R"({"a": 1})"), R"({"s":"{\"a\": 1}"})");
  // A JSON string literal is text with quotes in it, for a string parameter.
  EXPECT_EQ(typedArg("s", R"("x")"), R"({"s":"\"x\""})");
  EXPECT_EQ(typedArg("s", ""), R"({"s":""})");
}

TEST(ToolCallParser, IntegerParameters) {
  EXPECT_EQ(typedArg("i", "42"), R"({"i":42})");
  EXPECT_EQ(typedArg("i", "-7"), R"({"i":-7})");
  EXPECT_EQ(typedArg("i", " 5\n"), R"({"i":5})");
  EXPECT_EQ(typedArg("i", "18446744073709551615"), R"({"i":18446744073709551615})");
  // Integral floats are integers; other numbers and non-numbers stay strings.
  EXPECT_EQ(typedArg("i", "3.0"), R"({"i":3})");
  EXPECT_EQ(typedArg("i", "1e3"), R"({"i":1000})");
  EXPECT_EQ(typedArg("i", "3.5"), R"({"i":"3.5"})");
  EXPECT_EQ(typedArg("i", "three"), R"({"i":"three"})");
  EXPECT_EQ(typedArg("i", "4 5"), R"({"i":"4 5"})");
  EXPECT_EQ(typedArg("i", "true"), R"({"i":"true"})");
  EXPECT_EQ(typedArg("i", R"("4")"), R"({"i":"\"4\""})");
  EXPECT_EQ(typedArg("i", ""), R"({"i":""})");
}

TEST(ToolCallParser, NumberBooleanNullParameters) {
  EXPECT_EQ(typedArg("n", "2.5"), R"({"n":2.5})");
  EXPECT_EQ(typedArg("n", "7"), R"({"n":7})");
  EXPECT_EQ(typedArg("n", "-1e-3"), R"({"n":-0.001})");
  EXPECT_EQ(typedArg("n", "NaN"), R"({"n":"NaN"})");
  EXPECT_EQ(typedArg("b", "true"), R"({"b":true})");
  EXPECT_EQ(typedArg("b", "false"), R"({"b":false})");
  EXPECT_EQ(typedArg("b", "yes"), R"({"b":"yes"})");
  EXPECT_EQ(typedArg("b", "1"), R"({"b":"1"})");
  EXPECT_EQ(typedArg("z", "null"), R"({"z":null})");
  EXPECT_EQ(typedArg("z", "none"), R"({"z":"none"})");
}

TEST(ToolCallParser, ObjectAndArrayParametersKeepTheirOrder) {
  EXPECT_EQ(typedArg("o", R"({"z": 1, "a": {"nested": [1, 2, {"k": null}]}, "m": "x"})"),
            R"({"o":{"z":1,"a":{"nested":[1,2,{"k":null}]},"m":"x"}})");
  EXPECT_EQ(typedArg("o", "[1]"), R"({"o":"[1]"})");
  EXPECT_EQ(typedArg("o", "{broken"), R"({"o":"{broken"})");
  EXPECT_EQ(typedArg("a", R"(["c", "f", 3])"), R"({"a":["c","f",3]})");
  EXPECT_EQ(typedArg("a", R"({"x": 1})"), R"({"a":"{\"x\": 1}"})");
}

TEST(ToolCallParser, TypeListsEnumsAndAnyOf) {
  EXPECT_EQ(typedArg("iOrNull", "5"), R"({"iOrNull":5})");
  EXPECT_EQ(typedArg("iOrNull", "null"), R"({"iOrNull":null})");
  EXPECT_EQ(typedArg("iOrNull", "x"), R"({"iOrNull":"x"})");
  // With string allowed too, a value that is JSON of another allowed type takes that type.
  EXPECT_EQ(typedArg("sOrI", "5"), R"({"sOrI":5})");
  EXPECT_EQ(typedArg("sOrI", "five"), R"({"sOrI":"five"})");
  EXPECT_EQ(typedArg("sOrI", "true"), R"({"sOrI":"true"})");
  // An enum of strings is a string parameter, whatever the text looks like.
  EXPECT_EQ(typedArg("literal", "1"), R"({"literal":"1"})");
  EXPECT_EQ(typedArg("numEnum", "2.5"), R"({"numEnum":2.5})");
  EXPECT_EQ(typedArg("numEnum", "1"), R"({"numEnum":1})");
  EXPECT_EQ(typedArg("optional", "hello"), R"({"optional":"hello"})");
  EXPECT_EQ(typedArg("optional", "12"), R"({"optional":"12"})");
  EXPECT_EQ(typedArg("optionalInt", "12"), R"({"optionalInt":12})");
  EXPECT_EQ(typedArg("optionalInt", "null"), R"({"optionalInt":null})");
}

TEST(ToolCallParser, UnknownKeysAndUntypedSchemasParseJsonWhenValid) {
  EXPECT_EQ(typedArg("extra", "5"), R"({"extra":5})");
  EXPECT_EQ(typedArg("extra", "[1, 2]"), R"({"extra":[1,2]})");
  EXPECT_EQ(typedArg("extra", R"("quoted")"), R"({"extra":"quoted"})");
  EXPECT_EQ(typedArg("extra", "plain text"), R"({"extra":"plain text"})");
  EXPECT_EQ(typedArg("noType", "true"), R"({"noType":true})");
  EXPECT_EQ(typedArg("weird", "7"), R"({"weird":7})");
  EXPECT_EQ(typedArg("weird", "seven"), R"({"weird":"seven"})");
}

TEST(ToolCallParser, NoToolsMeansUntypedValues) {
  std::string text = call("f", {{"a", "1"}, {"b", "x"}, {"c", R"({"k": [true]})"}, {"d", "1.5"}});
  for (const Json &tools : {Json(), Json::array(), Json::object(), Json("tools")}) {
    Result r = runWhole(tools, text);
    ASSERT_EQ(r.calls.size(), 1u) << tools.dump();
    EXPECT_EQ(r.calls[0].name, "f");
    EXPECT_EQ(r.calls[0].argumentsJson, R"({"a":1,"b":"x","c":{"k":[true]},"d":1.5})");
  }
}

TEST(ToolCallParser, AnotherToolsSchemaDoesNotApply) {
  // "city" is a string of get_weather, not of other_tool.
  Result r = runWhole(weatherTools(), call("other_tool", {{"city", "123"}}));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":123})");
}

TEST(ToolCallParser, BareFunctionObjectsAndMalformedToolsAreTolerated) {
  Json tools = Json::parse(R"([
    "not a tool", 7, {"type": "function"}, {"function": {"name": 5}},
    {"type": "function", "function": {"name": "p", "parameters": "nope"}},
    {"type": "function", "function": {"name": "q", "parameters": {"properties": []}}},
    {"type": "function", "function": {"name": "r", "parameters": {"properties": {"x": 3}}}},
    {"name": "bare", "parameters": {"properties": {"x": {"type": "string"}}}}
  ])");
  for (std::string_view name : {"p", "q", "r"}) {
    Result r = runWhole(tools, call(name, {{"x", "1"}}));
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].argumentsJson, R"({"x":1})") << name;
  }
  Result r = runWhole(tools, call("bare", {{"x", "1"}}));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"x":"1"})");
}

TEST(ToolCallParser, UnicodeValues) {
  Result r =
      runWhole(weatherTools(), call("get_weather", {{"city", "Zürich 東京 🎉"}}) + "Ça marche ✓");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, "{\"city\":\"Zürich 東京 🎉\"}");
  EXPECT_EQ(r.content, "Ça marche ✓");
  EXPECT_EQ(typedArg("o", R"({"名前": "値"})"), R"({"o":{"名前":"値"}})");
}

TEST(ToolCallParser, InvalidUtf8InAValueDoesNotThrow) {
  std::string bad = "a\xff\xfe"
                    "b";
  Result r = runWhole(weatherTools(), call("get_weather", {{"city", bad}}));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, "{\"city\":\"a\xEF\xBF\xBD\xEF\xBF\xBD"
                                      "b\"}");
}

TEST(ToolCallParser, DuplicateKeyKeepsFirstPositionAndLastValue) {
  Result r =
      runWhole(weatherTools(), call("get_weather", {{"city", "A"}, {"days", "1"}, {"city", "B"}}));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"B","days":1})");
}

TEST(ToolCallParser, CallCutOffAtTheEndIsDropped) {
  Result r = runWhole(weatherTools(),
                      "Checking " + call("get_weather", {{"city", "Paris"}}) +
                          " and <tool_call>get_weather<arg_key>city</arg_key><arg_value>Ro");
  EXPECT_EQ(r.content, "Checking  and ");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].argumentsJson, R"({"city":"Paris"})");
  // Cut off right after the opener, or inside the closer.
  EXPECT_EQ(runWhole(Json(), "x<tool_call>").content, "x");
  EXPECT_EQ(runWhole(Json(), "x<tool_call>f</tool_cal").calls.size(), 0u);
}

TEST(ToolCallParser, PartialOpenerIsHeldBackThenReleased) {
  ToolCallParser parser(Json(), 0);
  EXPECT_EQ(parser.feed("Hello <tool_").content, "Hello ");
  EXPECT_EQ(parser.feed("cal").content, "");
  EXPECT_EQ(parser.feed("m").content, "<tool_calm");
  EXPECT_EQ(parser.feed(" <").content, " ");
  // At the end a partial opener is text.
  ToolCallParser::Delta d = parser.finish();
  EXPECT_EQ(d.content, "<");
  EXPECT_TRUE(d.calls.empty());
}

TEST(ToolCallParser, CallIsHeldUntilItCloses) {
  ToolCallParser parser(weatherTools(), 0);
  ToolCallParser::Delta d = parser.feed("a<tool_call>get_weather<arg_key>city</arg_key>");
  EXPECT_EQ(d.content, "a");
  EXPECT_TRUE(d.calls.empty());
  d = parser.feed("<arg_value>Paris</arg_value></tool_");
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  d = parser.feed("call>b");
  EXPECT_EQ(d.content, "b");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].argumentsJson, R"({"city":"Paris"})");
  d = parser.finish();
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
}

TEST(ToolCallParser, MalformedCallsBecomeContent) {
  const std::vector<std::string> malformed = {
      "<tool_call></tool_call>",
      "<tool_call>  \n</tool_call>",
      "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
      "<tool_call>get weather<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
      "<tool_call>f<arg_value>1</arg_value></tool_call>",
      "<tool_call>f<arg_key>a<arg_value>1</arg_value></tool_call>",
      "<tool_call>f<arg_key>a</arg_key>1</tool_call>",
      "<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>",
      "<tool_call>f<arg_key> </arg_key><arg_value>1</arg_value></tool_call>",
      "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>",
      "<tool_call>f<arg_key>a</arg_key>x<arg_value>1</arg_value></tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
      "<tool_call>f<tool_call>g</tool_call>",
  };
  for (const std::string &bad : malformed) {
    std::string text = "before " + bad + " middle " + call("get_weather", {{"city", "X"}}) + " end";
    Result r = runWhole(weatherTools(), text);
    EXPECT_EQ(r.content, "before " + bad + " middle  end");
    ASSERT_EQ(r.calls.size(), 1u) << bad;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    // A malformed call uses no id: the good call gets the first one.
    EXPECT_EQ(r.calls[0].id, runWhole(Json(), call("x", {})).calls[0].id);
  }
}

TEST(ToolCallParser, TextThatIsNotATagPassesThrough) {
  std::string text = "a </tool_call> b <tool_callx> c <TOOL_CALL> d <arg_key>k</arg_key> <";
  Result r = runWhole(weatherTools(), text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
}

TEST(ToolCallParser, IdsAreDeterministicPerSeedAndUniqueWithinAParser) {
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += "<tool_call>f</tool_call>";
  }
  Result a = run(Json(), {text}, 0);
  Result b = run(Json(), {text}, 0);
  Result c = run(Json(), {text}, 1);
  ASSERT_EQ(a.calls.size(), 2000u);
  std::set<std::string> ids;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_TRUE(isCallId(a.calls[i].id)) << a.calls[i].id;
    EXPECT_EQ(a.calls[i].id, b.calls[i].id);
    ids.insert(a.calls[i].id);
    ids.insert(c.calls[i].id);
  }
  EXPECT_EQ(ids.size(), 4000u);
}

TEST(ToolCallParser, LongCallFedAByteAtATime) {
  std::string value(200000, 'x');
  for (size_t i = 0; i < value.size(); i += 97) {
    value[i] = "<>/\n"[i % 4];
  }
  std::string text = "pre" + call("get_weather", {{"city", value}}) + "post";
  ToolCallParser parser(weatherTools(), 0);
  Result r;
  for (char ch : text) {
    ToolCallParser::Delta d = parser.feed(std::string_view(&ch, 1));
    r.content += d.content;
    for (ToolCall &c : d.calls) {
      r.calls.push_back(std::move(c));
    }
  }
  r.content += parser.finish().content;
  EXPECT_EQ(r.content, "prepost");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(Json::parse(r.calls[0].argumentsJson)["city"], value);
}

// A reply with content, good calls, a malformed call and a cut-off call, cut into two and three
// pieces at every position, and into single bytes: always what one feed gives, ids included.
TEST(ToolCallParser, EverySplitMatchesOneFeed) {
  const std::string reply =
      "Sure.\n" + call("get_weather", {{"city", "Zürich"}, {"days", "2"}}) + "\n<tool_" +
      "<tool_call>bad name<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>" +
      call("typed", {{"o", R"({"a": [1]})"}, {"s", "</arg"}}) + " </tool_call> <tool_call>cut";
  const Json tools = weatherTools();
  Result whole = runWhole(tools, reply);
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.content,
            "Sure.\n\n<tool_<tool_call>bad "
            "name<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> </tool_call> ");
  for (size_t i = 0; i <= reply.size(); ++i) {
    for (size_t j = i; j <= reply.size(); ++j) {
      Result r = run(tools, cut(reply, {i, j}));
      ASSERT_EQ(r.content, whole.content) << "cut at " << i << "," << j;
      ASSERT_EQ(describe(r.calls), describe(whole.calls)) << "cut at " << i << "," << j;
    }
  }
  std::vector<size_t> everyByte;
  for (size_t i = 1; i < reply.size(); ++i) {
    everyByte.push_back(i);
  }
  Result bytes = run(tools, cut(reply, everyByte));
  EXPECT_EQ(bytes.content, whole.content);
  EXPECT_EQ(describe(bytes.calls), describe(whole.calls));
}

TEST(ToolCallParser, RandomSplitsMatchOneFeed) {
  SplitMix64 rng(7);
  const std::string alphabet[] = {"<tool_call>", "</tool_call>",
                                  "<arg_key>",   "</arg_key>",
                                  "<arg_value>", "</arg_value>",
                                  "<",           "</",
                                  "<tool_",      "</tool_call",
                                  "f",           "x",
                                  "1",           " ",
                                  "\n",          "é",
                                  "{\"k\":2}"};
  Json tools = weatherTools();
  for (int round = 0; round < 3000; ++round) {
    std::string reply;
    size_t parts = rng.below(25);
    for (size_t k = 0; k < parts; ++k) {
      reply += alphabet[rng.below(std::size(alphabet))];
    }
    Result whole = runWhole(tools, reply);
    std::vector<size_t> at;
    size_t pos = 0;
    while (true) {
      pos += rng.below(8);
      if (pos >= reply.size()) {
        break;
      }
      at.push_back(pos);
    }
    Result r = run(tools, cut(reply, at));
    ASSERT_EQ(r.content, whole.content) << reply;
    ASSERT_EQ(describe(r.calls), describe(whole.calls)) << reply;
  }
}

} // namespace
} // namespace glm::server
