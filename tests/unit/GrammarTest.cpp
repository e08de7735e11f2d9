// The grammar engine without a model: what each front end accepts and refuses (run byte by byte),
// masks against a brute-force reference on the tiny fixture's tokenizer and a large synthetic
// byte-level vocabulary, and the bounds that refuse exploding inputs.
#include "server/grammar/JsonSchema.h"
#include "server/grammar/StructuredOutputs.h"
#include "server/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>

namespace glm::grammar {
namespace {

using Kind = ConstraintSpec::Kind;
using Json = nlohmann::ordered_json;

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// A vocabulary of the 256 single bytes (ids 0..255) and six special tokens (256..261).
std::shared_ptr<const TokenVocabulary> byteVocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) {
    bytes.push_back(std::string(1, static_cast<char>(b)));
  }
  bytes.resize(262);
  return std::make_shared<TokenVocabulary>(std::move(bytes),
                                           std::vector<int32_t>{256, 257, 258, 259, 260, 261});
}

ConstraintSpec spec(Kind kind, std::string text) {
  ConstraintSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.path = "field";
  return s;
}

std::shared_ptr<const CompiledGrammar> compileOrDie(const ConstraintSpec &s,
                                                    std::shared_ptr<const TokenVocabulary> v,
                                                    ToolCallTokens tokens = {}) {
  auto built = StructuredOutputs::build(s, tokens, {});
  if (auto *error = std::get_if<GrammarError>(&built)) {
    ADD_FAILURE() << error->path << ": " << error->message;
    return nullptr;
  }
  return std::make_shared<CompiledGrammar>(std::move(std::get<Grammar>(built)), std::move(v));
}

/// Whether the grammar takes `text` whole (fed byte by byte), ending there.
bool accepts(const std::shared_ptr<const CompiledGrammar> &g, std::string_view text) {
  Matcher m(g);
  for (char c : text) {
    if (!m.advance(static_cast<uint8_t>(c))) {
      return false;
    }
  }
  return m.accepting();
}

GrammarError errorOf(const ConstraintSpec &s, GrammarBounds bounds = {}) {
  auto built = StructuredOutputs::build(s, {}, bounds);
  if (auto *error = std::get_if<GrammarError>(&built)) {
    return *error;
  }
  ADD_FAILURE() << "compiled: " << s.text;
  return {};
}

TEST(Grammar, RegexesMatchWhole) {
  auto v = byteVocabulary();
  auto g = compileOrDie(spec(Kind::Regex, "^(ab|c)+[0-9]{2,3}x?$"), v);
  EXPECT_TRUE(accepts(g, "ab12"));
  EXPECT_TRUE(accepts(g, "cabc123x"));
  EXPECT_FALSE(accepts(g, "ab1"));
  EXPECT_FALSE(accepts(g, "ab1234"));
  EXPECT_FALSE(accepts(g, "12"));
  auto classes = compileOrDie(spec(Kind::Regex, R"(\d+\.\w\s[^a-c]\x41\u00e9.)"), v);
  EXPECT_TRUE(accepts(classes, "12.z d"
                               "A\xC3\xA9\xE2\x82\xAC"));
  EXPECT_FALSE(accepts(classes, "12.z b"
                                "A\xC3\xA9q"));
  EXPECT_FALSE(accepts(classes, "12.z dA\xC3\xA9\n")); // '.' is not a newline
  auto email = compileOrDie(spec(Kind::Regex, "[a-z]+@[a-z]+\\.(com|org)"), v);
  EXPECT_TRUE(accepts(email, "joe@example.org"));
  EXPECT_FALSE(accepts(email, "joe@example.net"));
}

TEST(Grammar, ChoicesAndGbnf) {
  auto v = byteVocabulary();
  ConstraintSpec choice = spec(Kind::Choice, "");
  choice.choices = {"yes", "no", "maybe not"};
  auto c = compileOrDie(choice, v);
  EXPECT_TRUE(accepts(c, "yes"));
  EXPECT_TRUE(accepts(c, "maybe not"));
  EXPECT_FALSE(accepts(c, "maybe"));
  auto g = compileOrDie(spec(Kind::Gbnf, R"g(# arithmetic
root ::= expr
expr ::= term ( [+-] term )*
term ::= num | "(" expr ")"
num  ::= [0-9]{1,3} "\x21"?
)g"),
                        v);
  EXPECT_TRUE(accepts(g, "1+(22-3)"));
  EXPECT_TRUE(accepts(g, "((1!))"));
  EXPECT_FALSE(accepts(g, "1+"));
  EXPECT_FALSE(accepts(g, "(1"));
  EXPECT_FALSE(accepts(g, "1234"));
}

TEST(Grammar, JsonSchemaAcceptsValidAndRejectsInvalid) {
  auto v = byteVocabulary();
  const std::string schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
      "when": {"type": "string", "format": "date"},
      "ok": {"type": ["boolean", "null"]}
    },
    "required": ["name", "tags"]
  })";
  auto g = compileOrDie(spec(Kind::JsonSchema, schema), v);
  EXPECT_TRUE(accepts(g, R"({"name":"abc","tags":["a"]})"));
  EXPECT_TRUE(accepts(g, "{ \"name\" : \"a\\\"\" ,\n  \"age\": -12, \"tags\": [3, \"b\"], "
                         "\"when\": \"2024-02-29\", \"ok\": null}"));
  EXPECT_FALSE(accepts(g, R"({"tags":["a"]})"));                      // name required
  EXPECT_FALSE(accepts(g, R"({"name":"abcdef","tags":["a"]})"));      // too long
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":[]})"));              // minItems
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":["a","a","a"]})"));   // maxItems
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":["c"]})"));           // enum
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":["a"],"x":1})"));     // no additional
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":["a"],"age":1.5})")); // integer
  EXPECT_FALSE(accepts(g, R"({"name":"a","tags":["a"],"when":"2024-13-01"})"));
  EXPECT_FALSE(accepts(g, R"({"tags":["a"],"name":"a"})")); // schema order
  // Whitespace is bounded between tokens.
  EXPECT_FALSE(
      accepts(g, "{" + std::string(kMaxJsonWhitespace + 1, ' ') + R"("name":"a","tags":["a"]})"));
}

TEST(Grammar, JsonSchemaRefsAndRecursion) {
  auto v = byteVocabulary();
  const std::string schema = R"({
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "string", "format": "uuid"}]
  })";
  auto g = compileOrDie(spec(Kind::JsonSchema, schema), v);
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"));
  EXPECT_TRUE(accepts(g, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"kids":[]}]})"));
  auto objects = compileOrDie(spec(Kind::JsonObject, ""), v);
  EXPECT_TRUE(accepts(objects, R"({"a":[1,{"b":null}],"c":"\u00e9"})"));
  EXPECT_FALSE(accepts(objects, R"([1])"));
  EXPECT_FALSE(accepts(objects, R"({"a":})"));
}

TEST(Grammar, ToolCallsFollowTheToolSchemas) {
  auto v = byteVocabulary();
  ConstraintSpec s = spec(Kind::ToolCall, "");
  s.tools = Json::parse(R"([{"type":"function","function":{"name":"get","parameters":{
    "type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]},
    "days":{"type":"integer"}},"required":["city"]}}}])");
  s.parallelToolCalls = false;
  const ToolCallTokens t{256, 257, 258, 259, 260, 261}; // the markers' stand-ins
  auto g = compileOrDie(s, v, t);
  Matcher m(g);
  auto feed = [&](std::string_view text) {
    for (char c : text) {
      if (!m.advance(static_cast<uint8_t>(c))) {
        return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(m.advance(256));
  ASSERT_TRUE(feed("get"));
  EXPECT_FALSE(m.allows(261)); // city is required
  ASSERT_TRUE(m.advance(258));
  ASSERT_TRUE(feed("city"));
  ASSERT_TRUE(m.advance(259));
  ASSERT_TRUE(m.advance(260));
  EXPECT_FALSE(m.allows('"')); // a string argument is raw
  ASSERT_TRUE(feed("Rome"));
  ASSERT_TRUE(m.advance(261));
  ASSERT_TRUE(m.advance(257));
  EXPECT_TRUE(m.finished()); // one call only
}

TEST(Grammar, BadInputNamesThePathAndBounds) {
  GrammarError e = errorOf(spec(Kind::JsonSchema, R"({"properties": {"a": {"type": "strin"}}})"));
  EXPECT_EQ(e.path, "field.properties.a.type");
  e = errorOf(spec(Kind::JsonSchema, R"({"type":"object","properties":{"b":{"minimum": 3}}})"));
  EXPECT_EQ(e.path, "field.properties.b.minimum");
  e = errorOf(spec(Kind::JsonSchema, R"({"$ref": "#/$defs/missing"})"));
  EXPECT_EQ(e.path, "field.$ref");
  e = errorOf(spec(Kind::JsonSchema, R"({"type":"array","maxItems": 100000})"));
  EXPECT_EQ(e.path, "field.maxItems");
  EXPECT_NE(e.message.find("grammar.maxRepeat"), std::string::npos) << e.message;
  Json huge = {{"enum", Json::array()}};
  for (int i = 0; i < 5000; ++i) {
    huge["enum"].push_back(i);
  }
  e = errorOf(spec(Kind::JsonSchema, huge.dump()));
  EXPECT_EQ(e.path, "field.enum");
  EXPECT_NE(e.message.find("grammar.maxAlternatives"), std::string::npos) << e.message;
  // Deep nesting, spelled out rather than through $ref.
  std::string deep = "true";
  for (int i = 0; i < 100; ++i) {
    deep = R"({"type":"array","items":)" + deep + "}";
  }
  e = errorOf(spec(Kind::JsonSchema, deep));
  EXPECT_NE(e.message.find("grammar.maxNesting"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::Regex, "a{0,100000}"));
  EXPECT_NE(e.message.find("grammar.maxRepeat"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::Regex, "(ab"));
  EXPECT_EQ(e.path, "field");
  EXPECT_NE(e.message.find("offset 3"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::Regex, "(a)\\1"));
  EXPECT_NE(e.message.find("backreference"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::Gbnf, "root ::= a\na ::= a \"x\" | \"y\""));
  EXPECT_NE(e.message.find("left-recursive"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::Gbnf, "root ::= undefined"));
  EXPECT_NE(e.message.find("'undefined'"), std::string::npos) << e.message;
  e = errorOf(spec(Kind::JsonSchema, "{not json"));
  EXPECT_EQ(e.path, "field");
  GrammarBounds small;
  small.maxRules = 50;
  e = errorOf(spec(Kind::JsonObject, ""), small);
  EXPECT_NE(e.message.find("grammar.maxRules"), std::string::npos) << e.message;
}

//===------------------------------------------------------------------------------------------===//
// Masks against the brute-force reference
//===------------------------------------------------------------------------------------------===//

/// Walks `steps` random allowed tokens (after `prefix`, fed a byte token at a time); at every state
/// the mask must equal the reference that runs each token through the matcher alone. Returns the
/// number of states compared; `firstMask` gets the first mask's MaskStats.
int compareMasks(const std::shared_ptr<const CompiledGrammar> &g, uint32_t seed, int steps,
                 std::vector<int32_t> eos, std::string_view prefix = {},
                 MaskStats *firstMask = nullptr) {
  const TokenVocabulary &v = g->vocabulary();
  Matcher m(g);
  for (char c : prefix) {
    EXPECT_TRUE(m.advance(static_cast<uint8_t>(c))) << "the prefix " << prefix;
  }
  std::mt19937 rng(seed);
  int compared = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<uint32_t> mask(v.words(), 0);
    m.fillMask(mask, eos);
    if (firstMask && step == 0) {
      *firstMask = m.lastMask();
    }
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.size(); ++id) {
      const bool expected =
          m.allows(id) || (m.accepting() && std::count(eos.begin(), eos.end(), id));
      const bool got = (mask[id / 32] >> (id % 32)) & 1;
      EXPECT_EQ(got, expected) << "token " << id << " '" << v.bytes(id) << "' at step " << step;
      if (got != expected) {
        return compared;
      }
      if (expected && !std::count(eos.begin(), eos.end(), id)) {
        allowed.push_back(id);
      }
    }
    ++compared;
    if (allowed.empty()) {
      break;
    }
    // Prefer structure closers now and then so documents finish.
    const int32_t pick = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.advance(pick));
  }
  return compared;
}

const char *kMaskSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string", "maxLength": 12},
    "kind": {"enum": ["alpha", "beta", "gamma delta"]},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
    "when": {"type": "string", "format": "date-time"}
  },
  "required": ["id", "kind"]
})";

TEST(GrammarMask, EqualsBruteForceOnTheTinyTokenizer) {
  Expected<server::Tokenizer> tokenizer = server::Tokenizer::fromModelDir(kTiny.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().toString();
  std::vector<std::string> bytes;
  std::vector<int32_t> special;
  for (size_t id = 0; id < tokenizer->idCount(); ++id) {
    bytes.emplace_back(tokenizer->tokenBytes(static_cast<int32_t>(id)));
  }
  for (const server::AddedToken &t : tokenizer->addedTokens()) {
    special.push_back(t.id);
  }
  auto v = std::make_shared<TokenVocabulary>(std::move(bytes), special);
  const std::vector<int32_t> eos = {*tokenizer->tokenToId("<|user|>")};
  int states = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    states += compareMasks(compileOrDie(spec(Kind::JsonSchema, kMaskSchema), v), seed, 40, eos);
  }
  states +=
      compareMasks(compileOrDie(spec(Kind::Regex, "(foo|ba[rz])+ [a-f0-9]{4,8}!?"), v), 1, 20, eos);
  states += compareMasks(compileOrDie(spec(Kind::JsonObject, ""), v), 2, 40, eos);
  EXPECT_GT(states, 150);
}

/// Every byte (ids 0..255), then random strings over a JSON-heavy alphabet and over all bytes, then
/// four specials (the last one the end of sequence).
std::shared_ptr<const TokenVocabulary> syntheticVocabulary(std::vector<std::string> extra = {}) {
  std::mt19937 rng(7);
  std::set<std::string> seen;
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) {
    bytes.emplace_back(1, static_cast<char>(b));
    seen.insert(bytes.back());
  }
  const std::string alphabet = "{}[]\":, \n\t0123456789-+.eEabcdefghijklmnopqrstuvwxyz_\\TZ";
  while (bytes.size() < 30000) {
    const size_t n = 2 + rng() % 7;
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      s += rng() % 8 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    if (seen.insert(s).second) {
      bytes.push_back(s);
    }
  }
  bytes.insert(bytes.end(), extra.begin(), extra.end());
  bytes.resize(bytes.size() + 4); // specials without bytes
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  return std::make_shared<TokenVocabulary>(std::move(bytes), std::vector<int32_t>{eos});
}

TEST(GrammarMask, EqualsBruteForceOnALargeSyntheticVocabulary) {
  auto v = syntheticVocabulary();
  const int32_t eos = v->size() - 1;
  int states = 0;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    states += compareMasks(compileOrDie(spec(Kind::JsonSchema, kMaskSchema), v), seed, 25, {eos});
  }
  states +=
      compareMasks(compileOrDie(spec(Kind::Regex, "[a-z]+(,[0-9]{1,3})*\\."), v), 3, 20, {eos});
  EXPECT_GT(states, 60);
}

// The paths the inlined character rules and the context tables (TokenMask.h) take: strings nested
// in arrays and objects, bounded strings, recursion through $ref, regex and GBNF rules that are
// spliced into their callers, and stacks deeper than kMaxContextDepth.
TEST(GrammarMask, EqualsBruteForceThroughInlinedRulesAndDeepContexts) {
  // Runs of closing brackets, which only stacks of many open lists decide.
  std::vector<std::string> closers;
  for (size_t n : {8, 14, 19, 20, 21}) {
    closers.push_back(std::string(n, ']'));
    closers.push_back("b" + std::string(n, ']') + ",c");
  }
  auto v = syntheticVocabulary(closers);
  const int32_t eos = v->size() - 1;
  int states = 0;
  const char *nested = R"({
    "type": "object",
    "properties": {
      "rows": {"type": "array", "items": {"type": "object", "properties": {
        "s": {"type": "string"},
        "short": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 4},
        "ok": {"type": "boolean"}}}},
      "word": {"type": "string", "minLength": 2, "maxLength": 6},
      "e": {"enum": ["a\"b", "c\\d", "x y"]}
    }
  })";
  for (uint32_t seed = 0; seed < 3; ++seed) {
    states += compareMasks(compileOrDie(spec(Kind::JsonSchema, nested), v), seed, 30, {eos});
    states += compareMasks(compileOrDie(spec(Kind::JsonSchema, nested), v), seed, 20, {eos},
                           R"({"rows":[{"s":"a\"b)");
  }
  const char *recursive = R"({
    "$defs": {"node": {"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"
  })";
  auto tree = compileOrDie(spec(Kind::JsonSchema, recursive), v);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    states += compareMasks(tree, seed, 30, {eos});
    // Inside a string eight objects down: the string's closing quote and what may follow it
    // depend on frames far below the top.
    states += compareMasks(tree, seed, 15, {eos},
                           R"({"kids":[{"kids":[{"kids":[{"kids":[{"kids":[{"kids":[{"kids":[)"
                           R"({"name":"ab)");
  }
  states += compareMasks(
      compileOrDie(spec(Kind::Regex, "([a-z]{1,3}\\.)+[a-z]{2,4}|\"([^\"\\\\]|\\\\.)*\""), v), 4,
      20, {eos});
  const char *gbnf = R"g(root ::= item ("," ws item)*
ws ::= [ \t]?
item ::= word | quoted | list
word ::= [a-z] [a-z0-9_]*
quoted ::= "\"" chr* "\""
chr ::= [^"\\] | "\\" ["\\nt]
list ::= "[" root "]"
)g";
  auto g = compileOrDie(spec(Kind::Gbnf, gbnf), v);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    states += compareMasks(g, seed, 25, {eos});
  }
  // Twenty open lists: the closing brackets a token may hold are decided below
  // kMaxContextDepth frames, so the mask walks them against the real stack.
  MaskStats deep;
  states += compareMasks(g, 5, 15, {eos}, std::string(20, '[') + "ab", &deep);
  EXPECT_GT(deep.walked, 0u);
  EXPECT_GT(states, 250);
}

// Inside a JSON string only tokens that hold a byte a string character cannot be (a quote, a
// backslash, a control byte, a byte that breaks UTF-8) may leave the string's frame, so only they
// are uncertain in the top frame's tables; the rest are decided by the tables alone.
TEST(GrammarMask, InsideAStringOnlyTokensThatMayEndItAreUncertain) {
  auto v = syntheticVocabulary();
  size_t mayEnd = 0, multiByte = 0;
  for (int32_t id = 0; id < v->size(); ++id) {
    const std::string_view b = v->bytes(id);
    const auto first = b.empty() ? 0 : static_cast<uint8_t>(b[0]);
    multiByte += b.size() >= 2 && ((first >= 0x20 && first < 0x80 && first != '"') ||
                                   (first >= 0xC2 && first <= 0xF4));
    mayEnd += std::any_of(b.begin(), b.end(), [](char c) {
      const auto u = static_cast<uint8_t>(c);
      return c == '"' || c == '\\' || u < 0x20 || u >= 0x80;
    });
  }
  const std::pair<const char *, const char *> cases[] = {
      {R"({"type": "string"})", "\"ab"},
      {R"({"type": "string", "maxLength": 30})", "\"ab"},
      {R"({"type": "array", "items": {"type": "string"}})", "[\"ab"}};
  for (const auto &[schema, prefix] : cases) {
    auto g = compileOrDie(spec(Kind::JsonSchema, schema), v);
    Matcher m(g);
    for (char c : std::string_view(prefix)) {
      ASSERT_TRUE(m.advance(static_cast<uint8_t>(c)));
    }
    std::vector<uint32_t> mask(v->words(), 0);
    m.fillMask(mask, {});
    EXPECT_LE(m.lastMask().topUncertain, mayEnd) << schema;
    // What the top frames left undecided when a string character was a rule of its own: every
    // token of two or more bytes that a string may start with.
    EXPECT_LT(mayEnd, multiByte) << schema;
    EXPECT_EQ(m.lastMask().walked, 0u) << schema;
  }
}

TEST(StructuredOutputsCache, DropsTheLeastRecentlyUsedGrammarsWhenTheirTablesExceedTheBytes) {
  // The tables fill as masks are asked for: a mask makes the first grammar's bytes count.
  auto v = byteVocabulary();
  auto filled = [&](StructuredOutputs &outputs, const ConstraintSpec &s) {
    auto compiled = std::get<std::shared_ptr<const CompiledGrammar>>(outputs.compile(s));
    Matcher m(compiled);
    std::vector<uint32_t> mask(v->words());
    m.fillMask(mask, {});
    EXPECT_GT(compiled->tableBytes(), 0u);
    return compiled;
  };
  const ConstraintSpec a = spec(Kind::Regex, "[a-z]+"), b = spec(Kind::Regex, "[0-9]+");
  StructuredOutputs roomy(v, {});
  auto first = filled(roomy, a);
  filled(roomy, b);
  EXPECT_EQ(std::get<std::shared_ptr<const CompiledGrammar>>(roomy.compile(a)), first)
      << "both fit: the first stays cached";
  StructuredOutputs tight(v, {}, {}, /*cacheBytes=*/1);
  first = filled(tight, a);
  auto second = filled(tight, b); // over the bytes: the least recently used (a) goes
  EXPECT_EQ(std::get<std::shared_ptr<const CompiledGrammar>>(tight.compile(b)), second)
      << "the newest always stays";
  EXPECT_NE(std::get<std::shared_ptr<const CompiledGrammar>>(tight.compile(a)), first)
      << "the dropped one is compiled anew";
}

} // namespace
} // namespace glm::grammar
