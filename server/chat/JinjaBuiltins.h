// The Jinja builtins a template reaches: filters, tests, globals, sandbox-safe methods, lookups.
#pragma once

#include "server/chat/JinjaValue.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glm::server::jinja {

/// Whether this interpreter implements a filter or test name. Unsupported names are ones jinja2
/// knows that we do not; the parser refuses them at load time.
enum class BuiltinSupport : uint8_t { Supported, Unsupported, Unknown };
BuiltinSupport filterSupport(std::string_view name);
BuiltinSupport testSupport(std::string_view name);

/// Evaluated call arguments.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

/// `input | name(args)`. Errors carry no location; the interpreter adds it.
Expected<Value> applyFilter(std::string_view name, const Value &input, const CallArgs &args);
/// `input is name(args)`.
Expected<bool> applyTest(std::string_view name, const Value &input, const CallArgs &args);

/// The global functions (range, namespace, dict, raise_exception, strftime_now) and the jinja2
/// globals this interpreter does not implement (cycler, joiner, lipsum).
bool isGlobalFunction(std::string_view name);
Expected<Value> callGlobal(std::string_view name, const CallArgs &args);
/// Calls a bound method (`'a b'.split()`, `d.items()`, `loop.cycle('a', 'b')`).
Expected<Value> callMethod(const Value &receiver, std::string_view name, const CallArgs &args);

/// jinja2's getattr: a Python attribute (a method) first, then an item; Undefined if neither.
/// The object must not be Undefined (the interpreter reports that as an error).
Value getAttribute(const Value &object, std::string_view name);
/// jinja2's getitem: an item first, then (for a string key) an attribute.
Value getItem(const Value &object, const Value &key);
/// object[start:stop:step] for a string, list or tuple.
Expected<Value> sliceValue(const Value &object, std::optional<int64_t> start,
                           std::optional<int64_t> stop, std::optional<int64_t> step);
/// The items a for loop visits: a list's items, a dict's keys, a string's characters; nothing
/// for Undefined.
Expected<std::vector<Value>> iterateValue(const Value &v);
/// `needle in haystack`.
Expected<bool> containsValue(const Value &haystack, const Value &needle);

} // namespace glm::server::jinja
