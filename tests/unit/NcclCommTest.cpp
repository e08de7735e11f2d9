// NcclComm where NCCL or a GPU may be missing: creation fails with an Unavailable error that names
// what is missing, without crashing or hanging the other ranks; the GPU behaviour is in
// tests/gpu/NcclCommGpuTest.cpp.
#include "runtime/comm/NcclComm.h"
#include "runtime/comm/LoopbackComm.h"
#include "runtime/cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace glm::runtime {
namespace {

/// Whether `message` contains `part`, printing the message when not.
::testing::AssertionResult contains(const std::string &message, const std::string &part) {
  if (message.find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "\"" << message << "\" lacks \"" << part << "\"";
}

/// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) {
      old_ = old;
    }
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

/// Whether this machine has a CUDA device 0 that the driver can use.
bool haveGpu() {
  Expected<const cuda::CudaDriver *> driver = cuda::driver();
  int count = 0;
  return driver.ok() && (*driver)->cuDeviceGetCount(&count) == 0 && count > 0;
}

TEST(NcclComm, MissingLibraryIsNamed) {
  const char *path = "/nonexistent/glm-test/libnccl.so.2";
  ScopedEnv env("GLM_NCCL", path);
  Expected<int> version = ncclVersion();
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.status().code(), StatusCode::Unavailable);
  EXPECT_TRUE(contains(version.status().message(), "NCCL (/nonexistent/glm-test/libnccl.so.2"));
  EXPECT_TRUE(contains(version.status().message(), "is not installed"));

  LoopbackGroup group(1);
  std::unique_ptr<Comm> control = group.comm(0);
  Expected<std::unique_ptr<NcclComm>> comm = NcclComm::create(*control, 0);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::Unavailable);
  EXPECT_TRUE(contains(comm.status().message(), "NCCL (/nonexistent/glm-test/libnccl.so.2"));
  EXPECT_TRUE(contains(comm.status().message(), "NCCL rank 0 of 1"));
}

TEST(NcclComm, InstalledLibraryReportsItsVersion) {
  ScopedEnv env("GLM_NCCL", nullptr);
  Expected<int> version = ncclVersion();
  if (!version.ok()) {
    EXPECT_EQ(version.status().code(), StatusCode::Unavailable);
    EXPECT_TRUE(contains(version.status().message(), "NCCL (libnccl.so.2) is not installed"));
    GTEST_SKIP() << version.status().toString();
  }
  // NCCL 2.9 and later code versions as major * 10000 + minor * 100 + patch.
  EXPECT_GE(*version, 20900);
}

TEST(NcclComm, CreationWithoutNcclOrGpuIsUnavailable) {
  ScopedEnv env("GLM_NCCL", nullptr);
  LoopbackGroup group(1);
  std::unique_ptr<Comm> control = group.comm(0);
  Expected<std::unique_ptr<NcclComm>> comm = NcclComm::create(*control, 0);
  if (comm.ok()) {
    // A machine with NCCL and a GPU: world 1 works (tests/gpu checks the collectives).
    EXPECT_TRUE(haveGpu());
    EXPECT_EQ((*comm)->world(), 1);
    return;
  }
  EXPECT_EQ(comm.status().code(), StatusCode::Unavailable) << comm.status().toString();
  const std::string &message = comm.status().message();
  if (ncclVersion().ok()) {
    // NCCL is here (as on the CI machine), the GPU is not: the message says which device.
    EXPECT_FALSE(haveGpu());
    EXPECT_TRUE(contains(message, "NcclComm needs CUDA device 0"));
  } else {
    EXPECT_TRUE(contains(message, "is not installed"));
  }
}

TEST(NcclComm, NegativeDeviceIsRejected) {
  LoopbackGroup group(1);
  std::unique_ptr<Comm> control = group.comm(0);
  Expected<std::unique_ptr<NcclComm>> comm = NcclComm::create(*control, -1);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(comm.status().message(), "CUDA device -1"));
}

// Two ranks that both fail to set up agree on it over the control channel and both return,
// each with its own reason: neither waits for the other in NCCL.
TEST(NcclComm, FailingRanksDoNotWaitForEachOther) {
  if (haveGpu()) {
    GTEST_SKIP() << "device 0 exists here, so rank 1 would not fail";
  }
  LoopbackGroup group(2);
  std::unique_ptr<Comm> control0 = group.comm(0);
  std::unique_ptr<Comm> control1 = group.comm(1);
  Status status0, status1;
  std::thread rank1([&] { status1 = NcclComm::create(*control1, 0).status(); });
  status0 = NcclComm::create(*control0, -1).status();
  rank1.join();
  EXPECT_EQ(status0.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status0.message(), "NCCL rank 0 of 2"));
  EXPECT_EQ(status1.code(), StatusCode::Unavailable);
  EXPECT_TRUE(contains(status1.message(), "NCCL rank 1 of 2"));
}

} // namespace
} // namespace glm::runtime
