// NcclComm on GPUs: on one GPU (world 1, the only NCCL group one GPU allows) every collective,
// host and device pointers, gives back its input; with GLM_NCCL_WORLD=2 on a machine of two GPUs,
// two processes (this one as rank 0 on GPU 0, a re-executed copy as rank 1 on GPU 1, the NCCL id
// exchanged over TcpComm on localhost) check the sums within 1e-6 and the gathers exactly. A
// peer that takes the NCCL id and then never initialises fails rank 0's create() after the
// timeout, or at once with the watch's reason, instead of hanging in ncclCommInitRank.
#include "runtime/comm/LoopbackComm.h"
#include "runtime/comm/NcclApi.h"
#include "runtime/comm/NcclComm.h"
#include "runtime/comm/TcpComm.h"
#include "tests/gpu/support/GpuTest.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace glm::testing {
namespace {

using runtime::Comm;
using runtime::LoopbackGroup;
using runtime::NcclComm;
using runtime::TcpComm;

/// Rank `rank`'s all-reduce input: values of several magnitudes, so that rounding shows.
std::vector<float> reduceInput(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    const float mantissa = static_cast<float>(static_cast<int>(i % 97) - 48) / 7.0f;
    v[i] =
        mantissa * std::pow(10.0f, static_cast<float>(i % 5) - 2.0f) * static_cast<float>(rank + 1);
  }
  return v;
}

/// Rank `rank`'s all-gather piece: every value distinct across ranks and positions.
std::vector<float> gatherInput(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>(rank * 1000 + static_cast<int>(i)) + 0.5f;
  }
  return v;
}

/// Checks `got` against the sum over ranks of reduceInput, element by element within 1e-6 of the
/// sum of magnitudes (NCCL adds in its own order, not rank order).
void expectSums(const std::vector<float> &got, int world) {
  std::vector<double> sum(got.size(), 0.0), magnitude(got.size(), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> in = reduceInput(r, got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      sum[i] += in[i];
      magnitude[i] += std::fabs(in[i]);
    }
  }
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - sum[i]) <= 1e-6 * magnitude[i])) {
      if (++bad <= 5) {
        ADD_FAILURE() << "all-reduce element " << i << ": " << got[i] << ", expected " << sum[i];
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

/// The gathered tensor [rows, world width] (axis 1) or [world rows, width] (axis 0).
std::vector<float> expectedGather(int world, size_t rows, size_t width, int axis) {
  std::vector<float> out(static_cast<size_t>(world) * rows * width);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> piece = gatherInput(r, rows * width);
    for (size_t row = 0; row < rows; ++row) {
      float *dst = axis == 0 ? out.data() + (static_cast<size_t>(r) * rows + row) * width
                             : out.data() + (row * static_cast<size_t>(world) + r) * width;
      std::memcpy(dst, piece.data() + row * width, width * sizeof(float));
    }
  }
  return out;
}

/// Every collective, host and device pointers, on one rank of `comm`.
void runCollectives(NcclComm &comm) {
  const int rank = comm.rank(), world = comm.world();
  const size_t n = static_cast<size_t>(world);

  // Host pointers: a small and a large all-reduce (the scratch grows), gathers on both axes.
  for (size_t count : {size_t{1000}, size_t{1} << 20}) {
    std::vector<float> buffer = reduceInput(rank, count);
    GLM_ASSERT_OK(comm.allReduce(buffer.data(), buffer.size()));
    expectSums(buffer, world);
  }
  const size_t rows = 3, width = 5;
  const std::vector<float> piece = gatherInput(rank, rows * width);
  for (int axis : {0, 1}) {
    std::vector<float> out(n * rows * width, -1.0f);
    GLM_ASSERT_OK(comm.allGather(piece.data(), out.data(), rows, width, axis));
    EXPECT_EQ(out, expectedGather(world, rows, width, axis)) << "host all-gather, axis " << axis;
  }
  std::vector<uint8_t> bytes(37, static_cast<uint8_t>(rank * 7 + 1));
  GLM_ASSERT_OK(comm.broadcast(bytes.data(), bytes.size()));
  EXPECT_EQ(bytes, std::vector<uint8_t>(37, 1)) << "rank 0's bytes";

  // Device pointers on a stream of the caller's (here the communicator's own context's).
  cuda::CudaContext &ctx = comm.context();
  cuda::CUstream stream = ctx.stream();
  const std::vector<float> reduceIn = reduceInput(rank, 4096);
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory reduceBuffer,
                           ctx.allocate(reduceIn.size() * sizeof(float)));
  GLM_ASSERT_OK(ctx.upload(reduceBuffer.ptr(), reduceIn.data(), reduceIn.size() * sizeof(float)));
  GLM_ASSERT_OK(comm.allReduceDevice(reduceBuffer.as<float>(), reduceIn.size(),
                                     runtime::CommElement::F32, stream));

  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory pieceBuffer, ctx.allocate(width * sizeof(float)));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory gatherBuffer,
                           ctx.allocate(n * rows * width * sizeof(float)));
  const std::vector<float> rowPiece = gatherInput(rank, width);
  GLM_ASSERT_OK(ctx.upload(pieceBuffer.ptr(), rowPiece.data(), width * sizeof(float)));
  // One row: axis 1 is NCCL's concatenation.
  GLM_ASSERT_OK(comm.allGatherDevice(pieceBuffer.as<float>(), gatherBuffer.as<float>(), 1, width, 1,
                                     runtime::CommElement::F32, stream));
  GLM_ASSERT_OK(comm.synchronize(stream));

  std::vector<float> reduced(reduceIn.size());
  GLM_ASSERT_OK(ctx.download(reduced.data(), reduceBuffer.ptr(), reduced.size() * sizeof(float)));
  expectSums(reduced, world);
  std::vector<float> gathered(n * width);
  GLM_ASSERT_OK(ctx.download(gathered.data(), gatherBuffer.ptr(), gathered.size() * sizeof(float)));
  EXPECT_EQ(gathered, expectedGather(world, 1, width, 1)) << "device all-gather, one row";

  // Several rows along axis 0 on the device, from the pieces' in-place position.
  const size_t mine = static_cast<size_t>(rank) * rows * width;
  GLM_ASSERT_OK(ctx.upload(gatherBuffer.ptr() + mine * sizeof(float), piece.data(),
                           piece.size() * sizeof(float)));
  GLM_ASSERT_OK(comm.allGatherDevice(gatherBuffer.as<float>() + mine, gatherBuffer.as<float>(),
                                     rows, width, 0, runtime::CommElement::F32, stream));
  GLM_ASSERT_OK(comm.synchronize(stream));
  std::vector<float> gathered0(n * rows * width);
  GLM_ASSERT_OK(
      ctx.download(gathered0.data(), gatherBuffer.ptr(), gathered0.size() * sizeof(float)));
  EXPECT_EQ(gathered0, expectedGather(world, rows, width, 0)) << "device all-gather, axis 0";

  // Axis 1 of several rows (the prefill logits): gathered through the communicator's scratch.
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory rowsBuffer,
                           ctx.allocate(piece.size() * sizeof(float)));
  GLM_ASSERT_OK(ctx.upload(rowsBuffer.ptr(), piece.data(), piece.size() * sizeof(float)));
  GLM_ASSERT_OK(comm.allGatherDevice(rowsBuffer.as<float>(), gatherBuffer.as<float>(), rows, width,
                                     1, runtime::CommElement::F32, stream));
  GLM_ASSERT_OK(comm.synchronize(stream));
  std::vector<float> gathered1(n * rows * width);
  GLM_ASSERT_OK(
      ctx.download(gathered1.data(), gatherBuffer.ptr(), gathered1.size() * sizeof(float)));
  EXPECT_EQ(gathered1, expectedGather(world, rows, width, 1)) << "device all-gather, axis 1";

  // bf16 elements: the sum of one rank's exactly representable values is themselves (world 1),
  // or their sum over ranks (small integers stay exact in bf16).
  std::vector<uint16_t> halves(64);
  for (size_t i = 0; i < halves.size(); ++i) {
    halves[i] = kernels::floatToBf16(static_cast<float>(i % 16) - 8.0f);
  }
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory halfBuffer, ctx.allocate(halves.size() * 2));
  GLM_ASSERT_OK(ctx.upload(halfBuffer.ptr(), halves.data(), halves.size() * 2));
  GLM_ASSERT_OK(comm.allReduceDevice(halfBuffer.as<void>(), halves.size(),
                                     runtime::CommElement::BF16, stream));
  GLM_ASSERT_OK(comm.synchronize(stream));
  std::vector<uint16_t> halfSums(halves.size());
  GLM_ASSERT_OK(ctx.download(halfSums.data(), halfBuffer.ptr(), halfSums.size() * 2));
  for (size_t i = 0; i < halves.size(); ++i) {
    EXPECT_EQ(kernels::bf16ToFloat(halfSums[i]), kernels::bf16ToFloat(halves[i]) * world)
        << "bf16 all-reduce element " << i;
  }

  const std::vector<uint8_t> deviceBytes(width * sizeof(float), static_cast<uint8_t>(rank + 10));
  GLM_ASSERT_OK(ctx.upload(pieceBuffer.ptr(), deviceBytes.data(), deviceBytes.size()));
  GLM_ASSERT_OK(comm.broadcastDevice(pieceBuffer.as<void>(), width * sizeof(float), stream));
  GLM_ASSERT_OK(comm.synchronize(stream));
  std::vector<uint8_t> broadcastBack(width * sizeof(float));
  GLM_ASSERT_OK(ctx.download(broadcastBack.data(), pieceBuffer.ptr(), broadcastBack.size()));
  EXPECT_EQ(broadcastBack, std::vector<uint8_t>(broadcastBack.size(), 10)) << "rank 0's bytes";
  EXPECT_EQ(comm.lastError(), "");
}

TEST(NcclCommGpu, WorldOneCollectivesGiveTheInput) {
  LoopbackGroup group(1);
  std::unique_ptr<Comm> control = group.comm(0);
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<NcclComm> comm, NcclComm::create(*control, 0));
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world(), 1);
  runCollectives(*comm);
}

/// Rank 1's part of a world-2 NcclComm::create over `control` up to the NCCL id (nothing failed
/// here; the id comes), after which it never calls NCCL: a peer stopped inside ncclCommInitRank.
/// The exchange is create()'s; should it change, rank 0 fails differently and the tests say so.
void takeTheIdAndStop(Comm &control) {
  float failed = 0.0f;
  (void)control.allReduce(&failed, 1);
  std::vector<uint8_t> message(1 + runtime::kUniqueIdBytes);
  (void)control.broadcast(message.data(), message.size());
}

/// Rank 0's create() on GPU 0 with `options` while rank 1 takes the id and stops.
Expected<std::unique_ptr<NcclComm>> createWithStoppedPeer(runtime::NcclCommOptions options) {
  LoopbackGroup group(2);
  std::unique_ptr<Comm> zero = group.comm(0), one = group.comm(1);
  std::thread peer([&] { takeTheIdAndStop(*one); });
  Expected<std::unique_ptr<NcclComm>> comm = NcclComm::create(*zero, 0, std::move(options));
  peer.join();
  return comm;
}

TEST(NcclCommGpu, AnInitWhosePeerNeverComesFailsAfterTheTimeout) {
  Expected<std::unique_ptr<NcclComm>> comm = createWithStoppedPeer({.timeoutMs = 1500});
  ASSERT_FALSE(comm.ok()) << "rank 0 formed a group of two alone";
  EXPECT_EQ(comm.status().code(), StatusCode::Unavailable) << comm.status().toString();
  EXPECT_NE(comm.status().message().find("ncclCommInitRank did not finish within 1500 ms"),
            std::string::npos)
      << comm.status().toString();
}

TEST(NcclCommGpu, AnInitWhosePeerIsGoneFailsWithTheWatchsReason) {
  // The watch reports the peer gone a little after the init started, long before the timeout.
  const auto start = std::chrono::steady_clock::now();
  runtime::NcclCommOptions options{.timeoutMs = 600000};
  options.watch = [start]() -> Status {
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
      return Status::success();
    }
    return Status(StatusCode::Unavailable, "tensor-parallel rank 1 closed the connection");
  };
  Expected<std::unique_ptr<NcclComm>> comm = createWithStoppedPeer(std::move(options));
  ASSERT_FALSE(comm.ok()) << "rank 0 formed a group of two alone";
  EXPECT_EQ(comm.status().code(), StatusCode::Unavailable) << comm.status().toString();
  EXPECT_NE(comm.status().message().find("rank 1 closed the connection"), std::string::npos)
      << comm.status().toString();
}

TcpComm::Admit admitAll() {
  return [](int, const std::string &) { return Status::success(); };
}

// Rank 0 of the two-process run; it starts rank 1 by re-executing this binary with a filter for
// TwoProcessesRank1 (a fork without exec could not use CUDA after this process initialised it).
TEST(NcclCommGpu, TwoProcesses) {
  const char *world = std::getenv("GLM_NCCL_WORLD");
  if (world == nullptr || std::string(world) != "2") {
    GTEST_SKIP() << "set GLM_NCCL_WORLD=2 on a machine of two GPUs";
  }
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<TcpComm> tcp, TcpComm::listen("127.0.0.1", 0, 2));
  const std::string port = std::to_string(tcp->port());
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    setenv("GLM_NCCL_RANK1_PORT", port.c_str(), 1);
    char self[] = "/proc/self/exe";
    char filter[] = "--gtest_filter=NcclCommGpu.TwoProcessesRank1";
    char *argv[] = {self, filter, nullptr};
    execv(self, argv);
    _exit(127);
  }
  while (!tcp->complete()) {
    Expected<int> joined = tcp->acceptPending(30000, admitAll());
    ASSERT_TRUE(joined.ok() && *joined == 1) << joined.status().toString();
  }
  {
    GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<NcclComm> comm, NcclComm::create(*tcp, 0));
    runCollectives(*comm);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "rank 1 failed (its output is above)";
}

// Rank 1 of TwoProcesses, run only as its child.
TEST(NcclCommGpu, TwoProcessesRank1) {
  const char *port = std::getenv("GLM_NCCL_RANK1_PORT");
  if (port == nullptr) {
    GTEST_SKIP() << "run by TwoProcesses";
  }
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<TcpComm> tcp,
                           TcpComm::worker("127.0.0.1", std::atoi(port), 1, 2, "nccl-gpu-test"));
  GLM_ASSERT_OK(tcp->connect(30000));
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<NcclComm> comm, NcclComm::create(*tcp, 1));
  runCollectives(*comm);
}

} // namespace
} // namespace glm::testing
