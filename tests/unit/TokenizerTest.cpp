// Tests of the byte-level BPE tokenizer against Hugging Face goldens, synthetic tokenizers and
// hostile tokenizer.json files, and of the streaming detokenizer.
#include "server/tokenizer/Tokenizer.h"
#include "base/Random.h"
#include "base/Utf8.h"
#include "server/tokenizer/ByteLevel.h"
#include "server/tokenizer/Regex.h"
#include "server/tokenizer/StreamingDetokenizer.h"
#include "tools/synth/SynthTokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace glm::server {
namespace {

using nlohmann::json;

const std::filesystem::path kTinyDir = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

json readJson(const std::filesystem::path &path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  json value = json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(value.is_discarded()) << path;
  return value;
}

Tokenizer loadTiny() {
  Expected<Tokenizer> tokenizer = Tokenizer::fromModelDir(kTinyDir.string());
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status().toString();
    std::abort();
  }
  return std::move(tokenizer).value();
}

/// A tokenizer built from JSON that the test expects to load.
Tokenizer load(const json &config) {
  Expected<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status().toString();
    std::abort();
  }
  return std::move(tokenizer).value();
}

/// The Status of loading JSON that the test expects to be refused.
Status loadError(const json &config) {
  Expected<Tokenizer> tokenizer = Tokenizer::fromJson(config.dump());
  EXPECT_FALSE(tokenizer.ok()) << "loaded a tokenizer.json that should be refused";
  return tokenizer.status();
}

std::vector<TokenId> encodeOk(const Tokenizer &tokenizer, std::string_view text,
                              bool addSpecialTokens = false) {
  Expected<std::vector<TokenId>> ids = tokenizer.encode(text, addSpecialTokens);
  EXPECT_TRUE(ids.ok()) << ids.status().toString();
  return ids.ok() ? *ids : std::vector<TokenId>();
}

std::string decodeOk(const Tokenizer &tokenizer, const std::vector<TokenId> &ids,
                     bool skipSpecialTokens = false) {
  Expected<std::string> text = tokenizer.decode(ids, skipSpecialTokens);
  EXPECT_TRUE(text.ok()) << text.status().toString();
  return text.ok() ? *text : std::string();
}

std::string synthJson(const glm53::SynthTokenizerOptions &options) {
  Expected<std::string> text = glm53::makeSynthTokenizerJson(options);
  EXPECT_TRUE(text.ok()) << text.status().toString();
  return text.ok() ? *text : std::string();
}

/// A minimal byte-level BPE tokenizer.json: the 256 byte tokens (ids in byte order), then
/// `extraTokens`, with `merges`.
json minimalTokenizer(const std::vector<std::string> &extraTokens,
                      const std::vector<std::pair<std::string, std::string>> &merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[byteLevelEncode(std::string(1, static_cast<char>(b)))] = b;
  }
  for (size_t i = 0; i < extraTokens.size(); ++i) {
    vocab[extraTokens[i]] = 256 + i;
  }
  json mergeList = json::array();
  for (const auto &[a, b] : merges) {
    mergeList.push_back({a, b});
  }
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", mergeList}}},
  };
}

json addedToken(int64_t id, const std::string &content, bool special, bool lstrip = false,
                bool rstrip = false, bool singleWord = false, bool normalized = false) {
  return json{{"id", id},          {"content", content}, {"single_word", singleWord},
              {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
              {"special", special}};
}

//===------------------------------------------------------------------------------------===//
// Hugging Face goldens
//===------------------------------------------------------------------------------------===//

TEST(TokenizerTest, MatchesHuggingFaceGoldenCases) {
  Tokenizer tokenizer = loadTiny();
  json golden = readJson(kTinyDir / "tokenizer_golden.json");
  const json &cases = golden["cases"];
  ASSERT_GE(cases.size(), 50u);
  size_t idsMatched = 0;
  size_t decodedMatched = 0;
  size_t skipMatched = 0;
  for (const json &c : cases) {
    const std::string text = c["text"];
    const std::vector<TokenId> expectedIds = c["ids"];
    std::vector<TokenId> ids = encodeOk(tokenizer, text);
    EXPECT_EQ(ids, expectedIds) << "text: " << json(text).dump();
    idsMatched += ids == expectedIds;
    std::string decoded = decodeOk(tokenizer, expectedIds);
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << json(text).dump();
    decodedMatched += decoded == c["decoded"].get<std::string>();
    std::string skipped = decodeOk(tokenizer, expectedIds, /*skipSpecialTokens=*/true);
    EXPECT_EQ(skipped, c["decoded_skip_special"].get<std::string>()) << json(text).dump();
    skipMatched += skipped == c["decoded_skip_special"].get<std::string>();
  }
  std::printf("golden: %zu/%zu ids, %zu/%zu decoded, %zu/%zu decoded_skip_special\n", idsMatched,
              cases.size(), decodedMatched, cases.size(), skipMatched, cases.size());
}

TEST(TokenizerTest, SpecialTokenIdsMatchGolden) {
  Tokenizer tokenizer = loadTiny();
  json golden = readJson(kTinyDir / "tokenizer_golden.json");
  ASSERT_EQ(golden["special_token_ids"].size(), 36u);
  for (const auto &[content, id] : golden["special_token_ids"].items()) {
    EXPECT_EQ(tokenizer.tokenToId(content), id.get<TokenId>()) << content;
    EXPECT_TRUE(tokenizer.isSpecial(id.get<TokenId>())) << content;
    EXPECT_EQ(tokenizer.idToToken(id.get<TokenId>()), content);
    EXPECT_EQ(encodeOk(tokenizer, content), std::vector<TokenId>{id.get<TokenId>()}) << content;
  }
  EXPECT_EQ(tokenizer.idCount(), 1024u);
  EXPECT_FALSE(tokenizer.isSpecial(64)); // "a"
}

TEST(TokenizerTest, MatchesChatTemplateGolden) {
  Tokenizer tokenizer = loadTiny();
  json golden = readJson(kTinyDir / "chat_template_golden.json");
  ASSERT_FALSE(golden["cases"].empty());
  size_t matched = 0;
  for (const json &c : golden["cases"]) {
    const std::string rendered = c["rendered"];
    const std::vector<TokenId> expected = c["ids"];
    std::vector<TokenId> ids = encodeOk(tokenizer, rendered);
    EXPECT_EQ(ids, expected) << c["conversation"] << " agp=" << c["add_generation_prompt"];
    matched += ids == expected;
    EXPECT_EQ(decodeOk(tokenizer, expected), rendered);
  }
  std::printf("chat template golden: %zu/%zu ids\n", matched, golden["cases"].size());
}

TEST(TokenizerTest, LegacyMergeStringsEncodeTheSame) {
  // tokenizer.json has spelled merges as "a b" strings and as ["a", "b"] pairs.
  json config = readJson(kTinyDir / "tokenizer.json");
  json legacy = config;
  json strings = json::array();
  for (const json &merge : config["model"]["merges"]) {
    strings.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
  }
  legacy["model"]["merges"] = strings;
  Tokenizer pairs = load(config);
  Tokenizer lines = load(legacy);
  json golden = readJson(kTinyDir / "tokenizer_golden.json");
  for (const json &c : golden["cases"]) {
    EXPECT_EQ(encodeOk(lines, c["text"].get<std::string>()),
              encodeOk(pairs, c["text"].get<std::string>()));
  }
}

//===------------------------------------------------------------------------------------===//
// Synthetic tokenizers (what `glmc synth` writes)
//===------------------------------------------------------------------------------------===//

std::vector<std::string> roundTripStrings() {
  std::vector<std::string> strings = {
      "",
      " ",
      "Hello, world! How's it going? I'll be there; we've done it.",
      "日本語のテキストと中文文本，还有한국어 문장.",
      "emoji 🙂🚀👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵",
      "combining é ä ñ and Ω≈ç√∫",
      "Привет, мир! مرحبا بالعالم שלום עולם",
      "tabs\tand\nnew\r\nlines\n\n\n   trailing   ",
      std::string("nul\0byte and \x01\x02\x7f controls", 25),
      "\u0085NEL \u180eMVS \u2028LS \u2029PS \u00a0NBSP \u3000ideographic",
      "zero\u200bwidth\u200d joiner",
      "\xf4\x8f\xbf\xbf max code point and \xef\xbf\xbd replacement",
      "<|user|>Hi<|assistant|><think>reasoning</think>answer<|endoftext|>",
      "<|user <|user|| |user|> <think",
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
      "x=y+z*(a-b)/c; // comment\n    return x ** 2\n",
      "1234567890 3.14159 1e-9 0x7fff $19.99 50%",
      std::string(3000, 'a'),
      std::string(500, ' ') + "end",
  };
  // Random code points from every plane we care about, including surrogate-adjacent ones.
  SplitMix64 rng(42);
  for (int n = 0; n < 200; ++n) {
    std::string s;
    size_t length = 1 + rng.below(40);
    for (size_t i = 0; i < length; ++i) {
      uint32_t cp;
      switch (rng.below(6)) {
      case 0:
        cp = static_cast<uint32_t>(rng.below(0x80));
        break;
      case 1:
        cp = 0x80 + static_cast<uint32_t>(rng.below(0x780));
        break;
      case 2:
        cp = 0x800 + static_cast<uint32_t>(rng.below(0xD000));
        break;
      case 3:
        cp = 0xE000 + static_cast<uint32_t>(rng.below(0x2000));
        break;
      case 4:
        cp = 0x10000 + static_cast<uint32_t>(rng.below(0x100000));
        break;
      default:
        cp = " \n\t'<|>"[rng.below(8)];
        break;
      }
      appendUtf8(s, cp);
    }
    strings.push_back(std::move(s));
  }
  return strings;
}

void expectRoundTrips(const Tokenizer &tokenizer) {
  for (const std::string &text : roundTripStrings()) {
    std::vector<TokenId> ids = encodeOk(tokenizer, text);
    for (TokenId id : ids) {
      ASSERT_TRUE(tokenizer.hasId(id)) << id;
    }
    EXPECT_EQ(decodeOk(tokenizer, ids), text) << json(text).dump();
  }
}

TEST(TokenizerTest, SynthTinyRoundTrips) {
  Tokenizer tokenizer = load(json::parse(synthJson({1024, 988, 732, 7})));
  EXPECT_EQ(tokenizer.idCount(), 1024u);
  EXPECT_EQ(tokenizer.tokenToId("<|user|>"), 995);
  expectRoundTrips(tokenizer);
}

TEST(TokenizerTest, SynthFullSizeRoundTrips) {
  // The release's layout: 154,820 BPE ids (mostly unreachable fillers), 36 specials, reserved
  // tokens up to 154,880.
  std::string text = synthJson({154880, 154820, 4000, 7});
  Expected<Tokenizer> tokenizer = Tokenizer::fromJson(text);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().toString();
  EXPECT_EQ(tokenizer->idCount(), 154880u);
  EXPECT_EQ(tokenizer->tokenToId("<|endoftext|>"), 154820);
  EXPECT_EQ(tokenizer->tokenToId("<|reserved_23|>"), 154879);
  EXPECT_EQ(encodeOk(*tokenizer, "<|user|><|reserved_0|>"), (std::vector<TokenId>{154827, 154856}));
  expectRoundTrips(*tokenizer);
}

TEST(TokenizerTest, RefusesInvalidUtf8Text) {
  Tokenizer tokenizer = loadTiny();
  for (std::string_view bad : {std::string_view("abc\xff"), std::string_view("\xc3"),
                               std::string_view("\xed\xa0\x80"), std::string_view("\xc0\xaf")}) {
    Expected<std::vector<TokenId>> ids = tokenizer.encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), StatusCode::InvalidArgument);
    EXPECT_NE(ids.status().message().find("not valid UTF-8"), std::string::npos);
  }
}

TEST(TokenizerTest, DecodeReplacesBrokenUtf8AndRefusesUnknownIds) {
  Tokenizer tokenizer = loadTiny();
  std::vector<TokenId> ids = encodeOk(tokenizer, "🙂");
  ASSERT_GE(ids.size(), 2u);
  // Dropping the last token leaves a truncated sequence: one U+FFFD, as from_utf8_lossy gives.
  std::vector<TokenId> truncated(ids.begin(), ids.end() - 1);
  EXPECT_EQ(decodeOk(tokenizer, truncated), std::string(kReplacementChar));
  Expected<std::string> unknown = tokenizer.decode(std::vector<TokenId>{64, 1024});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("token id 1024"), std::string::npos);
  EXPECT_FALSE(tokenizer.decode(std::vector<TokenId>{-1}).ok());
}

TEST(TokenizerTest, EncodesFromManyThreads) {
  Tokenizer tokenizer = loadTiny();
  std::vector<std::string> strings = roundTripStrings();
  std::vector<std::vector<TokenId>> expected;
  for (const std::string &s : strings) {
    expected.push_back(encodeOk(tokenizer, s));
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < strings.size(); ++i) {
          Expected<std::vector<TokenId>> ids =
              tokenizer.encode(strings[(i + t * 7) % strings.size()]);
          if (!ids.ok() || *ids != expected[(i + t * 7) % strings.size()]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread &thread : threads) {
    thread.join();
  }
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

//===------------------------------------------------------------------------------------===//
// Added tokens, merges and post-processing on hand-made tokenizers
//===------------------------------------------------------------------------------------===//

TEST(TokenizerTest, AddedTokenStripAndSingleWord) {
  json config = minimalTokenizer({}, {});
  config["added_tokens"] = json::array({
      addedToken(256, "<l>", true, /*lstrip=*/true),
      addedToken(257, "<r>", true, false, /*rstrip=*/true),
      addedToken(258, "tok", false, false, false, /*singleWord=*/true),
      addedToken(259, "<lr>", false, true, true),
  });
  Tokenizer tokenizer = load(config);
  auto bytes = [](std::string_view s) {
    std::vector<TokenId> ids;
    for (char c : s) {
      ids.push_back(static_cast<uint8_t>(c));
    }
    return ids;
  };
  auto cat = [](std::vector<TokenId> a, const std::vector<TokenId> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // lstrip swallows the spaces before, including a no-break space (Unicode White_Space).
  EXPECT_EQ(encodeOk(tokenizer, "a  <l>b"), cat(cat(bytes("a"), {256}), bytes("b")));
  EXPECT_EQ(encodeOk(tokenizer, "a\u00a0<l>b"), cat(cat(bytes("a"), {256}), bytes("b")));
  // rstrip swallows the spaces after.
  EXPECT_EQ(encodeOk(tokenizer, "a<r> \t b"), cat(cat(bytes("a"), {257}), bytes("b")));
  // Both, between two tokens: the second cannot take back what the first already took.
  EXPECT_EQ(encodeOk(tokenizer, "<r>  <lr>  x"), cat({257, 259}, bytes("x")));
  // single_word: only with no word character on either side.
  EXPECT_EQ(encodeOk(tokenizer, "a tok b"), cat(cat(bytes("a "), {258}), bytes(" b")));
  EXPECT_EQ(encodeOk(tokenizer, "atok b"), bytes("atok b"));
  EXPECT_EQ(encodeOk(tokenizer, "a toké"), bytes("a toké"));
  EXPECT_EQ(encodeOk(tokenizer, "tok"), std::vector<TokenId>{258});
  // Special tokens are skippable; the non-special ones are not.
  EXPECT_EQ(decodeOk(tokenizer, {256, 97, 258, 259}, true), "atok<lr>");
}

TEST(TokenizerTest, LongestAddedTokenWinsAndRawTokensGoFirst) {
  json config = minimalTokenizer({}, {});
  config["added_tokens"] = json::array({
      addedToken(256, "<a>", true),
      addedToken(257, "<a><b>", true),
      addedToken(258, "bc", false, false, false, false, /*normalized=*/true),
      addedToken(259, "cd", false),
  });
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(encodeOk(tokenizer, "<a><b><a>"), (std::vector<TokenId>{257, 256}));
  // "cd" (normalized=false) is matched over the whole text before "bc" (normalized=true) is
  // looked for in what is left, so "bcd" is b + cd although "bc" starts first.
  EXPECT_EQ(encodeOk(tokenizer, "bcd"), (std::vector<TokenId>{'b', 259}));
  EXPECT_EQ(encodeOk(tokenizer, "bce"), (std::vector<TokenId>{258, 'e'}));
}

TEST(TokenizerTest, MergesByRankAndIgnoreMerges) {
  json config = minimalTokenizer({"ab", "bc", "abc", "bcd", "xyz"},
                                 {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"bc", "d"}});
  Tokenizer tokenizer = load(config);
  // "b c" outranks "a b": abc -> a + bc -> abc.
  EXPECT_EQ(encodeOk(tokenizer, "abc"), std::vector<TokenId>{258});
  // Lowest rank first: b+c (0), then a+bc (2) before bc+d (3).
  EXPECT_EQ(encodeOk(tokenizer, "abcd"), (std::vector<TokenId>{258, 'd'}));
  // "xyz" has no merges: bytes, unless ignore_merges looks the whole word up first.
  EXPECT_EQ(encodeOk(tokenizer, "xyz"), (std::vector<TokenId>{'x', 'y', 'z'}));
  config["model"]["ignore_merges"] = true;
  EXPECT_EQ(encodeOk(load(config), "xyz"), std::vector<TokenId>{260});
}

TEST(TokenizerTest, ByteLevelPrefixSpaceAndGpt2Regex) {
  json config = minimalTokenizer({}, {});
  config["pre_tokenizer"]["add_prefix_space"] = true;
  Tokenizer tokenizer = load(config);
  // Prefixed, and each word by the GPT-2 regex: " hi" " there".
  EXPECT_EQ(encodeOk(tokenizer, "hi there"),
            (std::vector<TokenId>{' ', 'h', 'i', ' ', 't', 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(decodeOk(tokenizer, encodeOk(tokenizer, "hi")), " hi");
}

TEST(TokenizerTest, TemplateProcessingAddsIdsOnRequest) {
  json config = minimalTokenizer({}, {});
  config["added_tokens"] =
      json::array({addedToken(256, "<s>", true), addedToken(257, "</s>", true)});
  config["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}},
        {"</s>", {{"id", "</s>"}, {"ids", {257}}, {"tokens", {"</s>"}}}}}}};
  Tokenizer tokenizer = load(config);
  EXPECT_EQ(encodeOk(tokenizer, "a"), std::vector<TokenId>{'a'});
  EXPECT_EQ(encodeOk(tokenizer, "a", /*addSpecialTokens=*/true),
            (std::vector<TokenId>{256, 'a', 257}));
}

//===------------------------------------------------------------------------------------===//
// Hostile tokenizer.json
//===------------------------------------------------------------------------------------===//

void expectRefused(const json &config, StatusCode code, std::string_view fragment) {
  Status status = loadError(config);
  EXPECT_EQ(status.code(), code) << status.toString();
  EXPECT_NE(status.message().find(fragment), std::string::npos)
      << "message '" << status.message() << "' lacks '" << fragment << "'";
}

TEST(TokenizerTest, RefusesHostileTokenizerJson) {
  json base = readJson(kTinyDir / "tokenizer.json");
  {
    json c = base;
    c.erase("model");
    expectRefused(c, StatusCode::FormatError, "'model' is missing");
  }
  {
    json c = base;
    c["model"]["merges"].push_back({"Ġ", "nonexistent"});
    expectRefused(c, StatusCode::FormatError, "'nonexistent', which is not in the vocab");
  }
  {
    json c = base;
    c["model"]["merges"][0] = "a b c";
    expectRefused(c, StatusCode::FormatError, "model.merges[0]");
  }
  {
    json c = base;
    c["model"]["merges"][3] = 17;
    expectRefused(c, StatusCode::FormatError, "model.merges[3]");
  }
  {
    json c = base;
    c["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed[";
    expectRefused(c, StatusCode::InvalidArgument, "does not compile");
  }
  {
    json c = base;
    c["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-z&&[^aeiou]]";
    expectRefused(c, StatusCode::Unimplemented, "intersection");
  }
  {
    json c = base;
    c["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
    expectRefused(c, StatusCode::FormatError, "behavior");
  }
  {
    json c = base;
    c["normalizer"] = {{"type", "NFC"}};
    expectRefused(c, StatusCode::Unimplemented, "'normalizer' is NFC");
  }
  {
    json c = base;
    c["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
    expectRefused(c, StatusCode::Unimplemented, "Metaspace");
  }
  {
    json c = base;
    c["pre_tokenizer"] = nullptr;
    expectRefused(c, StatusCode::Unimplemented, "pre_tokenizer");
  }
  {
    json c = base;
    c["model"]["type"] = "WordPiece";
    expectRefused(c, StatusCode::Unimplemented, "WordPiece");
  }
  {
    json c = base;
    c["model"]["byte_fallback"] = true;
    expectRefused(c, StatusCode::Unimplemented, "byte_fallback");
  }
  {
    json c = base;
    c["decoder"] = {{"type", "Metaspace"}};
    expectRefused(c, StatusCode::Unimplemented, "decoder");
  }
  {
    json c = base;
    c["truncation"] = {{"max_length", 8}};
    expectRefused(c, StatusCode::Unimplemented, "truncation");
  }
  {
    json c = base;
    c["model"]["vocab"]["Ġduplicate"] = 5;
    expectRefused(c, StatusCode::FormatError, "the id 5");
  }
  {
    json c = base;
    c["model"]["vocab"]["bad"] = "seven";
    expectRefused(c, StatusCode::FormatError, "'bad'");
  }
  {
    json c = base;
    c["added_tokens"][3]["id"] = 5000;
    expectRefused(c, StatusCode::FormatError, "would give it id 991");
  }
  {
    json c = base;
    c["added_tokens"][0].erase("content");
    expectRefused(c, StatusCode::FormatError, "added_tokens[0].content");
  }
  Expected<Tokenizer> notJson = Tokenizer::fromJson("{\"model\": ");
  ASSERT_FALSE(notJson.ok());
  EXPECT_EQ(notJson.status().message(), "not valid JSON");
  Expected<Tokenizer> missing = Tokenizer::fromModelDir("/nonexistent/model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model/tokenizer.json"),
            std::string::npos);
}

/// tokenizer.json text whose `field` is `depth` Sequences of kind `type` (with list key `list`)
/// around `inner`, written as text: a DOM that deep would itself recurse when built or freed.
std::string nestedSequenceJson(const std::string &field, const std::string &list, int depth,
                               const std::string &inner) {
  json config = minimalTokenizer({}, {});
  config[field] = "@@NESTED@@";
  std::string nested;
  for (int i = 0; i < depth; ++i) {
    nested += R"({"type":"Sequence",")" + list + R"(":[)";
  }
  nested += inner;
  for (int i = 0; i < depth; ++i) {
    nested += "]}";
  }
  std::string text = config.dump();
  text.replace(text.find("\"@@NESTED@@\""), 12, nested);
  return text;
}

constexpr const char *kByteLevelPre =
    R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true})";

void expectTextRefused(const std::string &text, std::string_view fragment) {
  Expected<Tokenizer> tokenizer = Tokenizer::fromJson(text);
  ASSERT_FALSE(tokenizer.ok()) << "loaded a tokenizer.json that should be refused";
  EXPECT_EQ(tokenizer.status().code(), StatusCode::FormatError) << tokenizer.status().toString();
  EXPECT_NE(tokenizer.status().message().find(fragment), std::string::npos)
      << "message '" << tokenizer.status().message() << "' lacks '" << fragment << "'";
}

TEST(TokenizerTest, DeeplyNestedSequencesAreRefusedByName) {
  // 2k and 100k levels overflowed the stack (the recursion over Sequences, and nlohmann's
  // recursive DOM); the depth-limited SAX pass refuses them before any DOM exists.
  for (int depth : {2000, 100000}) {
    SCOPED_TRACE(depth);
    constexpr std::string_view kTooDeep = "nests deeper than 64 levels, the tokenizer.json nesting";
    expectTextRefused(nestedSequenceJson("pre_tokenizer", "pretokenizers", depth, kByteLevelPre),
                      kTooDeep);
    expectTextRefused(
        nestedSequenceJson("post_processor", "processors", depth, R"({"type":"ByteLevel"})"),
        kTooDeep);
    expectTextRefused(nestedSequenceJson("normalizer", "normalizers", depth, R"({"type":"NFC"})"),
                      kTooDeep);
    expectTextRefused(nestedSequenceJson("decoder", "decoders", depth, R"({"type":"ByteLevel"})"),
                      kTooDeep);
  }
  // Within the JSON depth, the Sequence nesting has a bound of its own.
  expectTextRefused(nestedSequenceJson("pre_tokenizer", "pretokenizers", 17, kByteLevelPre),
                    "pre_tokenizer Sequence nested deeper than 16 levels");
  expectTextRefused(
      nestedSequenceJson("post_processor", "processors", 17, R"({"type":"ByteLevel"})"),
      "post_processor Sequence nested deeper than 16 levels");
  // At the bound they load (real tokenizers nest one or two).
  EXPECT_TRUE(
      Tokenizer::fromJson(nestedSequenceJson("pre_tokenizer", "pretokenizers", 16, kByteLevelPre))
          .ok());
  EXPECT_TRUE(Tokenizer::fromJson(
                  nestedSequenceJson("post_processor", "processors", 16, R"({"type":"ByteLevel"})"))
                  .ok());
}

TEST(TokenizerTest, HostileSplitPatternsFailCleanly) {
  // PCRE2 bounds its own recursion: nesting (250 groups), match steps and JIT stack.
  json config = minimalTokenizer({}, {});
  config["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", std::string(100000, '(') + std::string(100000, ')')}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    json::parse(kByteLevelPre)})}};
  Status status = loadError(config);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_NE(status.message().find("does not compile"), std::string::npos)
      << status.message().substr(0, 300);
  // Catastrophic backtracking gives up with an error instead of running on.
  config["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a+)+$"}};
  Tokenizer tokenizer = load(config);
  Expected<std::vector<TokenId>> ids = tokenizer.encode(std::string(100000, 'a') + "!");
  if (!ids.ok()) {
    EXPECT_NE(ids.status().message().find("gave up"), std::string::npos) << ids.status().message();
  }
}

TEST(TokenizerTest, HugeValuesAreQuotedShortInErrors) {
  json config = minimalTokenizer({}, {});
  config["normalizer"] = {{"kind", std::string(1 << 20, 'x')}};
  Status status = loadError(config);
  EXPECT_EQ(status.code(), StatusCode::Unimplemented);
  EXPECT_LT(status.message().size(), 1000u) << status.message().substr(0, 300);
}

TEST(TokenizerTest, NonRegularTokenizerFileIsRefusedByName) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("glm_tokenizer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path fifo = dir / "tokenizer.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A FIFO would block the read forever; it is refused before it is opened.
  Expected<Tokenizer> tokenizer = Tokenizer::fromModelDir(dir.string());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("tokenizer.json is not a regular file (a FIFO)"),
            std::string::npos)
      << tokenizer.status().message();
  std::filesystem::remove_all(dir);
}

//===------------------------------------------------------------------------------------===//
// Streaming detokenizer
//===------------------------------------------------------------------------------------===//

/// Ids that spell `bytes` one byte per token, so every multi-byte character is split.
std::vector<TokenId> byteIds(const Tokenizer &tokenizer, std::string_view bytes) {
  std::vector<TokenId> ids;
  for (char c : bytes) {
    std::optional<TokenId> id = tokenizer.tokenToId(byteLevelEncode(std::string(1, c)));
    EXPECT_TRUE(id.has_value());
    ids.push_back(id.value_or(0));
  }
  return ids;
}

/// Streams `ids` and checks each piece is valid UTF-8 and the whole equals decode().
void expectStreamsLikeDecode(const Tokenizer &tokenizer, const std::vector<TokenId> &ids,
                             bool skipSpecialTokens) {
  StreamingDetokenizer stream(tokenizer, skipSpecialTokens);
  std::string all;
  for (TokenId id : ids) {
    Expected<std::string> piece = stream.feed(id);
    ASSERT_TRUE(piece.ok()) << piece.status().toString();
    EXPECT_FALSE(findInvalidUtf8(*piece).has_value()) << json(*piece).dump();
    all += *piece;
  }
  std::string tail = stream.finish();
  EXPECT_FALSE(findInvalidUtf8(tail).has_value());
  all += tail;
  EXPECT_EQ(all, decodeOk(tokenizer, ids, skipSpecialTokens));
}

TEST(StreamingDetokenizerTest, HoldsBackSplitCharacters) {
  Tokenizer tokenizer = loadTiny();
  std::string text = "a日本🙂é";
  std::vector<TokenId> ids = byteIds(tokenizer, text);
  StreamingDetokenizer stream(tokenizer);
  std::vector<std::string> pieces;
  for (TokenId id : ids) {
    Expected<std::string> piece = stream.feed(id);
    ASSERT_TRUE(piece.ok());
    pieces.push_back(*piece);
  }
  // a | 日 (3 bytes) | 本 (3) | 🙂 (4) | é (2): text appears only when a character completes.
  std::vector<std::string> expected = {"a", "", "", "日", "", "", "本", "", "", "", "🙂", "", "é"};
  EXPECT_EQ(pieces, expected);
  EXPECT_EQ(stream.finish(), "");
  expectStreamsLikeDecode(tokenizer, ids, false);
}

TEST(StreamingDetokenizerTest, BrokenSequencesMatchWholeDecode) {
  Tokenizer tokenizer = loadTiny();
  for (std::string_view bytes :
       {std::string_view("\xe6\x97"),
        std::string_view("\xe6\x97"
                         "a"),
        std::string_view("\xf0\x9f\x99\x82\xf0\x9f"), std::string_view("\xed\xa0\x80x"),
        std::string_view("\xc0\xaf\x80\xff"), std::string_view("\xf4\x90\x80\x80")}) {
    expectStreamsLikeDecode(tokenizer, byteIds(tokenizer, bytes), false);
  }
  StreamingDetokenizer stream(tokenizer);
  for (TokenId id : byteIds(tokenizer, "\xf0\x9f\x99")) {
    EXPECT_EQ(stream.feed(id).value(), "");
  }
  EXPECT_EQ(stream.pendingBytes(), 3u);
  EXPECT_EQ(stream.finish(), std::string(kReplacementChar));
}

TEST(StreamingDetokenizerTest, RandomStreamsMatchWholeDecode) {
  Tokenizer tokenizer = loadTiny();
  SplitMix64 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::vector<TokenId> ids;
    size_t length = 1 + rng.below(30);
    for (size_t i = 0; i < length; ++i) {
      // Mostly byte tokens (to split characters), some merged tokens and special tokens.
      uint64_t kind = rng.below(10);
      ids.push_back(static_cast<TokenId>(kind < 6   ? rng.below(256)
                                         : kind < 9 ? rng.below(988)
                                                    : 988 + rng.below(36)));
    }
    expectStreamsLikeDecode(tokenizer, ids, n % 2 == 0);
  }
}

TEST(StreamingDetokenizerTest, SkipsSpecialTokensAndRefusesUnknownIds) {
  Tokenizer tokenizer = loadTiny();
  StreamingDetokenizer stream(tokenizer, /*skipSpecialTokens=*/true);
  EXPECT_EQ(stream.feed(995).value(), "");
  EXPECT_EQ(stream.feed(64).value(), "a");
  EXPECT_FALSE(stream.feed(4096).ok());
  EXPECT_EQ(stream.feed(65).value(), "b");
}

//===------------------------------------------------------------------------------------===//
// UTF-8, byte-level alphabet and regex translation
//===------------------------------------------------------------------------------------===//

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  const std::string r(kReplacementChar);
  EXPECT_EQ(utf8Lossy("ok"), "ok");
  EXPECT_EQ(utf8Lossy("\xe0\x80"), r + r);                 // E0 needs A0..BF next
  EXPECT_EQ(utf8Lossy("\xf0\x9f\x98"), r);                 // truncated at the end: one
  EXPECT_EQ(utf8Lossy("\xed\xa0\x80"), r + r + r);         // surrogate
  EXPECT_EQ(utf8Lossy("\xc0\xaf"), r + r);                 // overlong
  EXPECT_EQ(utf8Lossy("\xf4\x90\x80\x80"), r + r + r + r); // above U+10FFFF
  EXPECT_EQ(utf8Lossy("a\xe6\x97"
                      "b"),
            "a" + r + "b");
  std::string out;
  EXPECT_EQ(appendUtf8Lossy(out, "a\xe6\x97", /*final=*/false), 1u);
  EXPECT_EQ(out, "a");
}

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(byteLevelCodePoint(' '), 0x120u);  // Ġ
  EXPECT_EQ(byteLevelCodePoint('\n'), 0x10Au); // Ċ
  EXPECT_EQ(byteLevelCodePoint('a'), uint32_t{'a'});
  EXPECT_EQ(byteLevelCodePoint(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byteLevelByte(byteLevelCodePoint(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(byteLevelDecodeToken("Ġhello"), " hello");
  // A token outside the alphabet decodes to its own bytes, as tokenizers' decoder does.
  EXPECT_EQ(byteLevelDecodeToken("a b"), "a b");
}

TEST(RegexTest, FollowsOnigurumaClasses) {
  auto matches = [](std::string_view pattern, std::string_view text) {
    Expected<Regex> regex = Regex::compile(pattern);
    EXPECT_TRUE(regex.ok()) << regex.status().toString();
    std::vector<std::pair<size_t, size_t>> found;
    EXPECT_TRUE(regex->findAll(text, found).ok());
    return found;
  };
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  // U+0085 is White_Space; U+180E no longer is (PCRE2 alone would call it \s).
  EXPECT_EQ(matches("\\s", "\xc2\x85"), (Ranges{{0, 2}}));
  EXPECT_EQ(matches("\\s", "\xe1\xa0\x8e"), Ranges{});
  EXPECT_EQ(matches("[^\\s]", "\xe1\xa0\x8e"), (Ranges{{0, 3}}));
  EXPECT_EQ(matches("\\S+", "a\xe1\xa0\x8e b"), (Ranges{{0, 4}, {5, 6}}));
  EXPECT_EQ(matches("\\h+", "xBEEF"), (Ranges{{1, 5}}));
  EXPECT_EQ(matches("\\w+", "e\xcc\x81_"), (Ranges{{0, 4}})); // marks are word characters
  // Empty matches step one character on, and one right after a match is skipped.
  EXPECT_EQ(matches("a*", "baa"), (Ranges{{0, 0}, {1, 3}}));
  EXPECT_FALSE(Regex::compile("[a[b]]").ok());
  EXPECT_FALSE(Regex::compile("(").ok());
}

} // namespace
} // namespace glm::server
