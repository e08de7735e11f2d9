// A first pass over untrusted JSON text, before any DOM is built from it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace glm {

/// A SAX consumer for nlohmann's sax_parse that builds nothing. It refuses nesting deeper than
/// `maxDepth` (the SAX parser is iterative, so the refusal comes before recursive DOM code sees a
/// hostile document) and keeps the parse error, so that a malformed document is reported without
/// an exception leaving the parser. Callers that watch keys or objects derive from it and hide
/// the handlers they extend (sax_parse calls the derived type's members, so no virtuals).
/// The value types are nlohmann::json's, which ordered_json shares.
class JsonChecker {
public:
  using Json = nlohmann::json;

  explicit JsonChecker(size_t maxDepth) : maxDepth_(maxDepth) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t &) { return true; }
  bool string(Json::string_t &) { return true; }
  bool binary(Json::binary_t &) { return true; }
  bool key(Json::string_t &) { return true; }
  bool start_object(std::size_t) { return enter(); }
  bool end_object() { return leave(); }
  bool start_array(std::size_t) { return enter(); }
  bool end_array() { return leave(); }
  bool parse_error(std::size_t position, const std::string &,
                   const nlohmann::detail::exception &error) {
    errorByte_ = position;
    error_ = error.what();
    return false;
  }

  size_t maxDepth() const { return maxDepth_; }
  /// The nesting depth at the current point of the pass (1 inside the root object).
  size_t depth() const { return depth_; }
  bool tooDeep() const { return tooDeep_; }
  /// The byte (counted from 1, as nlohmann does) and nlohmann's message of a syntax error.
  size_t errorByte() const { return errorByte_; }
  const std::string &error() const { return error_; }

private:
  bool enter() {
    if (++depth_ > maxDepth_) {
      tooDeep_ = true;
      return false;
    }
    return true;
  }
  bool leave() {
    --depth_;
    return true;
  }

  size_t maxDepth_;
  size_t depth_ = 0;
  bool tooDeep_ = false;
  size_t errorByte_ = 0;
  std::string error_;
};

} // namespace glm
