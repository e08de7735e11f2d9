// The render budget of the thread, and the errors that name each bound.
#include "server/chat/JinjaLimits.h"

namespace glm::server::jinja {
namespace {

thread_local RenderBudget *tBudget = nullptr;

} // namespace

Status RenderBudget::stepBudgetError(uint64_t maxSteps) {
  return invalidArgument("the template ran more than ", maxSteps,
                         " steps, the interpreter's step budget (a loop that never ends, or "
                         "loops nested too deep?)");
}

RenderBudgetScope::RenderBudgetScope(RenderBudget &budget) : saved_(tBudget) { tBudget = &budget; }

RenderBudgetScope::~RenderBudgetScope() { tBudget = saved_; }

bool spendSteps(uint64_t steps) { return tBudget == nullptr || tBudget->spend(steps); }

bool renderFailed() { return tBudget != nullptr && !tBudget->ok(); }

void reportLimit(Status status) {
  if (tBudget != nullptr) {
    tBudget->fail(std::move(status));
  }
}

Status stringTooLong(std::string_view what, uint64_t bytes) {
  return invalidArgument(what, " would build a string of ", bytes, " bytes, more than the ",
                         kMaxStringBytes, " the interpreter's string limit allows");
}

Status listTooLong(std::string_view what, uint64_t items) {
  return invalidArgument(what, " would build a list of ", items, " items, more than the ",
                         kMaxListItems, " the interpreter's list limit allows");
}

} // namespace glm::server::jinja
