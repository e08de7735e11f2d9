// Values of the Jinja-subset interpreter: Python's data model as far as chat templates use it.
#pragma once

#include "base/Status.h"
#include "base/Utf8.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glm::server::jinja {

class Value;
struct MacroStmt;
class Scope;

/// How a sequence prints: templates can print `.items()` or a tuple, and Python's repr differs.
enum class ListStyle : uint8_t { List, Tuple, DictKeys, DictValues, DictItems };

/// A Python list or tuple. Sequences are never mutated once built (the sandbox forbids it), so
/// values share them.
struct ListData {
  std::vector<Value> items;
  ListStyle style = ListStyle::List;
  /// 1 + the deepest item's depth, and whether some item holds a namespace (Value::list sets
  /// both).
  size_t depth = 1;
  bool holdsNamespace = false;
};

/// A dict, a namespace() object or a loop object: string keys in insertion order, because JSON
/// key order is what tojson prints.
struct DictData {
  std::vector<std::pair<std::string, Value>> entries;
  /// 1 + the deepest entry's depth, and whether some entry holds a namespace: set by the Value
  /// factories and kept up to date by set(), so a namespace only gets deeper.
  size_t depth = 1;
  bool holdsNamespace = false;

  const Value *find(std::string_view key) const;
  /// Replaces the value of an existing key in place, or appends the key.
  void set(std::string key, Value value);
  /// Recomputes depth and holdsNamespace from the entries.
  void measure();
};

/// Something a template can call.
struct CallableData {
  enum class Kind : uint8_t {
    Macro,  // a {% macro %}: macro and closure are set
    Global, // a global function (range, namespace, raise_exception...): name is set
    Method, // a method of a value ('a b'.split, d.items, loop.cycle): receiver and name are set
  };
  Kind kind = Kind::Global;
  std::string name;
  const MacroStmt *macro = nullptr;
  Scope *closure = nullptr;
  std::shared_ptr<const Value> receiver;
};

enum class ValueKind : uint8_t {
  Undefined, // a missing variable, attribute or item (jinja2's default Undefined)
  None,
  Bool,
  Int,
  Float,
  String,
  List,
  Dict,
  Namespace,
  Loop,
  Callable,
};

class Value {
public:
  /// An Undefined; `hint` is the error message used if the template operates on it
  /// ("'x' is undefined").
  Value() = default;
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double f);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, ListStyle style = ListStyle::List);
  static Value dict(std::shared_ptr<DictData> data);
  static Value dict(DictData data) { return dict(std::make_shared<DictData>(std::move(data))); }
  static Value namespaceObject(std::shared_ptr<DictData> data);
  static Value loop(std::shared_ptr<DictData> data);
  static Value callable(std::shared_ptr<const CallableData> data);

  ValueKind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == ValueKind::Undefined; }
  bool isNone() const { return kind_ == ValueKind::None; }
  bool isString() const { return kind_ == ValueKind::String; }
  bool isList() const { return kind_ == ValueKind::List; }
  bool isDict() const { return kind_ == ValueKind::Dict; }
  /// Int or Bool: Python's bool is an int.
  bool isIntegral() const { return kind_ == ValueKind::Int || kind_ == ValueKind::Bool; }
  /// Int, Bool or Float.
  bool isNumber() const { return isIntegral() || kind_ == ValueKind::Float; }
  /// Dict, Namespace or Loop: the kinds backed by DictData.
  bool hasDictData() const {
    return kind_ == ValueKind::Dict || kind_ == ValueKind::Namespace || kind_ == ValueKind::Loop;
  }

  bool asBool() const { return int_ != 0; }
  /// Int or Bool as an integer.
  int64_t asInt() const { return int_; }
  /// Any number as a double.
  double asDouble() const { return kind_ == ValueKind::Float ? float_ : static_cast<double>(int_); }
  const std::string &asString() const { return string_ ? *string_ : emptyString(); }
  const std::string &undefinedHint() const { return asString(); }
  const ListData &asList() const { return *list_; }
  DictData &asDict() const { return *dict_; }
  const std::shared_ptr<DictData> &dictPtr() const { return dict_; }
  const CallableData &asCallable() const { return *callable_; }

  /// How deep lists, dicts and bound methods nest inside this value (0 for a scalar), as
  /// recorded when each container was built (see kMaxValueDepth).
  size_t depth() const;
  /// Whether this value is or holds a namespace (a namespace attribute may not: that is how
  /// jinja2 templates build cycles).
  bool holdsNamespace() const;

private:
  static const std::string &emptyString();

  ValueKind kind_ = ValueKind::Undefined;
  int64_t int_ = 0;
  double float_ = 0.0;
  // String payload, or the Undefined's hint; shared, so copying a value never copies its text.
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const CallableData> callable_;
};

/// Python's truth value (Undefined is false).
bool truthy(const Value &v);

/// Python's type name, as error messages say it ("int", "str", "dict", "NoneType").
std::string_view typeName(const Value &v);

/// Python's str(v), as `{{ v }}` prints it: Undefined prints as "", None as "None", 1.0 as "1.0".
void appendPyStr(std::string &out, const Value &v);
std::string pyStr(const Value &v);
/// Python's repr(v): how a value prints inside a list or dict ('a', True, None).
void appendPyRepr(std::string &out, const Value &v);
std::string pyRepr(const Value &v);
/// Python's repr of a float: the shortest text that reads back as the same double ("0.1", "1.0",
/// "1e+16").
std::string formatPyFloat(double f);

/// Python's ==, with 1 == 1.0 == True and deep comparison of sequences and dicts.
bool valuesEqual(const Value &a, const Value &b);
/// Python's ordering for <, <=, >, >=: -1, 0 or 1; an error for types Python refuses to order.
Expected<int> compareValues(const Value &a, const Value &b);

/// What json.dumps takes (transformers' tojson filter exposes these).
struct JsonDumpOptions {
  bool ensureAscii = false;
  std::optional<std::string> indent; // the indent string; none: everything on one line
  std::string itemSeparator = ", ";
  std::string keySeparator = ": ";
  bool sortKeys = false;
};
/// json.dumps(v, ...); an error for values JSON cannot hold (Undefined, macros, namespaces).
Expected<std::string> dumpJson(const Value &v, const JsonDumpOptions &options);

/// A JSON document as a Value (objects keep their key order).
Value valueFromJson(const nlohmann::ordered_json &json);

// Strings are UTF-8; Python indexes them by code point.

/// The number of code points.
size_t utf8Length(std::string_view s);
/// Splits into code points (each a UTF-8 substring).
std::vector<std::string_view> utf8Chars(std::string_view s);
/// Python's str.isspace() for one code point.
bool isPySpace(char32_t c);
/// Python's str.strip / lstrip / rstrip: with no `chars`, strips Unicode whitespace.
std::string_view pyStrip(std::string_view s, const std::optional<std::string> &chars, bool left,
                         bool right);
/// Decodes the code point at s[i] and advances i past it. A byte that does not start a valid
/// sequence is taken as a code point of its own value, so malformed text still makes progress.
char32_t decodeUtf8(std::string_view s, size_t &i);
/// Appends the UTF-8 encoding of a code point.

} // namespace glm::server::jinja
