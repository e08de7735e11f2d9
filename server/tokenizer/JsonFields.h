// Typed, exception-free reads of tokenizer.json fields, with errors that name the field's path.
#pragma once

#include "base/Status.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace glm::server::json_fields {

using Json = nlohmann::json;

/// How deep Sequence normalizers, pre-tokenizers, decoders and post-processors may nest inside
/// each other: real tokenizers nest one Sequence (two at most), and reading them recurses.
inline constexpr int kMaxSequenceNesting = 16;

/// "model.type" from ("model", "type"); "pre_tokenizer.pretokenizers[1]" from an index.
inline std::string join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : strCat(path, ".", key);
}
inline std::string join(std::string_view path, size_t index) {
  return strCat(path, "[", index, "]");
}

inline std::string_view typeName(const Json &value) { return value.type_name(); }

/// The member `key` of object `object`, or nullptr when it is absent.
inline const Json *find(const Json &object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

inline Status expectObject(const Json &value, std::string_view path) {
  if (!value.is_object()) {
    return formatError("'", path, "' must be an object, not ", typeName(value));
  }
  return Status::success();
}

/// A required string member.
inline Expected<std::string> getString(const Json &object, std::string_view key,
                                       std::string_view path) {
  const Json *value = find(object, key);
  if (value == nullptr) {
    return formatError("'", join(path, key), "' is missing");
  }
  if (!value->is_string()) {
    return formatError("'", join(path, key), "' must be a string, not ", typeName(*value));
  }
  return value->get<std::string>();
}

/// A boolean member; `fallback` when absent or null (nullopt: it is required).
inline Expected<bool> getBool(const Json &object, std::string_view key, std::string_view path,
                              std::optional<bool> fallback) {
  const Json *value = find(object, key);
  if (value == nullptr || value->is_null()) {
    if (fallback) {
      return *fallback;
    }
    return formatError("'", join(path, key), "' is missing");
  }
  if (!value->is_boolean()) {
    return formatError("'", join(path, key), "' must be true or false, not ", typeName(*value));
  }
  return value->get<bool>();
}

/// A member that may be absent, null or a string.
inline Expected<std::optional<std::string>>
getOptionalString(const Json &object, std::string_view key, std::string_view path) {
  const Json *value = find(object, key);
  if (value == nullptr || value->is_null()) {
    return std::optional<std::string>();
  }
  if (!value->is_string()) {
    return formatError("'", join(path, key), "' must be a string or null, not ", typeName(*value));
  }
  return std::optional<std::string>(value->get<std::string>());
}

} // namespace glm::server::json_fields
