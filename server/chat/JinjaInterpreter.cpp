// The Jinja interpreter: evaluates a template's syntax tree as jinja2's compiled code would.
#include "server/chat/JinjaInterpreter.h"

#include "server/chat/JinjaBuiltins.h"
#include "server/chat/JinjaLimits.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

namespace glm::server::jinja {

// Scoping follows jinja2: a for loop gives each iteration a fresh scope (so `set` inside a loop
// neither leaks out nor survives into the next iteration), `if` shares its enclosing scope, a
// macro body runs in a scope whose parent is where the macro was defined, and only namespace()
// objects carry values out of a loop.

/// Variables visible at one point of the template; lookups walk up the parents.
class Scope {
public:
  explicit Scope(Scope *parent) : parent_(parent) {}

  const Value *find(std::string_view name) const {
    for (const Scope *s = this; s != nullptr; s = s->parent_) {
      for (const auto &[key, value] : s->vars_) {
        if (key == name) {
          return &value;
        }
      }
    }
    return nullptr;
  }

  void set(std::string_view name, Value value) {
    for (auto &[key, v] : vars_) {
      if (key == name) {
        v = std::move(value);
        return;
      }
    }
    vars_.emplace_back(std::string(name), std::move(value));
  }

  void clear() { vars_.clear(); }

  /// A macro defined here keeps a pointer to this scope, so it must outlive the render.
  bool captured = false;

private:
  Scope *parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

namespace {

enum class Flow : uint8_t { Normal, Break, Continue };

/// How deep macros may call each other (Python's own recursion limit stops jinja2 near here).
/// kMaxRenderDepth bounds the native stack; this names the usual culprit.
constexpr int kMaxCallDepth = 256;

Status undefinedError(const Value &v) { return invalidArgument(v.undefinedHint()); }

Status overflow() {
  return invalidArgument("integer overflow (this interpreter's integers are 64-bit)");
}

/// Python's float divmod, which // and % on floats follow.
std::pair<double, double> floatDivmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floorDiv = 0.0;
  if (div != 0.0) {
    floorDiv = std::floor(div);
    if (div - floorDiv > 0.5) {
      floorDiv += 1.0;
    }
  } else {
    floorDiv = std::copysign(0.0, x / y);
  }
  return {floorDiv, mod};
}

[[gnu::noinline]] Expected<Value> repeat(const Value &sequence, int64_t times) {
  const int64_t n = std::max<int64_t>(0, times);
  if (sequence.isString()) {
    const std::string &s = sequence.asString();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size()) {
      return stringTooLong("'*'", static_cast<uint64_t>(n) * s.size());
    }
    // By doubling: a one-character string repeated 10^8 times is 27 appends, not 10^8.
    const size_t total = s.size() * static_cast<size_t>(n);
    std::string out;
    out.reserve(total);
    if (total > 0) {
      out = s;
      while (out.size() * 2 <= total) {
        out.append(out);
      }
      out.append(out, 0, total - out.size());
    }
    return Value::string(std::move(out));
  }
  const ListData &list = sequence.asList();
  if (!list.items.empty() && static_cast<uint64_t>(n) > kMaxListItems / list.items.size()) {
    return listTooLong("'*'", static_cast<uint64_t>(n) * list.items.size());
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) {
    items.insert(items.end(), list.items.begin(), list.items.end());
  }
  return Value::list(std::move(items),
                     list.style == ListStyle::Tuple ? ListStyle::Tuple : ListStyle::List);
}

const char *opSymbol(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
    return "+";
  case BinaryOp::Sub:
    return "-";
  case BinaryOp::Mul:
    return "*";
  case BinaryOp::Div:
    return "/";
  case BinaryOp::FloorDiv:
    return "//";
  case BinaryOp::Mod:
    return "%";
  case BinaryOp::Pow:
    return "**";
  }
  return "?";
}

/// Python's binary arithmetic on two values.
[[gnu::noinline]] Expected<Value> binaryOp(BinaryOp op, const Value &a, const Value &b) {
  if (a.isUndefined()) {
    return undefinedError(a);
  }
  if (b.isUndefined()) {
    return undefinedError(b);
  }
  const auto unsupportedTypes = [&]() {
    return invalidArgument("unsupported operand type(s) for ", opSymbol(op), ": '", typeName(a),
                           "' and '", typeName(b), "'");
  };
  const bool ints = a.isIntegral() && b.isIntegral();
  const bool numbers = a.isNumber() && b.isNumber();
  switch (op) {
  case BinaryOp::Add:
    if (ints) {
      int64_t r = 0;
      if (__builtin_add_overflow(a.asInt(), b.asInt(), &r)) {
        return overflow();
      }
      return Value::integer(r);
    }
    if (numbers) {
      return Value::real(a.asDouble() + b.asDouble());
    }
    if (a.isString() && b.isString()) {
      GLM_RETURN_IF_ERROR(checkStringSize("'+'", a.asString().size() + b.asString().size()));
      return Value::string(a.asString() + b.asString());
    }
    if (a.isList() && b.isList() &&
        (a.asList().style == ListStyle::Tuple) == (b.asList().style == ListStyle::Tuple)) {
      GLM_RETURN_IF_ERROR(checkListSize("'+'", a.asList().items.size() + b.asList().items.size()));
      std::vector<Value> items = a.asList().items;
      items.insert(items.end(), b.asList().items.begin(), b.asList().items.end());
      return Value::list(std::move(items),
                         a.asList().style == ListStyle::Tuple ? ListStyle::Tuple : ListStyle::List);
    }
    if (a.isString() || a.isList()) {
      return invalidArgument("can only concatenate ", typeName(a), " (not \"", typeName(b),
                             "\") to ", typeName(a));
    }
    return unsupportedTypes();
  case BinaryOp::Sub:
    if (ints) {
      int64_t r = 0;
      if (__builtin_sub_overflow(a.asInt(), b.asInt(), &r)) {
        return overflow();
      }
      return Value::integer(r);
    }
    if (numbers) {
      return Value::real(a.asDouble() - b.asDouble());
    }
    return unsupportedTypes();
  case BinaryOp::Mul:
    if (ints) {
      int64_t r = 0;
      if (__builtin_mul_overflow(a.asInt(), b.asInt(), &r)) {
        return overflow();
      }
      return Value::integer(r);
    }
    if (numbers) {
      return Value::real(a.asDouble() * b.asDouble());
    }
    if ((a.isString() || a.isList()) && b.isIntegral()) {
      return repeat(a, b.asInt());
    }
    if (a.isIntegral() && (b.isString() || b.isList())) {
      return repeat(b, a.asInt());
    }
    return unsupportedTypes();
  case BinaryOp::Div:
    if (numbers) {
      if (b.asDouble() == 0.0) {
        return invalidArgument("division by zero");
      }
      return Value::real(a.asDouble() / b.asDouble());
    }
    return unsupportedTypes();
  case BinaryOp::FloorDiv:
  case BinaryOp::Mod:
    if (ints) {
      const int64_t x = a.asInt();
      const int64_t y = b.asInt();
      if (y == 0) {
        return invalidArgument("integer division or modulo by zero");
      }
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return op == BinaryOp::Mod ? Value::integer(0) : Expected<Value>(overflow());
      }
      int64_t q = x / y;
      int64_t r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return Value::integer(op == BinaryOp::FloorDiv ? q : r);
    }
    if (numbers) {
      if (b.asDouble() == 0.0) {
        return invalidArgument(op == BinaryOp::Mod ? "float modulo"
                                                   : "float floor division by zero");
      }
      const auto [div, mod] = floatDivmod(a.asDouble(), b.asDouble());
      return Value::real(op == BinaryOp::FloorDiv ? div : mod);
    }
    if (op == BinaryOp::Mod && a.isString()) {
      return unimplemented("printf-style string formatting ('...' % args) is not supported by "
                           "this template interpreter");
    }
    return unsupportedTypes();
  case BinaryOp::Pow:
    if (ints && b.asInt() >= 0) {
      int64_t result = 1;
      int64_t base = a.asInt();
      int64_t exponent = b.asInt();
      while (exponent > 0) {
        if ((exponent & 1) != 0 && __builtin_mul_overflow(result, base, &result)) {
          return overflow();
        }
        exponent >>= 1;
        if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) {
          return overflow();
        }
      }
      return Value::integer(result);
    }
    if (numbers) {
      if (a.asDouble() == 0.0 && b.asDouble() < 0) {
        return invalidArgument("0.0 cannot be raised to a negative power");
      }
      return Value::real(std::pow(a.asDouble(), b.asDouble()));
    }
    return unsupportedTypes();
  }
  return unsupportedTypes();
}

[[gnu::noinline]] Expected<bool> compareOp(CompareOp op, const Value &a, const Value &b) {
  switch (op) {
  case CompareOp::Eq:
    return valuesEqual(a, b);
  case CompareOp::Ne:
    return !valuesEqual(a, b);
  case CompareOp::In:
    return containsValue(b, a);
  case CompareOp::NotIn: {
    GLM_ASSIGN_OR_RETURN(bool in, containsValue(b, a));
    return !in;
  }
  default:
    break;
  }
  if (a.isUndefined()) {
    return undefinedError(a);
  }
  if (b.isUndefined()) {
    return undefinedError(b);
  }
  GLM_ASSIGN_OR_RETURN(int c, compareValues(a, b));
  switch (op) {
  case CompareOp::Lt:
    return c < 0;
  case CompareOp::Le:
    return c <= 0;
  case CompareOp::Gt:
    return c > 0;
  case CompareOp::Ge:
    return c >= 0;
  default:
    return false;
  }
}

class Renderer {
public:
  explicit Renderer(const Template &tmpl) : tmpl_(tmpl) {}

  Expected<std::string> run(const DictData &variables) {
    RenderBudgetScope budgetScope(budget_);
    stackLimit_ = stackLimit();
    Scope *context = newScope(nullptr);
    for (const auto &[key, value] : variables.entries) {
      context->set(key, value);
    }
    Scope *root = newScope(context);
    std::string out;
    GLM_ASSIGN_OR_RETURN(Flow flow, execBody(tmpl_.body, *root, out));
    (void)flow;
    return out;
  }

private:
  Scope *newScope(Scope *parent) {
    scopes_.push_back(std::make_unique<Scope>(parent));
    return scopes_.back().get();
  }

  /// Frees the scopes made since `mark` unless a macro captured one of them.
  void releaseScopes(size_t mark) {
    for (size_t i = mark; i < scopes_.size(); ++i) {
      if (scopes_[i]->captured) {
        return;
      }
    }
    scopes_.resize(mark);
  }

  Status located(SourceLoc loc, const Status &status) const {
    return Status(status.code(), locatedMessage(tmpl_.name, loc, status.message()));
  }

  template <typename... Args> Status fail(SourceLoc loc, Args &&...args) const {
    return invalidArgument(locatedMessage(tmpl_.name, loc, strCat(std::forward<Args>(args)...)));
  }

  // --- limits ---------------------------------------------------------------------------------

  /// One level of render recursion for the guard's lifetime.
  class Level {
  public:
    explicit Level(int &depth) : depth_(++depth) {}
    ~Level() { --depth_; }
    Level(const Level &) = delete;
    Level &operator=(const Level &) = delete;

  private:
    int &depth_;
  };

  /// One step at `loc`: fails past kMaxRenderDepth levels, when the step budget is spent, or when
  /// a builtin reported a limit it could not return.
  Status step(SourceLoc loc, uint64_t steps = 1) {
    if (renderDepth_ > kMaxRenderDepth ||
        reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < stackLimit_) {
      return depthError(loc);
    }
    if (!budget_.spend(steps)) {
      return located(loc, budget_.failure());
    }
    return Status::success();
  }

  [[gnu::noinline]] Status depthError(SourceLoc loc) const {
    if (renderDepth_ <= kMaxRenderDepth) {
      return fail(loc, "the template recurses deeper than this thread's stack allows (",
                  renderDepth_, " levels; the interpreter's recursion limit is ", kMaxRenderDepth,
                  ")");
    }
    return fail(loc, "the template recurses deeper than ", kMaxRenderDepth,
                " levels, the interpreter's recursion limit (statements, expressions and macro "
                "calls nested inside each other)");
  }

  /// The lowest stack address a step may start from: a backstop under kMaxRenderDepth for a
  /// thread with a small stack (or a build with large frames), keeping an eighth of the stack
  /// (64 KiB to 1 MiB) for the builtins and value printing a step runs. 0 if unknown.
  static uintptr_t stackLimit() {
    // Asked once a thread (for the main thread glibc reads /proc/self/maps).
    thread_local const uintptr_t limit = measureStackLimit();
    return limit;
  }

  static uintptr_t measureStackLimit() {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) {
      return 0;
    }
    void *low = nullptr;
    size_t size = 0;
    const int rc = pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0 || low == nullptr) {
      return 0;
    }
    const size_t reserve = std::clamp<size_t>(size / 8, size_t(64) << 10, size_t(1) << 20);
    return reinterpret_cast<uintptr_t>(low) + reserve;
  }

  /// The steps that reading `v` costs an operation: its text or its items (see kMaxRenderSteps).
  static uint64_t sizeSteps(const Value &v) {
    if (v.isString()) {
      return stepsForBytes(v.asString().size());
    }
    if (v.isList()) {
      return stepsForItems(v.asList().items.size());
    }
    if (v.hasDictData()) {
      return stepsForItems(v.asDict().entries.size());
    }
    return 0;
  }

  /// Appends `text` to `out` (a render's output, a macro's or a block's), within kMaxStringBytes.
  Status emit(SourceLoc loc, std::string &out, std::string_view text) {
    if (out.size() + text.size() > kMaxStringBytes) {
      return located(loc, stringTooLong("the template's output", out.size() + text.size()));
    }
    out += text;
    return Status::success();
  }

  /// Appends str(v) to `out`, within kMaxStringBytes.
  Status emitValue(SourceLoc loc, std::string &out, const Value &v) {
    if (v.isString()) {
      return emit(loc, out, v.asString());
    }
    appendPyStr(out, v); // stops at the limit, and reports it to the budget
    if (!budget_.ok()) {
      return located(loc, budget_.failure());
    }
    return emit(loc, out, {});
  }

  // --- statements -----------------------------------------------------------------------------

  Expected<Flow> execBody(const Body &body, Scope &scope, std::string &out) {
    for (const StmtPtr &stmt : body) {
      GLM_ASSIGN_OR_RETURN(Flow flow, exec(*stmt, scope, out));
      if (flow != Flow::Normal) {
        return flow;
      }
    }
    return Flow::Normal;
  }

  Expected<Flow> exec(const Stmt &stmt, Scope &scope, std::string &out) {
    Level level(renderDepth_);
    GLM_RETURN_IF_ERROR(step(stmt.loc));
    return execNode(stmt, scope, out);
  }

  Expected<Flow> execNode(const Stmt &stmt, Scope &scope, std::string &out) {
    switch (stmt.kind) {
    case StmtKind::Output:
      GLM_RETURN_IF_ERROR(emit(stmt.loc, out, static_cast<const OutputStmt &>(stmt).text));
      return Flow::Normal;
    case StmtKind::Print:
      return execPrint(stmt, scope, out);
    case StmtKind::If:
      return execIf(stmt, scope, out);
    case StmtKind::For:
      return execFor(static_cast<const ForStmt &>(stmt), scope, out);
    case StmtKind::Set:
      return execSet(stmt, scope, out);
    case StmtKind::SetBlock:
      return execSetBlock(stmt, scope, out);
    case StmtKind::Macro:
      return execMacro(stmt, scope, out);
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::With:
      return execWith(stmt, scope, out);
    case StmtKind::FilterBlock:
      return execFilterBlock(stmt, scope, out);
    case StmtKind::Generation:
      return execGeneration(stmt, scope, out);
    }
    return internalError("unknown statement kind");
  }

  [[gnu::noinline]] Expected<Flow> execPrint(const Stmt &stmt, Scope &scope, std::string &out) {
    GLM_ASSIGN_OR_RETURN(Value v, eval(*static_cast<const PrintStmt &>(stmt).expr, scope));
    GLM_RETURN_IF_ERROR(emitValue(stmt.loc, out, v));
    return Flow::Normal;
  }

  [[gnu::noinline]] Expected<Flow> execIf(const Stmt &stmt, Scope &scope, std::string &out) {
    const auto &s = static_cast<const IfStmt &>(stmt);
    for (const IfStmt::Branch &branch : s.branches) {
      GLM_ASSIGN_OR_RETURN(Value c, eval(*branch.condition, scope));
      if (truthy(c)) {
        return execBody(branch.body, scope, out);
      }
    }
    return execBody(s.elseBody, scope, out);
  }

  [[gnu::noinline]] Expected<Flow> execSet(const Stmt &stmt, Scope &scope, std::string &out) {
    const auto &s = static_cast<const SetStmt &>(stmt);
    GLM_ASSIGN_OR_RETURN(Value v, eval(*s.value, scope));
    GLM_RETURN_IF_ERROR(assign(s.target, std::move(v), scope));
    return Flow::Normal;
  }

  [[gnu::noinline]] Expected<Flow> execSetBlock(const Stmt &stmt, Scope &scope, std::string &out) {
    const auto &s = static_cast<const SetBlockStmt &>(stmt);
    GLM_ASSIGN_OR_RETURN(Value v, renderBlock(s.body, scope, s.filter.get()));
    GLM_RETURN_IF_ERROR(assign(s.target, std::move(v), scope));
    return Flow::Normal;
  }

  [[gnu::noinline]] Expected<Flow> execMacro(const Stmt &stmt, Scope &scope, std::string &out) {
    const auto &s = static_cast<const MacroStmt &>(stmt);
    auto data = std::make_shared<CallableData>();
    data->kind = CallableData::Kind::Macro;
    data->name = s.name;
    data->macro = &s;
    data->closure = &scope;
    scope.captured = true;
    scope.set(s.name, Value::callable(std::move(data)));
    return Flow::Normal;
  }

  [[gnu::noinline]] Expected<Flow> execWith(const Stmt &stmt, Scope &scope, std::string &out) {
    const auto &s = static_cast<const WithStmt &>(stmt);
    // The values are computed in the enclosing scope, before any name is bound.
    std::vector<Value> values;
    for (const ExprPtr &e : s.values) {
      GLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
      values.push_back(std::move(v));
    }
    const size_t mark = scopes_.size();
    Scope *inner = newScope(&scope);
    for (size_t i = 0; i < s.targets.size(); ++i) {
      GLM_RETURN_IF_ERROR(assign(s.targets[i], std::move(values[i]), *inner));
    }
    Expected<Flow> flow = execBody(s.body, *inner, out);
    releaseScopes(mark);
    return flow;
  }

  [[gnu::noinline]] Expected<Flow> execFilterBlock(const Stmt &stmt, Scope &scope,
                                                   std::string &out) {
    const auto &s = static_cast<const FilterBlockStmt &>(stmt);
    GLM_ASSIGN_OR_RETURN(Value v, renderBlock(s.body, scope, s.filter.get()));
    GLM_RETURN_IF_ERROR(emitValue(stmt.loc, out, v));
    return Flow::Normal;
  }

  [[gnu::noinline]] Expected<Flow> execGeneration(const Stmt &stmt, Scope &scope,
                                                  std::string &out) {
    const auto &s = static_cast<const GenerationStmt &>(stmt);
    const size_t mark = scopes_.size();
    Scope *inner = newScope(&scope);
    Expected<Flow> flow = execBody(s.body, *inner, out);
    releaseScopes(mark);
    if (!flow.ok()) {
      return flow.status();
    }
    return Flow::Normal;
  }

  /// `for x in xs if cond`: keeps the items the condition holds for (it sees the loop variables;
  /// loop.index and loop.length then count only the items it kept).
  [[gnu::noinline]] Status keepFiltered(const ForStmt &s, Scope &scope, std::vector<Value> &items) {
    const size_t mark = scopes_.size();
    std::vector<Value> kept;
    Scope *probe = newScope(&scope);
    for (Value &item : items) {
      GLM_RETURN_IF_ERROR(step(s.filter->loc));
      probe->clear();
      GLM_RETURN_IF_ERROR(assign(s.target, item, *probe));
      GLM_ASSIGN_OR_RETURN(Value keep, eval(*s.filter, *probe));
      if (truthy(keep)) {
        kept.push_back(std::move(item));
      }
    }
    items = std::move(kept);
    releaseScopes(mark);
    return Status::success();
  }

  /// The `loop` object of iteration `i` over `items`.
  [[gnu::noinline]] static Value loopObject(const std::vector<Value> &items, int64_t i) {
    const int64_t length = static_cast<int64_t>(items.size());
    auto loop = std::make_shared<DictData>();
    loop->entries.reserve(11);
    loop->entries.emplace_back("index0", Value::integer(i));
    loop->entries.emplace_back("index", Value::integer(i + 1));
    loop->entries.emplace_back("revindex", Value::integer(length - i));
    loop->entries.emplace_back("revindex0", Value::integer(length - i - 1));
    loop->entries.emplace_back("first", Value::boolean(i == 0));
    loop->entries.emplace_back("last", Value::boolean(i == length - 1));
    loop->entries.emplace_back("length", Value::integer(length));
    loop->entries.emplace_back("depth", Value::integer(1));
    loop->entries.emplace_back("depth0", Value::integer(0));
    if (i > 0) {
      loop->entries.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    }
    if (i + 1 < length) {
      loop->entries.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    }
    return Value::loop(std::move(loop));
  }

  /// Renders a block body in a scope of its own and passes the text through a filter chain.
  [[gnu::noinline]] Expected<Value> renderBlock(const Body &body, Scope &scope,
                                                const Expr *filter) {
    const size_t mark = scopes_.size();
    Scope *inner = newScope(&scope);
    std::string text;
    Expected<Flow> flow = execBody(body, *inner, text);
    releaseScopes(mark);
    if (!flow.ok()) {
      return flow.status();
    }
    Value v = Value::string(std::move(text));
    if (filter == nullptr) {
      return v;
    }
    const Value *saved = blockInput_;
    blockInput_ = &v;
    Expected<Value> filtered = eval(*filter, scope);
    blockInput_ = saved;
    return filtered;
  }

  Status assign(const AssignTarget &target, Value value, Scope &scope) {
    if (!target.namespaceAttr.empty()) {
      const Value *ns = scope.find(target.names[0]);
      if (ns == nullptr || ns->kind() != ValueKind::Namespace) {
        return fail(target.loc, "cannot assign attribute on non-namespace object");
      }
      // A namespace is the one mutable value, so it is where cycles would start (ns.self = ns),
      // and a cycle is never freed and never stops printing.
      if (value.holdsNamespace()) {
        return fail(target.loc, "a namespace attribute cannot hold a namespace (this interpreter "
                                "refuses the cycles that would allow)");
      }
      if (value.depth() + 1 > kMaxValueDepth) {
        return fail(target.loc, valueTooDeep());
      }
      ns->asDict().set(target.namespaceAttr, std::move(value));
      return Status::success();
    }
    if (!target.isTuple) {
      scope.set(target.names[0], std::move(value));
      return Status::success();
    }
    Expected<std::vector<Value>> items = iterateValue(value);
    if (!items.ok() || value.isUndefined()) {
      return fail(target.loc, "cannot unpack non-iterable ", typeName(value), " object");
    }
    const size_t expected = target.names.size();
    if (items->size() > expected) {
      return fail(target.loc, "too many values to unpack (expected ", expected, ")");
    }
    if (items->size() < expected) {
      return fail(target.loc, "not enough values to unpack (expected ", expected, ", got ",
                  items->size(), ")");
    }
    for (size_t i = 0; i < expected; ++i) {
      scope.set(target.names[i], std::move((*items)[i]));
    }
    return Status::success();
  }

  [[gnu::noinline]] Expected<Flow> execFor(const ForStmt &s, Scope &scope, std::string &out) {
    GLM_ASSIGN_OR_RETURN(Value iterable, eval(*s.iterable, scope));
    Expected<std::vector<Value>> listed = iterateValue(iterable);
    if (!listed.ok()) {
      return located(s.iterable->loc, listed.status());
    }
    std::vector<Value> items = std::move(listed).value();
    GLM_RETURN_IF_ERROR(step(s.iterable->loc, stepsForItems(items.size())));
    const size_t mark = scopes_.size();
    if (s.filter) {
      GLM_RETURN_IF_ERROR(keepFiltered(s, scope, items));
    }
    if (items.empty()) {
      const size_t elseMark = scopes_.size();
      Scope *inner = newScope(&scope);
      Expected<Flow> flow = execBody(s.elseBody, *inner, out);
      releaseScopes(elseMark);
      if (!flow.ok()) {
        return flow.status();
      }
      return Flow::Normal;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    Scope *iteration = nullptr;
    for (int64_t i = 0; i < length; ++i) {
      GLM_RETURN_IF_ERROR(step(s.loc, kLoopIterationSteps)); // even with an empty body
      // Each iteration starts from a fresh scope, so a `set` in one iteration is gone in the
      // next; a scope a macro captured is left alone.
      if (iteration == nullptr || iteration->captured) {
        iteration = newScope(&scope);
      } else {
        iteration->clear();
      }
      iteration->set("loop", loopObject(items, i));
      GLM_RETURN_IF_ERROR(assign(s.target, items[static_cast<size_t>(i)], *iteration));
      GLM_ASSIGN_OR_RETURN(Flow flow, execBody(s.body, *iteration, out));
      if (flow == Flow::Break) {
        break;
      }
    }
    releaseScopes(mark);
    return Flow::Normal;
  }

  // --- expressions ----------------------------------------------------------------------------

  Expected<CallArgs> evalArgs(const Expr &e, size_t firstArg, Scope &scope) {
    CallArgs args;
    for (size_t i = firstArg; i < e.operands.size(); ++i) {
      GLM_ASSIGN_OR_RETURN(Value v, eval(*e.operands[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const Keyword &k : e.keywords) {
      GLM_ASSIGN_OR_RETURN(Value v, eval(*k.value, scope));
      args.keywords.emplace_back(k.name, std::move(v));
    }
    return args;
  }

  Expected<std::optional<int64_t>> sliceIndex(const Expr *e, Scope &scope) {
    if (e == nullptr) {
      return std::optional<int64_t>();
    }
    GLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    if (v.isNone()) {
      return std::optional<int64_t>();
    }
    if (!v.isIntegral()) {
      return fail(e->loc, "slice indices must be integers or None");
    }
    return std::optional<int64_t>(v.asInt());
  }

  [[gnu::noinline]] Status valueDepthError(SourceLoc loc) const {
    return fail(loc, valueTooDeep());
  }

  static std::string valueTooDeep() {
    return strCat("values nest deeper than ", kMaxValueDepth,
                  " levels, the interpreter's value nesting limit");
  }

  Expected<Value> eval(const Expr &e, Scope &scope) {
    Level level(renderDepth_);
    GLM_RETURN_IF_ERROR(step(e.loc));
    Expected<Value> v = evalNode(e, scope);
    if (v.ok() && v->depth() > kMaxValueDepth) {
      return valueDepthError(e.loc);
    }
    return v;
  }

  /// Charges reading the operands of a builtin, operator or call (their text and items).
  Status chargeInputs(SourceLoc loc, const Value &input, const CallArgs *args) {
    uint64_t steps = sizeSteps(input);
    if (args != nullptr) {
      for (const Value &a : args->positional) {
        steps += sizeSteps(a);
      }
      for (const auto &[key, a] : args->keywords) {
        steps += sizeSteps(a);
      }
    }
    return steps == 0 ? Status::success() : step(loc, steps);
  }

  // Each kind evaluates in a function of its own, so a level of recursion costs the stack frame
  // of the one kind it evaluates, not of the largest (AddressSanitizer makes frames large).
  Expected<Value> evalNode(const Expr &e, Scope &scope) {
    switch (e.kind) {
    case ExprKind::Const:
      return e.constant;
    case ExprKind::Name:
      return evalName(e, scope);
    case ExprKind::List:
    case ExprKind::Tuple:
      return evalListTuple(e, scope);
    case ExprKind::Dict:
      return evalDict(e, scope);
    case ExprKind::GetAttr:
      return evalGetAttr(e, scope);
    case ExprKind::GetItem:
      return evalGetItem(e, scope);
    case ExprKind::Slice:
      return fail(e.loc, "a slice is only valid inside []");
    case ExprKind::Call:
      return evalCall(e, scope);
    case ExprKind::Filter:
      return evalFilter(e, scope);
    case ExprKind::Test:
      return evalTest(e, scope);
    case ExprKind::Neg:
    case ExprKind::Pos:
      return evalNegPos(e, scope);
    case ExprKind::Not:
      return evalNot(e, scope);
    case ExprKind::Binary:
      return evalBinary(e, scope);
    case ExprKind::And:
    case ExprKind::Or:
      return evalAndOr(e, scope);
    case ExprKind::Compare:
      return evalCompare(e, scope);
    case ExprKind::Concat:
      return evalConcat(e, scope);
    case ExprKind::CondExpr:
      return evalCondExpr(e, scope);
    }
    return internalError("unknown expression kind");
  }

  [[gnu::noinline]] Expected<Value> evalName(const Expr &e, Scope &scope) {
    if (const Value *v = scope.find(e.name)) {
      return *v;
    }
    if (isGlobalFunction(e.name)) {
      auto data = std::make_shared<CallableData>();
      data->kind = CallableData::Kind::Global;
      data->name = e.name;
      return Value::callable(std::move(data));
    }
    return Value::undefined(strCat("'", e.name, "' is undefined"));
  }

  [[gnu::noinline]] Expected<Value> evalListTuple(const Expr &e, Scope &scope) {
    std::vector<Value> items;
    items.reserve(e.operands.size());
    for (const ExprPtr &item : e.operands) {
      GLM_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
      items.push_back(std::move(v));
    }
    return Value::list(std::move(items),
                       e.kind == ExprKind::Tuple ? ListStyle::Tuple : ListStyle::List);
  }

  [[gnu::noinline]] Expected<Value> evalDict(const Expr &e, Scope &scope) {
    auto data = std::make_shared<DictData>();
    for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
      GLM_ASSIGN_OR_RETURN(Value key, eval(*e.operands[i], scope));
      if (!key.isString()) {
        return located(e.operands[i]->loc,
                       unimplemented("dict keys other than strings are not supported by this "
                                     "template interpreter"));
      }
      GLM_ASSIGN_OR_RETURN(Value value, eval(*e.operands[i + 1], scope));
      data->set(key.asString(), std::move(value));
    }
    return Value::dict(std::move(data));
  }

  [[gnu::noinline]] Expected<Value> evalGetAttr(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value object, eval(*e.operands[0], scope));
    if (object.isUndefined()) {
      return located(e.loc, undefinedError(object));
    }
    return getAttribute(object, e.name);
  }

  [[gnu::noinline]] Expected<Value> evalGetItem(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value object, eval(*e.operands[0], scope));
    const Expr &key = *e.operands[1];
    if (key.kind == ExprKind::Slice) {
      GLM_ASSIGN_OR_RETURN(auto start, sliceIndex(key.operands[0].get(), scope));
      GLM_ASSIGN_OR_RETURN(auto stop, sliceIndex(key.operands[1].get(), scope));
      GLM_ASSIGN_OR_RETURN(auto step, sliceIndex(key.operands[2].get(), scope));
      Expected<Value> sliced = sliceValue(object, start, stop, step);
      if (!sliced.ok()) {
        return located(e.loc, sliced.status());
      }
      return sliced;
    }
    GLM_ASSIGN_OR_RETURN(Value k, eval(key, scope));
    if (object.isUndefined()) {
      return located(e.loc, undefinedError(object));
    }
    return getItem(object, k);
  }

  [[gnu::noinline]] Expected<Value> evalFilter(const Expr &e, Scope &scope) {
    Value input;
    if (e.operands[0]) {
      GLM_ASSIGN_OR_RETURN(input, eval(*e.operands[0], scope));
    } else if (blockInput_ != nullptr) {
      input = *blockInput_;
    }
    GLM_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1, scope));
    if (filterSupport(e.name) != BuiltinSupport::Supported) {
      return located(e.loc, unimplemented("no filter named '", e.name, "'"));
    }
    GLM_RETURN_IF_ERROR(chargeInputs(e.loc, input, &args));
    Expected<Value> result = applyFilter(e.name, input, args);
    return builtinResult(e.loc, std::move(result));
  }

  [[gnu::noinline]] Expected<Value> evalTest(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value input, eval(*e.operands[0], scope));
    GLM_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1, scope));
    if (testSupport(e.name) != BuiltinSupport::Supported) {
      return located(e.loc, unimplemented("no test named '", e.name, "'"));
    }
    GLM_RETURN_IF_ERROR(chargeInputs(e.loc, input, &args));
    Expected<bool> result = applyTest(e.name, input, args);
    if (!budget_.ok()) {
      return located(e.loc, budget_.failure());
    }
    if (!result.ok()) {
      return located(e.loc, result.status());
    }
    return Value::boolean(*result != e.negated);
  }

  [[gnu::noinline]] Expected<Value> evalNegPos(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0], scope));
    if (v.isUndefined()) {
      return located(e.loc, undefinedError(v));
    }
    if (!v.isNumber()) {
      return fail(e.loc, "bad operand type for unary ", e.kind == ExprKind::Neg ? "-" : "+", ": '",
                  typeName(v), "'");
    }
    if (v.kind() == ValueKind::Float) {
      return Value::real(e.kind == ExprKind::Neg ? -v.asDouble() : v.asDouble());
    }
    if (e.kind == ExprKind::Pos) {
      return Value::integer(v.asInt());
    }
    if (v.asInt() == std::numeric_limits<int64_t>::min()) {
      return located(e.loc, overflow());
    }
    return Value::integer(-v.asInt());
  }

  [[gnu::noinline]] Expected<Value> evalNot(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0], scope));
    return Value::boolean(!truthy(v));
  }

  [[gnu::noinline]] Expected<Value> evalBinary(const Expr &e, Scope &scope) {
    // Left to right: ((a op0 b) op1 c) ...
    GLM_ASSIGN_OR_RETURN(Value acc, eval(*e.operands[0], scope));
    for (size_t i = 0; i < e.binaryOps.size(); ++i) {
      GLM_ASSIGN_OR_RETURN(Value b, eval(*e.operands[i + 1], scope));
      GLM_RETURN_IF_ERROR(step(e.opLocs[i], sizeSteps(acc) + sizeSteps(b)));
      Expected<Value> result = binaryOp(e.binaryOps[i], acc, b);
      if (!result.ok()) {
        return located(e.opLocs[i], result.status());
      }
      acc = std::move(result).value();
    }
    return acc;
  }

  [[gnu::noinline]] Expected<Value> evalAndOr(const Expr &e, Scope &scope) {
    // Python's and/or return an operand, not a bool: the first that decides, or the last.
    for (size_t i = 0; i + 1 < e.operands.size(); ++i) {
      GLM_ASSIGN_OR_RETURN(Value a, eval(*e.operands[i], scope));
      if (truthy(a) == (e.kind == ExprKind::Or)) {
        return a;
      }
    }
    return eval(*e.operands.back(), scope);
  }

  [[gnu::noinline]] Expected<Value> evalCompare(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0], scope));
    for (size_t i = 0; i < e.compareOps.size(); ++i) {
      GLM_ASSIGN_OR_RETURN(Value right, eval(*e.operands[i + 1], scope));
      GLM_RETURN_IF_ERROR(step(e.operands[i + 1]->loc, sizeSteps(left) + sizeSteps(right)));
      Expected<bool> holds = compareOp(e.compareOps[i], left, right);
      if (!budget_.ok()) {
        return located(e.operands[i + 1]->loc, budget_.failure());
      }
      if (!holds.ok()) {
        return located(e.operands[i + 1]->loc, holds.status());
      }
      if (!*holds) {
        return Value::boolean(false);
      }
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  [[gnu::noinline]] Expected<Value> evalConcat(const Expr &e, Scope &scope) {
    std::string text;
    for (const ExprPtr &part : e.operands) {
      GLM_ASSIGN_OR_RETURN(Value v, eval(*part, scope));
      if (v.isString() && text.size() + v.asString().size() > kMaxStringBytes) {
        return located(part->loc, stringTooLong("'~'", text.size() + v.asString().size()));
      }
      GLM_RETURN_IF_ERROR(emitValue(part->loc, text, v));
    }
    return Value::string(std::move(text));
  }

  [[gnu::noinline]] Expected<Value> evalCondExpr(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value c, eval(*e.operands[0], scope));
    if (truthy(c)) {
      return eval(*e.operands[1], scope);
    }
    if (e.operands[2]) {
      return eval(*e.operands[2], scope);
    }
    return Value::undefined(strCat("the inline if-expression on line ", e.loc.line,
                                   " evaluated to false and no else section was defined."));
  }

  [[gnu::noinline]] Expected<Value> evalCall(const Expr &e, Scope &scope) {
    GLM_ASSIGN_OR_RETURN(Value callee, eval(*e.operands[0], scope));
    GLM_ASSIGN_OR_RETURN(CallArgs args, evalArgs(e, 1, scope));
    if (callee.isUndefined()) {
      return located(e.loc, undefinedError(callee));
    }
    if (callee.kind() != ValueKind::Callable) {
      return fail(e.loc, "'", typeName(callee), "' object is not callable");
    }
    const CallableData &c = callee.asCallable();
    Expected<Value> result = Value();
    switch (c.kind) {
    case CallableData::Kind::Macro:
      return callMacro(c, std::move(args), e.loc);
    case CallableData::Kind::Global:
      GLM_RETURN_IF_ERROR(chargeInputs(e.loc, Value(), &args));
      result = callGlobal(c.name, args);
      break;
    case CallableData::Kind::Method:
      GLM_RETURN_IF_ERROR(chargeInputs(e.loc, *c.receiver, &args));
      result = callMethod(*c.receiver, c.name, args);
      break;
    }
    return builtinResult(e.loc, std::move(result));
  }

  /// A builtin's result, located at `loc`: a limit it reported wins over its own result (building
  /// the result was charged by Value's factories).
  Expected<Value> builtinResult(SourceLoc loc, Expected<Value> result) {
    if (!budget_.ok()) {
      return located(loc, budget_.failure());
    }
    if (!result.ok()) {
      return located(loc, result.status());
    }
    if (result->isString()) {
      Status size = checkStringSize("a builtin", result->asString().size());
      if (!size.ok()) {
        return located(loc, size);
      }
    }
    return result;
  }

  [[gnu::noinline]] Expected<Value> callMacro(const CallableData &c, CallArgs args, SourceLoc loc) {
    const MacroStmt &macro = *c.macro;
    if (depth_ >= kMaxCallDepth) {
      return fail(loc, "macro calls nest deeper than ", kMaxCallDepth,
                  " levels (runaway recursion in '", macro.name, "'?)");
    }
    const size_t mark = scopes_.size();
    GLM_ASSIGN_OR_RETURN(Scope * scope, bindMacroArguments(c, std::move(args), loc));
    std::string out;
    ++depth_;
    Level level(renderDepth_);
    Expected<Flow> flow = execBody(macro.body, *scope, out);
    --depth_;
    releaseScopes(mark);
    if (!flow.ok()) {
      return flow.status();
    }
    return Value::string(std::move(out));
  }

  /// A new scope for a call of macro `c` with its parameters bound (out of line: a recursion
  /// through macros carries callMacro's frame, not this one).
  [[gnu::noinline]] Expected<Scope *> bindMacroArguments(const CallableData &c, CallArgs args,
                                                         SourceLoc loc) {
    const MacroStmt &macro = *c.macro;
    Scope *scope = newScope(c.closure);
    const size_t nParams = macro.params.size();
    std::vector<bool> bound(nParams, false);
    std::vector<Value> extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < nParams) {
        scope->set(macro.params[i], std::move(args.positional[i]));
        bound[i] = true;
      } else {
        extra.push_back(std::move(args.positional[i]));
      }
    }
    if (!extra.empty() && !macro.usesVarargs) {
      return fail(loc, "macro '", macro.name, "' takes not more than ", nParams, " argument(s)");
    }
    auto kwargs = std::make_shared<DictData>();
    for (auto &[key, value] : args.keywords) {
      const auto it = std::find(macro.params.begin(), macro.params.end(), key);
      if (it != macro.params.end()) {
        const size_t index = static_cast<size_t>(it - macro.params.begin());
        if (bound[index]) {
          return fail(loc, "macro '", macro.name, "' got multiple values for argument '", key, "'");
        }
        scope->set(key, std::move(value));
        bound[index] = true;
      } else if (macro.usesKwargs) {
        kwargs->set(key, std::move(value));
      } else {
        return fail(loc, "macro '", macro.name, "' takes no keyword argument '", key, "'");
      }
    }
    // Defaults are computed per call, in the macro's scope: they can use earlier parameters.
    for (size_t i = 0; i < nParams; ++i) {
      if (bound[i]) {
        continue;
      }
      if (macro.defaults[i]) {
        GLM_ASSIGN_OR_RETURN(Value v, eval(*macro.defaults[i], *scope));
        scope->set(macro.params[i], std::move(v));
      } else {
        scope->set(macro.params[i],
                   Value::undefined(strCat("parameter '", macro.params[i], "' was not provided")));
      }
    }
    if (macro.usesVarargs) {
      scope->set("varargs", Value::list(std::move(extra), ListStyle::Tuple));
    }
    if (macro.usesKwargs) {
      scope->set("kwargs", Value::dict(std::move(kwargs)));
    }
    return scope;
  }

  const Template &tmpl_;
  std::vector<std::unique_ptr<Scope>> scopes_;
  const Value *blockInput_ = nullptr;
  int depth_ = 0;       // macro calls open
  int renderDepth_ = 0; // Level guards open (statements, expressions, macro calls)
  RenderBudget budget_{kMaxRenderSteps};
  uintptr_t stackLimit_ = 0; // see stackLimit()
};

} // namespace

Expected<std::string> renderTemplate(const Template &tmpl, const DictData &variables) {
  Renderer renderer(tmpl);
  return renderer.run(variables);
}

} // namespace glm::server::jinja
