// Status printing.
#include "base/Status.h"

namespace glm {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "ok";
  case StatusCode::InvalidArgument:
    return "invalid argument";
  case StatusCode::NotFound:
    return "not found";
  case StatusCode::IoError:
    return "i/o error";
  case StatusCode::FormatError:
    return "format error";
  case StatusCode::Unimplemented:
    return "unimplemented";
  case StatusCode::Unavailable:
    return "unavailable";
  case StatusCode::Internal:
    return "internal error";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (ok()) {
    return "ok";
  }
  return strCat(statusCodeName(code_), ": ", message_);
}

} // namespace glm
