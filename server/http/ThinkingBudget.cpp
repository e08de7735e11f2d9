// The thinking budget as a per-step mask.
#include "server/http/ThinkingBudget.h"

#include <algorithm>

namespace glm::server {

ThinkingBudget::ThinkingBudget(int64_t budget, int32_t thinkEnd,
                               std::unique_ptr<runtime::TokenConstraint> inner)
    : budget_(budget), thinkEnd_(thinkEnd), inner_(std::move(inner)) {}

ThinkingBudget::ThinkingBudget(const ThinkingBudget &other)
    : budget_(other.budget_), thinkEnd_(other.thinkEnd_),
      inner_(other.inner_ ? other.inner_->clone() : nullptr), thinking_(other.thinking_),
      thought_(other.thought_) {}

bool ThinkingBudget::fillAllowed(std::span<uint32_t> mask) {
  const size_t word = static_cast<size_t>(thinkEnd_) / 32;
  if (thinking_ && thought_ >= budget_ && word < mask.size()) {
    std::fill(mask.begin(), mask.end(), 0u);
    mask[word] = 1u << (static_cast<uint32_t>(thinkEnd_) % 32);
    return true;
  }
  return inner_ && inner_->fillAllowed(mask);
}

bool ThinkingBudget::advance(int32_t token) {
  if (thinking_) {
    ++thought_;
    thinking_ = token != thinkEnd_;
  }
  return !inner_ || inner_->advance(token);
}

std::unique_ptr<runtime::TokenConstraint> ThinkingBudget::clone() const {
  return std::make_unique<ThinkingBudget>(*this);
}

} // namespace glm::server
