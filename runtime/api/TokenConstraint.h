// The per-step hook of structured outputs: a constraint on which tokens a sequence may sample
// next, consulted by the scheduler before each step and advanced on each delivered token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace glm::runtime {

/// One choice's constraint. The scheduler owns a clone per choice (SequenceRequest holds the
/// prototype, never advanced) and calls it on its thread only.
class TokenConstraint {
public:
  virtual ~TokenConstraint() = default;
  /// Writes the allowed-token mask for the next token into `mask` (bit i % 32 of word i / 32,
  /// every word written, ids the constraint does not know cleared); false when every token is
  /// allowed this step (e.g. while the reply reasons), `mask` then untouched.
  virtual bool fillAllowed(std::span<uint32_t> mask) = 0;
  /// Advances on the delivered token. An end-of-sequence token that ends the reply is not
  /// passed; under ignore_eos it ends nothing and is passed like any other, so a constraint
  /// must then not allow it unless it can advance on it. False when the token breaks the
  /// constraint, which a sampler that applied the mask never produces.
  virtual bool advance(int32_t token) = 0;
  /// The constrained structure is complete and nothing may follow it: the choice ends (Stop).
  virtual bool complete() const = 0;
  /// A fresh copy in the same state (for the choices of an n > 1 request).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
};

} // namespace glm::runtime
