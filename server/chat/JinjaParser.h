// The Jinja parser: tokens to a syntax tree, refusing at load time what cannot be run.
#pragma once

#include "base/Status.h"
#include "server/chat/JinjaAst.h"

#include <memory>
#include <string>
#include <string_view>

namespace glm::server::jinja {

/// Parses template text. `name` prefixes every diagnostic ("chat_template.jinja:12:5: unsupported
/// tag 'include'"): Unimplemented for constructs this interpreter does not support, FormatError
/// for templates jinja2 would refuse too.
Expected<std::shared_ptr<const Template>> parseTemplate(std::string_view source, std::string name);

} // namespace glm::server::jinja
