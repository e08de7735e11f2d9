// SynthTokenizer: trains a small byte-level BPE and writes it, with GLM's special tokens, as
// tokenizer.json; also the tokenizer config and the embedded chat template.
#include "tools/synth/SynthTokenizer.h"

#include "base/Random.h"
#include "base/Utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <iterator>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace glm::glm53 {

namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kChatTemplate =
#include "tools/synth/ChatTemplate.inc"
    ;

/// GLM's pre-tokenizer split pattern, as the release's tokenizer.json spells it.
constexpr std::string_view kPreTokenizerRegex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Training text written for this file, so every seed shares a base of ordinary prose and code.
constexpr std::string_view kBaseText = R"text(
A compiler for a language model is mostly a bookkeeping problem. The model arrives as a folder of
tensors and a configuration file, and the compiler has to decide, for every layer, which kernels
run, where their inputs live, and how much memory the cache will need when a thousand requests
arrive at once. None of this is glamorous, but when it goes wrong the symptoms are confusing: the
server starts, the first token looks plausible, and the tenth token is nonsense.

We keep three rules. First, every shape is checked when the checkpoint is loaded, not when the
kernel runs. Second, every number that the runtime reads from a file is validated against the
configuration it claims to match. Third, a test that compares against a reference must say how
close is close enough, and why.

The scheduler batches requests by the length of their prompts. Short prompts share a step; a long
prompt is split into chunks so that it doesn't starve the others. Each chunk writes its keys and
values into pages of the cache, and the attention kernel reads them back through a page table.
When the cache is full, the oldest idle sequence is evicted and its pages return to the pool.

    struct PageTable {
      std::vector<int32_t> pages;   // one entry per 64 tokens
      int64_t length = 0;
    };

    int64_t pagesNeeded(int64_t tokens, int64_t pageSize) {
      return (tokens + pageSize - 1) / pageSize;
    }

    for (int i = 0; i < numLayers; ++i) {
      if (layers[i].isSparse()) {
        runIndexer(layers[i], state, /*topK=*/2048);
      }
      hidden = layers[i].forward(hidden, cache.view(i));
    }

def softmax(xs):
    m = max(xs)
    exps = [math.exp(x - m) for x in xs]
    total = sum(exps)
    return [e / total for e in exps]

if __name__ == "__main__":
    print(softmax([1.0, 2.0, 3.0]))

{"model": "glm", "layers": 8, "hidden_size": 128, "experts": 16, "top_k": 4, "dtype": "bfloat16"}

It's worth saying what we don't do. We don't guess a missing field; we report it. We don't retry a
failed allocation with a smaller batch behind the user's back; we fail, and say which tensor
didn't fit. We'll add those conveniences when someone needs them, and they'll be explicit flags.

Questions we ask of every change: Does it make the common path slower? Is there a test that fails
without it? Would a reader in a year understand why it's there? If the answer to the last one is
no, the change needs a comment, not a cleverer variable name.

Le café était fermé, alors nous avons travaillé à la bibliothèque. Über den Wolken ist es ruhig.
El niño comió una manzana. 今日はいい天気です。我们明天再讨论这个问题。Привет, как дела?
Numbers: 0, 7, 42, 1024, 65536, 3.14159, 2.71828, 1e-6, 0x7fff, 2024-05-17, 12:30:45, $19.99, 50%.
Emoji and symbols: 🙂 🚀 ✓ → ← ½ ° © — “quoted” ‘single’ … · • §
)text";

/// The GPT-2 byte-level alphabet: each byte as one printable character. Token ids 0..255 follow
/// the table's own order (printable bytes first, then the rest), as the release's vocab does.
struct ByteAlphabet {
  std::array<std::string, 256> charOfByte; // UTF-8 of the character standing for a byte
  std::array<uint8_t, 256> byteOfId;       // the byte that token id i stands for
  std::array<int32_t, 256> idOfByte;
};

const ByteAlphabet &byteAlphabet() {
  static const ByteAlphabet alphabet = [] {
    ByteAlphabet a;
    std::array<bool, 256> printable{};
    int32_t id = 0;
    auto addPrintable = [&](uint32_t lo, uint32_t hi) {
      for (uint32_t b = lo; b <= hi; ++b) {
        printable[b] = true;
        a.charOfByte[b].clear();
        appendUtf8(a.charOfByte[b], b);
        a.byteOfId[id] = static_cast<uint8_t>(b);
        a.idOfByte[b] = id++;
      }
    };
    addPrintable('!', '~');
    addPrintable(0xA1, 0xAC);
    addPrintable(0xAE, 0xFF);
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      if (!printable[b]) {
        appendUtf8(a.charOfByte[b], shifted++);
        a.byteOfId[id] = static_cast<uint8_t>(b);
        a.idOfByte[b] = id++;
      }
    }
    return a;
  }();
  return alphabet;
}

std::string toByteLevel(std::string_view raw) {
  const ByteAlphabet &alphabet = byteAlphabet();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) {
    out += alphabet.charOfByte[static_cast<uint8_t>(c)];
  }
  return out;
}

//===------------------------------------------------------------------------------------------===//
// Training text
//===------------------------------------------------------------------------------------------===//

/// Words of a made-up language from syllables, used with Zipf-like frequencies so that merges
/// grow from common syllables into common words, as they do on real text.
std::vector<std::string> makeLexicon(SplitMix64 &rng, size_t count) {
  static constexpr std::array<std::string_view, 26> kOnsets = {
      "",  "b", "c", "d", "f",  "g",  "h",  "k",  "l",  "m",  "n",  "p",  "r",
      "s", "t", "v", "w", "st", "tr", "pl", "ch", "sh", "th", "br", "gr", "qu"};
  static constexpr std::array<std::string_view, 10> kVowels = {"a",  "e",  "i",  "o",  "u",
                                                               "ai", "ea", "ou", "io", "y"};
  static constexpr std::array<std::string_view, 11> kCodas = {"",  "",  "n",  "r",  "s", "t",
                                                              "l", "m", "nd", "st", "ng"};
  std::unordered_set<std::string> seen;
  std::vector<std::string> words;
  while (words.size() < count) {
    std::string word;
    uint64_t syllables = 1 + rng.below(3) + (rng.chance(25) ? 1 : 0);
    for (uint64_t s = 0; s < syllables; ++s) {
      word += kOnsets[rng.below(kOnsets.size())];
      word += kVowels[rng.below(kVowels.size())];
      word += kCodas[rng.below(kCodas.size())];
    }
    if (seen.insert(word).second) {
      words.push_back(std::move(word));
    }
  }
  // Frequent words are short in real languages; Zipf picks low ranks most.
  std::stable_sort(words.begin(), words.end(),
                   [](const std::string &x, const std::string &y) { return x.size() < y.size(); });
  return words;
}

/// Picks lexicon ranks with probability about 1/(rank+1), in integer arithmetic only.
class ZipfPicker {
public:
  explicit ZipfPicker(size_t count) {
    uint64_t total = 0;
    for (size_t r = 0; r < count; ++r) {
      total += (uint64_t{1} << 20) / (r + 1);
      cumulative_.push_back(total);
    }
  }

  size_t pick(SplitMix64 &rng) const {
    uint64_t x = rng.below(cumulative_.back());
    return static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), x) -
                               cumulative_.begin());
  }

private:
  std::vector<uint64_t> cumulative_;
};

/// Seeded pseudo-text: sentences of lexicon words with numbers, punctuation, contractions,
/// code-like lines and some non-ASCII, so merges cover every pre-token class.
std::string makeRandomText(uint64_t seed, size_t bytes, size_t lexiconSize) {
  SplitMix64 rng(seed);
  std::vector<std::string> lexicon = makeLexicon(rng, lexiconSize);
  ZipfPicker zipf(lexicon.size());
  static constexpr std::array<std::string_view, 16> kForeign = {
      "café", "naïve", "über",   "élan",    "señor",  "façade", "中文", "日本語",
      "🙂",   "🚀",    "Привет", "données", "straße", "½",      "—",    "東京"};
  static constexpr std::array<std::string_view, 8> kContractions = {"'s",  "'t", "'re", "'ve",
                                                                    "'ll", "'d", "'m",  "n't"};
  static constexpr std::array<std::string_view, 10> kPunct = {", ", ", ", ": ",  "; ",   " - ",
                                                              " (", ") ", " = ", " -> ", "/"};
  static constexpr std::array<std::string_view, 4> kEnds = {". ", ". ", "? ", "!\n"};

  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    uint64_t kind = rng.below(100);
    if (kind < 8) {
      // A code-like line: indentation, an identifier made of words, a call with arguments.
      text += std::string(4 * rng.below(3), ' ');
      text += lexicon[zipf.pick(rng)] + "_" + lexicon[zipf.pick(rng)];
      text += rng.chance(50) ? " = " : "(";
      text += lexicon[zipf.pick(rng)] + ", " + std::to_string(rng.below(1000));
      text += rng.chance(50) ? ");\n" : ")\n";
      continue;
    }
    uint64_t words = 4 + rng.below(12);
    for (uint64_t w = 0; w < words; ++w) {
      uint64_t pick = rng.below(100);
      std::string word;
      if (pick < 4) {
        word = kForeign[rng.below(kForeign.size())];
      } else if (pick < 6) {
        // A random CJK character: multi-byte merges need more than a fixed word list.
        appendUtf8(word, 0x4E00 + static_cast<uint32_t>(rng.below(0x200)));
      } else if (pick < 12) {
        word = std::to_string(rng.below(pick < 9 ? 100 : 1000000));
      } else {
        word = lexicon[zipf.pick(rng)];
        if (rng.chance(3)) {
          word += kContractions[rng.below(kContractions.size())];
        }
      }
      if (w == 0 && !word.empty() && word[0] >= 'a' && word[0] <= 'z') {
        word[0] = static_cast<char>(word[0] - 'a' + 'A');
      }
      text += word;
      if (w + 1 < words) {
        text += rng.chance(12) ? kPunct[rng.below(kPunct.size())] : " ";
      }
    }
    text += kEnds[rng.below(kEnds.size())];
    if (rng.chance(10)) {
      text += "\n\n";
    }
  }
  return text;
}

//===------------------------------------------------------------------------------------------===//
// Pre-tokenization
//===------------------------------------------------------------------------------------------===//

enum class CharClass { Letter, Digit, Newline, Space, Other };

/// A rough \p{L}/\p{N}/\s classification: enough to split training text about where GLM's regex
/// does. Non-ASCII counts as a letter unless it is in a punctuation, symbol or emoji block.
CharClass classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
      return CharClass::Letter;
    }
    if (cp >= '0' && cp <= '9') {
      return CharClass::Digit;
    }
    if (cp == '\n' || cp == '\r') {
      return CharClass::Newline;
    }
    if (cp == ' ' || cp == '\t' || cp == '\v' || cp == '\f') {
      return CharClass::Space;
    }
    return CharClass::Other;
  }
  if (cp == 0x85 || cp == 0xA0 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
      cp == 0x3000) {
    return CharClass::Space;
  }
  if (cp < 0xC0 || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2010 && cp <= 0x2BFF) ||
      (cp >= 0x3001 && cp <= 0x303F) || (cp >= 0xFF01 && cp <= 0xFF0F) || cp >= 0x1F000) {
    return CharClass::Other;
  }
  return CharClass::Letter;
}

struct CodePoint {
  uint32_t value;
  size_t offset; // byte offset in the text
  CharClass cls;
};

std::vector<CodePoint> decodeUtf8(std::string_view text) {
  std::vector<CodePoint> out;
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<uint8_t>(text[i]);
    size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    len = std::min(len, text.size() - i);
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
    }
    out.push_back({cp, i, classify(cp)});
    i += len;
  }
  return out;
}

/// Splits text into pre-tokens following the alternatives of kPreTokenizerRegex in order.
std::vector<std::string_view> splitPreTokens(std::string_view text) {
  std::vector<CodePoint> cps = decodeUtf8(text);
  const size_t n = cps.size();
  auto is = [&](size_t i, CharClass c) { return i < n && cps[i].cls == c; };
  auto lower = [&](size_t i) {
    uint32_t v = i < n ? cps[i].value : 0;
    return v >= 'A' && v <= 'Z' ? v - 'A' + 'a' : v;
  };
  auto isWhite = [&](size_t i) { return is(i, CharClass::Space) || is(i, CharClass::Newline); };

  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < n) {
    size_t end = i + 1;
    bool isLetterRun =
        is(i, CharClass::Letter) ||
        (!is(i, CharClass::Newline) && !is(i, CharClass::Digit) && is(i + 1, CharClass::Letter));
    if (cps[i].value == '\'' && (lower(i + 1) == 's' || lower(i + 1) == 't' ||
                                 lower(i + 1) == 'm' || lower(i + 1) == 'd')) {
      end = i + 2;
    } else if (cps[i].value == '\'' && ((lower(i + 1) == 'r' && lower(i + 2) == 'e') ||
                                        (lower(i + 1) == 'v' && lower(i + 2) == 'e') ||
                                        (lower(i + 1) == 'l' && lower(i + 2) == 'l'))) {
      end = i + 3;
    } else if (isLetterRun) {
      end = i + 1;
      while (is(end, CharClass::Letter)) {
        ++end;
      }
    } else if (is(i, CharClass::Digit)) {
      while (end < i + 3 && is(end, CharClass::Digit)) {
        ++end;
      }
    } else if (is(i, CharClass::Other) || (cps[i].value == ' ' && is(i + 1, CharClass::Other))) {
      end = is(i, CharClass::Other) ? i : i + 1;
      while (is(end, CharClass::Other)) {
        ++end;
      }
      while (is(end, CharClass::Newline)) {
        ++end;
      }
    } else {
      // Whitespace: up to the run's last newline if it has one; otherwise all of it but the last
      // character when a word follows, since that one leads the next pre-token.
      size_t runEnd = i;
      size_t lastNewline = n;
      while (isWhite(runEnd)) {
        if (is(runEnd, CharClass::Newline)) {
          lastNewline = runEnd;
        }
        ++runEnd;
      }
      if (lastNewline != n) {
        end = lastNewline + 1;
      } else if (runEnd < n && runEnd - i > 1) {
        end = runEnd - 1;
      } else {
        end = runEnd;
      }
    }
    size_t from = cps[i].offset;
    size_t to = end < n ? cps[end].offset : text.size();
    out.push_back(text.substr(from, to - from));
    i = end;
  }
  return out;
}

//===------------------------------------------------------------------------------------------===//
// BPE training
//===------------------------------------------------------------------------------------------===//

struct TrainedBpe {
  std::vector<std::string> tokens;                 // raw bytes of each token, by id
  std::vector<std::pair<int32_t, int32_t>> merges; // in rank order
};

uint64_t pairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

/// Standard BPE: repeatedly merges the most frequent adjacent pair (ties: smaller ids first)
/// until there are targetTokens tokens or no pair occurs twice. Pair counts are updated only for
/// the words a merge touches, which keeps thousands of merges fast.
TrainedBpe trainBpe(const std::vector<std::pair<std::string, int64_t>> &wordCounts,
                    size_t targetTokens) {
  const ByteAlphabet &alphabet = byteAlphabet();
  TrainedBpe bpe;
  std::unordered_map<std::string, int32_t> idOfToken;
  for (int32_t id = 0; id < 256; ++id) {
    bpe.tokens.emplace_back(1, static_cast<char>(alphabet.byteOfId[id]));
    idOfToken.emplace(bpe.tokens.back(), id);
  }

  struct Word {
    std::vector<int32_t> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto &[text, count] : wordCounts) {
    Word word{{}, count};
    for (char c : text) {
      word.symbols.push_back(alphabet.idOfByte[static_cast<uint8_t>(c)]);
    }
    words.push_back(std::move(word));
  }

  std::unordered_map<uint64_t, int64_t> pairCount;
  std::unordered_map<uint64_t, std::vector<int32_t>> pairWords; // may list stale words
  auto addPairs = [&](int32_t w, int64_t sign, std::unordered_set<uint64_t> *touched) {
    const Word &word = words[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      uint64_t key = pairKey(word.symbols[i], word.symbols[i + 1]);
      pairCount[key] += sign * word.count;
      if (sign > 0) {
        pairWords[key].push_back(w);
      }
      if (touched) {
        touched->insert(key);
      }
    }
  };
  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w) {
    addPairs(w, 1, nullptr);
  }

  // Max-heap on (count, then smaller pair first); entries go stale when counts change and are
  // checked against pairCount when popped.
  using Entry = std::tuple<int64_t, int32_t, int32_t>;
  auto worse = [](const Entry &x, const Entry &y) {
    if (std::get<0>(x) != std::get<0>(y)) {
      return std::get<0>(x) < std::get<0>(y);
    }
    return std::make_pair(std::get<1>(x), std::get<2>(x)) >
           std::make_pair(std::get<1>(y), std::get<2>(y));
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  auto push = [&](uint64_t key) {
    int64_t count = pairCount[key];
    if (count >= 2) {
      heap.emplace(count, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFF));
    }
  };
  {
    // Push in key order so the heap's layout, though not its answers, is reproducible too.
    std::vector<uint64_t> keys;
    for (const auto &[key, count] : pairCount) {
      keys.push_back(key);
    }
    std::sort(keys.begin(), keys.end());
    for (uint64_t key : keys) {
      push(key);
    }
  }

  std::unordered_set<uint64_t> banned;
  while (bpe.tokens.size() < targetTokens && !heap.empty()) {
    auto [count, a, b] = heap.top();
    heap.pop();
    uint64_t key = pairKey(a, b);
    if (pairCount[key] != count || banned.count(key)) {
      continue;
    }
    std::string merged = bpe.tokens[a] + bpe.tokens[b];
    if (idOfToken.count(merged)) {
      // Another pair already made this string; a second merge to it would repeat a token.
      banned.insert(key);
      continue;
    }
    auto newId = static_cast<int32_t>(bpe.tokens.size());
    bpe.tokens.push_back(merged);
    idOfToken.emplace(std::move(merged), newId);
    bpe.merges.emplace_back(a, b);

    std::vector<int32_t> affected = std::move(pairWords[key]);
    pairWords.erase(key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    std::unordered_set<uint64_t> touched;
    for (int32_t w : affected) {
      std::vector<int32_t> &symbols = words[w].symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < symbols.size() && !has; ++i) {
        has = symbols[i] == a && symbols[i + 1] == b;
      }
      if (!has) {
        continue;
      }
      addPairs(w, -1, &touched);
      std::vector<int32_t> next;
      next.reserve(symbols.size());
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          next.push_back(newId);
          ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols = std::move(next);
      addPairs(w, 1, &touched);
    }
    std::vector<uint64_t> touchedKeys(touched.begin(), touched.end());
    std::sort(touchedKeys.begin(), touchedKeys.end());
    for (uint64_t touchedKey : touchedKeys) {
      push(touchedKey);
    }
  }
  return bpe;
}

/// Counts the pre-tokens of the base text and of seeded text sized to the merges wanted.
std::vector<std::pair<std::string, int64_t>> makeWordCounts(uint64_t seed, size_t mergesWanted) {
  size_t randomBytes = 16 * 1024 + 48 * mergesWanted;
  std::unordered_map<std::string, int64_t> counts;
  // The written text counts several times so that its English and code keep a share of the
  // first merges next to the made-up words.
  for (std::string_view piece : splitPreTokens(kBaseText)) {
    counts[std::string(piece)] += 4;
  }
  std::string randomText = makeRandomText(seed, randomBytes, 1000 + mergesWanted / 2);
  for (std::string_view piece : splitPreTokens(randomText)) {
    ++counts[std::string(piece)];
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

OrderedJson addedToken(int64_t id, const std::string &content) {
  OrderedJson token;
  token["id"] = id;
  token["content"] = content;
  token["single_word"] = false;
  token["lstrip"] = false;
  token["rstrip"] = false;
  token["normalized"] = false;
  token["special"] = true;
  return token;
}

} // namespace

const std::vector<std::string> &glm53SpecialTokens() {
  static const std::vector<std::string> tokens = {
      "<|endoftext|>",
      "[MASK]",
      "[gMASK]",
      "[sMASK]",
      "<sop>",
      "<eop>",
      "<|system|>",
      "<|user|>",
      "<|assistant|>",
      "<|observation|>",
      "<|begin_of_image|>",
      "<|end_of_image|>",
      "<|begin_of_video|>",
      "<|end_of_video|>",
      "<|begin_of_audio|>",
      "<|end_of_audio|>",
      "<|begin_of_transcription|>",
      "<|end_of_transcription|>",
      "<|code_prefix|>",
      "<|code_middle|>",
      "<|code_suffix|>",
      "<think>",
      "</think>",
      "<tool_call>",
      "</tool_call>",
      "<tool_response>",
      "</tool_response>",
      "<arg_key>",
      "</arg_key>",
      "<arg_value>",
      "</arg_value>",
      "/nothink",
      "<|begin_of_box|>",
      "<|end_of_box|>",
      "<|image|>",
      "<|video|>",
  };
  return tokens;
}

Expected<std::string> makeSynthTokenizerJson(const SynthTokenizerOptions &options) {
  const std::vector<std::string> &specials = glm53SpecialTokens();
  const auto numSpecials = static_cast<int64_t>(specials.size());
  if (options.firstSpecialId < 256) {
    return invalidArgument("tokenizer: first special id ", options.firstSpecialId,
                           " leaves no room for the 256 byte tokens");
  }
  if (options.vocabSize < options.firstSpecialId + numSpecials) {
    return invalidArgument("tokenizer: vocab size ", options.vocabSize,
                           " is below first special id ", options.firstSpecialId, " + ",
                           numSpecials, " special tokens");
  }
  // Hugging Face tokenizers keeps ids in 32 bits.
  if (options.vocabSize > int64_t{1} << 31) {
    return invalidArgument("tokenizer: vocab size ", options.vocabSize, " does not fit 32-bit ids");
  }
  if (options.maxMerges < 0) {
    return invalidArgument("tokenizer: max merges ", options.maxMerges, " is negative");
  }

  auto bpeSize = static_cast<size_t>(options.firstSpecialId);
  size_t targetTokens = std::min<size_t>(bpeSize, 256 + static_cast<size_t>(options.maxMerges));
  TrainedBpe bpe = trainBpe(makeWordCounts(options.seed, targetTokens - 256), targetTokens);

  std::vector<std::string> vocab;
  vocab.reserve(bpeSize);
  std::unordered_set<std::string> used;
  for (const std::string &raw : bpe.tokens) {
    vocab.push_back(toByteLevel(raw));
    used.insert(vocab.back());
  }
  // Fillers keep the BPE part at exactly firstSpecialId tokens. A filler mixes letters, digits
  // and punctuation, which the pre-tokenizer never leaves in one piece, so no merge makes one.
  for (int64_t n = 0; vocab.size() < bpeSize; ++n) {
    std::string filler = toByteLevel(strCat("<|filler_", n, "|>"));
    if (used.insert(filler).second) {
      vocab.push_back(std::move(filler));
    }
  }

  OrderedJson addedTokens = OrderedJson::array();
  for (int64_t i = 0; i < numSpecials; ++i) {
    addedTokens.push_back(addedToken(options.firstSpecialId + i, specials[i]));
  }
  for (int64_t id = options.firstSpecialId + numSpecials; id < options.vocabSize; ++id) {
    addedTokens.push_back(
        addedToken(id, strCat("<|reserved_", id - options.firstSpecialId - numSpecials, "|>")));
  }

  // Built in one go from (token, id) pairs: ordered_json's per-key insert searches the keys
  // linearly, too slow for 150k entries. The strings are already known to be unique.
  std::vector<std::pair<const std::string, OrderedJson>> vocabEntries;
  vocabEntries.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    vocabEntries.emplace_back(vocab[id], OrderedJson(static_cast<int64_t>(id)));
  }
  OrderedJson vocabJson = OrderedJson::object_t(std::make_move_iterator(vocabEntries.begin()),
                                                std::make_move_iterator(vocabEntries.end()));
  OrderedJson merges = OrderedJson::array();
  for (const auto &[a, b] : bpe.merges) {
    merges.push_back(OrderedJson::array({vocab[a], vocab[b]}));
  }

  OrderedJson split;
  split["type"] = "Split";
  split["pattern"] = {{"Regex", kPreTokenizerRegex}};
  split["behavior"] = "Isolated";
  split["invert"] = false;
  OrderedJson byteLevel;
  byteLevel["type"] = "ByteLevel";
  byteLevel["add_prefix_space"] = false;
  byteLevel["trim_offsets"] = false;
  byteLevel["use_regex"] = false;
  OrderedJson preTokenizer;
  preTokenizer["type"] = "Sequence";
  preTokenizer["pretokenizers"] = OrderedJson::array({split, byteLevel});

  auto sequence = [](const char *id, int typeId) {
    OrderedJson inner;
    inner["id"] = id;
    inner["type_id"] = typeId;
    OrderedJson outer;
    outer["Sequence"] = inner;
    return outer;
  };
  OrderedJson postProcessor;
  postProcessor["type"] = "TemplateProcessing";
  postProcessor["single"] = OrderedJson::array({sequence("A", 0)});
  postProcessor["pair"] = OrderedJson::array({sequence("A", 0), sequence("B", 1)});
  postProcessor["special_tokens"] = OrderedJson::object();

  // The byte-level decoder ignores these flags; they are what `tokenizers` writes for it.
  OrderedJson decoder;
  decoder["type"] = "ByteLevel";
  decoder["add_prefix_space"] = true;
  decoder["trim_offsets"] = true;
  decoder["use_regex"] = true;

  OrderedJson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = std::move(vocabJson);
  model["merges"] = std::move(merges);

  OrderedJson doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = std::move(addedTokens);
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = std::move(preTokenizer);
  doc["post_processor"] = std::move(postProcessor);
  doc["decoder"] = std::move(decoder);
  doc["model"] = std::move(model);
  return doc.dump(2);
}

std::string makeSynthTokenizerConfigJson() {
  // Written as text: model_max_length is transformers' "no limit" value int(1e30), which does
  // not fit a 64-bit JSON integer.
  return R"json({
  "backend": "tokenizers",
  "eos_token": "<|endoftext|>",
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "<|endoftext|>",
  "tokenizer_class": "TokenizersBackend"
}
)json";
}

std::string_view glm53ChatTemplate() { return kChatTemplate; }

} // namespace glm::glm53
