// Tests for the synthetic tokenizer.json, tokenizer_config.json and chat template of `glmc synth`.
#include "tools/synth/SynthTokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace glm::glm53 {
namespace {

using nlohmann::json;

// The two presets of `glmc synth`: tiny matches the glm53-tiny fixture, full the release.
constexpr SynthTokenizerOptions kTiny{1024, 988, 732, 7};
constexpr SynthTokenizerOptions kFull{154880, 154820, 4000, 7};

json makeTokenizer(const SynthTokenizerOptions &options) {
  Expected<std::string> text = makeSynthTokenizerJson(options);
  EXPECT_TRUE(text.ok()) << text.status().toString();
  return text.ok() ? json::parse(*text) : json();
}

/// The invariants `tokenizers` relies on when it loads a BPE model.
void expectWellFormed(const json &tok, const SynthTokenizerOptions &options) {
  const json &vocab = tok["model"]["vocab"];
  ASSERT_EQ(vocab.size(), static_cast<size_t>(options.firstSpecialId));
  // Every id below firstSpecialId is used exactly once (json::parse keeps one of duplicate keys,
  // so this also shows the strings are unique).
  std::set<int64_t> ids;
  for (const auto &[token, id] : vocab.items()) {
    ids.insert(id.get<int64_t>());
  }
  ASSERT_EQ(ids.size(), vocab.size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), options.firstSpecialId - 1);

  std::set<std::string> results;
  for (const json &merge : tok["model"]["merges"]) {
    ASSERT_TRUE(merge.is_array());
    ASSERT_EQ(merge.size(), 2u);
    std::string a = merge[0], b = merge[1];
    EXPECT_TRUE(vocab.contains(a)) << a;
    EXPECT_TRUE(vocab.contains(b)) << b;
    EXPECT_TRUE(vocab.contains(a + b)) << a << " + " << b;
    EXPECT_TRUE(results.insert(a + b).second) << "two merges make " << a + b;
  }

  const json &added = tok["added_tokens"];
  ASSERT_EQ(added.size(), static_cast<size_t>(options.vocabSize - options.firstSpecialId));
  const std::vector<std::string> &specials = glm53SpecialTokens();
  for (size_t i = 0; i < added.size(); ++i) {
    const json &token = added[i];
    EXPECT_EQ(token["id"], options.firstSpecialId + static_cast<int64_t>(i));
    std::string expected = i < specials.size()
                               ? specials[i]
                               : "<|reserved_" + std::to_string(i - specials.size()) + "|>";
    EXPECT_EQ(token["content"], expected);
    EXPECT_EQ(token["special"], true);
    EXPECT_EQ(token["normalized"], false);
    EXPECT_FALSE(vocab.contains(expected)) << expected;
  }
}

TEST(SynthTokenizerTest, SpecialTokensInReleaseOrder) {
  const std::vector<std::string> &specials = glm53SpecialTokens();
  ASSERT_EQ(specials.size(), 36u);
  EXPECT_EQ(specials[0], "<|endoftext|>");
  EXPECT_EQ(specials[2], "[gMASK]");
  EXPECT_EQ(specials[7], "<|user|>");
  EXPECT_EQ(specials[21], "<think>");
  EXPECT_EQ(specials[27], "<arg_key>");
  EXPECT_EQ(specials[35], "<|video|>");
}

TEST(SynthTokenizerTest, TinyPreset) {
  json tok = makeTokenizer(kTiny);
  expectWellFormed(tok, kTiny);
  // The training text has enough repeated pairs to fill the whole BPE part with real merges.
  EXPECT_EQ(tok["model"]["merges"].size(), 988u - 256u);
  EXPECT_EQ(tok["added_tokens"].size(), 36u);
}

TEST(SynthTokenizerTest, FullSizePreset) {
  json tok = makeTokenizer(kFull);
  expectWellFormed(tok, kFull);
  EXPECT_EQ(tok["model"]["merges"].size(), 4000u);
  EXPECT_EQ(tok["added_tokens"].back()["content"], "<|reserved_23|>");
  EXPECT_EQ(tok["added_tokens"].back()["id"], 154879);
}

TEST(SynthTokenizerTest, ByteTokensFollowGpt2Order) {
  json vocab = makeTokenizer(kTiny)["model"]["vocab"];
  EXPECT_EQ(vocab["!"], 0); // printable ASCII first
  EXPECT_EQ(vocab["~"], 93);
  EXPECT_EQ(vocab["¡"], 94);         // then Latin-1 printables
  EXPECT_EQ(vocab["\xc3\xbf"], 187); // ÿ
  EXPECT_EQ(vocab["Ā"], 188);        // byte 0
  EXPECT_EQ(vocab["Ġ"], 220);        // byte 0x20, space
  EXPECT_EQ(vocab["Ń"], 255);        // byte 0xAD
}

TEST(SynthTokenizerTest, MatchesFixtureLayout) {
  std::filesystem::path path =
      std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny/tokenizer.json";
  std::ifstream in(path);
  if (!in) {
    GTEST_SKIP() << "no fixture at " << path;
  }
  json fixture = json::parse(in);
  json tok = makeTokenizer(kTiny);
  for (const char *key : {"version", "truncation", "padding", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder"}) {
    EXPECT_EQ(tok[key], fixture[key]) << key;
  }
  EXPECT_EQ(tok["added_tokens"], fixture["added_tokens"]);
  for (const char *key : {"type", "dropout", "unk_token", "continuing_subword_prefix",
                          "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges"}) {
    EXPECT_EQ(tok["model"][key], fixture["model"][key]) << key;
  }
  std::map<int64_t, std::string> ours, theirs;
  for (const auto &[token, id] : tok["model"]["vocab"].items()) {
    ours[id] = token;
  }
  for (const auto &[token, id] : fixture["model"]["vocab"].items()) {
    theirs[id] = token;
  }
  for (int64_t id = 0; id < 256; ++id) {
    EXPECT_EQ(ours[id], theirs[id]) << "byte token " << id;
  }
}

TEST(SynthTokenizerTest, DeterministicInSeed) {
  Expected<std::string> a = makeSynthTokenizerJson(kTiny);
  Expected<std::string> b = makeSynthTokenizerJson(kTiny);
  SynthTokenizerOptions other = kTiny;
  other.seed = 8;
  Expected<std::string> c = makeSynthTokenizerJson(other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(json::parse(*a)["model"]["merges"], json::parse(*c)["model"]["merges"]);
}

TEST(SynthTokenizerTest, FewMergesLeaveFillers) {
  SynthTokenizerOptions options{600, 500, 10, 1};
  json tok = makeTokenizer(options);
  expectWellFormed(tok, options);
  EXPECT_EQ(tok["model"]["merges"].size(), 10u);
  EXPECT_EQ(tok["model"]["vocab"]["<|filler_0|>"], 266);
  EXPECT_EQ(tok["added_tokens"].size(), 100u);
}

TEST(SynthTokenizerTest, RejectsTooSmallVocab) {
  Expected<std::string> noRoom = makeSynthTokenizerJson({1000, 988, 100, 0});
  ASSERT_FALSE(noRoom.ok());
  EXPECT_EQ(noRoom.status().code(), StatusCode::InvalidArgument);
  Expected<std::string> noBytes = makeSynthTokenizerJson({300, 200, 100, 0});
  ASSERT_FALSE(noBytes.ok());
  EXPECT_EQ(noBytes.status().code(), StatusCode::InvalidArgument);
  Expected<std::string> negative = makeSynthTokenizerJson({1024, 988, -1, 0});
  EXPECT_FALSE(negative.ok());
}

TEST(SynthTokenizerTest, TokenizerConfig) {
  json config = json::parse(makeSynthTokenizerConfigJson());
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["pad_token"], "<|endoftext|>");
  EXPECT_EQ(config["tokenizer_class"], "TokenizersBackend");
  EXPECT_TRUE(config.contains("model_max_length"));
  EXPECT_FALSE(config.contains("chat_template"));
}

/// The tag keywords of a Jinja text: the first word after each "{%" (and its "-" or "+").
std::set<std::string> tagKeywords(std::string_view text) {
  std::set<std::string> keywords;
  for (size_t at = text.find("{%"); at != std::string_view::npos; at = text.find("{%", at + 2)) {
    size_t pos = at + 2;
    while (pos < text.size() && (text[pos] == '-' || text[pos] == '+' || text[pos] == ' ')) {
      ++pos;
    }
    size_t end = pos;
    while (end < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
      ++end;
    }
    keywords.insert(std::string(text.substr(pos, end - pos)));
  }
  return keywords;
}

TEST(SynthTokenizerTest, ChatTemplateUsesPlainJinja) {
  std::string_view tmpl = glm53ChatTemplate();
  ASSERT_FALSE(tmpl.empty());
  EXPECT_NE(tmpl.find("[gMASK]<sop>"), std::string_view::npos);
  EXPECT_NE(tmpl.find("Reasoning Effort: "), std::string_view::npos);
  EXPECT_NE(tmpl.find("<|assistant|><think>"), std::string_view::npos);
  // Only the statements of the subset glmc renders; this also rules out transformers'
  // {% generation %} training tags.
  const std::set<std::string> allowed = {"set", "if",     "elif",  "else",    "endif",
                                         "for", "endfor", "macro", "endmacro"};
  for (const std::string &keyword : tagKeywords(tmpl)) {
    EXPECT_TRUE(allowed.count(keyword)) << "unsupported tag {% " << keyword << " %}";
  }
  EXPECT_EQ(tmpl.find("raise_exception"), std::string_view::npos);
}

} // namespace
} // namespace glm::glm53
