// The bounds that keep a hostile chat template (a checkpoint's own file) from crashing or stalling
// glmc. Each is named in the error that reports it and sits far above what real templates need.
#pragma once

#include "base/Status.h"

#include <cstddef>
#include <cstdint>

namespace glm::server::jinja {

/// The largest chat template read (chat_template.jinja, or the chat_template string in
/// tokenizer_config.json): real templates are under 100 KiB; a 1 MiB one lexes into at most
/// ~40 MiB of tokens and parses in well under a second.
inline constexpr uint64_t kMaxTemplateBytes = uint64_t(1) << 20;

/// How deep blocks and expressions may nest when a template is parsed: one counter for nested
/// statements, parentheses, brackets, calls, unary operators and conditional chains, and the
/// same bound on the height of any expression's tree. Real templates nest under 20; jinja2 itself
/// (Python's recursion limit) gives up near 80 nested parentheses.
inline constexpr int kMaxNesting = 128;

/// How deep a render may recurse: every statement executed, expression evaluated and macro call
/// inside another counts one level. A tree nested kMaxNesting deep costs 2 levels per nesting
/// level, so real templates use a few dozen. Each level runs in a frame of its own kind only, so
/// the bound keeps the native stack under 2 MiB in a release build and ~5 MiB with
/// AddressSanitizer; a thread whose stack runs out first is stopped by a stack check ("deeper than
/// this thread's stack allows"). It sits above the 256 macro calls kMaxCallDepth allows to a macro
/// that only calls itself (3 levels a call).
inline constexpr int kMaxRenderDepth = 1024;

/// The longest string a render may build, the output included: 4x the server's default request
/// body (32 MiB), so the text of every message of any request fits with room for the template's
/// own text. Checked before the string is built.
inline constexpr size_t kMaxStringBytes = size_t(128) << 20;

/// The most items one list may hold (range() alone stops at 100000): about 350 MiB of values.
inline constexpr size_t kMaxListItems = size_t(1) << 22;

/// How deep lists, dicts and namespaces may nest inside each other: request JSON is limited to
/// 64 levels, and printing, comparing or freeing a value recurses over its depth.
inline constexpr size_t kMaxValueDepth = 256;

/// The work one render may do. A step is a statement executed, an expression evaluated, a
/// comparison inside a builtin (sort, unique, ==, in), kLoopIterationSteps per loop iteration, or
/// each KiB of text and each 16 list items an operation reads or builds. GLM's template renders a
/// 4,200-message conversation with tools in ~0.2 million steps (0.05 s); the budget is 100x that
/// and stops a runaway template within a few seconds (3-10 million steps a second).
inline constexpr uint64_t kMaxRenderSteps = 20'000'000;

/// What one loop iteration costs beyond its body (it builds the loop object).
inline constexpr uint64_t kLoopIterationSteps = 4;

/// The steps that reading or building `bytes` of text costs (at least 0).
inline constexpr uint64_t stepsForBytes(size_t bytes) { return bytes >> 10; }
/// The steps that reading or building `items` list items costs.
inline constexpr uint64_t stepsForItems(size_t items) { return items >> 4; }

/// The budget of the render running on this thread. The interpreter installs one per render
/// (RenderBudgetScope) and checks it at every step; builtins and value printing charge their inner
/// loops to it (spendSteps) and report a string that would pass kMaxStringBytes where they cannot
/// return an error (reportLimit). The first failure sticks; the interpreter returns it at its next
/// step, so a computation cut short is never used.
class RenderBudget {
public:
  explicit RenderBudget(uint64_t maxSteps) : left_(maxSteps), max_(maxSteps) {}

  /// Charges `steps`; false once the budget is spent or the render has failed.
  bool spend(uint64_t steps) {
    if (steps >= left_) {
      left_ = 0;
      fail(stepBudgetError(max_));
      return false;
    }
    left_ -= steps;
    return failure_.ok();
  }
  /// Records the render's failure, unless one is recorded already.
  void fail(Status status) {
    if (failure_.ok()) {
      failure_ = std::move(status);
    }
  }
  bool ok() const { return failure_.ok(); }
  const Status &failure() const { return failure_; }

  /// The error for a spent budget.
  static Status stepBudgetError(uint64_t maxSteps);

private:
  uint64_t left_;
  uint64_t max_;
  Status failure_;
};

/// Installs `budget` as this thread's for its lifetime.
class RenderBudgetScope {
public:
  explicit RenderBudgetScope(RenderBudget &budget);
  ~RenderBudgetScope();
  RenderBudgetScope(const RenderBudgetScope &) = delete;
  RenderBudgetScope &operator=(const RenderBudgetScope &) = delete;

private:
  RenderBudget *saved_;
};

/// Charges this thread's render budget; false when it is spent or the render has failed (callers
/// stop early). Always true outside a render.
bool spendSteps(uint64_t steps);
/// Whether this thread's render has failed (false outside a render).
bool renderFailed();
/// Records a failure in this thread's render (ignored outside a render).
void reportLimit(Status status);

/// The error for a string that would pass kMaxStringBytes; `what` names it ("indent()").
Status stringTooLong(std::string_view what, uint64_t bytes);
/// The error for a list that would pass kMaxListItems.
Status listTooLong(std::string_view what, uint64_t items);

/// Success if a string of `bytes` may be built.
inline Status checkStringSize(std::string_view what, uint64_t bytes) {
  return bytes > kMaxStringBytes ? stringTooLong(what, bytes) : Status::success();
}
/// Success if a list of `items` may be built.
inline Status checkListSize(std::string_view what, uint64_t items) {
  return items > kMaxListItems ? listTooLong(what, items) : Status::success();
}

} // namespace glm::server::jinja
