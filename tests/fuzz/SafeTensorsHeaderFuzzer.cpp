// Fuzzes a .safetensors file (8-byte header length, JSON header, data) through
// SafeTensorsFile::open, the checkpoint reader `info`, `compile` and `generate` use.
#include "runtime/weights/SafeTensors.h"
#include "tests/fuzz/FuzzSupport.h"

#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace {

// open() maps a path, so the input is written to one memory file, reopened through /proc: no disk
// I/O per run, and the file is regular as a checkpoint's is.
int memoryFile() {
  static const int fd = [] {
    int f = ::memfd_create("safetensors-fuzz", MFD_CLOEXEC);
    if (f < 0) {
      glm::fuzz::contractBroken("memfd_create", "no memory file");
    }
    return f;
  }();
  return fd;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int fd = memoryFile();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    glm::fuzz::contractBroken("pwrite", "cannot write the memory file");
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  glm::Expected<std::unique_ptr<glm::SafeTensorsFile>> file = glm::SafeTensorsFile::open(path);
  if (!file.ok()) {
    return 0;
  }
  // open() promises every view is safe to read in full and sized by its shape and dtype.
  uint64_t sum = 0;
  for (const glm::TensorView &t : (*file)->tensors()) {
    const uint64_t elements = static_cast<uint64_t>(t.numel());
    GLM_FUZZ_CHECK(elements * glm::dtypeSize(t.dtype) == t.byteSize,
                   t.name + " " + glm::shapeText(t.shape));
    GLM_FUZZ_CHECK(t.byteSize <= size, t.name + " is larger than the file");
    GLM_FUZZ_CHECK((*file)->find(t.name) != nullptr, t.name + " is not found by name");
    for (uint8_t b : t.bytes()) {
      sum += b;
    }
  }
  for (const auto &[key, value] : (*file)->metadata()) {
    sum += key.size() + value.size();
  }
  return sum == 0xFFFFFFFFFFFFFFFFull ? 1 : 0;
}
