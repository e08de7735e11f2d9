// Bounded reads of untrusted files.
#include "base/InputFile.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

namespace glm {

Expected<std::string> readInputFile(const std::filesystem::path &path, uint64_t maxBytes,
                                    std::string_view what) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return notFound(path.string(), ": no such ", what);
    }
    return ioError(path.string(), ": cannot read ", what, " (", std::strerror(error), ")");
  }
  if (!S_ISREG(info.st_mode)) {
    return invalidArgument(path.string(), ": ", what, " is not a regular file (",
                           S_ISDIR(info.st_mode)                            ? "a directory"
                           : S_ISFIFO(info.st_mode)                         ? "a FIFO"
                           : S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode) ? "a device"
                                                                            : "a socket",
                           ")");
  }
  if (static_cast<uint64_t>(info.st_size) > maxBytes) {
    return invalidArgument(path.string(), ": ", what, " is ", info.st_size,
                           " bytes, more than the ", maxBytes, " this glmc reads");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return ioError(path.string(), ": cannot open ", what, " (", std::strerror(errno), ")");
  }
  // Exactly the size stat() saw: a file that changes meanwhile is refused, so the read stays
  // bounded.
  std::string text(static_cast<size_t>(info.st_size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.gcount() != static_cast<std::streamsize>(text.size())) {
    return ioError(path.string(), ": ", what, " shrank while it was read");
  }
  if (in.peek() != std::ifstream::traits_type::eof()) {
    return ioError(path.string(), ": ", what, " grew while it was read");
  }
  return text;
}

} // namespace glm
