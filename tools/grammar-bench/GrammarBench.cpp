// glmc-grammar-bench: times the allowed-token mask of one row at many states of generated JSON
// documents, over a byte-level vocabulary of GLM-5.3's size (154,880 ids). The vocabulary is a
// real tokenizer.json when --tokenizer names one, else a generated stand-in shaped like a BPE
// vocabulary: words with and without a leading space, CJK runs, digits, punctuation and JSON
// fragments, whitespace runs. Each document is walked twice: the first pass builds the
// per-position token tables (cold: what the first request under a schema pays), the second replays
// the same states with the tables built (warm: every later request). Prints median, p90, p99 and
// max per pass, in microseconds, as JSON (also to --json OUT); the warm pass also times the advance
// on each sampled token and reports the slowest masks with their stack tops, the uncertain tokens
// of their top frames' tables and the tokens walked against the real stack. --verify N checks every
// Nth warm mask against running each token alone.
#include "server/grammar/JsonSchema.h"
#include "server/grammar/StructuredOutputs.h"
#include "server/tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace glm;
using namespace glm::grammar;
using Clock = std::chrono::steady_clock;

constexpr int64_t kVocab = 154880;
constexpr int64_t kSpecials = 60; // the ids without bytes at the end, as GLM-5.3's

const char *kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "title": {"type": "string", "maxLength": 40},
    "summary": {"type": "string"},
    "status": {"enum": ["open", "closed", "in progress", "blocked"]},
    "score": {"type": "number"},
    "created": {"type": "string", "format": "date-time"},
    "owner": {"$ref": "#/$defs/person"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 6},
    "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}
  },
  "required": ["id", "title", "status", "owner"],
  "$defs": {"person": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "email": {"type": "string", "format": "email"},
    "admin": {"type": "boolean"}}, "required": ["name"]}}
})";

/// A BPE-shaped stand-in vocabulary of kVocab ids.
std::vector<std::string> syntheticVocabulary(uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) {
    out.emplace_back(1, static_cast<char>(b));
    seen.insert(out.back());
  }
  static const char *kSyllables[] = {"th", "er", "on", "an", "re", "he", "in", "ed", "nd",  "ha",
                                     "at", "en", "es", "of", "or", "nt", "ea", "ti", "to",  "it",
                                     "st", "io", "le", "is", "ou", "ar", "as", "de", "rt",  "ve",
                                     "a",  "e",  "i",  "o",  "u",  "y",  "s",  "t",  "ing", "ion"};
  const std::string punct = "{}[]\":,.;!?()<>/\\-_+=*&^%$#@'`|~";
  auto word = [&] {
    std::string w;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      w += kSyllables[rng() % std::size(kSyllables)];
    }
    if (rng() % 5 == 0) {
      w[0] = static_cast<char>(std::toupper(w[0]));
    }
    return w;
  };
  while (static_cast<int64_t>(out.size()) < kVocab - kSpecials) {
    std::string t;
    const uint32_t kind = rng() % 100;
    if (kind < 55) {
      t = (rng() % 2 ? " " : "") + word();
    } else if (kind < 75) { // CJK runs: 1..4 characters of U+4E00..U+9FFF
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        const uint32_t cp = 0x4E00 + rng() % 0x5200;
        t += static_cast<char>(0xE0 | (cp >> 12));
        t += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        t += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else if (kind < 82) { // digits, 1..3 (GLM's pre-tokenizer splits numbers so)
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) {
        t += static_cast<char>('0' + rng() % 10);
      }
    } else if (kind < 92) { // punctuation runs, often around quotes: `",`, `":"`, `"}`
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) {
        t += rng() % 3 == 0 ? '"' : punct[rng() % punct.size()];
      }
      if (rng() % 3 == 0) {
        t += word();
      }
    } else if (kind < 97) { // whitespace runs and indentation
      t = rng() % 2 ? "\n" : "";
      t += std::string(1 + rng() % 12, rng() % 4 ? ' ' : '\t');
    } else { // code-ish: word + punctuation
      t = word() + punct[rng() % punct.size()];
    }
    if (seen.insert(t).second) {
      out.push_back(t);
    }
  }
  out.resize(kVocab); // the specials: no bytes
  return out;
}

struct Stats {
  double median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) {
    return s;
  }
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  s.median = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  s.max = v.back();
  for (double x : v) {
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  return s;
}

} // namespace

int main(int argc, char **argv) {
  std::string tokenizerPath, jsonOut;
  int documents = 20;
  int maxSteps = 400;
  int verifyEvery = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      tokenizerPath = argv[++i];
    } else if (!std::strcmp(argv[i], "--documents") && i + 1 < argc) {
      documents = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--max-steps") && i + 1 < argc) {
      maxSteps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--verify") && i + 1 < argc) {
      verifyEvery = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      jsonOut = argv[++i];
    } else {
      std::fprintf(stderr, "usage: glmc-grammar-bench [--tokenizer tokenizer.json] [--documents N] "
                           "[--max-steps N] [--verify N] [--json OUT]\n"
                           "  --verify N: check every Nth warm mask against running each token "
                           "alone (slow)\n");
      return 2;
    }
  }
  std::vector<std::string> bytes;
  std::vector<int32_t> special;
  std::string source = "synthetic";
  if (!tokenizerPath.empty()) {
    Expected<server::Tokenizer> t = server::Tokenizer::fromFile(tokenizerPath);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().toString().c_str());
      return 1;
    }
    bytes.resize(t->idCount());
    for (size_t id = 0; id < bytes.size(); ++id) {
      bytes[id] = std::string(t->tokenBytes(static_cast<int32_t>(id)));
    }
    for (const server::AddedToken &a : t->addedTokens()) {
      special.push_back(a.id);
    }
    source = tokenizerPath;
  } else {
    bytes = syntheticVocabulary(1);
  }
  const auto t0 = Clock::now();
  auto vocabulary = std::make_shared<TokenVocabulary>(std::move(bytes), special);
  const double vocabMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::JsonSchema;
  spec.text = kSchema;
  spec.path = "schema";
  const auto t1 = Clock::now();
  auto built = StructuredOutputs::build(spec, {}, {});
  if (auto *e = std::get_if<GrammarError>(&built)) {
    std::fprintf(stderr, "%s: %s\n", e->path.c_str(), e->message.c_str());
    return 1;
  }
  auto compiled =
      std::make_shared<CompiledGrammar>(std::move(std::get<Grammar>(built)), vocabulary);
  const double compileMs = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();

  // Generate the documents: random allowed tokens, the closing of structures favoured a little so
  // that documents end (a real model ends them; a uniform pick inside a string rarely does).
  const int32_t eos = vocabulary->size() - 1;
  std::mt19937 rng(42);
  std::vector<double> cold, warm;
  std::vector<MaskStats> warmStats;
  std::vector<double> advances; // Matcher::advance on the sampled token, warm
  int64_t verified = 0, mismatches = 0;
  std::vector<std::vector<int32_t>> picks;
  std::vector<uint32_t> mask(vocabulary->words());
  int64_t states = 0;
  for (int d = 0; d < documents; ++d) {
    Matcher m(compiled);
    std::vector<int32_t> doc;
    for (int step = 0; step < maxSteps; ++step) {
      std::fill(mask.begin(), mask.end(), 0u);
      const auto s = Clock::now();
      m.fillMask(mask, std::vector<int32_t>{eos});
      cold.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      ++states;
      std::vector<int32_t> allowed, closing;
      for (int32_t id = 0; id < vocabulary->size(); ++id) {
        if ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) {
          allowed.push_back(id);
          const std::string_view b = vocabulary->bytes(id);
          if (b.find_first_of("\"]},") != std::string_view::npos) {
            closing.push_back(id);
          }
        }
      }
      if (allowed.empty() || (m.accepting() && rng() % 2 == 0)) {
        break;
      }
      const bool close = !closing.empty() && rng() % 4 == 0;
      const int32_t pick =
          close ? closing[rng() % closing.size()] : allowed[rng() % allowed.size()];
      if (pick == eos) {
        break;
      }
      m.advance(pick);
      doc.push_back(pick);
    }
    picks.push_back(std::move(doc));
  }
  const size_t tables = compiled->positionsComputed();
  const size_t contexts = compiled->contextsComputed();
  for (const std::vector<int32_t> &doc : picks) {
    Matcher m(compiled);
    for (size_t i = 0; i <= doc.size(); ++i) {
      std::fill(mask.begin(), mask.end(), 0u);
      const auto s = Clock::now();
      m.fillMask(mask, std::vector<int32_t>{eos});
      warm.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      warmStats.push_back(m.lastMask());
      if (verifyEvery > 0 && warm.size() % static_cast<size_t>(verifyEvery) == 0) {
        ++verified;
        for (int32_t id = 0; id < vocabulary->size(); ++id) {
          const bool expected = m.allows(id) || (id == eos && m.accepting());
          if (expected != (((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) != 0)) {
            ++mismatches;
          }
        }
      }
      if (i < doc.size()) {
        const auto a = Clock::now();
        m.advance(doc[i]);
        advances.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
      }
    }
  }
  const Stats c = summarize(cold), w = summarize(warm), a = summarize(advances);
  // The slowest warm states, with what made them slow.
  std::vector<size_t> order(warm.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return warm[a] > warm[b]; });
  nlohmann::ordered_json slowest = nlohmann::ordered_json::array();
  for (size_t i = 0; i < std::min<size_t>(5, order.size()); ++i) {
    const MaskStats &st = warmStats[order[i]];
    slowest.push_back({{"us", warm[order[i]]},
                       {"tops", st.tops},
                       {"top_frame_uncertain", st.topUncertain},
                       {"walked", st.walked}});
  }
  size_t maxTopUncertain = 0, maxWalked = 0;
  for (const MaskStats &st : warmStats) {
    maxTopUncertain = std::max(maxTopUncertain, st.topUncertain);
    maxWalked = std::max(maxWalked, st.walked);
  }
  nlohmann::ordered_json out = {
      {"vocabulary", source},
      {"vocab_size", vocabulary->size()},
      {"vocabulary_build_ms", vocabMs},
      {"schema_compile_ms", compileMs},
      {"grammar_positions", compiled->grammar().elements().size()},
      {"position_tables_built", tables},
      {"context_tables_built", contexts},
      {"table_mib", static_cast<double>(compiled->tableBytes()) / (1 << 20)},
      {"states", states},
      {"cold_us",
       {{"median", c.median}, {"p90", c.p90}, {"p99", c.p99}, {"max", c.max}, {"mean", c.mean}}},
      {"warm_us",
       {{"median", w.median}, {"p90", w.p90}, {"p99", w.p99}, {"max", w.max}, {"mean", w.mean}}},
      {"warm_advance_us",
       {{"median", a.median}, {"p90", a.p90}, {"p99", a.p99}, {"max", a.max}, {"mean", a.mean}}},
      {"warm_max_top_frame_uncertain", maxTopUncertain},
      {"warm_max_walked", maxWalked},
      {"warm_slowest", slowest}};
  if (verifyEvery > 0) {
    out["verified_states"] = verified;
    out["verify_mismatched_tokens"] = mismatches;
  }
  std::printf("%s\n", out.dump(2).c_str());
  if (!jsonOut.empty()) {
    if (FILE *f = std::fopen(jsonOut.c_str(), "w")) {
      std::fprintf(f, "%s\n", out.dump(2).c_str());
      std::fclose(f);
    }
  }
  return 0;
}
