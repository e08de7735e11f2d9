// Anthropic's thinking.budget_tokens, enforced: a token constraint that lets the think block run
// for at most the budget's tokens and then allows only the end-of-think token, so the model goes
// on to write its answer. It wraps the request's own constraint (structured outputs, a forced tool
// call), which holds after the think block as before.
#pragma once

#include "runtime/api/TokenConstraint.h"

#include <cstdint>
#include <memory>

namespace glm::server {

class ThinkingBudget final : public runtime::TokenConstraint {
public:
  /// The reply starts inside the think block; after `budget` tokens in it, `thinkEnd` (GLM's
  /// `</think>`) is the only token allowed. `inner` (null: none) sees every token, the think
  /// block's included, and decides the mask once the think block is closed.
  ThinkingBudget(int64_t budget, int32_t thinkEnd, std::unique_ptr<runtime::TokenConstraint> inner);
  ThinkingBudget(const ThinkingBudget &other);

  bool fillAllowed(std::span<uint32_t> mask) override;
  bool advance(int32_t token) override;
  bool complete() const override { return inner_ && inner_->complete(); }
  std::unique_ptr<runtime::TokenConstraint> clone() const override;

private:
  const int64_t budget_;
  const int32_t thinkEnd_;
  std::unique_ptr<runtime::TokenConstraint> inner_;
  bool thinking_ = true;
  int64_t thought_ = 0; // tokens generated inside the think block
};

} // namespace glm::server
