// From a request's constraint fields to the sequence's token constraint.
#include "server/http/StructuredRequest.h"

#include "server/openai/ReasoningSplitter.h"

namespace glm::server {

using grammar::ConstraintSpec;

std::shared_ptr<grammar::StructuredOutputs> makeStructuredOutputs(const Tokenizer &tokenizer) {
  std::vector<std::string> bytes(tokenizer.idCount());
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (tokenizer.hasId(static_cast<TokenId>(id))) {
      bytes[id] = std::string(tokenizer.tokenBytes(static_cast<TokenId>(id)));
    }
  }
  std::vector<int32_t> special;
  for (const AddedToken &t : tokenizer.addedTokens()) {
    special.push_back(t.id);
  }
  auto id = [&](std::string_view token) {
    std::optional<TokenId> found = tokenizer.tokenToId(token);
    return found ? static_cast<int32_t>(*found) : -1;
  };
  grammar::ToolCallTokens tools{id("<tool_call>"), id("</tool_call>"), id("<arg_key>"),
                                id("</arg_key>"),  id("<arg_value>"),  id("</arg_value>")};
  return std::make_shared<grammar::StructuredOutputs>(
      std::make_shared<grammar::TokenVocabulary>(std::move(bytes), special), tools);
}

namespace {

std::optional<ConstraintSpec> fromConstraint(const OutputConstraint &c) {
  ConstraintSpec spec;
  spec.path = c.param;
  spec.text = c.text;
  spec.choices = c.choices;
  switch (c.kind) {
  case OutputConstraint::Kind::None:
    return std::nullopt;
  case OutputConstraint::Kind::JsonObject:
    spec.kind = ConstraintSpec::Kind::JsonObject;
    break;
  case OutputConstraint::Kind::JsonSchema:
    spec.kind = ConstraintSpec::Kind::JsonSchema;
    break;
  case OutputConstraint::Kind::Regex:
    spec.kind = ConstraintSpec::Kind::Regex;
    break;
  case OutputConstraint::Kind::Choice:
    spec.kind = ConstraintSpec::Kind::Choice;
    break;
  case OutputConstraint::Kind::Grammar:
    spec.kind = ConstraintSpec::Kind::Gbnf;
    break;
  }
  return spec;
}

} // namespace

std::optional<ConstraintSpec> constraintSpec(const ChatRequest &request) {
  if (request.toolChoice == ToolChoice::Required || request.toolChoice == ToolChoice::Named) {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::ToolCall;
    spec.tools = request.tools;
    spec.toolName = request.toolChoice == ToolChoice::Named ? request.toolChoiceName : "";
    spec.parallelToolCalls = request.parallelToolCalls;
    spec.path = "tools";
    return spec;
  }
  return fromConstraint(request.constraint);
}

std::optional<ConstraintSpec> constraintSpec(const CompletionRequest &request) {
  return fromConstraint(request.constraint);
}

std::optional<ApiError> attachConstraint(const ConstraintSpec &spec,
                                         grammar::StructuredOutputs &structured,
                                         const Tokenizer &tokenizer, bool startsInReasoning,
                                         runtime::SequenceRequest &sequence) {
  auto compiled = structured.compile(spec);
  if (auto *error = std::get_if<grammar::GrammarError>(&compiled)) {
    return ApiError{400, "invalid_request_error", "invalid_value",
                    strCat("Invalid '", error->path, "': ", error->message, "."), error->path};
  }
  std::optional<int32_t> reasoningEnd;
  if (startsInReasoning) {
    if (std::optional<TokenId> end = tokenizer.tokenToId(kThinkClose)) {
      reasoningEnd = static_cast<int32_t>(*end);
    }
  }
  // With ignore_eos an end-of-sequence token ends nothing: the scheduler hands it to the
  // constraint as a token, which no grammar accepts. So the grammar does not offer it: where the
  // structure may end or go on, it goes on (up to max_tokens); where it is complete, the reply
  // ends there all the same.
  std::vector<int32_t> endIds = sequence.ignoreEos ? std::vector<int32_t>() : sequence.eosIds;
  sequence.constraint = std::make_shared<grammar::GrammarConstraint>(
      std::get<std::shared_ptr<const grammar::CompiledGrammar>>(std::move(compiled)),
      std::move(endIds), reasoningEnd);
  return std::nullopt;
}

} // namespace glm::server
