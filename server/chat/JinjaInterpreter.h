// The Jinja interpreter: renders a parsed template with jinja2's runtime semantics.
#pragma once

#include "base/Status.h"
#include "server/chat/JinjaAst.h"
#include "server/chat/JinjaValue.h"

#include <string>

namespace glm::server::jinja {

/// Renders `tmpl` with the given top-level variables. Errors name the template position:
/// "chat_template.jinja:40:9: <message>" (raise_exception's message, an undefined value used in
/// arithmetic, a non-iterable in a for loop...). Safe to call concurrently on one template.
Expected<std::string> renderTemplate(const Template &tmpl, const DictData &variables);

} // namespace glm::server::jinja
