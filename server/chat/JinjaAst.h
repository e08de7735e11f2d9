// The syntax tree of a parsed Jinja template, with source locations for runtime errors.
#pragma once

#include "server/chat/JinjaLexer.h"
#include "server/chat/JinjaValue.h"

#include <memory>
#include <string>
#include <vector>

namespace glm::server::jinja {

enum class ExprKind : uint8_t {
  Const,    // constant
  Name,     // name
  List,     // operands: the items
  Tuple,    // operands: the items
  Dict,     // operands: key0, value0, key1, value1, ...
  GetAttr,  // operands[0].name
  GetItem,  // operands[0][operands[1]]; a Slice key slices
  Slice,    // operands: start, stop, step (each may be null)
  Call,     // operands[0](operands[1:], keywords)
  Filter,   // operands[0] | name(operands[1:], keywords); operands[0] is null inside filter blocks
  Test,     // operands[0] is [not] name(operands[1:], keywords)
  Neg,      // -operands[0]
  Pos,      // +operands[0]
  Not,      // not operands[0]
  Binary,   // operands[0] binaryOps[0] operands[1] binaryOps[1] ..., left to right
  And,      // operands[0] and operands[1] and ... (short-circuit, left to right)
  Or,       // operands[0] or operands[1] or ...
  Compare,  // operands[0] compareOps[0] operands[1] compareOps[1] operands[2] ...
  Concat,   // operands joined with ~
  CondExpr, // operands[1] if operands[0] else operands[2] (operands[2] may be null)
};

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  SourceLoc loc;
  Value constant;
  std::string name;
  // A chain of one precedence level (a + b - c) is one node, so a long flat chain neither
  // recurses when evaluated nor when freed; opLocs[i] is where binaryOps[i] is written.
  std::vector<BinaryOp> binaryOps;
  std::vector<SourceLoc> opLocs;
  std::vector<CompareOp> compareOps;
  std::vector<ExprPtr> operands;
  std::vector<Keyword> keywords;
  bool negated = false; // a Test written `is not`
  int height = 1;       // 1 + the tallest operand's height; at most kMaxNesting
};

/// The left side of `set`, `for` and `with`: one name, a tuple of names, or `ns.attr`.
struct AssignTarget {
  std::vector<std::string> names;
  bool isTuple = false;
  std::string namespaceAttr; // non-empty for `set ns.attr = ...` (names[0] is the namespace)
  SourceLoc loc;
};

enum class StmtKind : uint8_t {
  Output,      // template text
  Print,       // {{ expr }}
  If,          // if / elif / else
  For,         // for ... in ... [if ...] / else
  Set,         // set target = value
  SetBlock,    // set target [| filters] ... endset
  Macro,       // macro name(params) ... endmacro
  Break,       // break (loopcontrols)
  Continue,    // continue (loopcontrols)
  With,        // with a = 1 ... endwith
  FilterBlock, // filter name ... endfilter
  Generation,  // generation ... endgeneration (transformers' assistant-mask markers)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  Stmt(StmtKind kind, SourceLoc loc) : kind(kind), loc(loc) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourceLoc loc;
};

struct OutputStmt : Stmt {
  explicit OutputStmt(SourceLoc loc) : Stmt(StmtKind::Output, loc) {}
  std::string text;
};

struct PrintStmt : Stmt {
  explicit PrintStmt(SourceLoc loc) : Stmt(StmtKind::Print, loc) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(SourceLoc loc) : Stmt(StmtKind::If, loc) {}
  struct Branch {
    ExprPtr condition;
    Body body;
  };
  std::vector<Branch> branches; // if, then each elif
  Body elseBody;
};

struct ForStmt : Stmt {
  explicit ForStmt(SourceLoc loc) : Stmt(StmtKind::For, loc) {}
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr filter; // `for x in xs if cond`; may be null
  Body body;
  Body elseBody;
};

struct SetStmt : Stmt {
  explicit SetStmt(SourceLoc loc) : Stmt(StmtKind::Set, loc) {}
  AssignTarget target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(SourceLoc loc) : Stmt(StmtKind::SetBlock, loc) {}
  AssignTarget target;
  ExprPtr filter; // a Filter chain whose innermost input is null; may be null
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(SourceLoc loc) : Stmt(StmtKind::Macro, loc) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults; // one per parameter; null where there is no default
  Body body;
  // The body mentions these names, so extra arguments are collected into them, as jinja2 does.
  bool usesVarargs = false;
  bool usesKwargs = false;
};

struct LoopControlStmt : Stmt {
  LoopControlStmt(StmtKind kind, SourceLoc loc) : Stmt(kind, loc) {}
};

struct WithStmt : Stmt {
  explicit WithStmt(SourceLoc loc) : Stmt(StmtKind::With, loc) {}
  std::vector<AssignTarget> targets;
  std::vector<ExprPtr> values;
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(SourceLoc loc) : Stmt(StmtKind::FilterBlock, loc) {}
  ExprPtr filter; // a Filter chain whose innermost input is null
  Body body;
};

struct GenerationStmt : Stmt {
  explicit GenerationStmt(SourceLoc loc) : Stmt(StmtKind::Generation, loc) {}
  Body body;
};

/// A parsed template. Immutable once parsed, so one can be rendered from many threads.
struct Template {
  std::string name; // for diagnostics: "chat_template.jinja"
  Body body;
};

} // namespace glm::server::jinja
