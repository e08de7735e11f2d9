// Streams tensors into safetensors files and Hub-style sharded checkpoints.
#include "runtime/weights/SafeTensorsWriter.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <system_error>
#include <unistd.h>

namespace glm {

namespace {

namespace fs = std::filesystem;

constexpr const char *kSingleFileName = "model.safetensors";
constexpr const char *kIndexFileName = "model.safetensors.index.json";

std::string errnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

/// Whether `text` is well-formed UTF-8. nlohmann's dump() throws on anything else, and the reader
/// rejects it, so names are checked before they reach the header.
bool isValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t codePoint = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    }
    if ((byte & 0xE0) == 0xC0) {
      length = 2;
      codePoint = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3;
      codePoint = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4;
      codePoint = byte & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) {
      return false;
    }
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) {
        return false;
      }
      codePoint = (codePoint << 6) | (next & 0x3F);
    }
    // Overlong encodings, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (codePoint < kMinForLength[length] || codePoint > 0x10FFFF ||
        (codePoint >= 0xD800 && codePoint <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

/// numel * dtypeSize with every step checked; the error names the tensor.
Expected<uint64_t> checkedByteSize(const TensorSpec &spec) {
  uint64_t numel = 1;
  for (int64_t dim : spec.shape) {
    if (dim < 0) {
      return invalidArgument("tensor '", spec.name, "': negative dimension ", dim);
    }
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) {
      return invalidArgument("tensor '", spec.name, "': element count overflows");
    }
  }
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return invalidArgument("tensor '", spec.name, "': element count overflows int64");
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, dtypeSize(spec.dtype), &bytes)) {
    return invalidArgument("tensor '", spec.name, "': byte size overflows");
  }
  return bytes;
}

/// Checks what the reader would reject, so a bad spec fails before any file is created.
Status validateSpecs(std::span<const TensorSpec> tensors,
                     const std::map<std::string, std::string> &metadata) {
  std::set<std::string_view> names;
  uint64_t total = 0;
  for (const TensorSpec &spec : tensors) {
    if (spec.name == "__metadata__") {
      return invalidArgument("tensor name '__metadata__' is reserved by the format");
    }
    if (!isValidUtf8(spec.name)) {
      return invalidArgument("tensor name '", spec.name, "' is not valid UTF-8");
    }
    if (!names.insert(spec.name).second) {
      return invalidArgument("tensor '", spec.name, "' is given twice");
    }
    if (!spec.fill) {
      return invalidArgument("tensor '", spec.name, "' has no fill function");
    }
    GLM_ASSIGN_OR_RETURN(uint64_t bytes, checkedByteSize(spec));
    if (__builtin_add_overflow(total, bytes, &total)) {
      return invalidArgument("tensors total more than 2^64 bytes");
    }
  }
  for (const auto &[key, value] : metadata) {
    if (!isValidUtf8(key) || !isValidUtf8(value)) {
      return invalidArgument("metadata entry '", key, "' is not valid UTF-8");
    }
  }
  return Status::success();
}

/// A JSON string literal for `text`, escaped. validateSpecs checked the UTF-8, so the strict
/// handler would not throw; `replace` only guarantees that nothing can escape.
std::string jsonString(const std::string &text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The JSON header, padded with spaces so the data section starts 8-byte aligned.
std::string buildHeader(std::span<const TensorSpec> tensors,
                        const std::map<std::string, std::string> &metadata) {
  // Assembled entry by entry: it keeps the tensors in the given order without ordered_json, whose
  // linear key lookup would make a header of n tensors cost O(n^2) to build.
  std::string text = "{";
  bool first = true;
  if (!metadata.empty()) {
    nlohmann::json meta(metadata);
    text += "\"__metadata__\":";
    text += meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    first = false;
  }
  uint64_t offset = 0;
  for (const TensorSpec &spec : tensors) {
    uint64_t bytes = spec.byteSize();
    nlohmann::json entry = {{"dtype", std::string(dtypeName(spec.dtype))},
                            {"shape", spec.shape},
                            {"data_offsets", {offset, offset + bytes}}};
    if (!first) {
      text += ',';
    }
    first = false;
    text += jsonString(spec.name);
    text += ':';
    text += entry.dump();
    offset += bytes;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

/// An open temporary file that is removed unless commit() renames it into place.
class TempFile {
public:
  explicit TempFile(fs::path finalPath)
      : finalPath_(std::move(finalPath)), tmpPath_(finalPath_.string() + ".tmp") {}
  ~TempFile() {
    if (file_) {
      std::fclose(file_);
    }
    if (!committed_) {
      std::error_code ec;
      fs::remove(tmpPath_, ec);
    }
  }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;

  Status open() {
    file_ = std::fopen(tmpPath_.c_str(), "wb");
    if (!file_) {
      int err = errno;
      return ioError(finalPath_.string(), ": cannot create ", tmpPath_.string(), ": ",
                     errnoText(err));
    }
    return Status::success();
  }

  Status write(const void *data, size_t size) {
    if (size != 0 && std::fwrite(data, 1, size, file_) != size) {
      int err = errno;
      return ioError(finalPath_.string(), ": write failed: ", errnoText(err));
    }
    return Status::success();
  }

  /// Flushes, syncs, closes and renames; the rename is the moment the file appears.
  Status commit() {
    if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) {
      int err = errno;
      return ioError(finalPath_.string(), ": write failed: ", errnoText(err));
    }
    int closeResult = std::fclose(file_);
    int closeErr = errno;
    file_ = nullptr;
    if (closeResult != 0) {
      return ioError(finalPath_.string(), ": write failed: ", errnoText(closeErr));
    }
    std::error_code ec;
    fs::rename(tmpPath_, finalPath_, ec);
    if (ec) {
      return ioError(finalPath_.string(), ": cannot rename ", tmpPath_.string(),
                     " into place: ", ec.message());
    }
    committed_ = true;
    return Status::success();
  }

private:
  fs::path finalPath_;
  fs::path tmpPath_;
  std::FILE *file_ = nullptr;
  bool committed_ = false;
};

/// writeSafeTensors with a per-tensor progress callback.
Status writeSafeTensorsImpl(const fs::path &path, std::span<const TensorSpec> tensors,
                            const std::map<std::string, std::string> &metadata,
                            const std::function<void(uint64_t)> &onTensorWritten) {
  GLM_RETURN_IF_ERROR(validateSpecs(tensors, metadata).withContext(path.string()));
  std::string header = buildHeader(tensors, metadata);

  TempFile out(path);
  GLM_RETURN_IF_ERROR(out.open());
  uint8_t lengthBytes[8];
  uint64_t headerSize = header.size();
  for (int i = 0; i < 8; ++i) {
    lengthBytes[i] = static_cast<uint8_t>(headerSize >> (8 * i));
  }
  GLM_RETURN_IF_ERROR(out.write(lengthBytes, sizeof(lengthBytes)));
  GLM_RETURN_IF_ERROR(out.write(header.data(), header.size()));

  // One buffer, grown to the largest tensor seen so far: memory stays at one tensor, not the file.
  std::unique_ptr<uint8_t[]> buffer;
  size_t capacity = 0;
  for (const TensorSpec &spec : tensors) {
    uint64_t bytes = spec.byteSize();
    if (bytes > std::numeric_limits<size_t>::max()) {
      return invalidArgument(path.string(), ": tensor '", spec.name, "' (", bytes,
                             " bytes) does not fit in memory");
    }
    if (bytes > capacity) {
      buffer.reset(new (std::nothrow) uint8_t[bytes]);
      if (!buffer) {
        return ioError(path.string(), ": cannot allocate ", bytes, " bytes for tensor '", spec.name,
                       "'");
      }
      capacity = bytes;
    }
    // Zeroed so a fill that skips bytes cannot leak the previous tensor's data into this one.
    std::memset(buffer.get(), 0, bytes);
    spec.fill(std::span<uint8_t>(buffer.get(), bytes));
    GLM_RETURN_IF_ERROR(out.write(buffer.get(), bytes));
    if (onTensorWritten) {
      onTensorWritten(bytes);
    }
  }
  return out.commit();
}

/// Writes a small text file through a temporary, as the tensor files are written.
Status writeTextFile(const fs::path &path, const std::string &text) {
  TempFile out(path);
  GLM_RETURN_IF_ERROR(out.open());
  GLM_RETURN_IF_ERROR(out.write(text.data(), text.size()));
  return out.commit();
}

std::string shardFileName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

} // namespace

uint64_t TensorSpec::byteSize() const {
  // Wraps for absurd shapes; the writer rejects those through checkedByteSize before using this.
  uint64_t numel = 1;
  for (int64_t dim : shape) {
    numel *= static_cast<uint64_t>(dim);
  }
  return numel * dtypeSize(dtype);
}

Status writeSafeTensors(const fs::path &path, const std::vector<TensorSpec> &tensors,
                        const std::map<std::string, std::string> &metadata) {
  return writeSafeTensorsImpl(path, tensors, metadata, {});
}

Status writeCheckpointShards(const fs::path &dir, const std::vector<TensorSpec> &tensors,
                             uint64_t maxShardBytes,
                             const std::function<void(uint64_t)> &onTensorWritten) {
  // Checked for the whole set up front: names must be unique across shards too, and nothing
  // should be written if any tensor is bad.
  GLM_RETURN_IF_ERROR(validateSpecs(tensors, {}).withContext(dir.string()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return ioError(dir.string(), ": cannot create directory: ", ec.message());
  }
  // The Python safetensors library records the framework this way; readers such as transformers
  // look for it.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};

  // validateSpecs checked that this sum does not overflow.
  uint64_t total = 0;
  for (const TensorSpec &spec : tensors) {
    total += spec.byteSize();
  }

  if (total <= maxShardBytes) {
    GLM_RETURN_IF_ERROR(
        writeSafeTensorsImpl(dir / kSingleFileName, tensors, metadata, onTensorWritten));
    // A leftover index would make readers ignore the file just written.
    fs::remove(dir / kIndexFileName, ec);
    if (ec) {
      return ioError((dir / kIndexFileName).string(),
                     ": cannot remove stale index: ", ec.message());
    }
    return Status::success();
  }

  // Greedy packing in the given order: a shard closes when the next tensor would overflow it, so
  // a tensor larger than the limit ends up alone in its shard. Shards are [begin, end) ranges of
  // `tensors`, since packing never reorders.
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t shardBytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t bytes = tensors[i].byteSize();
    bool shardHasTensors = !shards.empty() && shards.back().second > shards.back().first;
    if (shards.empty() ||
        (shardHasTensors && (shardBytes > maxShardBytes || bytes > maxShardBytes - shardBytes))) {
      shards.emplace_back(i, i);
      shardBytes = 0;
    }
    shards.back().second = i + 1;
    shardBytes += bytes;
  }

  nlohmann::json weightMap = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = shardFileName(i, shards.size());
    std::span<const TensorSpec> shard(tensors.data() + shards[i].first,
                                      shards[i].second - shards[i].first);
    GLM_RETURN_IF_ERROR(writeSafeTensorsImpl(dir / name, shard, metadata, onTensorWritten));
    for (const TensorSpec &spec : shard) {
      weightMap[spec.name] = name;
    }
  }
  // Written last, so an interrupted run never leaves an index naming shards that do not exist.
  // nlohmann::json sorts keys, which gives the weight_map the Hub's by-name order.
  nlohmann::json index = nlohmann::json::object();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weightMap);
  std::string text = index.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return writeTextFile(dir / kIndexFileName, text);
}

Status copyCheckpointCompanions(const std::filesystem::path &from,
                                const std::filesystem::path &to) {
  std::error_code ec;
  for (const std::filesystem::directory_entry &entry :
       std::filesystem::directory_iterator(from, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name == "config.json" ||
        name == "quantization_config.json") {
      continue;
    }
    std::filesystem::copy_file(entry.path(), to / name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return ioError(entry.path().string(), ": cannot copy to ", to.string(), ": ", ec.message());
    }
  }
  return ec ? ioError(from.string(), ": ", ec.message()) : Status::success();
}

} // namespace glm
