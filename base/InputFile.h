// Reading a file a user or a checkpoint names, as untrusted input: only a regular file (a FIFO or
// a device would block or never end), never more than a stated size, and JSON text through the
// depth-limited checker before any DOM is built.
#pragma once

#include "base/JsonChecker.h"
#include "base/Status.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace glm {

/// The whole of `path`, refused with an error naming `what` and the path when it is not a regular
/// file (after symlinks) or holds more than `maxBytes`. Checked with stat() before open(), since
/// opening a FIFO blocks until a writer comes.
Expected<std::string> readInputFile(const std::filesystem::path &path, uint64_t maxBytes,
                                    std::string_view what);

/// Parses untrusted JSON text into `JsonT` (nlohmann::json or ordered_json): a SAX pass that
/// refuses nesting deeper than `maxDepth` first (the DOM's copy and destruction recurse), and no
/// exception leaves it. Errors name `source`.
template <typename JsonT>
Expected<JsonT> parseUntrustedJson(std::string_view text, std::string_view source,
                                   size_t maxDepth) {
  JsonChecker checker(maxDepth);
  if (!JsonChecker::Json::sax_parse(text.begin(), text.end(), &checker)) {
    if (checker.tooDeep()) {
      return invalidArgument(source, ": nests deeper than ", maxDepth, " levels");
    }
    return invalidArgument(source, ": not valid JSON (",
                           checker.error().empty() ? "parse error" : checker.error(), ")");
  }
  JsonT value = JsonT::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return invalidArgument(source, ": not valid JSON");
  }
  return value;
}

} // namespace glm
