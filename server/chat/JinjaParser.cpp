// The Jinja parser: a recursive-descent copy of jinja2's grammar over JinjaLexer's tokens.
#include "server/chat/JinjaParser.h"

#include "server/chat/JinjaBuiltins.h"
#include "server/chat/JinjaLimits.h"

#include <algorithm>
#include <initializer_list>

namespace glm::server::jinja {
namespace {

// Tags jinja2 knows (or transformers' environment would know) that this interpreter refuses.
constexpr std::string_view kUnsupportedTags[] = {"include", "import",   "from",       "extends",
                                                 "block",   "call",     "autoescape", "do",
                                                 "trans",   "pluralize"};

bool isUnsupportedTag(std::string_view name) {
  return std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), name) !=
         std::end(kUnsupportedTags);
}

std::string describe(const Token &t) {
  switch (t.kind) {
  case TokenKind::Data:
    return "template data";
  case TokenKind::VariableBegin:
    return "begin of print statement";
  case TokenKind::VariableEnd:
    return "end of print statement";
  case TokenKind::BlockBegin:
    return "begin of statement block";
  case TokenKind::BlockEnd:
    return "end of statement block";
  case TokenKind::Name:
  case TokenKind::Operator:
    return "'" + t.text + "'";
  case TokenKind::String:
    return "string";
  case TokenKind::Integer:
    return "integer";
  case TokenKind::Float:
    return "float";
  case TokenKind::End:
    return "end of template";
  }
  return "token";
}

// Same precedence and quirks as jinja2 (filters bind tighter than unary minus, `is` tests take one
// bare argument, `if`/`for` heads have no inline conditional), so the same text means the same
// tree. Recursion is bounded: every way the grammar nests (a block body, a parenthesis, bracket or
// call, a unary operator, a conditional's else) passes through one Nest guard, and no expression
// tree grows taller than kMaxNesting; chains of one precedence level are flat nodes.
class Parser {
public:
  Parser(std::vector<Token> tokens, std::string name)
      : tokens_(std::move(tokens)), name_(std::move(name)) {}

  Expected<std::shared_ptr<const Template>> run() {
    auto result = std::make_shared<Template>();
    result->name = name_;
    result->body = subparse({});
    if (!error_.ok()) {
      return error_;
    }
    if (current().kind != TokenKind::End) {
      fail(current(), strCat("unexpected ", describe(current())));
      return error_;
    }
    // An unknown filter or test outside an if-statement or conditional expression is a
    // compile-time error in jinja2 (inside one, only when reached).
    for (const PendingName &pending : pendingNames_) {
      if (!pending.soft) {
        return formatError(locatedMessage(name_, pending.loc, pending.message));
      }
    }
    return std::shared_ptr<const Template>(std::move(result));
  }

private:
  // --- token stream ---------------------------------------------------------------------------

  const Token &current() const { return tokens_[pos_]; }
  const Token &peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) {
      ++pos_;
    }
  }
  bool failed() const { return !error_.ok(); }

  static bool isName(const Token &t, std::string_view name) {
    return t.kind == TokenKind::Name && t.text == name;
  }
  static bool isOp(const Token &t, std::string_view op) {
    return t.kind == TokenKind::Operator && t.text == op;
  }

  void fail(const Token &at, std::string_view message) { failAt(at.loc, message); }
  void failAt(SourceLoc loc, std::string_view message) {
    if (error_.ok()) {
      error_ = formatError(locatedMessage(name_, loc, message));
    }
  }
  void unsupported(const Token &at, std::string_view message) {
    if (error_.ok()) {
      error_ = unimplemented(locatedMessage(name_, at.loc, message));
    }
  }

  bool expectKind(TokenKind kind, std::string_view what) {
    if (current().kind != kind) {
      fail(current(), strCat("expected ", what, ", got ", describe(current())));
      return false;
    }
    advance();
    return true;
  }
  bool expectOp(std::string_view op) {
    if (!isOp(current(), op)) {
      fail(current(), strCat("expected '", op, "', got ", describe(current())));
      return false;
    }
    advance();
    return true;
  }
  bool expectName(std::string_view name) {
    if (!isName(current(), name)) {
      fail(current(), strCat("expected '", name, "', got ", describe(current())));
      return false;
    }
    advance();
    return true;
  }

  ExprPtr makeExpr(ExprKind kind, SourceLoc loc) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    return e;
  }

  /// One level of nesting, for the guard's lifetime; past kMaxNesting the parse fails at `at`
  /// (callers check failed() after making one).
  class Nest {
  public:
    Nest(Parser &parser, const Token &at) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) {
        parser_.fail(at, strCat("nested deeper than ", kMaxNesting,
                                " levels (the template parser's nesting limit)"));
      }
    }
    ~Nest() { --parser_.depth_; }
    Nest(const Nest &) = delete;
    Nest &operator=(const Nest &) = delete;

  private:
    Parser &parser_;
  };

  /// A finished node: its height is its tallest operand's plus one, refused past kMaxNesting
  /// (chains such as a.b.c or x|f|g grow a tree without recursing in the parser).
  ExprPtr done(ExprPtr e) {
    if (!e) {
      return e;
    }
    int tallest = 0;
    for (const ExprPtr &operand : e->operands) {
      tallest = operand ? std::max(tallest, operand->height) : tallest;
    }
    for (const Keyword &keyword : e->keywords) {
      tallest = keyword.value ? std::max(tallest, keyword.value->height) : tallest;
    }
    e->height = tallest + 1;
    if (e->height > kMaxNesting) {
      failAt(e->loc, strCat("expression nested deeper than ", kMaxNesting,
                            " levels (the template parser's nesting limit)"));
      return nullptr;
    }
    return e;
  }

  // --- template structure ---------------------------------------------------------------------

  /// Parses text, prints and statements until a block whose tag is one of `endNames` (left as
  /// the current token) or the end of the template.
  Body subparse(std::initializer_list<std::string_view> endNames) {
    Body body;
    while (!failed()) {
      const Token &t = current();
      if (t.kind == TokenKind::Data) {
        auto out = std::make_unique<OutputStmt>(t.loc);
        out->text = t.text;
        body.push_back(std::move(out));
        advance();
      } else if (t.kind == TokenKind::VariableBegin) {
        auto print = std::make_unique<PrintStmt>(t.loc);
        advance();
        print->expr = parseTuple(/*simplified=*/false, /*withCondExpr=*/true, {},
                                 /*explicitParens=*/false);
        if (failed() || !expectKind(TokenKind::VariableEnd, "'}}'")) {
          break;
        }
        body.push_back(std::move(print));
      } else if (t.kind == TokenKind::BlockBegin) {
        advance();
        if (current().kind == TokenKind::Name &&
            std::find(endNames.begin(), endNames.end(), current().text) != endNames.end()) {
          return body;
        }
        StmtPtr stmt = parseStatement();
        if (failed() || !expectKind(TokenKind::BlockEnd, "'%}'")) {
          break;
        }
        body.push_back(std::move(stmt));
      } else if (t.kind == TokenKind::End) {
        break;
      } else {
        fail(t, strCat("unexpected ", describe(t)));
        break;
      }
    }
    return body;
  }

  /// A statement body: the opening tag's `%}`, then everything up to one of `endNames`.
  Body parseBody(std::initializer_list<std::string_view> endNames, const Token &opener) {
    if (isOp(current(), ":")) {
      advance();
    }
    if (!expectKind(TokenKind::BlockEnd, "'%}'")) {
      return {};
    }
    Nest nest(*this, opener);
    if (failed()) {
      return {};
    }
    Body body = subparse(endNames);
    if (!failed() && current().kind == TokenKind::End) {
      std::string expected;
      for (std::string_view n : endNames) {
        expected += expected.empty() ? "" : " or ";
        expected += strCat("'", n, "'");
      }
      fail(opener, strCat("'", opener.text, "' is never closed: expected ", expected,
                          " before the end of the template"));
    }
    return body;
  }

  /// Runs `f` as the body of a new frame: loop controls and soft (if-guarded) context do not
  /// carry into macros, loop bodies and blocks.
  template <typename F> auto inFrame(bool isLoop, bool isFunction, F f) {
    const int savedSoft = softDepth_;
    const int savedLoop = loopDepth_;
    softDepth_ = 0;
    if (isFunction) {
      loopDepth_ = 0;
    }
    if (isLoop) {
      ++loopDepth_;
    }
    auto result = f();
    softDepth_ = savedSoft;
    loopDepth_ = savedLoop;
    return result;
  }

  StmtPtr parseStatement() {
    const Token &tag = current();
    if (tag.kind != TokenKind::Name) {
      fail(tag, "tag name expected");
      return nullptr;
    }
    const std::string &name = tag.text;
    if (name == "if") {
      return parseIf();
    }
    if (name == "for") {
      return parseFor();
    }
    if (name == "set") {
      return parseSet();
    }
    if (name == "macro") {
      return parseMacro();
    }
    if (name == "with") {
      return parseWith();
    }
    if (name == "filter") {
      return parseFilterBlock();
    }
    if (name == "generation") {
      return parseGeneration();
    }
    if (name == "break" || name == "continue") {
      if (loopDepth_ == 0) {
        fail(tag, strCat("'", name, "' outside of a for loop"));
        return nullptr;
      }
      auto stmt = std::make_unique<LoopControlStmt>(
          name == "break" ? StmtKind::Break : StmtKind::Continue, tag.loc);
      advance();
      return stmt;
    }
    if (isUnsupportedTag(name)) {
      unsupported(tag, strCat("unsupported tag '", name, "'"));
      return nullptr;
    }
    if (name == "recursive" || name.rfind("end", 0) == 0 || name == "else" || name == "elif") {
      fail(tag, strCat("unexpected tag '", name, "'"));
      return nullptr;
    }
    fail(tag, strCat("unknown tag '", name, "'"));
    return nullptr;
  }

  StmtPtr parseIf() {
    const Token opener = current();
    auto stmt = std::make_unique<IfStmt>(opener.loc);
    advance();
    // jinja2 checks filter and test names of an if-statement only when they run.
    ++softDepth_;
    while (!failed()) {
      IfStmt::Branch branch;
      branch.condition = parseTuple(false, /*withCondExpr=*/false, {}, false);
      branch.body = parseBody({"elif", "else", "endif"}, opener);
      stmt->branches.push_back(std::move(branch));
      if (failed()) {
        break;
      }
      const std::string tag = current().text;
      advance();
      if (tag == "elif") {
        continue;
      }
      if (tag == "else") {
        stmt->elseBody = parseBody({"endif"}, opener);
        advance();
      }
      break;
    }
    --softDepth_;
    return stmt;
  }

  StmtPtr parseFor() {
    const Token opener = current();
    auto stmt = std::make_unique<ForStmt>(opener.loc);
    advance();
    stmt->target = parseAssignTarget(/*withNamespace=*/false, {"in"});
    if (failed() || !expectName("in")) {
      return nullptr;
    }
    stmt->iterable = parseTuple(false, /*withCondExpr=*/false, {"recursive"}, false);
    if (failed()) {
      return nullptr;
    }
    if (isName(current(), "if")) {
      advance();
      stmt->filter = inFrame(false, false, [&] { return parseExpression(true); });
    }
    if (isName(current(), "recursive")) {
      unsupported(current(), "unsupported recursive for loop");
      return nullptr;
    }
    stmt->body = inFrame(true, false, [&] { return parseBody({"endfor", "else"}, opener); });
    if (failed()) {
      return nullptr;
    }
    const bool hasElse = current().text == "else";
    advance();
    if (hasElse) {
      stmt->elseBody = inFrame(false, false, [&] { return parseBody({"endfor"}, opener); });
      advance();
    }
    return stmt;
  }

  StmtPtr parseSet() {
    const Token opener = current();
    advance();
    AssignTarget target = parseAssignTarget(/*withNamespace=*/true, {});
    if (failed()) {
      return nullptr;
    }
    if (isOp(current(), "=")) {
      advance();
      auto stmt = std::make_unique<SetStmt>(opener.loc);
      stmt->target = std::move(target);
      stmt->value = parseTuple(false, true, {}, false);
      return stmt;
    }
    auto stmt = std::make_unique<SetBlockStmt>(opener.loc);
    stmt->target = std::move(target);
    if (isOp(current(), "|")) {
      stmt->filter = parseFilter(nullptr, /*startInline=*/false);
    }
    stmt->body = inFrame(false, false, [&] { return parseBody({"endset"}, opener); });
    advance();
    return stmt;
  }

  StmtPtr parseMacro() {
    const Token opener = current();
    auto stmt = std::make_unique<MacroStmt>(opener.loc);
    advance();
    if (current().kind != TokenKind::Name) {
      fail(current(), strCat("expected a macro name, got ", describe(current())));
      return nullptr;
    }
    stmt->name = current().text;
    advance();
    if (!expectOp("(")) {
      return nullptr;
    }
    bool sawDefault = false;
    while (!failed() && !isOp(current(), ")")) {
      if (!stmt->params.empty() && !expectOp(",")) {
        return nullptr;
      }
      if (current().kind != TokenKind::Name) {
        fail(current(), strCat("expected a parameter name, got ", describe(current())));
        return nullptr;
      }
      const Token param = current();
      stmt->params.push_back(param.text);
      advance();
      if (isOp(current(), "=")) {
        advance();
        stmt->defaults.push_back(parseExpression(true));
        sawDefault = true;
      } else if (sawDefault) {
        fail(param, "non-default argument follows default argument");
        return nullptr;
      } else {
        stmt->defaults.push_back(nullptr);
      }
    }
    if (failed() || !expectOp(")")) {
      return nullptr;
    }
    macros_.push_back(stmt.get());
    stmt->body = inFrame(false, true, [&] { return parseBody({"endmacro"}, opener); });
    macros_.pop_back();
    advance();
    return stmt;
  }

  StmtPtr parseWith() {
    const Token opener = current();
    auto stmt = std::make_unique<WithStmt>(opener.loc);
    advance();
    while (!failed() && current().kind != TokenKind::BlockEnd) {
      if (!stmt->targets.empty() && !expectOp(",")) {
        return nullptr;
      }
      stmt->targets.push_back(parseAssignTarget(false, {}));
      if (failed() || !expectOp("=")) {
        return nullptr;
      }
      stmt->values.push_back(parseExpression(true));
    }
    stmt->body = inFrame(false, false, [&] { return parseBody({"endwith"}, opener); });
    advance();
    return stmt;
  }

  StmtPtr parseFilterBlock() {
    const Token opener = current();
    auto stmt = std::make_unique<FilterBlockStmt>(opener.loc);
    advance();
    stmt->filter = parseFilter(nullptr, /*startInline=*/true);
    stmt->body = inFrame(false, false, [&] { return parseBody({"endfilter"}, opener); });
    advance();
    return stmt;
  }

  StmtPtr parseGeneration() {
    // transformers' {% generation %} marks assistant text for training masks; it renders its
    // body in a frame of its own (it is a call block).
    const Token opener = current();
    auto stmt = std::make_unique<GenerationStmt>(opener.loc);
    advance();
    stmt->body = inFrame(false, true, [&] { return parseBody({"endgeneration"}, opener); });
    advance();
    return stmt;
  }

  /// The target of set/for/with: `name`, `a, b`, `(a, b)` or (for set) `ns.attr`.
  AssignTarget parseAssignTarget(bool withNamespace, std::initializer_list<std::string_view> end) {
    AssignTarget target;
    target.loc = current().loc;
    if (withNamespace && current().kind == TokenKind::Name && isOp(peek(), ".")) {
      target.names.push_back(current().text);
      advance();
      advance();
      if (current().kind != TokenKind::Name) {
        fail(current(), strCat("expected an attribute name, got ", describe(current())));
        return target;
      }
      target.namespaceAttr = current().text;
      advance();
      return target;
    }
    ExprPtr e = parseTuple(/*simplified=*/true, false, end, false);
    if (failed()) {
      return target;
    }
    const auto addName = [&](const Expr &n) {
      if (n.kind != ExprKind::Name) {
        if (n.kind == ExprKind::Tuple) {
          unsupported(current(), "unsupported nested tuple in an assignment target");
        } else {
          failAt(n.loc, "can't assign to this expression");
        }
        return;
      }
      target.names.push_back(n.name);
    };
    if (e->kind == ExprKind::Tuple) {
      target.isTuple = true;
      for (const ExprPtr &item : e->operands) {
        addName(*item);
      }
    } else {
      addName(*e);
    }
    return target;
  }

  // --- expressions ----------------------------------------------------------------------------

  bool isTupleEnd(std::initializer_list<std::string_view> extraEnd) const {
    const Token &t = current();
    if (t.kind == TokenKind::VariableEnd || t.kind == TokenKind::BlockEnd || isOp(t, ")")) {
      return true;
    }
    return t.kind == TokenKind::Name &&
           std::find(extraEnd.begin(), extraEnd.end(), t.text) != extraEnd.end();
  }

  ExprPtr parseTuple(bool simplified, bool withCondExpr,
                     std::initializer_list<std::string_view> extraEnd, bool explicitParens) {
    const SourceLoc loc = current().loc;
    std::vector<ExprPtr> items;
    bool isTuple = false;
    while (!failed()) {
      if (!items.empty() && !expectOp(",")) {
        return nullptr;
      }
      if (isTupleEnd(extraEnd)) {
        break;
      }
      items.push_back(simplified ? parsePrimary() : parseExpression(withCondExpr));
      if (failed()) {
        return nullptr;
      }
      if (isOp(current(), ",")) {
        isTuple = true;
      } else {
        break;
      }
    }
    if (failed()) {
      return nullptr;
    }
    if (!isTuple) {
      if (!items.empty()) {
        return std::move(items.front());
      }
      if (!explicitParens) {
        fail(current(), strCat("expected an expression, got ", describe(current())));
        return nullptr;
      }
    }
    ExprPtr tuple = makeExpr(ExprKind::Tuple, loc);
    tuple->operands = std::move(items);
    return done(std::move(tuple));
  }

  ExprPtr parseExpression(bool withCondExpr) {
    Nest nest(*this, current());
    if (failed()) {
      return nullptr;
    }
    return withCondExpr ? parseCondExpr() : parseOr();
  }

  ExprPtr parseCondExpr() {
    const size_t pendingBefore = pendingNames_.size();
    ExprPtr expr = parseOr();
    while (!failed() && isName(current(), "if")) {
      // Filters and tests anywhere in a conditional expression are checked only when run.
      for (size_t i = pendingBefore; i < pendingNames_.size(); ++i) {
        pendingNames_[i].soft = true;
      }
      ++softDepth_;
      const SourceLoc loc = current().loc;
      advance();
      ExprPtr condition = parseOr();
      ExprPtr otherwise;
      if (!failed() && isName(current(), "else")) {
        advance();
        Nest nest(*this, current());
        if (!failed()) {
          otherwise = parseCondExpr();
        }
      }
      --softDepth_;
      if (failed()) {
        return nullptr;
      }
      ExprPtr cond = makeExpr(ExprKind::CondExpr, loc);
      cond->operands.push_back(std::move(condition));
      cond->operands.push_back(std::move(expr));
      cond->operands.push_back(std::move(otherwise));
      expr = done(std::move(cond));
    }
    return expr;
  }

  /// `a or b or c` (or `and`): one node with every operand.
  ExprPtr parseBinaryChain(ExprKind kind, std::string_view keyword, ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    if (failed() || !isName(current(), keyword)) {
      return left;
    }
    ExprPtr node = makeExpr(kind, current().loc);
    node->operands.push_back(std::move(left));
    while (!failed() && isName(current(), keyword)) {
      advance();
      ExprPtr right = (this->*next)();
      if (failed()) {
        return nullptr;
      }
      node->operands.push_back(std::move(right));
    }
    return done(std::move(node));
  }

  ExprPtr parseOr() { return parseBinaryChain(ExprKind::Or, "or", &Parser::parseAnd); }
  ExprPtr parseAnd() { return parseBinaryChain(ExprKind::And, "and", &Parser::parseNot); }

  ExprPtr parseNot() {
    if (isName(current(), "not")) {
      const SourceLoc loc = current().loc;
      advance();
      Nest nest(*this, current());
      if (failed()) {
        return nullptr;
      }
      ExprPtr operand = parseNot();
      if (failed()) {
        return nullptr;
      }
      ExprPtr node = makeExpr(ExprKind::Not, loc);
      node->operands.push_back(std::move(operand));
      return done(std::move(node));
    }
    return parseCompare();
  }

  ExprPtr parseCompare() {
    const SourceLoc loc = current().loc;
    ExprPtr first = parseMath1();
    if (failed()) {
      return nullptr;
    }
    ExprPtr node;
    while (true) {
      std::optional<CompareOp> op;
      const Token &t = current();
      if (t.kind == TokenKind::Operator) {
        if (t.text == "==") {
          op = CompareOp::Eq;
        } else if (t.text == "!=") {
          op = CompareOp::Ne;
        } else if (t.text == "<") {
          op = CompareOp::Lt;
        } else if (t.text == "<=") {
          op = CompareOp::Le;
        } else if (t.text == ">") {
          op = CompareOp::Gt;
        } else if (t.text == ">=") {
          op = CompareOp::Ge;
        }
        if (op) {
          advance();
        }
      } else if (isName(t, "in")) {
        op = CompareOp::In;
        advance();
      } else if (isName(t, "not") && isName(peek(), "in")) {
        op = CompareOp::NotIn;
        advance();
        advance();
      }
      if (!op) {
        break;
      }
      ExprPtr right = parseMath1();
      if (failed()) {
        return nullptr;
      }
      if (!node) {
        node = makeExpr(ExprKind::Compare, loc);
        node->operands.push_back(std::move(first));
      }
      node->compareOps.push_back(*op);
      node->operands.push_back(std::move(right));
    }
    return node ? done(std::move(node)) : std::move(first);
  }

  /// Adds `op right` to the chain `node` (made, with `left` as its first operand, on the first
  /// operator): a left-associative chain of one precedence level is one flat node.
  void chain(ExprPtr &node, ExprPtr &left, BinaryOp op, SourceLoc loc, ExprPtr right) {
    if (!node) {
      node = makeExpr(ExprKind::Binary, loc);
      node->operands.push_back(std::move(left));
    }
    node->binaryOps.push_back(op);
    node->opLocs.push_back(loc);
    node->operands.push_back(std::move(right));
  }

  ExprPtr parseMath1() {
    ExprPtr left = parseConcat();
    ExprPtr node;
    while (!failed() && (isOp(current(), "+") || isOp(current(), "-"))) {
      const BinaryOp op = current().text == "+" ? BinaryOp::Add : BinaryOp::Sub;
      const SourceLoc loc = current().loc;
      advance();
      ExprPtr right = parseConcat();
      if (failed()) {
        return nullptr;
      }
      chain(node, left, op, loc, std::move(right));
    }
    return node ? done(std::move(node)) : std::move(left);
  }

  ExprPtr parseConcat() {
    const SourceLoc loc = current().loc;
    ExprPtr first = parseMath2();
    if (failed() || !isOp(current(), "~")) {
      return first;
    }
    ExprPtr node = makeExpr(ExprKind::Concat, loc);
    node->operands.push_back(std::move(first));
    while (!failed() && isOp(current(), "~")) {
      advance();
      node->operands.push_back(parseMath2());
    }
    return failed() ? nullptr : done(std::move(node));
  }

  ExprPtr parseMath2() {
    ExprPtr left = parsePow();
    ExprPtr node;
    while (!failed() && current().kind == TokenKind::Operator &&
           (current().text == "*" || current().text == "/" || current().text == "//" ||
            current().text == "%")) {
      const std::string &t = current().text;
      const BinaryOp op = t == "*"    ? BinaryOp::Mul
                          : t == "/"  ? BinaryOp::Div
                          : t == "//" ? BinaryOp::FloorDiv
                                      : BinaryOp::Mod;
      const SourceLoc loc = current().loc;
      advance();
      ExprPtr right = parsePow();
      if (failed()) {
        return nullptr;
      }
      chain(node, left, op, loc, std::move(right));
    }
    return node ? done(std::move(node)) : std::move(left);
  }

  ExprPtr parsePow() {
    ExprPtr left = parseUnary(true);
    ExprPtr node;
    while (!failed() && isOp(current(), "**")) {
      const SourceLoc loc = current().loc;
      advance();
      ExprPtr right = parseUnary(true);
      if (failed()) {
        return nullptr;
      }
      chain(node, left, BinaryOp::Pow, loc, std::move(right));
    }
    return node ? done(std::move(node)) : std::move(left);
  }

  ExprPtr parseUnary(bool withFilter) {
    const Token &t = current();
    ExprPtr node;
    if (isOp(t, "-") || isOp(t, "+")) {
      const ExprKind kind = t.text == "-" ? ExprKind::Neg : ExprKind::Pos;
      const SourceLoc loc = t.loc;
      advance();
      Nest nest(*this, current());
      if (failed()) {
        return nullptr;
      }
      ExprPtr operand = parseUnary(false);
      if (failed()) {
        return nullptr;
      }
      node = makeExpr(kind, loc);
      node->operands.push_back(std::move(operand));
      node = done(std::move(node));
    } else {
      node = parsePrimary();
    }
    if (failed()) {
      return nullptr;
    }
    node = parsePostfix(std::move(node));
    if (withFilter && !failed()) {
      node = parseFilterExpr(std::move(node));
    }
    return failed() ? nullptr : std::move(node);
  }

  ExprPtr parsePrimary() {
    const Token &t = current();
    switch (t.kind) {
    case TokenKind::Name: {
      ExprPtr node = makeExpr(ExprKind::Const, t.loc);
      if (t.text == "true" || t.text == "True") {
        node->constant = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        node->constant = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        node->constant = Value::none();
      } else {
        node->kind = ExprKind::Name;
        node->name = t.text;
        if (!macros_.empty()) {
          if (t.text == "varargs") {
            macros_.back()->usesVarargs = true;
          } else if (t.text == "kwargs") {
            macros_.back()->usesKwargs = true;
          }
        }
      }
      advance();
      return node;
    }
    case TokenKind::String: {
      // Adjacent string literals concatenate, as in Python.
      ExprPtr node = makeExpr(ExprKind::Const, t.loc);
      std::string text;
      while (current().kind == TokenKind::String) {
        text += current().text;
        advance();
      }
      node->constant = Value::string(std::move(text));
      return node;
    }
    case TokenKind::Integer: {
      ExprPtr node = makeExpr(ExprKind::Const, t.loc);
      node->constant = Value::integer(t.intValue);
      advance();
      return node;
    }
    case TokenKind::Float: {
      ExprPtr node = makeExpr(ExprKind::Const, t.loc);
      node->constant = Value::real(t.floatValue);
      advance();
      return node;
    }
    case TokenKind::Operator:
      if (t.text == "(") {
        advance();
        ExprPtr inner = parseTuple(false, true, {}, /*explicitParens=*/true);
        if (failed() || !expectOp(")")) {
          return nullptr;
        }
        return inner;
      }
      if (t.text == "[") {
        return parseList();
      }
      if (t.text == "{") {
        return parseDict();
      }
      break;
    default:
      break;
    }
    fail(t, strCat("unexpected ", describe(t)));
    return nullptr;
  }

  ExprPtr parseList() {
    ExprPtr node = makeExpr(ExprKind::List, current().loc);
    advance();
    while (!failed() && !isOp(current(), "]")) {
      if (!node->operands.empty() && !expectOp(",")) {
        return nullptr;
      }
      if (isOp(current(), "]")) {
        break;
      }
      node->operands.push_back(parseExpression(true));
    }
    if (failed() || !expectOp("]")) {
      return nullptr;
    }
    return done(std::move(node));
  }

  ExprPtr parseDict() {
    ExprPtr node = makeExpr(ExprKind::Dict, current().loc);
    advance();
    while (!failed() && !isOp(current(), "}")) {
      if (!node->operands.empty() && !expectOp(",")) {
        return nullptr;
      }
      if (isOp(current(), "}")) {
        break;
      }
      node->operands.push_back(parseExpression(true));
      if (failed() || !expectOp(":")) {
        return nullptr;
      }
      node->operands.push_back(parseExpression(true));
    }
    if (failed() || !expectOp("}")) {
      return nullptr;
    }
    return done(std::move(node));
  }

  /// Attribute, item and call suffixes. Their nodes carry the location where the whole
  /// expression starts, which is what an error about `a.b.c` or `f(x)` should point at.
  ExprPtr parsePostfix(ExprPtr node) {
    while (!failed()) {
      const Token &t = current();
      const SourceLoc loc = node->loc;
      if (isOp(t, ".")) {
        advance();
        const Token &attr = current();
        if (attr.kind == TokenKind::Name) {
          ExprPtr get = makeExpr(ExprKind::GetAttr, loc);
          get->name = attr.text;
          get->operands.push_back(std::move(node));
          node = done(std::move(get));
          advance();
        } else if (attr.kind == TokenKind::Integer) {
          ExprPtr get = makeExpr(ExprKind::GetItem, loc);
          ExprPtr key = makeExpr(ExprKind::Const, attr.loc);
          key->constant = Value::integer(attr.intValue);
          get->operands.push_back(std::move(node));
          get->operands.push_back(std::move(key));
          node = done(std::move(get));
          advance();
        } else {
          fail(attr, "expected name or number");
          return nullptr;
        }
      } else if (isOp(t, "[")) {
        node = parseSubscript(std::move(node), loc);
      } else if (isOp(t, "(")) {
        node = parseCall(std::move(node), loc);
      } else {
        break;
      }
    }
    return failed() ? nullptr : std::move(node);
  }

  ExprPtr parseSubscript(ExprPtr node, SourceLoc loc) {
    advance();
    std::vector<ExprPtr> args;
    while (!failed() && !isOp(current(), "]")) {
      if (!args.empty() && !expectOp(",")) {
        return nullptr;
      }
      args.push_back(parseSubscribed());
    }
    if (failed() || !expectOp("]")) {
      return nullptr;
    }
    ExprPtr get = makeExpr(ExprKind::GetItem, loc);
    get->operands.push_back(std::move(node));
    if (args.size() == 1) {
      get->operands.push_back(std::move(args.front()));
    } else {
      ExprPtr tuple = makeExpr(ExprKind::Tuple, loc);
      tuple->operands = std::move(args);
      get->operands.push_back(done(std::move(tuple)));
    }
    return done(std::move(get));
  }

  /// One subscript: an expression or a slice `start:stop:step` with any part left out.
  ExprPtr parseSubscribed() {
    const SourceLoc loc = current().loc;
    ExprPtr start;
    if (isOp(current(), ":")) {
      advance();
    } else {
      start = parseExpression(true);
      if (failed() || !isOp(current(), ":")) {
        return start;
      }
      advance();
    }
    ExprPtr slice = makeExpr(ExprKind::Slice, loc);
    ExprPtr stop;
    ExprPtr step;
    if (!isOp(current(), ":") && !isOp(current(), "]") && !isOp(current(), ",")) {
      stop = parseExpression(true);
    }
    if (!failed() && isOp(current(), ":")) {
      advance();
      if (!isOp(current(), "]") && !isOp(current(), ",")) {
        step = parseExpression(true);
      }
    }
    slice->operands.push_back(std::move(start));
    slice->operands.push_back(std::move(stop));
    slice->operands.push_back(std::move(step));
    return failed() ? nullptr : done(std::move(slice));
  }

  /// `(args, name=value)`: appends the positional arguments to `node->operands`.
  bool parseCallArgs(Expr &node) {
    const Token open = current();
    if (!expectOp("(")) {
      return false;
    }
    bool requireComma = false;
    while (!failed() && !isOp(current(), ")")) {
      if (requireComma) {
        if (!expectOp(",")) {
          return false;
        }
        if (isOp(current(), ")")) {
          break;
        }
      }
      if (isOp(current(), "*") || isOp(current(), "**")) {
        unsupported(current(), "unsupported argument unpacking in a call");
        return false;
      }
      if (current().kind == TokenKind::Name && isOp(peek(), "=")) {
        Keyword keyword;
        keyword.name = current().text;
        advance();
        advance();
        keyword.value = parseExpression(true);
        node.keywords.push_back(std::move(keyword));
      } else {
        if (!node.keywords.empty()) {
          fail(open, "invalid syntax for function call expression");
          return false;
        }
        node.operands.push_back(parseExpression(true));
      }
      requireComma = true;
    }
    return !failed() && expectOp(")");
  }

  ExprPtr parseCall(ExprPtr callee, SourceLoc loc) {
    ExprPtr call = makeExpr(ExprKind::Call, loc);
    call->operands.push_back(std::move(callee));
    if (!parseCallArgs(*call)) {
      return nullptr;
    }
    return done(std::move(call));
  }

  ExprPtr parseFilterExpr(ExprPtr node) {
    while (!failed()) {
      if (isOp(current(), "|")) {
        node = parseFilter(std::move(node), false);
      } else if (isName(current(), "is")) {
        node = parseTest(std::move(node));
      } else if (isOp(current(), "(")) {
        const SourceLoc loc = node->loc;
        node = parseCall(std::move(node), loc);
      } else {
        break;
      }
    }
    return node;
  }

  /// Checks a filter or test name when it is parsed: unsupported ones are refused outright,
  /// unknown ones as jinja2 would (at load time unless guarded by an if).
  void checkBuiltinName(const Token &at, const std::string &name, bool isFilter) {
    const BuiltinSupport support = isFilter ? filterSupport(name) : testSupport(name);
    const char *what = isFilter ? "filter" : "test";
    if (support == BuiltinSupport::Unsupported) {
      unsupported(at, strCat("unsupported ", what, " '", name, "'"));
    } else if (support == BuiltinSupport::Unknown) {
      pendingNames_.push_back({at.loc, strCat("no ", what, " named '", name, "'"), softDepth_ > 0});
    }
  }

  ExprPtr parseFilter(ExprPtr node, bool startInline) {
    while (!failed() && (isOp(current(), "|") || startInline)) {
      if (!startInline) {
        advance();
      }
      startInline = false;
      const Token nameToken = current();
      if (nameToken.kind != TokenKind::Name) {
        fail(nameToken, strCat("expected a filter name, got ", describe(nameToken)));
        return nullptr;
      }
      std::string name = nameToken.text;
      advance();
      while (isOp(current(), ".") && peek().kind == TokenKind::Name) {
        advance();
        name += "." + current().text;
        advance();
      }
      checkBuiltinName(nameToken, name, true);
      ExprPtr filter = makeExpr(ExprKind::Filter, nameToken.loc);
      filter->name = std::move(name);
      filter->operands.push_back(std::move(node));
      if (isOp(current(), "(") && !parseCallArgs(*filter)) {
        return nullptr;
      }
      node = done(std::move(filter));
    }
    return failed() ? nullptr : std::move(node);
  }

  ExprPtr parseTest(ExprPtr node) {
    const SourceLoc loc = current().loc;
    advance(); // is
    bool negated = false;
    if (isName(current(), "not")) {
      negated = true;
      advance();
    }
    const Token nameToken = current();
    if (nameToken.kind != TokenKind::Name) {
      fail(nameToken, strCat("expected a test name, got ", describe(nameToken)));
      return nullptr;
    }
    std::string name = nameToken.text;
    advance();
    while (isOp(current(), ".") && peek().kind == TokenKind::Name) {
      advance();
      name += "." + current().text;
      advance();
    }
    checkBuiltinName(nameToken, name, false);
    ExprPtr test = makeExpr(ExprKind::Test, loc);
    test->name = std::move(name);
    test->negated = negated;
    test->operands.push_back(std::move(node));
    const Token &t = current();
    if (isOp(t, "(")) {
      if (!parseCallArgs(*test)) {
        return nullptr;
      }
    } else if ((t.kind == TokenKind::Name || t.kind == TokenKind::String ||
                t.kind == TokenKind::Integer || t.kind == TokenKind::Float || isOp(t, "[") ||
                isOp(t, "{")) &&
               !isName(t, "else") && !isName(t, "or") && !isName(t, "and")) {
      // One argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
      if (isName(t, "is")) {
        fail(t, "you cannot chain multiple tests with is");
        return nullptr;
      }
      ExprPtr arg = parsePostfix(parsePrimary());
      if (failed()) {
        return nullptr;
      }
      test->operands.push_back(std::move(arg));
    }
    return done(std::move(test));
  }

  struct PendingName {
    SourceLoc loc;
    std::string message;
    bool soft = false;
  };

  std::vector<Token> tokens_;
  std::string name_;
  size_t pos_ = 0;
  Status error_;
  int softDepth_ = 0;
  int loopDepth_ = 0;
  int depth_ = 0; // Nest levels open

  std::vector<MacroStmt *> macros_;
  std::vector<PendingName> pendingNames_;
};

} // namespace

Expected<std::shared_ptr<const Template>> parseTemplate(std::string_view source, std::string name) {
  if (source.size() > kMaxTemplateBytes) {
    return formatError(name, ": a template of ", source.size(), " bytes is larger than the ",
                       kMaxTemplateBytes, " the template parser reads");
  }
  GLM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenizeTemplate(source, name));
  Parser parser(std::move(tokens), std::move(name));
  return parser.run();
}

} // namespace glm::server::jinja
