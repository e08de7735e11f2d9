// Maps safetensors files and checkpoint directories, validating every header field before use.
#include "runtime/weights/SafeTensors.h"

#include "base/InputFile.h"
#include "base/JsonChecker.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace glm {

namespace {

namespace fs = std::filesystem;
// Plain (std::map-backed) json: nlohmann::ordered_json would keep file order but looks keys up
// linearly, which makes parsing a header of n tensors O(n^2). File order is recovered separately.
using Json = nlohmann::json;

constexpr uint64_t kHeaderLengthBytes = 8;
// No real header comes near this (the largest Hub checkpoints' headers are a few MB); the cap keeps
// a hostile length from making us parse, or even look at, gigabytes of "JSON".
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// The index is a name -> file map; the same reasoning bounds how much of it we read.
constexpr uint64_t kMaxIndexBytes = 100ull * 1024 * 1024;
// The header's own padding (the reference writer pads with spaces to an 8-byte boundary).
constexpr char kHeaderPadding = ' ';

constexpr const char *kSingleFileName = "model.safetensors";
constexpr const char *kIndexFileName = "model.safetensors.index.json";

std::string errnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

/// "[10, 10]", for messages.
/// A JSON value's type as a reader would call it, for messages.
std::string_view jsonTypeName(const Json &value) {
  if (value.is_number_float()) {
    return "a non-integer number";
  }
  if (value.is_number_integer()) {
    return "an integer";
  }
  switch (value.type()) {
  case Json::value_t::null:
    return "null";
  case Json::value_t::object:
    return "an object";
  case Json::value_t::array:
    return "an array";
  case Json::value_t::string:
    return "a string";
  case Json::value_t::boolean:
    return "a boolean";
  default:
    return "an unexpected value";
  }
}

// A safetensors header nests three deep (root, entry, shape) and an index two; anything far deeper
// is hostile, and refusing it before the DOM is built bounds what parsing can allocate.
constexpr size_t kMaxJsonDepth = 16;

/// A parsed JSON document plus what nlohmann's DOM does not keep.
struct ParsedJson {
  Json value;
  /// Why the text was refused ("is not valid JSON: ..."); empty when `value` is usable.
  std::string error;
  /// The root object's keys in file order (the DOM sorts them).
  std::vector<std::string> topLevelKeys;
  /// The first key repeated within one object, if any. nlohmann silently keeps only one value per
  /// key, and a header that names a tensor twice is ambiguous, so callers reject it.
  std::string duplicateKey;
};

/// A SAX pass that checks syntax and depth and records what the DOM loses: the root object's key
/// order and repeated keys. (A DOM parse with a callback could do this in one pass, but nlohmann's
/// callback parser rescans the parent object at every object end: quadratic in the tensor count.)
class KeyScanner : public JsonChecker {
public:
  explicit KeyScanner(ParsedJson &out) : JsonChecker(kMaxJsonDepth), out_(out) {}

  bool start_object(std::size_t n) {
    keysPerObject_.emplace_back();
    return JsonChecker::start_object(n);
  }
  bool end_object() {
    keysPerObject_.pop_back();
    return JsonChecker::end_object();
  }
  bool key(Json::string_t &key) {
    // Keys only occur directly inside an object, so the innermost key set is this object's.
    if (!keysPerObject_.back().insert(key).second) {
      if (out_.duplicateKey.empty()) {
        out_.duplicateKey = key;
      }
    } else if (depth() == 1) {
      out_.topLevelKeys.push_back(key);
    }
    return true;
  }

private:
  ParsedJson &out_;
  std::vector<std::set<std::string>> keysPerObject_;
};

/// Parses `text` as JSON without exceptions; on failure `error` says why.
ParsedJson parseJson(std::string_view text) {
  ParsedJson parsed;
  KeyScanner scanner(parsed);
  if (!Json::sax_parse(text.begin(), text.end(), &scanner)) {
    parsed.error = scanner.tooDeep() ? strCat("nests deeper than ", kMaxJsonDepth, " levels")
                   : scanner.error().empty() ? std::string("is not valid JSON")
                                             : strCat("is not valid JSON (", scanner.error(), ")");
    return parsed;
  }
  parsed.value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.value.is_discarded()) {
    // The SAX pass accepted it, so this should not happen; refuse rather than trust it.
    parsed.error = "is not valid JSON";
  }
  return parsed;
}

/// Reads a non-negative JSON integer that fits in int64_t; nullopt for anything else.
std::optional<int64_t> nonNegativeInt64(const Json &value) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v);
    }
    return std::nullopt;
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v >= 0) {
      return v;
    }
  }
  return std::nullopt;
}

/// Reads a non-negative JSON integer as uint64_t; nullopt for anything else.
std::optional<uint64_t> nonNegativeUInt64(const Json &value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>();
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v >= 0) {
      return static_cast<uint64_t>(v);
    }
  }
  return std::nullopt;
}

/// A header entry after its fields have been checked, before the ranges are checked together.
struct ParsedEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

/// Checks one tensor entry of a header. `where` is "<path>: tensor '<name>'".
Expected<ParsedEntry> parseEntry(const std::string &where, const std::string &name,
                                 const Json &entry, uint64_t dataSize) {
  if (!entry.is_object()) {
    return formatError(where, ": entry is ", jsonTypeName(entry), ", not an object");
  }
  for (const auto &[key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return formatError(where, ": unknown field '", key,
                         "' (expected only dtype, shape and data_offsets)");
    }
  }

  ParsedEntry parsed;
  parsed.name = name;

  auto dtypeIt = entry.find("dtype");
  if (dtypeIt == entry.end()) {
    return formatError(where, ": missing field 'dtype'");
  }
  if (!dtypeIt->is_string()) {
    return formatError(where, ": 'dtype' is ", jsonTypeName(*dtypeIt), ", not a string");
  }
  const std::string &dtypeText = dtypeIt->get_ref<const std::string &>();
  std::optional<DType> dtype = parseDType(dtypeText);
  if (!dtype) {
    return formatError(where, ": unknown dtype '", dtypeText, "'");
  }
  parsed.dtype = *dtype;

  auto shapeIt = entry.find("shape");
  if (shapeIt == entry.end()) {
    return formatError(where, ": missing field 'shape'");
  }
  if (!shapeIt->is_array()) {
    return formatError(where, ": 'shape' is ", jsonTypeName(*shapeIt), ", not an array");
  }
  int64_t numel = 1;
  bool numelOverflows = false;
  for (size_t i = 0; i < shapeIt->size(); ++i) {
    const Json &dimValue = (*shapeIt)[i];
    std::optional<int64_t> dim = nonNegativeInt64(dimValue);
    if (!dim) {
      if (dimValue.is_number_integer() && !dimValue.is_number_unsigned()) {
        return formatError(where, ": shape dimension ", i, " is negative (",
                           dimValue.get<int64_t>(), ")");
      }
      if (dimValue.is_number_unsigned()) {
        return formatError(where, ": shape dimension ", i, " (", dimValue.get<uint64_t>(),
                           ") does not fit in int64");
      }
      return formatError(where, ": shape dimension ", i, " is ", jsonTypeName(dimValue),
                         ", not a non-negative integer");
    }
    parsed.shape.push_back(*dim);
    // Once a zero dimension is seen the product is 0 whatever follows; multiplying on would only
    // report overflow for a shape that holds no elements.
    if (!numelOverflows && __builtin_mul_overflow(numel, *dim, &numel)) {
      numelOverflows = true;
    }
  }
  bool hasZeroDim = std::find(parsed.shape.begin(), parsed.shape.end(), 0) != parsed.shape.end();
  if (hasZeroDim) {
    numel = 0;
  } else if (numelOverflows) {
    return formatError(where, ": shape ", shapeText(parsed.shape),
                       " has more elements than int64 can count (overflow)");
  }
  uint64_t neededBytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtypeSize(parsed.dtype), &neededBytes)) {
    return formatError(where, ": shape ", shapeText(parsed.shape), " of ", dtypeText,
                       " needs more bytes than uint64 can count (overflow)");
  }

  auto offsetsIt = entry.find("data_offsets");
  if (offsetsIt == entry.end()) {
    return formatError(where, ": missing field 'data_offsets'");
  }
  if (!offsetsIt->is_array() || offsetsIt->size() != 2) {
    return formatError(where, ": 'data_offsets' must be an array of 2 non-negative integers, got ",
                       offsetsIt->dump());
  }
  std::optional<uint64_t> begin = nonNegativeUInt64((*offsetsIt)[0]);
  std::optional<uint64_t> end = nonNegativeUInt64((*offsetsIt)[1]);
  if (!begin || !end) {
    return formatError(where, ": 'data_offsets' must be an array of 2 non-negative integers, got ",
                       offsetsIt->dump());
  }
  parsed.begin = *begin;
  parsed.end = *end;
  if (parsed.begin > parsed.end) {
    return formatError(where, ": data_offsets [", parsed.begin, ", ", parsed.end,
                       ") begin after they end");
  }
  if (parsed.end > dataSize) {
    return formatError(where, ": data_offsets [", parsed.begin, ", ", parsed.end,
                       ") end beyond the data section, which holds ", dataSize, " bytes");
  }
  if (parsed.end - parsed.begin != neededBytes) {
    return formatError(where, ": data_offsets [", parsed.begin, ", ", parsed.end, ") hold ",
                       parsed.end - parsed.begin, " bytes but shape ", shapeText(parsed.shape),
                       " of ", dtypeText, " needs ", neededBytes);
  }
  return parsed;
}

/// What a path that is not a regular file is, for messages.
const char *fileKind(mode_t mode) {
  return S_ISDIR(mode)                    ? "a directory"
         : S_ISFIFO(mode)                 ? "a FIFO"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
         : S_ISSOCK(mode)                 ? "a socket"
                                          : "not a regular file";
}

/// A shard name from an index must stay inside the checkpoint directory.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
}

bool fileExists(const fs::path &path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

} // namespace

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += strCat(i ? ", " : "", shape[i]);
  }
  return text + "]";
}

int64_t TensorView::numel() const {
  // open() checked that the product fits, but only once a zero dimension makes it 0: a shape such
  // as [2^32, 2^32, 0] is valid and empty, and multiplying it out in order would overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    return 0;
  }
  int64_t n = 1;
  for (int64_t dim : shape) {
    n *= dim;
  }
  return n;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (mapping_) {
    ::munmap(mapping_, mappingSize_);
  }
}

const TensorView *SafeTensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::unique_ptr<SafeTensorsFile>> SafeTensorsFile::open(const fs::path &path) {
  const std::string pathText = path.string();
  // The constructor is private, so make_unique cannot reach it.
  std::unique_ptr<SafeTensorsFile> file(new SafeTensorsFile());
  file->path_ = path;

  // stat() before open(): opening a FIFO for reading blocks until a writer comes, and a device
  // never ends. O_NONBLOCK keeps a FIFO swapped in between the two from blocking the open, and
  // fstat() then refuses it.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return notFound(pathText, ": no such file");
    }
    return ioError(pathText, ": cannot stat: ", errnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    return invalidArgument(pathText, ": safetensors file is not a regular file (",
                           fileKind(st.st_mode), ")");
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      return notFound(pathText, ": no such file");
    }
    return ioError(pathText, ": cannot open: ", errnoText(err));
  }
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ioError(pathText, ": cannot stat: ", errnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument(pathText, ": safetensors file is not a regular file (",
                           fileKind(st.st_mode), ")");
  }
  const uint64_t fileSize = static_cast<uint64_t>(st.st_size);
  // mmap of length 0 fails, and a file this short cannot hold the header length anyway.
  if (fileSize < kHeaderLengthBytes) {
    ::close(fd);
    return formatError(pathText, ": file is ", fileSize, " bytes, too short for the ",
                       kHeaderLengthBytes, "-byte header length");
  }
  if (fileSize > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    return ioError(pathText, ": file is too large to map (", fileSize, " bytes)");
  }
  void *mapping = ::mmap(nullptr, static_cast<size_t>(fileSize), PROT_READ, MAP_PRIVATE, fd, 0);
  int mmapErr = errno;
  // The mapping keeps its own reference to the file.
  ::close(fd);
  if (mapping == MAP_FAILED) {
    return ioError(pathText, ": cannot mmap ", fileSize, " bytes: ", errnoText(mmapErr));
  }
  file->mapping_ = mapping;
  file->mappingSize_ = static_cast<size_t>(fileSize);
  const uint8_t *base = static_cast<const uint8_t *>(mapping);

  uint64_t headerSize = 0;
  for (uint64_t i = 0; i < kHeaderLengthBytes; ++i) {
    headerSize |= static_cast<uint64_t>(base[i]) << (8 * i);
  }
  // fileSize >= 8 here, so the subtraction cannot wrap; adding to headerSize could.
  if (headerSize > fileSize - kHeaderLengthBytes) {
    return formatError(pathText, ": header length ", headerSize, " exceeds the ",
                       fileSize - kHeaderLengthBytes, " bytes that follow it in the file");
  }
  if (headerSize > kMaxHeaderBytes) {
    return formatError(pathText, ": header length ", headerSize, " exceeds the limit of ",
                       kMaxHeaderBytes, " bytes (100 MB)");
  }
  const uint64_t dataStart = kHeaderLengthBytes + headerSize;
  const uint64_t dataSize = fileSize - dataStart;
  std::string_view headerText(reinterpret_cast<const char *>(base + kHeaderLengthBytes),
                              static_cast<size_t>(headerSize));
  ParsedJson parsedHeader = parseJson(headerText);
  const Json &header = parsedHeader.value;
  if (!parsedHeader.error.empty()) {
    return formatError(pathText, ": header ", parsedHeader.error);
  }
  if (!header.is_object()) {
    return formatError(pathText, ": header is ", jsonTypeName(header), ", not a JSON object");
  }
  if (!parsedHeader.duplicateKey.empty()) {
    return formatError(pathText, ": header repeats the key '", parsedHeader.duplicateKey, "'");
  }
  // The header is exactly headerSize bytes: one JSON object from its first byte to its last,
  // padded at the end with spaces only. JSON's own whitespace elsewhere (a leading newline, a
  // trailing tab) would let a wrong length still parse.
  if (headerText.front() != '{') {
    return formatError(pathText, ": header does not begin with '{' (its ", headerSize,
                       "-byte length may be wrong)");
  }
  const size_t lastByte = headerText.find_last_not_of(kHeaderPadding);
  if (headerText[lastByte] != '}') {
    return formatError(pathText, ": header does not end with '}' before its space padding (its ",
                       headerSize, "-byte length may be wrong)");
  }

  std::vector<ParsedEntry> entries;
  entries.reserve(header.size());
  // Header (file) order, so tensors() lists tensors as the file does.
  for (const std::string &key : parsedHeader.topLevelKeys) {
    auto valueIt = header.find(key);
    if (valueIt == header.end()) {
      return internalError(pathText, ": header key '", key,
                           "' was seen while parsing but is absent");
    }
    const Json &value = *valueIt;
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return formatError(pathText, ": '__metadata__' is ", jsonTypeName(value),
                           ", not an object");
      }
      for (const auto &[metaKey, metaValue] : value.items()) {
        if (!metaValue.is_string()) {
          return formatError(pathText, ": '__metadata__' entry '", metaKey, "' is ",
                             jsonTypeName(metaValue), ", not a string");
        }
        file->metadata_[metaKey] = metaValue.get<std::string>();
      }
      continue;
    }
    GLM_ASSIGN_OR_RETURN(ParsedEntry entry, parseEntry(strCat(pathText, ": tensor '", key, "'"),
                                                       key, value, dataSize));
    entries.push_back(std::move(entry));
  }

  // Coverage, as the reference implementation checks it: in (begin, end) order, each range
  // starts where the one before it ends, from 0 to the end of the file. A gap, an overlap or a
  // trailing byte means the offsets or the header length are wrong (a length one byte short
  // leaves a byte of padding in the data section and shifts every tensor by it).
  std::vector<const ParsedEntry *> byBegin;
  for (const ParsedEntry &entry : entries) {
    byBegin.push_back(&entry);
  }
  std::sort(byBegin.begin(), byBegin.end(), [](const ParsedEntry *a, const ParsedEntry *b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const ParsedEntry *previous = nullptr;
  for (const ParsedEntry *entry : byBegin) {
    if (entry->begin < covered) {
      return formatError(pathText, ": tensors '", previous->name, "' [", previous->begin, ", ",
                         previous->end, ") and '", entry->name, "' [", entry->begin, ", ",
                         entry->end, ") overlap");
    }
    if (entry->begin > covered) {
      return formatError(pathText, ": bytes [", covered, ", ", entry->begin,
                         ") of the data section belong to no tensor (tensor '", entry->name,
                         "' begins at ", entry->begin,
                         "); the data_offsets must cover it without gaps");
    }
    covered = entry->end;
    previous = entry;
  }
  if (covered != dataSize) {
    return formatError(pathText, ": the tensors cover ", covered, " of the ", dataSize,
                       " bytes after the ", headerSize,
                       "-byte header; the header length or the data_offsets are wrong, or the "
                       "file has trailing bytes");
  }

  file->tensors_.reserve(entries.size());
  for (ParsedEntry &entry : entries) {
    TensorView view;
    view.name = std::move(entry.name);
    view.dtype = entry.dtype;
    view.shape = std::move(entry.shape);
    view.data = base + dataStart + entry.begin;
    view.byteSize = entry.end - entry.begin;
    view.file = &file->path_;
    file->index_.emplace(view.name, file->tensors_.size());
    file->tensors_.push_back(std::move(view));
  }
  return file;
}

Expected<std::string> readConfigJson(const fs::path &path) {
  return readInputFile(path, kMaxConfigJsonBytes, path.filename().string());
}

bool Checkpoint::hasWeights(const fs::path &modelDir) {
  return fileExists(modelDir / kIndexFileName) || fileExists(modelDir / kSingleFileName);
}

const TensorView *Checkpoint::find(std::string_view name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : it->second;
}

Expected<std::unique_ptr<Checkpoint>> Checkpoint::open(const fs::path &modelDir) {
  auto checkpoint = std::make_unique<Checkpoint>();
  checkpoint->dir_ = modelDir;
  const fs::path indexPath = modelDir / kIndexFileName;
  const fs::path singlePath = modelDir / kSingleFileName;

  if (fileExists(indexPath)) {
    const std::string indexText = indexPath.string();
    GLM_ASSIGN_OR_RETURN(std::string text,
                         readInputFile(indexPath, kMaxIndexBytes, "safetensors index"));
    ParsedJson parsedIndex = parseJson(text);
    const Json &index = parsedIndex.value;
    if (!parsedIndex.error.empty()) {
      return formatError(indexText, ": ", parsedIndex.error);
    }
    if (!index.is_object()) {
      return formatError(indexText, ": is ", jsonTypeName(index), ", not a JSON object");
    }
    if (!parsedIndex.duplicateKey.empty()) {
      return formatError(indexText, ": repeats the key '", parsedIndex.duplicateKey, "'");
    }
    auto mapIt = index.find("weight_map");
    if (mapIt == index.end()) {
      return formatError(indexText, ": missing 'weight_map'");
    }
    if (!mapIt->is_object()) {
      return formatError(indexText, ": 'weight_map' is ", jsonTypeName(*mapIt), ", not an object");
    }
    if (mapIt->empty()) {
      return formatError(indexText, ": 'weight_map' lists no tensors");
    }

    // Tensor name -> shard file name, and each distinct shard opened once.
    std::map<std::string, std::string, std::less<>> weightMap;
    std::map<std::string, size_t> shardIndex;
    for (const auto &[tensor, shardValue] : mapIt->items()) {
      if (!shardValue.is_string()) {
        return formatError(indexText, ": tensor '", tensor, "' maps to ", jsonTypeName(shardValue),
                           ", not a shard file name");
      }
      const std::string &shard = shardValue.get_ref<const std::string &>();
      if (!isPlainFileName(shard)) {
        return formatError(indexText, ": tensor '", tensor, "' names shard '", shard,
                           "', which is not a plain file name in the checkpoint directory");
      }
      weightMap.emplace(tensor, shard);
      shardIndex.emplace(shard, 0);
    }
    for (auto &[shard, slot] : shardIndex) {
      fs::path shardPath = modelDir / shard;
      if (!fileExists(shardPath)) {
        return notFound(indexText, ": names shard '", shard, "', but ", shardPath.string(),
                        " does not exist");
      }
      GLM_ASSIGN_OR_RETURN(std::unique_ptr<SafeTensorsFile> file, SafeTensorsFile::open(shardPath));
      slot = checkpoint->files_.size();
      checkpoint->files_.push_back(std::move(file));
    }

    for (const auto &[tensor, shard] : weightMap) {
      const SafeTensorsFile &file = *checkpoint->files_[shardIndex.find(shard)->second];
      if (!file.find(tensor)) {
        return formatError(indexText, ": tensor '", tensor, "' is listed in shard '", shard,
                           "', but ", file.path().string(), " does not hold it");
      }
    }
    for (const auto &[shard, slot] : shardIndex) {
      const SafeTensorsFile &file = *checkpoint->files_[slot];
      for (const TensorView &view : file.tensors()) {
        auto listed = weightMap.find(view.name);
        if (listed == weightMap.end()) {
          return formatError(file.path().string(), ": tensor '", view.name, "' is not listed in ",
                             indexText);
        }
        if (listed->second != shard) {
          // The named shard holds it too (checked above), so it is stored twice.
          return formatError(file.path().string(), ": tensor '", view.name, "' is also in shard '",
                             listed->second, "' (", indexText,
                             " places it there); a tensor may appear in only one file");
        }
      }
    }
  } else if (fileExists(singlePath)) {
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<SafeTensorsFile> file, SafeTensorsFile::open(singlePath));
    checkpoint->files_.push_back(std::move(file));
  } else {
    return notFound(modelDir.string(), ": no ", kSingleFileName, " or ", kIndexFileName);
  }

  for (const auto &file : checkpoint->files_) {
    for (const TensorView &view : file->tensors()) {
      if (!checkpoint->byName_.emplace(view.name, &view).second) {
        // Unreachable after the checks above; kept so byName_ can never silently drop a tensor.
        return formatError(modelDir.string(), ": tensor '", view.name,
                           "' appears in more than one file");
      }
    }
  }
  checkpoint->sorted_.reserve(checkpoint->byName_.size());
  for (const auto &[name, view] : checkpoint->byName_) {
    checkpoint->sorted_.push_back(view);
  }
  return checkpoint;
}

} // namespace glm
