// Tests of the bounded reads of untrusted files and JSON (base/InputFile.h).
#include "base/InputFile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace glm {
namespace {

class InputFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("glm-input-file-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string &name, const std::string &text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(InputFileTest, ReadsARegularFileWithinItsLimit) {
  const auto text = readInputFile(write("a.json", "{\"x\": 1}"), 8, "config");
  ASSERT_TRUE(text.ok()) << text.status().toString();
  EXPECT_EQ(*text, "{\"x\": 1}");
}

TEST_F(InputFileTest, RefusesAFileLargerThanItsLimitByNameAndSize) {
  const auto text = readInputFile(write("big.json", std::string(9, ' ')), 8, "config");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("config is 9 bytes, more than the 8"), std::string::npos)
      << text.status().message();
}

TEST_F(InputFileTest, RefusesAFifoWithoutBlocking) {
  const std::filesystem::path fifo = dir_ / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto text = readInputFile(fifo, 1 << 20, "checkpoint");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("is not a regular file (a FIFO)"), std::string::npos)
      << text.status().message();
}

TEST_F(InputFileTest, RefusesADirectoryAndAMissingFile) {
  const auto directory = readInputFile(dir_, 1 << 20, "config");
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("a directory"), std::string::npos);
  const auto missing = readInputFile(dir_ / "absent.json", 1 << 20, "config");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
}

TEST_F(InputFileTest, FollowsSymlinksToWhatTheyName) {
  const std::filesystem::path link = dir_ / "urandom.json";
  std::filesystem::create_symlink("/dev/urandom", link);
  const auto text = readInputFile(link, 1 << 20, "config");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("a device"), std::string::npos) << text.status().message();
}

TEST(UntrustedJson, RefusesNestingDeeperThanItsLimitBeforeBuildingIt) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto parsed = parseUntrustedJson<nlohmann::json>(deep, "tokenizer.json", 64);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("tokenizer.json: nests deeper than 64 levels"),
            std::string::npos)
      << parsed.status().message();
  const auto shallow = parseUntrustedJson<nlohmann::ordered_json>("{\"b\":1,\"a\":[2]}", "x", 2);
  ASSERT_TRUE(shallow.ok()) << shallow.status().toString();
  EXPECT_EQ(shallow->begin().key(), "b");
  const auto broken = parseUntrustedJson<nlohmann::json>("{\"a\":", "x", 8);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("not valid JSON"), std::string::npos);
}

} // namespace
} // namespace glm
