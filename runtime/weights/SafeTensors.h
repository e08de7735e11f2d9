// Read-only, validated access to safetensors checkpoints: one file or shards with an index.
#pragma once

#include "base/DType.h"
#include "base/Status.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace glm {

/// One tensor of a mapped safetensors file. `data` points into the mapping and stays valid while
/// the file that produced it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  uint64_t byteSize = 0;
  /// The file that holds it, for error messages.
  const std::filesystem::path *file = nullptr;

  int64_t numel() const;
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(byteSize)}; }
};

/// A single .safetensors file, mmapped read-only. open() refuses anything but a regular file
/// before opening it (a FIFO would block), and validates the whole header before it returns, by
/// the format's rules as its reference implementation checks them: a header length within the
/// file, a header of exactly that many bytes that is one JSON object (from its first byte, '{',
/// to its last, padded with spaces only), known dtypes, non-negative shapes whose element count
/// times the dtype size equals the byte range, and ranges that cover the data section exactly, in
/// order, with no gap, overlap or trailing byte (so a header length off by one, which shifts
/// every tensor, is refused). After that, every TensorView is safe to read in full.
class SafeTensorsFile {
public:
  static Expected<std::unique_ptr<SafeTensorsFile>> open(const std::filesystem::path &path);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile &) = delete;
  SafeTensorsFile &operator=(const SafeTensorsFile &) = delete;

  const std::filesystem::path &path() const { return path_; }
  /// Tensors in header order.
  const std::vector<TensorView> &tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorView *find(std::string_view name) const;
  /// The optional "__metadata__" string map.
  const std::map<std::string, std::string> &metadata() const { return metadata_; }

private:
  SafeTensorsFile() = default;

  std::filesystem::path path_;
  void *mapping_ = nullptr;
  size_t mappingSize_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

/// All the weights of a checkpoint directory: model.safetensors.index.json and the shards it names,
/// or else a single model.safetensors. Each tensor must be in the shard the index names, and no
/// tensor may appear twice.
class Checkpoint {
public:
  static Expected<std::unique_ptr<Checkpoint>> open(const std::filesystem::path &modelDir);

  /// Whether the directory holds any weights (model.safetensors or an index).
  static bool hasWeights(const std::filesystem::path &modelDir);

  const std::filesystem::path &directory() const { return dir_; }
  const std::vector<std::unique_ptr<SafeTensorsFile>> &files() const { return files_; }
  /// Every tensor of every file, sorted by name.
  const std::vector<const TensorView *> &tensors() const { return sorted_; }
  /// nullptr when absent.
  const TensorView *find(std::string_view name) const;

private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
  std::map<std::string, const TensorView *, std::less<>> byName_;
  std::vector<const TensorView *> sorted_;
};

/// The most bytes glmc reads of a checkpoint's config.json: the release's is 6 KB, so this is far
/// beyond any real one, while a huge file (or a link to /dev/zero) is refused by name.
inline constexpr uint64_t kMaxConfigJsonBytes = 16ull << 20;

/// A checkpoint's config.json (or another JSON beside it) read whole as untrusted input: only a
/// regular file, of at most kMaxConfigJsonBytes (base/InputFile.h).
Expected<std::string> readConfigJson(const std::filesystem::path &path);

/// A shape as messages print it: "[2, 3]".
std::string shapeText(const std::vector<int64_t> &shape);

} // namespace glm
