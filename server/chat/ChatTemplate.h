// A checkpoint's chat template, parsed once and rendered per request as transformers renders it.
#pragma once

#include "base/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace glm::server {

namespace jinja {
struct Template;
} // namespace jinja

class ChatTemplate {
public:
  /// Parses template text. A construct this interpreter cannot run is an error now, naming its
  /// place: "chat_template.jinja:12:5: unsupported tag 'include'". Text over kMaxTemplateBytes
  /// (JinjaLimits.h, like every bound of the parser and interpreter) is refused.
  static Expected<ChatTemplate> parse(std::string_view text, std::string sourceName);
  /// Reads (at most kMaxTemplateBytes) and parses a template file; diagnostics name the path as
  /// given.
  static Expected<ChatTemplate> load(const std::filesystem::path &path);

  /// Renders with `variables` (a JSON object; each key is a template variable; objects keep
  /// their key order, which tojson prints). Errors from the template (raise_exception, a value
  /// of the wrong type) name the template position. Safe to call from many threads at once.
  Expected<std::string> render(const nlohmann::ordered_json &variables) const;

  const std::string &sourceName() const;

private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> parsed)
      : template_(std::move(parsed)) {}

  std::shared_ptr<const jinja::Template> template_;
};

/// The largest tokenizer_config.json (or other chat file) read: real ones are under 10 MiB, even
/// with an added_tokens_decoder of every added token.
inline constexpr uint64_t kMaxChatFileBytes = uint64_t(64) << 20;

/// Reads a whole text file through readInputFile: a FIFO, a device or a file over `maxBytes` is
/// refused by name; the error names the path.
Expected<std::string> readChatFile(const std::filesystem::path &path,
                                   uint64_t maxBytes = kMaxChatFileBytes);

} // namespace glm::server
