// Tests of the safetensors reader, writer and checkpoint loader, hostile files included.
#include "runtime/weights/SafeTensors.h"
#include "runtime/weights/SafeTensorsWriter.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace glm {
namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system temp dir, removed with everything in it at scope end.
class TempDir {
public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ = fs::temp_directory_path() /
            strCat("glm_safetensors_test_", ::getpid(), "_", counter++, "_", random());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const fs::path &path() const { return path_; }
  fs::path operator/(const std::string &name) const { return path_ / name; }

private:
  fs::path path_;
};

void writeBytes(const fs::path &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

/// A safetensors file built by hand: the 8-byte little-endian length as given (it may lie), then
/// `header`, then `data`.
void writeRawSafeTensors(const fs::path &path, uint64_t headerLength, const std::string &header,
                         const std::string &data) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(static_cast<char>((headerLength >> (8 * i)) & 0xFF));
  }
  bytes += header;
  bytes += data;
  writeBytes(path, bytes);
}

/// The common case: a truthful length for `header`, and `dataSize` bytes of data.
void writeHeaderFile(const fs::path &path, const std::string &header, size_t dataSize) {
  writeRawSafeTensors(path, header.size(), header, std::string(dataSize, '\x5a'));
}

std::string readBytes(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Asserts that `status` failed and its message names `file` and contains every one of `parts`.
void expectError(const Status &status, const std::string &file,
                 std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(status.ok()) << "expected an error mentioning " << file;
  const std::string &message = status.message();
  EXPECT_NE(message.find(file), std::string::npos) << "message lacks '" << file << "': " << message;
  for (std::string_view part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "message lacks '" << part << "': " << message;
  }
}

void expectOpenFails(const fs::path &path, std::initializer_list<std::string_view> parts) {
  auto file = SafeTensorsFile::open(path);
  expectError(file.status(), path.filename().string(), parts);
}

void expectCheckpointFails(const fs::path &dir, const std::string &file,
                           std::initializer_list<std::string_view> parts) {
  auto checkpoint = Checkpoint::open(dir);
  expectError(checkpoint.status(), file, parts);
}

/// Deterministic contents that differ per tensor, so a mixed-up range shows as a mismatch.
std::vector<uint8_t> patternBytes(const std::string &name, uint64_t size) {
  std::vector<uint8_t> bytes(size);
  uint8_t seed = static_cast<uint8_t>(std::hash<std::string>()(name));
  for (uint64_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 8));
  }
  return bytes;
}

TensorSpec patternSpec(const std::string &name, DType dtype, std::vector<int64_t> shape) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = dtype;
  spec.shape = std::move(shape);
  spec.fill = [name](std::span<uint8_t> out) {
    std::vector<uint8_t> bytes = patternBytes(name, out.size());
    std::memcpy(out.data(), bytes.data(), bytes.size());
  };
  return spec;
}

void expectMatches(const TensorView &view, const TensorSpec &spec) {
  EXPECT_EQ(view.name, spec.name);
  EXPECT_EQ(view.dtype, spec.dtype) << spec.name;
  EXPECT_EQ(view.shape, spec.shape) << spec.name;
  ASSERT_EQ(view.byteSize, spec.byteSize()) << spec.name;
  std::vector<uint8_t> expected = patternBytes(spec.name, spec.byteSize());
  EXPECT_TRUE(std::equal(view.bytes().begin(), view.bytes().end(), expected.begin()))
      << spec.name << " bytes differ";
}

const std::vector<DType> kAllDTypes = {DType::BF16, DType::F16, DType::F32, DType::F8_E4M3,
                                       DType::I8,   DType::I16, DType::I32, DType::I64,
                                       DType::U8,   DType::BOOL};

TEST(DTypeTest, SizesNamesAndKinds) {
  const std::vector<size_t> sizes = {2, 2, 4, 1, 1, 2, 4, 8, 1, 1};
  const std::vector<std::string_view> names = {"BF16", "F16", "F32", "F8_E4M3", "I8",
                                               "I16",  "I32", "I64", "U8",      "BOOL"};
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    EXPECT_EQ(dtypeSize(kAllDTypes[i]), sizes[i]) << names[i];
    EXPECT_EQ(dtypeName(kAllDTypes[i]), names[i]);
    EXPECT_EQ(parseDType(names[i]), kAllDTypes[i]);
  }
  EXPECT_TRUE(isFloatingPoint(DType::BF16));
  EXPECT_TRUE(isFloatingPoint(DType::F8_E4M3));
  EXPECT_FALSE(isFloatingPoint(DType::I32));
  EXPECT_FALSE(isFloatingPoint(DType::BOOL));
  EXPECT_EQ(parseDType("F7"), std::nullopt);
  EXPECT_EQ(parseDType("bf16"), std::nullopt);
  EXPECT_EQ(parseDType(""), std::nullopt);
}

TEST(SafeTensorsTest, SingleFileRoundTripKeepsOrderBytesAndMetadata) {
  TempDir dir;
  std::vector<TensorSpec> specs;
  // One tensor per dtype, with odd sizes so the data section is not naturally aligned.
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    specs.push_back(patternSpec(strCat("z.layer", i, ".", dtypeName(kAllDTypes[i])), kAllDTypes[i],
                                {3, static_cast<int64_t>(i + 1)}));
  }
  specs.push_back(patternSpec("a.scalar", DType::F32, {}));
  specs.push_back(patternSpec("m.empty", DType::BF16, {0, 7}));
  specs.push_back(patternSpec("b.big", DType::BF16, {64, 33}));
  fs::path path = dir / "weights.safetensors";
  ASSERT_TRUE(writeSafeTensors(path, specs, {{"format", "pt"}, {"note", "ünïcode"}}).ok());
  EXPECT_FALSE(fs::exists(dir / "weights.safetensors.tmp"));

  // The data section starts 8-byte aligned.
  std::string raw = readBytes(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t headerLength = 0;
  for (int i = 0; i < 8; ++i) {
    headerLength |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  }
  EXPECT_EQ((8 + headerLength) % 8, 0u);

  auto file = SafeTensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().toString();
  const auto &tensors = (*file)->tensors();
  ASSERT_EQ(tensors.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    // Header order is the order given to the writer, not sorted.
    expectMatches(tensors[i], specs[i]);
    EXPECT_EQ(tensors[i].file, &(*file)->path());
  }
  EXPECT_EQ(tensors[kAllDTypes.size()].numel(), 1);
  EXPECT_EQ(tensors[kAllDTypes.size() + 1].numel(), 0);
  EXPECT_EQ(tensors[kAllDTypes.size() + 2].numel(), 64 * 33);
  const TensorView *big = (*file)->find("b.big");
  ASSERT_NE(big, nullptr);
  expectMatches(*big, specs.back());
  EXPECT_EQ((*file)->find("absent"), nullptr);
  std::map<std::string, std::string> expectedMetadata = {{"format", "pt"}, {"note", "ünïcode"}};
  EXPECT_EQ((*file)->metadata(), expectedMetadata);
}

TEST(SafeTensorsTest, EmptyFileListAndNoMetadata) {
  TempDir dir;
  fs::path path = dir / "empty.safetensors";
  ASSERT_TRUE(writeSafeTensors(path, {}).ok());
  auto file = SafeTensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().toString();
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafeTensorsTest, WriterRejectsBadSpecsAndLeavesNoFiles) {
  TempDir dir;
  fs::path path = dir / "bad.safetensors";
  std::vector<TensorSpec> duplicate = {patternSpec("w", DType::F32, {2}),
                                       patternSpec("w", DType::F32, {2})};
  expectError(writeSafeTensors(path, duplicate), "bad.safetensors", {"'w'", "twice"});
  std::vector<TensorSpec> negative = {patternSpec("neg", DType::F32, {2, -1})};
  expectError(writeSafeTensors(path, negative), "bad.safetensors", {"'neg'", "negative"});
  std::vector<TensorSpec> reserved = {patternSpec("__metadata__", DType::F32, {1})};
  expectError(writeSafeTensors(path, reserved), "bad.safetensors", {"reserved"});
  std::vector<TensorSpec> badUtf8 = {patternSpec("bad\xff", DType::F32, {1})};
  expectError(writeSafeTensors(path, badUtf8), "bad.safetensors", {"UTF-8"});
  EXPECT_TRUE(fs::is_empty(dir.path()));

  fs::path missingDir = dir / "no_such_dir" / "x.safetensors";
  std::vector<TensorSpec> good = {patternSpec("w", DType::F32, {2})};
  expectError(writeSafeTensors(missingDir, good), "x.safetensors", {"cannot create"});
}

TEST(SafeTensorsTest, CheckpointSingleFile) {
  TempDir dir;
  std::vector<TensorSpec> specs = {patternSpec("model.layers.1.w", DType::BF16, {4, 8}),
                                   patternSpec("lm_head.weight", DType::F32, {8, 3}),
                                   patternSpec("model.embed.weight", DType::I8, {5})};
  uint64_t reported = 0;
  int calls = 0;
  ASSERT_TRUE(writeCheckpointShards(dir.path(), specs, 1 << 20, [&](uint64_t bytes) {
                reported += bytes;
                ++calls;
              }).ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(reported, 64u + 96u + 5u);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(Checkpoint::hasWeights(dir.path()));

  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
  EXPECT_EQ((*checkpoint)->directory(), dir.path());
  ASSERT_EQ((*checkpoint)->files().size(), 1u);
  EXPECT_EQ((*checkpoint)->files()[0]->metadata().at("format"), "pt");
  const auto &tensors = (*checkpoint)->tensors();
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0]->name, "lm_head.weight");
  EXPECT_EQ(tensors[1]->name, "model.embed.weight");
  EXPECT_EQ(tensors[2]->name, "model.layers.1.w");
  for (const TensorSpec &spec : specs) {
    const TensorView *view = (*checkpoint)->find(spec.name);
    ASSERT_NE(view, nullptr) << spec.name;
    expectMatches(*view, spec);
  }
  EXPECT_EQ((*checkpoint)->find("nope"), nullptr);
}

TEST(SafeTensorsTest, CheckpointShardedRoundTrip) {
  TempDir dir;
  // Limit 100 bytes: [a 40, b 40] [c 240 alone, over the limit] [d 8, e 0, f 64].
  std::vector<TensorSpec> specs = {
      patternSpec("t.a", DType::F32, {10}),   patternSpec("t.b", DType::BF16, {20}),
      patternSpec("t.c", DType::I64, {30}),   patternSpec("s.d", DType::U8, {8}),
      patternSpec("s.e", DType::F16, {0, 3}), patternSpec("s.f", DType::I32, {4, 4})};
  uint64_t reported = 0;
  ASSERT_TRUE(
      writeCheckpointShards(dir.path(), specs, 100, [&](uint64_t b) { reported += b; }).ok());
  EXPECT_EQ(reported, 40u + 40u + 240u + 8u + 0u + 64u);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  for (const char *name : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir / name)) << name;
    EXPECT_FALSE(fs::exists(dir / (std::string(name) + ".tmp"))) << name;
  }

  std::string indexText = readBytes(dir / "model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(indexText, nullptr, false);
  ASSERT_TRUE(index.is_object()) << indexText;
  EXPECT_EQ(index["metadata"]["total_size"], 392);
  nlohmann::json expectedMap = {
      {"t.a", "model-00001-of-00003.safetensors"}, {"t.b", "model-00001-of-00003.safetensors"},
      {"t.c", "model-00002-of-00003.safetensors"}, {"s.d", "model-00003-of-00003.safetensors"},
      {"s.e", "model-00003-of-00003.safetensors"}, {"s.f", "model-00003-of-00003.safetensors"}};
  EXPECT_EQ(index["weight_map"], expectedMap);
  // Pretty-printed with the names in order, as the Hub writes it.
  EXPECT_NE(indexText.find("\n  \"metadata\": {\n    \"total_size\": 392\n  }"), std::string::npos)
      << indexText;
  EXPECT_LT(indexText.find("\"s.f\""), indexText.find("\"t.a\""));

  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
  EXPECT_EQ((*checkpoint)->files().size(), 3u);
  for (const auto &file : (*checkpoint)->files()) {
    EXPECT_EQ(file->metadata().at("format"), "pt");
  }
  const auto &tensors = (*checkpoint)->tensors();
  ASSERT_EQ(tensors.size(), specs.size());
  for (size_t i = 1; i < tensors.size(); ++i) {
    EXPECT_LT(tensors[i - 1]->name, tensors[i]->name);
  }
  for (const TensorSpec &spec : specs) {
    const TensorView *view = (*checkpoint)->find(spec.name);
    ASSERT_NE(view, nullptr) << spec.name;
    expectMatches(*view, spec);
  }
  EXPECT_EQ((*checkpoint)->find("t.c")->file->filename().string(),
            "model-00002-of-00003.safetensors");

  // Rewriting the same directory as a single file drops the stale index, so the new file is read.
  std::vector<TensorSpec> small = {patternSpec("only", DType::F32, {2})};
  ASSERT_TRUE(writeCheckpointShards(dir.path(), small, 1000).ok());
  auto rewritten = Checkpoint::open(dir.path());
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().toString();
  ASSERT_EQ((*rewritten)->tensors().size(), 1u);
  EXPECT_EQ((*rewritten)->tensors()[0]->name, "only");
}

TEST(SafeTensorsTest, ShardWriterRejectsNamesRepeatedAcrossShards) {
  TempDir dir;
  std::vector<TensorSpec> specs = {patternSpec("w", DType::F32, {100}),
                                   patternSpec("w", DType::F32, {100})};
  expectError(writeCheckpointShards(dir.path(), specs, 16), dir.path().filename().string(),
              {"'w'", "twice"});
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SafeTensorsTest, CheckpointWithoutWeights) {
  TempDir dir;
  EXPECT_FALSE(Checkpoint::hasWeights(dir.path()));
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::NotFound);
  expectError(checkpoint.status(), dir.path().string(),
              {"no model.safetensors or model.safetensors.index.json"});
}

TEST(SafeTensorsTest, OpenMissingFile) {
  TempDir dir;
  auto file = SafeTensorsFile::open(dir / "absent.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::NotFound);
  expectError(file.status(), "absent.safetensors", {"no such file"});
}

TEST(SafeTensorsTest, ReadsHubWrittenFixture) {
  // Written by the Python safetensors library, not by our writer: guards format compatibility.
  fs::path dir = fs::path(GLM_FIXTURES_DIR) / "glm53-tiny";
  if (!fs::exists(dir / "model.safetensors")) {
    GTEST_SKIP() << "no fixture at " << dir;
  }
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().toString();
  ASSERT_FALSE((*checkpoint)->tensors().empty());
  for (const TensorView *view : (*checkpoint)->tensors()) {
    EXPECT_EQ(static_cast<uint64_t>(view->numel()) * dtypeSize(view->dtype), view->byteSize)
        << view->name;
  }
  auto golden = SafeTensorsFile::open(dir / "golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().toString();
  EXPECT_FALSE((*golden)->tensors().empty());
}

// --- Hostile single files: each must fail in open(), with the file and the problem named. ---

TEST(SafeTensorsHostileTest, EmptyFile) {
  TempDir dir;
  fs::path path = dir / "empty.safetensors";
  writeBytes(path, "");
  expectOpenFails(path, {"0 bytes", "too short"});
}

TEST(SafeTensorsHostileTest, SevenByteFile) {
  TempDir dir;
  fs::path path = dir / "seven.safetensors";
  writeBytes(path, std::string("\x02\0\0\0\0\0\0", 7));
  expectOpenFails(path, {"7 bytes", "too short"});
}

TEST(SafeTensorsHostileTest, HeaderLengthBeyondFile) {
  TempDir dir;
  fs::path path = dir / "long.safetensors";
  writeRawSafeTensors(path, 1000, "{}", "");
  expectOpenFails(path, {"header length 1000", "exceeds the 2 bytes"});
}

TEST(SafeTensorsHostileTest, HeaderLengthMaxUInt64) {
  TempDir dir;
  fs::path path = dir / "huge.safetensors";
  // 8 + N wraps to 7 here; a check written as 8 + N <= size would pass.
  writeRawSafeTensors(path, ~uint64_t{0}, "{}", std::string(32, ' '));
  expectOpenFails(path, {"header length 18446744073709551615", "exceeds"});
}

TEST(SafeTensorsHostileTest, HeaderLengthOverLimit) {
  TempDir dir;
  fs::path path = dir / "capped.safetensors";
  constexpr uint64_t kLength = 101ull * 1024 * 1024;
  writeRawSafeTensors(path, kLength, "{}", "");
  // Sparse, so the test costs no real disk: the length fits the file but exceeds the cap.
  fs::resize_file(path, 8 + kLength + 16);
  expectOpenFails(path, {"exceeds the limit", "100 MB"});
}

TEST(SafeTensorsHostileTest, HeaderNotJson) {
  TempDir dir;
  fs::path path = dir / "notjson.safetensors";
  writeHeaderFile(path, "{\"a\": {\"dtype\": \"F32\",", 16);
  expectOpenFails(path, {"not valid JSON"});
}

TEST(SafeTensorsHostileTest, HeaderNestedTooDeep) {
  TempDir dir;
  fs::path path = dir / "deep.safetensors";
  // Refused before a DOM is built, so depth cannot be used to exhaust memory or stack.
  writeHeaderFile(path, std::string(100000, '[') + std::string(100000, ']'), 0);
  expectOpenFails(path, {"nests deeper than 16 levels"});
}

TEST(SafeTensorsHostileTest, HeaderNotObject) {
  TempDir dir;
  fs::path path = dir / "array.safetensors";
  writeHeaderFile(path, "[1, 2, 3]", 16);
  expectOpenFails(path, {"header is an array, not a JSON object"});
}

TEST(SafeTensorsHostileTest, EntryNotObject) {
  TempDir dir;
  fs::path path = dir / "entry.safetensors";
  writeHeaderFile(path, R"({"w": [1, 2]})", 16);
  expectOpenFails(path, {"tensor 'w'", "not an object"});
}

TEST(SafeTensorsHostileTest, MissingField) {
  TempDir dir;
  fs::path path = dir / "missing.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "missing field 'shape'"});
}

TEST(SafeTensorsHostileTest, DTypeNotString) {
  TempDir dir;
  fs::path path = dir / "dtype_type.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "'dtype' is an integer, not a string"});
}

TEST(SafeTensorsHostileTest, UnknownDType) {
  TempDir dir;
  fs::path path = dir / "f7.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "unknown dtype 'F7'"});
}

TEST(SafeTensorsHostileTest, UnknownField) {
  TempDir dir;
  fs::path path = dir / "extra.safetensors";
  writeHeaderFile(
      path, R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "stride": [1]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "unknown field 'stride'"});
}

TEST(SafeTensorsHostileTest, NegativeDimension) {
  TempDir dir;
  fs::path path = dir / "negdim.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 8]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "shape dimension 1 is negative (-3)"});
}

TEST(SafeTensorsHostileTest, NonIntegerDimension) {
  TempDir dir;
  fs::path path = dir / "floatdim.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "shape dimension 0 is a non-integer number"});
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "shape dimension 0 is a string"});
}

TEST(SafeTensorsHostileTest, ShapeNotArray) {
  TempDir dir;
  fs::path path = dir / "shape.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "'shape' is an integer, not an array"});
}

TEST(SafeTensorsHostileTest, ShapeProductOverflows) {
  TempDir dir;
  fs::path path = dir / "overflow.safetensors";
  // 2^32 * 2^32 = 2^64 wraps to 0 in 64 bits, which would "match" an empty range.
  writeHeaderFile(
      path, R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
      16);
  expectOpenFails(path, {"tensor 'w'", "overflow"});
  // Fits int64 as an element count but not as a byte count.
  writeHeaderFile(
      path, R"({"w": {"dtype": "I64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})",
      16);
  expectOpenFails(path, {"tensor 'w'", "overflow"});
  // A dimension beyond int64.
  writeHeaderFile(
      path, R"({"w": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 0]}})",
      16);
  expectOpenFails(path, {"tensor 'w'", "does not fit in int64"});
}

TEST(SafeTensorsHostileTest, DataOffsetsNotTwoInts) {
  TempDir dir;
  fs::path path = dir / "offsets.safetensors";
  for (const char *offsets : {"[0]", "[0, 4, 8]", "[0, \"4\"]", "[-4, 0]", "[0, 4.0]", "4"}) {
    writeHeaderFile(
        path, strCat(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": )", offsets, "}}"),
        16);
    expectOpenFails(path, {"tensor 'w'", "'data_offsets' must be an array of 2 non-negative"});
  }
}

TEST(SafeTensorsHostileTest, BeginAfterEnd) {
  TempDir dir;
  fs::path path = dir / "reversed.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "data_offsets [8, 4) begin after they end"});
}

TEST(SafeTensorsHostileTest, EndBeyondDataSection) {
  TempDir dir;
  fs::path path = dir / "beyond.safetensors";
  writeHeaderFile(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [4, 20]}})", 16);
  expectOpenFails(path, {"tensor 'w'", "end beyond the data section, which holds 16 bytes"});
  // Offsets near 2^64: end - begin matches, but the range is nowhere in the file.
  writeHeaderFile(path,
                  R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": )"
                  R"([18446744073709551610, 18446744073709551614]}})",
                  16);
  expectOpenFails(path, {"tensor 'w'", "end beyond the data section"});
}

TEST(SafeTensorsHostileTest, LyingHeaderByteLength) {
  TempDir dir;
  fs::path path = dir / "model.safetensors";
  writeHeaderFile(path,
                  R"({"lm_head.weight": {"dtype": "BF16", "shape": [10, 10], )"
                  R"("data_offsets": [0, 100]}})",
                  200);
  expectOpenFails(path, {"model.safetensors: tensor 'lm_head.weight': data_offsets [0, 100) hold "
                         "100 bytes but shape [10, 10] of BF16 needs 200"});
}

TEST(SafeTensorsHostileTest, OverlappingRanges) {
  TempDir dir;
  fs::path path = dir / "overlap.safetensors";
  writeHeaderFile(path,
                  R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})",
                  32);
  expectOpenFails(path, {"'a' [0, 16)", "'b' [12, 20)", "overlap"});
  // An empty range inside another is out of order too, as the reference implementation says.
  writeHeaderFile(path,
                  R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                  R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
                  16);
  expectOpenFails(path, {"'a' [0, 16)", "'e' [8, 8)", "overlap"});
  // A range nested inside an earlier, longer one.
  writeHeaderFile(path,
                  R"({"outer": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},)"
                  R"( "mid": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},)"
                  R"( "inner": {"dtype": "U8", "shape": [2], "data_offsets": [8, 10]}})",
                  32);
  expectOpenFails(path, {"'outer'", "overlap"});
  // The same range twice.
  writeHeaderFile(path,
                  R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                  R"( "y": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                  32);
  expectOpenFails(path, {"'x'", "'y'", "overlap"});
}

TEST(SafeTensorsHostileTest, AdjacentAndEmptyRangesAreFine) {
  TempDir dir;
  fs::path path = dir / "adjacent.safetensors";
  // Empty ranges sit where the ranges before them end, in any header order.
  writeHeaderFile(path,
                  R"({"b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},)"
                  R"( "e": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},)"
                  R"( "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                  R"( "z": {"dtype": "U8", "shape": [0], "data_offsets": [8, 8]}})",
                  8);
  auto file = SafeTensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().toString();
  ASSERT_EQ((*file)->tensors().size(), 4u);
  // Header order, not name order.
  EXPECT_EQ((*file)->tensors()[0].name, "b");
  EXPECT_EQ((*file)->tensors()[1].name, "e");
  EXPECT_EQ((*file)->tensors()[2].name, "a");
  EXPECT_EQ((*file)->tensors()[3].name, "z");
}

TEST(SafeTensorsHostileTest, RangesMustCoverTheDataSectionExactly) {
  TempDir dir;
  fs::path path = dir / "cover.safetensors";
  // A gap between two tensors.
  writeHeaderFile(path,
                  R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                  R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})",
                  12);
  expectOpenFails(path, {"bytes [4, 8) of the data section belong to no tensor", "'b'"});
  // Bytes after the last tensor.
  writeHeaderFile(path, R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 16);
  expectOpenFails(path, {"the tensors cover 4 of the 16 bytes after the"});
  // No tensor at all, but data.
  writeHeaderFile(path, R"({"__metadata__": {"format": "pt"}})", 1);
  expectOpenFails(path, {"the tensors cover 0 of the 1 bytes"});
}

TEST(SafeTensorsHostileTest, HeaderLengthOneByteShort) {
  TempDir dir;
  fs::path path = dir / "model.safetensors";
  // As the reference writer lays it out: the header padded with spaces, then the data.
  const std::string header =
      R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}})" + std::string(3, ' ');
  const std::string data(12, '\x5a');
  writeRawSafeTensors(path, header.size(), header, data);
  ASSERT_TRUE(SafeTensorsFile::open(path).ok());
  // One byte short: the header still parses (it loses a space of padding), but the data section
  // gains that byte and every tensor would be read one byte early.
  writeRawSafeTensors(path, header.size() - 1, header, data);
  expectOpenFails(path, {"model.safetensors: the tensors cover 12 of the 13 bytes after the",
                         "the header length or the data_offsets are wrong"});
  // One byte long: the header ends inside the data.
  writeRawSafeTensors(path, header.size() + 1, header, data);
  expectOpenFails(path, {"model.safetensors: header"});
}

TEST(SafeTensorsHostileTest, HeaderFramedBySpacesOnly) {
  TempDir dir;
  fs::path path = dir / "framing.safetensors";
  const std::string entry = R"("a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})";
  writeHeaderFile(path, "{" + entry + "}    ", 4);
  EXPECT_TRUE(SafeTensorsFile::open(path).ok()) << "space padding is the format's";
  writeHeaderFile(path, " {" + entry + "}", 4);
  expectOpenFails(path, {"header does not begin with '{'"});
  writeHeaderFile(path, "{" + entry + "}\n\t", 4);
  expectOpenFails(path, {"header does not end with '}' before its space padding"});
}

TEST(SafeTensorsHostileTest, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  // Opening a FIFO for reading would wait for a writer forever; it is refused by name first.
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  expectOpenFails(dir / "model.safetensors", {"not a regular file (a FIFO)"});
  EXPECT_TRUE(Checkpoint::hasWeights(dir.path()));
  expectCheckpointFails(dir.path(), "model.safetensors", {"not a regular file (a FIFO)"});
  // The index, and a shard it names.
  ASSERT_EQ(::mkfifo((dir / "model.safetensors.index.json").c_str(), 0600), 0);
  expectCheckpointFails(dir.path(), "model.safetensors.index.json",
                        {"safetensors index is not a regular file (a FIFO)"});
  fs::remove(dir / "model.safetensors.index.json");
  writeBytes(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "model.safetensors"}})");
  expectCheckpointFails(dir.path(), "model.safetensors", {"not a regular file (a FIFO)"});
  // A directory in its place.
  fs::remove(dir / "model.safetensors");
  fs::create_directory(dir / "model.safetensors");
  expectCheckpointFails(dir.path(), "model.safetensors", {"not a regular file (a directory)"});
}

TEST(SafeTensorsHostileTest, MetadataNotStrings) {
  TempDir dir;
  fs::path path = dir / "meta.safetensors";
  writeHeaderFile(path, R"({"__metadata__": {"format": "pt", "version": 3}})", 0);
  expectOpenFails(path, {"'__metadata__' entry 'version' is an integer, not a string"});
  writeHeaderFile(path, R"({"__metadata__": ["pt"]})", 0);
  expectOpenFails(path, {"'__metadata__' is an array, not an object"});
}

TEST(SafeTensorsHostileTest, DuplicateTensorName) {
  TempDir dir;
  fs::path path = dir / "dup.safetensors";
  writeHeaderFile(path,
                  R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                  R"( "w": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                  8);
  expectOpenFails(path, {"repeats the key 'w'"});
}

// --- Hostile checkpoint directories. ---

/// A shard named `file` in `dir` holding each of `names` (4 U8 bytes each).
void writeShard(const TempDir &dir, const std::string &file, std::vector<std::string> names) {
  std::vector<TensorSpec> specs;
  for (const std::string &name : names) {
    specs.push_back(patternSpec(name, DType::U8, {4}));
  }
  ASSERT_TRUE(writeSafeTensors(dir / file, specs).ok());
}

void writeIndex(const TempDir &dir, const nlohmann::json &weightMap) {
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weightMap}};
  writeBytes(dir / "model.safetensors.index.json", index.dump(2));
}

TEST(CheckpointHostileTest, IndexNamesMissingShard) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x"});
  writeIndex(dir, {{"x", "a.safetensors"}, {"y", "gone.safetensors"}});
  auto checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::NotFound);
  expectCheckpointFails(dir.path(), "model.safetensors.index.json",
                        {"'gone.safetensors'", "does not exist"});
}

TEST(CheckpointHostileTest, ShardPathEscapesDirectory) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x"});
  for (const char *shard : {"../a.safetensors", "/etc/passwd", "..", "sub/a.safetensors", ""}) {
    writeIndex(dir, {{"x", shard}});
    expectCheckpointFails(dir.path(), "model.safetensors.index.json",
                          {strCat("'", shard, "'"), "not a plain file name"});
  }
}

TEST(CheckpointHostileTest, IndexMalformed) {
  TempDir dir;
  writeBytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  expectCheckpointFails(dir.path(), "model.safetensors.index.json", {"not valid JSON"});
  writeBytes(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
  expectCheckpointFails(dir.path(), "model.safetensors.index.json", {"missing 'weight_map'"});
  writeBytes(dir / "model.safetensors.index.json", "{\"weight_map\": {\"x\": 3}}");
  expectCheckpointFails(dir.path(), "model.safetensors.index.json",
                        {"tensor 'x'", "not a shard file name"});
}

TEST(CheckpointHostileTest, ListedTensorAbsentFromShard) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x"});
  writeIndex(dir, {{"x", "a.safetensors"}, {"y", "a.safetensors"}});
  expectCheckpointFails(dir.path(), "a.safetensors",
                        {"tensor 'y'", "listed in shard 'a.safetensors'", "does not hold it"});
}

TEST(CheckpointHostileTest, ShardTensorNotInIndex) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x", "stowaway"});
  writeIndex(dir, {{"x", "a.safetensors"}});
  expectCheckpointFails(dir.path(), "a.safetensors",
                        {"tensor 'stowaway'", "not listed in", "model.safetensors.index.json"});
}

TEST(CheckpointHostileTest, SameTensorInTwoShards) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x", "shared"});
  writeShard(dir, "b.safetensors", {"y", "shared"});
  // Whichever shard the index names, the other one also holds the tensor.
  for (const char *owner : {"a.safetensors", "b.safetensors"}) {
    writeIndex(dir, {{"x", "a.safetensors"}, {"y", "b.safetensors"}, {"shared", owner}});
    expectCheckpointFails(dir.path(), "b.safetensors",
                          {"tensor 'shared'", "a.safetensors", "only one file"});
  }
}

TEST(CheckpointHostileTest, BadShardFailsWholeCheckpoint) {
  TempDir dir;
  writeShard(dir, "a.safetensors", {"x"});
  writeBytes(dir / "b.safetensors", "short");
  writeIndex(dir, {{"x", "a.safetensors"}, {"y", "b.safetensors"}});
  expectCheckpointFails(dir.path(), "b.safetensors", {"too short"});
}

} // namespace
} // namespace glm
