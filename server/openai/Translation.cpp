// Field errors in the client's paths, and the chat parser's errors mapped back to them.
#include "server/openai/Translation.h"

#include "base/JsonChecker.h"

namespace glm::server {
namespace {

using Json = nlohmann::ordered_json;

/// As deep as the chat parser allows: the translated body is no deeper than the client's.
constexpr size_t kMaxClientJsonDepth = 64;

/// An error about the body as a whole (no field to name).
ApiError bodyError(std::string code, std::string message) {
  return ApiError{400, "invalid_request_error", std::move(code), std::move(message), std::nullopt};
}

/// Whether `path` is `prefix` or starts with it followed by a member or an index.
bool extends(const std::string &path, const std::string &prefix) {
  return path.starts_with(prefix) &&
         (path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[');
}

void replaceAll(std::string &text, const std::string &from, const std::string &to) {
  if (from.empty()) {
    return;
  }
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

} // namespace

std::variant<Json, ApiError> parseClientBody(std::string_view body) {
  JsonChecker checker(kMaxClientJsonDepth);
  if (!Json::sax_parse(body.begin(), body.end(), &checker)) {
    if (checker.tooDeep()) {
      return bodyError("invalid_json", strCat("Invalid JSON body: nested deeper than ",
                                              kMaxClientJsonDepth, " levels."));
    }
    // nlohmann's message quotes the input: only the position is told.
    return bodyError("invalid_json",
                     strCat("Invalid JSON body at byte ", checker.errorByte(), "."));
  }
  Json root = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return bodyError("invalid_json", "Invalid JSON body.");
  }
  if (!root.is_object()) {
    return bodyError("invalid_type", strCat("The request body must be a JSON object, but got ",
                                            jsonTypeName(root), "."));
  }
  return root;
}

const Json *member(const Json &object, const char *key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

void ParamMap::add(std::string chatPath, std::string clientPath) {
  paths_.emplace_back(std::move(chatPath), std::move(clientPath));
}

ApiError ParamMap::toClient(ApiError error, const std::string &fallback) const {
  if (!error.param) {
    return error;
  }
  const std::string chatPath = *error.param;
  const std::pair<std::string, std::string> *best = nullptr;
  for (const auto &entry : paths_) {
    if (extends(chatPath, entry.first) && (!best || entry.first.size() > best->first.size())) {
      best = &entry;
    }
  }
  // Unmapped fields kept their names (model, temperature...), except the conversation's.
  const std::string clientPath = best ? best->second + chatPath.substr(best->first.size())
                                 : extends(chatPath, "messages") ? fallback
                                                                 : chatPath;
  // The message quotes the path ("Invalid 'max_tokens': ..."): it names the client's too.
  replaceAll(error.message, "'" + chatPath + "'", "'" + clientPath + "'");
  error.param = clientPath;
  return error;
}

} // namespace glm::server
