// The tiny fixture's f32 CPU plan, compiled by glmc for a test (made-up prompts for it:
// tests/unit/support/Requests.h): what the engine-level tests of kept states and speculative
// decoding share.
#pragma once

#include "runtime/engine/CpuEngine.h"
#include "tests/unit/support/Requests.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace glm::runtime::testing {

inline const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// The tiny fixture's (or `model`'s) f32 CPU plan compiled with `options` (a file removed with
/// the object).
class TinyPlan {
public:
  explicit TinyPlan(const std::string &options, const std::filesystem::path &model = kTiny) {
    static int serial = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("tiny_plan_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) + ".glmp");
    const std::string command = std::string(GLM_GLMC_PATH) + " compile " + model.string() + " -o " +
                                path_.string() + " --target cpu --precision f32 " + options +
                                " 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    checkpoint_ = std::move(Checkpoint::open(model)).value();
  }
  ~TinyPlan() { std::filesystem::remove(path_); }
  std::unique_ptr<CpuEngine> engine(CpuEngineOptions options = {}) const {
    Expected<std::unique_ptr<CpuEngine>> engine =
        CpuEngine::create(std::move(PlanFile::open(path_)).value(), *checkpoint_, options);
    EXPECT_TRUE(engine.ok()) << engine.status().toString();
    return engine.ok() ? std::move(engine).value() : nullptr;
  }
  const std::filesystem::path &path() const { return path_; }
  const Checkpoint &checkpoint() const { return *checkpoint_; }

private:
  std::filesystem::path path_;
  std::unique_ptr<Checkpoint> checkpoint_;
};

} // namespace glm::runtime::testing
