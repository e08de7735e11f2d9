// The front door of structured outputs: a request's constraint (JSON Schema, json_object, regex,
// choice, GBNF, a forced tool call) compiled once per text into a CompiledGrammar, cached, and
// turned into the per-choice TokenConstraint the scheduler runs.
#pragma once

#include "runtime/api/TokenConstraint.h"
#include "server/grammar/Grammar.h"
#include "server/grammar/TokenMask.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace glm::grammar {

/// What a request asks its reply to be.
struct ConstraintSpec {
  enum class Kind { JsonObject, JsonSchema, Regex, Choice, Gbnf, ToolCall };
  Kind kind = Kind::JsonObject;
  std::string text;                 // JsonSchema: the schema's JSON; Regex; Gbnf
  std::vector<std::string> choices; // Choice
  nlohmann::ordered_json tools;     // ToolCall: the OpenAI tools array
  std::string toolName;             // ToolCall: the forced tool; empty: any of them
  bool parallelToolCalls = true;    // ToolCall: several calls allowed
  std::string path;                 // the request field it came from, for errors
};

/// The special tokens GLM writes a tool call with.
struct ToolCallTokens {
  int32_t callOpen = -1, callClose = -1, keyOpen = -1, keyClose = -1, valueOpen = -1,
          valueClose = -1;
};

/// Compiles specs into grammars over one vocabulary; caches them by spec (at most kCacheSize,
/// and at most `cacheBytes` of token tables: least recently used dropped; a dropped grammar lives
/// on while requests hold it). Safe to share between threads.
class StructuredOutputs {
public:
  static constexpr size_t kCacheSize = 64;
  /// A schema's tables take ~10 MiB at GLM's vocabulary (docs/performance.md): a few dozen fit.
  static constexpr size_t kCacheBytes = size_t{256} << 20;
  StructuredOutputs(std::shared_ptr<const TokenVocabulary> vocabulary, ToolCallTokens toolTokens,
                    GrammarBounds bounds = {}, size_t cacheBytes = kCacheBytes);

  std::variant<std::shared_ptr<const CompiledGrammar>, GrammarError>
  compile(const ConstraintSpec &spec);
  /// Grammar of the spec alone, without the cache or the vocabulary (tests, tools).
  static std::variant<Grammar, GrammarError>
  build(const ConstraintSpec &spec, const ToolCallTokens &toolTokens, const GrammarBounds &bounds);
  const TokenVocabulary &vocabulary() const { return *vocabulary_; }
  std::shared_ptr<const TokenVocabulary> sharedVocabulary() const { return vocabulary_; }

private:
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  ToolCallTokens toolTokens_;
  GrammarBounds bounds_;
  size_t cacheBytes_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;
  std::map<std::string, decltype(lru_)::iterator> index_;
};

/// A choice's constraint: everything passes while the reply reasons (until `reasoningEnd`,
/// GLM's `</think>`), then the grammar holds; once the grammar is complete the choice ends, and
/// where it may end or go on, the end-of-sequence ids are allowed beside its tokens.
class GrammarConstraint final : public runtime::TokenConstraint {
public:
  /// `reasoningEnd` nullopt: the reply does not reason, the grammar holds from the first token.
  GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> eosIds,
                    std::optional<int32_t> reasoningEnd);
  GrammarConstraint(const GrammarConstraint &other) = default;

  bool fillAllowed(std::span<uint32_t> mask) override;
  bool advance(int32_t token) override;
  bool complete() const override { return !reasoning_ && matcher_.finished(); }
  std::unique_ptr<runtime::TokenConstraint> clone() const override;

  bool reasoning() const { return reasoning_; }
  const Matcher &matcher() const { return matcher_; }

private:
  Matcher matcher_;
  std::vector<int32_t> eosIds_;
  std::optional<int32_t> reasoningEnd_;
  bool reasoning_;
};

} // namespace glm::grammar
