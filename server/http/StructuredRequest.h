// Structured outputs for a prepared request: the model's grammar front door (its vocabulary's bytes
// decoded once, at server start) and the request's constraint compiled into the sequence's
// per-choice token constraint.
#pragma once

#include "runtime/api/EngineApi.h"
#include "server/grammar/StructuredOutputs.h"
#include "server/openai/Protocol.h"
#include "server/tokenizer/Tokenizer.h"

#include <memory>
#include <optional>

namespace glm::server {

/// The grammar front door over `tokenizer`'s vocabulary: every id's bytes, added and special
/// tokens kept out of byte matching, GLM's tool-call tokens for forced calls.
std::shared_ptr<grammar::StructuredOutputs> makeStructuredOutputs(const Tokenizer &tokenizer);

/// What a request's reply must be, for the grammar engine: its constraint, or, for a forced tool
/// call, the call form of its tools. nullopt when the reply is free.
std::optional<grammar::ConstraintSpec> constraintSpec(const ChatRequest &request);
std::optional<grammar::ConstraintSpec> constraintSpec(const CompletionRequest &request);

/// Compiles `spec` (cached) and sets `sequence.constraint`: the grammar holds after the reasoning
/// when `startsInReasoning` (from the first token otherwise); end-of-sequence ids are offered
/// where the structure may end unless the sequence ignores them. A schema, regex or grammar error
/// is a 400 naming the field and the path inside it.
std::optional<ApiError> attachConstraint(const grammar::ConstraintSpec &spec,
                                         grammar::StructuredOutputs &structured,
                                         const Tokenizer &tokenizer, bool startsInReasoning,
                                         runtime::SequenceRequest &sequence);

} // namespace glm::server
