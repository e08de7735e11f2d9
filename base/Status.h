// Status and Expected<T>: how code outside the compiler reports failure without exceptions.
#pragma once

#include <cassert>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace glm {

enum class StatusCode {
  Ok = 0,
  InvalidArgument, // the caller passed something malformed (a flag, a request, a config field)
  NotFound,        // a file, tensor or key that should exist does not
  IoError,         // the operating system refused (open, read, mmap, write)
  FormatError,     // a file's contents break its format's rules
  Unimplemented,   // valid input that this build does not support
  Unavailable,     // a resource (device, rank) is missing or gone
  Internal,        // a broken invariant: a bug in glmc
};

std::string_view statusCodeName(StatusCode code);

/// Concatenates any streamable values into one string: strCat("tensor ", name, " has ", n, "
/// dims").
template <typename... Args> std::string strCat(Args &&...args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

/// `items` with `separator` between them: strJoin({"1x4", "1x16"}, ", ") is "1x4, 1x16".
template <typename Items> std::string strJoin(const Items &items, std::string_view separator) {
  std::string out;
  for (const auto &item : items) {
    if (!out.empty()) {
      out += separator;
    }
    out += item;
  }
  return out;
}

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status success() { return Status(); }

  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }

  /// Prefixes the message with where the failure happened: "reading x.safetensors: <message>".
  Status withContext(std::string_view context) const {
    if (ok()) {
      return *this;
    }
    return Status(code_, strCat(context, ": ", message_));
  }

  /// "format error: <message>", for printing.
  std::string toString() const;

private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

template <typename... Args> Status invalidArgument(Args &&...args) {
  return Status(StatusCode::InvalidArgument, strCat(std::forward<Args>(args)...));
}
template <typename... Args> Status notFound(Args &&...args) {
  return Status(StatusCode::NotFound, strCat(std::forward<Args>(args)...));
}
template <typename... Args> Status ioError(Args &&...args) {
  return Status(StatusCode::IoError, strCat(std::forward<Args>(args)...));
}
template <typename... Args> Status formatError(Args &&...args) {
  return Status(StatusCode::FormatError, strCat(std::forward<Args>(args)...));
}
template <typename... Args> Status unimplemented(Args &&...args) {
  return Status(StatusCode::Unimplemented, strCat(std::forward<Args>(args)...));
}
template <typename... Args> Status internalError(Args &&...args) {
  return Status(StatusCode::Internal, strCat(std::forward<Args>(args)...));
}

/// A value or the Status that explains why there is none.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : storage_(std::move(value)) {}
  Expected(Status status) : storage_(std::move(status)) {
    assert(!std::get<Status>(storage_).ok() && "an Expected error needs a failed Status");
  }

  bool ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return ok(); }

  /// The error; Status::success() when there is a value.
  Status status() const { return ok() ? Status::success() : std::get<Status>(storage_); }

  T &value() & {
    assert(ok());
    return std::get<T>(storage_);
  }
  const T &value() const & {
    assert(ok());
    return std::get<T>(storage_);
  }
  T &&value() && {
    assert(ok());
    return std::get<T>(std::move(storage_));
  }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }

private:
  std::variant<T, Status> storage_;
};

} // namespace glm

#define GLM_STATUS_CONCAT_INNER(a, b) a##b
#define GLM_STATUS_CONCAT(a, b) GLM_STATUS_CONCAT_INNER(a, b)

/// Returns the Status of `expr` from the enclosing function if it failed.
#define GLM_RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                             \
    ::glm::Status glmStatus_ = (expr);                                                             \
    if (!glmStatus_.ok()) {                                                                        \
      return glmStatus_;                                                                           \
    }                                                                                              \
  } while (false)

/// `GLM_ASSIGN_OR_RETURN(auto x, makeX());` declares x from an Expected or returns its error.
#define GLM_ASSIGN_OR_RETURN(lhs, expr)                                                            \
  GLM_ASSIGN_OR_RETURN_IMPL(GLM_STATUS_CONCAT(glmExpected_, __LINE__), lhs, expr)
#define GLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                                                  \
  auto tmp = (expr);                                                                               \
  if (!tmp.ok()) {                                                                                 \
    return tmp.status();                                                                           \
  }                                                                                                \
  lhs = std::move(tmp).value()
