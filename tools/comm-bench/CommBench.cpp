// glm-comm-bench: the device collectives a tensor-parallel decode step runs between its CUDA
// graphs, timed at decode's sizes on two GPUs of this host: NcclComm's allGatherDevice and
// allReduceDevice (what the CUDA engine calls) against bare ncclAllGather and ncclAllReduce on the
// same communicator, so that what our path adds is told apart from NCCL's own latency.
//
//   glm-comm-bench --config DIR [--calls N] [--reps N] [--single N] [--loopback]
//
// Sizes, from the model's config.json (--config DIR): the [batch, hidden] row blocks a TP 2 decode
// step all-reduces after each token mixer and MLP, at batch 1, 2 and 4, in bf16 and f32 (8-32 KiB
// per rank in bf16 for GLM-5.3-Flash's hidden 4096), both ops, and the logits all-gather of one
// row (vocab / 2 f32 per rank).
//
// Method: two ranks as threads of this process, rank r on device r, each on a stream of its own
// (as a CUDA engine's), the NCCL communicators made as `glmc generate` makes them. For each size,
// op and path, after a warm-up batch: --reps batches of --calls back-to-back calls, each batch
// timed with CUDA events on each rank (cuda::timeOnStream), giving µs per call; then --single
// calls one at a time (one call between two events, then a wait). The ranks' threads line up at a
// spinning barrier before every timed batch or call, and a repetition's figure is the smaller of
// the two ranks' times: the rank that started last waited for no one, so its time is the
// collective's own. The tables give the median over repetitions.
//
// --loopback adds a table of LoopbackComm's device collectives, both ranks on device 0 sharing it
// (what tests and `GLM_TP_DEVICES=one` use): all-reduce through host memory, all-gather by device
// copies. It is not comparable with NCCL, and is printed on its own when NCCL cannot run.
//
// Exit status: 0 measured; 1 a failure while measuring (named on stderr); 2 bad arguments; 3 the
// comparison cannot run here (fewer than two CUDA devices, or NCCL does not load): what is missing
// goes to stderr, and the loopback table is still measured and printed when device 0 exists.
#include "models/glm53/Config.h"
#include "runtime/comm/LoopbackComm.h"
#include "runtime/comm/NcclApi.h"
#include "runtime/comm/NcclComm.h"
#include "runtime/cuda/Ceilings.h"
#include "runtime/cuda/CudaContext.h"
#include "tools/glmc/CommandLine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace glm;
using runtime::CommElement;

constexpr int kExitMeasured = 0, kExitFailed = 1, kExitUsage = 2, kExitMissing = 3;
constexpr int kWorld = 2;
/// How long the other ranks may stay in a collective after one rank failed before the process
/// gives up on them: an NCCL kernel whose peer will not come never ends. Longer than NcclComm's
/// own wait (30 s), which names the failure better where it applies.
constexpr auto kStuckAfterFailure = std::chrono::seconds(35);

struct Options {
  int calls = 100; // back-to-back calls per timed batch
  int reps = 20;   // timed batches
  int single = 200;
};

/// One collective at one size.
struct Case {
  size_t count = 0; // elements per rank
  CommElement element = CommElement::BF16;
  bool gather = false; // all-gather, else all-reduce
  std::string note;    // what in a decode step moves this
};

/// The collectives of a TP kWorld decode step of the model `config` describes.
std::vector<Case> decodeCases(const glm53::Glm53Config &config) {
  std::vector<Case> cases;
  const auto hidden = static_cast<size_t>(config.hiddenSize);
  for (size_t batch : {1, 2, 4}) {
    for (CommElement element : {CommElement::BF16, CommElement::F32}) {
      const std::string rows = strCat(" [", batch, ", hidden]");
      cases.push_back({batch * hidden, element, false, rows});
      cases.push_back({batch * hidden, element, true, rows});
    }
  }
  cases.push_back({static_cast<size_t>(config.vocabSize) / kWorld, CommElement::F32, true,
                   " (a row of logits)"});
  return cases;
}

std::string describe(const Case &c) {
  return strCat(c.gather ? "all-gather" : "all-reduce", " of ", c.count, " ",
                runtime::commElementName(c.element), " per rank");
}

/// One rank's device buffers, sized for the largest case: a piece, the gathered result (not
/// overlapping it), and the all-reduce's buffer (reduced in place).
struct Buffers {
  cuda::DeviceMemory piece, out, reduce;
};

Expected<Buffers> allocateBuffers(cuda::CudaContext &ctx, const std::vector<Case> &cases) {
  size_t bytes = 0;
  for (const Case &c : cases) {
    bytes = std::max(bytes, c.count * runtime::commElementBytes(c.element));
  }
  Buffers b;
  GLM_ASSIGN_OR_RETURN(b.piece, ctx.allocate(bytes));
  GLM_ASSIGN_OR_RETURN(b.out, ctx.allocate(kWorld * bytes));
  GLM_ASSIGN_OR_RETURN(b.reduce, ctx.allocate(bytes));
  // Zeros: what the values are does not change the time, and sums of zeros stay finite.
  for (const cuda::DeviceMemory *m : {&b.piece, &b.out, &b.reduce}) {
    GLM_CU(&ctx.driver(), cuMemsetD8(m->ptr(), 0, m->bytes()));
  }
  return b;
}

/// A way of running a case's collective: enqueues one call on `stream`.
struct Path {
  const char *name;
  std::function<Status(const Case &, cuda::CUstream)> call;
};

/// The engine's path: the DeviceComm calls CudaEngine::collect makes (a decode gather is one row,
/// which NcclComm passes to ncclAllGather whole).
Path ours(runtime::DeviceComm &comm, const Buffers &b) {
  return {"ours", [&comm, &b](const Case &c, cuda::CUstream stream) -> Status {
            if (c.gather) {
              return comm.allGatherDevice(b.piece.as<void>(), b.out.as<void>(), 1, c.count, 1,
                                          c.element, stream);
            }
            return comm.allReduceDevice(b.reduce.as<void>(), c.count, c.element, stream);
          }};
}

/// NCCL's own calls on the same communicator, buffers and stream.
Path bare(runtime::NcclComm &nccl, const Buffers &b) {
  return {"bare", [&nccl, &b](const Case &c, cuda::CUstream stream) -> Status {
            const runtime::NcclApi &api = nccl.api();
            const auto handle = static_cast<runtime::NcclHandle>(nccl.ncclComm());
            if (handle == nullptr) {
              return Status(StatusCode::Unavailable,
                            strCat("the NCCL communicator was aborted: ", nccl.lastError()));
            }
            const int type =
                c.element == CommElement::F32 ? runtime::kNcclFloat32 : runtime::kNcclBfloat16;
            const int result =
                c.gather ? api.ncclAllGather(b.piece.as<void>(), b.out.as<void>(), c.count, type,
                                             handle, stream)
                         : api.ncclAllReduce(b.reduce.as<void>(), b.reduce.as<void>(), c.count,
                                             type, runtime::kNcclSum, handle, stream);
            if (result != runtime::kNcclSuccess) {
              return internalError(c.gather ? "ncclAllGather" : "ncclAllReduce",
                                   " failed: ", api.ncclGetErrorString(result), " (", result, ")");
            }
            return Status::success();
          }};
}

/// Lines the ranks' threads up before each timed repetition. It spins rather than sleeps so that
/// the ranks leave it within about a microsecond of each other: the first to start a collective
/// waits for the other, and that wait should be small. A rank that fails abandons it, and the
/// others then stop at their next wait instead of waiting for it.
class SpinBarrier {
public:
  explicit SpinBarrier(int count) : count_(count) {}

  /// False once a rank has abandoned the barrier.
  bool wait() {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    } else {
      for (long spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
        if (abandoned_.load(std::memory_order_acquire)) {
          return false;
        }
        // A rank may take a while between repetitions (event setup, a slow first call): spin for
        // about a millisecond, then let the core go between looks.
        if (spins > 100000) {
          std::this_thread::yield();
        }
      }
    }
    return !abandoned_.load(std::memory_order_acquire);
  }
  void abandon() { abandoned_.store(true, std::memory_order_release); }

private:
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> abandoned_{false};
};

/// Event times in µs of one case on one path: [rank][repetition].
struct Measured {
  std::vector<std::vector<double>> batch = std::vector<std::vector<double>>(kWorld);
  std::vector<std::vector<double>> single = std::vector<std::vector<double>>(kWorld);
};
using Results = std::vector<std::vector<Measured>>; // [case][path]

Status abandoned() { return Status(StatusCode::Unavailable, "stopped: another rank failed"); }

/// This rank's part: every case on every path, in the same order on every rank, so that the
/// ranks' collectives pair up. Its times go to results[case][path] at [rank].
Status timeCases(cuda::CudaContext &ctx, runtime::DeviceComm &comm, const std::vector<Path> &paths,
                 const std::vector<Case> &cases, const Options &options, SpinBarrier &barrier,
                 Results &results) {
  const int rank = comm.rank();
  const cuda::CUstream stream = ctx.stream();
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t p = 0; p < paths.size(); ++p) {
      const Case &k = cases[c];
      const Path &path = paths[p];
      auto once = [&]() -> Status { return path.call(k, stream); };
      auto batch = [&]() -> Status {
        for (int i = 0; i < options.calls; ++i) {
          GLM_RETURN_IF_ERROR(path.call(k, stream));
        }
        return Status::success();
      };
      auto timed = [&]() -> Status {
        // Warm-up: NCCL sets up a size's channels and protocol on the first calls. The wait goes
        // through the communicator, which fails rather than hangs when a peer is gone.
        if (!barrier.wait()) {
          return abandoned();
        }
        GLM_RETURN_IF_ERROR(batch());
        GLM_RETURN_IF_ERROR(comm.synchronize(stream));
        Measured &m = results[c][p];
        for (int r = 0; r < options.reps; ++r) {
          if (!barrier.wait()) {
            return abandoned();
          }
          GLM_ASSIGN_OR_RETURN(cuda::EventTiming t, cuda::timeOnStream(ctx, batch, 1, 0));
          m.batch[static_cast<size_t>(rank)].push_back(t.medianUs);
        }
        for (int r = 0; r < options.single; ++r) {
          if (!barrier.wait()) {
            return abandoned();
          }
          GLM_ASSIGN_OR_RETURN(cuda::EventTiming t, cuda::timeOnStream(ctx, once, 1, 0));
          m.single[static_cast<size_t>(rank)].push_back(t.medianUs);
        }
        return Status::success();
      };
      GLM_RETURN_IF_ERROR(timed().withContext(strCat(path.name, " ", describe(k))));
    }
  }
  return Status::success();
}

/// Runs kWorld ranks, each `body(rank, barrier)` on a thread of its own, and returns their errors
/// (each named by rank). A rank that fails abandons the barrier; if another then stays in a
/// collective its failed peer will never join, the process reports the failure and exits
/// (kExitFailed) after kStuckAfterFailure rather than hang.
Status runRanks(const std::function<Status(int rank, SpinBarrier &barrier)> &body) {
  SpinBarrier barrier(kWorld);
  std::mutex mutex;
  std::condition_variable changed;
  int finished = 0;
  std::vector<Status> errors(kWorld, Status::success());
  std::optional<std::chrono::steady_clock::time_point> firstFailure;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      Status s = body(r, barrier);
      if (!s.ok()) {
        barrier.abandon();
      }
      std::lock_guard<std::mutex> lock(mutex);
      errors[static_cast<size_t>(r)] = std::move(s);
      ++finished;
      if (!errors[static_cast<size_t>(r)].ok() && !firstFailure) {
        firstFailure = std::chrono::steady_clock::now();
      }
      changed.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (finished < kWorld) {
      if (firstFailure && std::chrono::steady_clock::now() - *firstFailure > kStuckAfterFailure) {
        for (int r = 0; r < kWorld; ++r) {
          if (!errors[static_cast<size_t>(r)].ok()) {
            std::fprintf(stderr, "glm-comm-bench: rank %d: %s\n", r,
                         errors[static_cast<size_t>(r)].toString().c_str());
          }
        }
        std::fprintf(stderr,
                     "glm-comm-bench: the other rank is still in a collective %lld s later; "
                     "giving up on it\n",
                     static_cast<long long>(kStuckAfterFailure.count()));
        std::fflush(stderr);
        std::_Exit(kExitFailed);
      }
      changed.wait_for(lock, std::chrono::milliseconds(100));
    }
  }
  for (std::thread &t : threads) {
    t.join();
  }
  std::optional<Status> failed;
  std::string why;
  for (int r = 0; r < kWorld; ++r) {
    const Status &s = errors[static_cast<size_t>(r)];
    if (!s.ok()) {
      failed = failed.value_or(s);
      why += strCat(why.empty() ? "" : "; ", "rank ", r, ": ", s.message());
    }
  }
  return failed ? Status(failed->code(), why) : Status::success();
}

/// A repetition's figure is its smallest rank time (the rank that started last waited for no
/// one); the result is the median over repetitions.
double combine(const std::vector<std::vector<double>> &perRank) {
  std::vector<double> figures;
  for (size_t i = 0; i < perRank[0].size(); ++i) {
    double smallest = std::numeric_limits<double>::infinity();
    for (const std::vector<double> &rank : perRank) {
      smallest = std::min(smallest, rank[i]);
    }
    figures.push_back(smallest);
  }
  std::sort(figures.begin(), figures.end());
  return figures.empty() ? 0.0 : figures[figures.size() / 2];
}

void printCaseColumns(const Case &c) {
  std::printf("| %.4g KiB | %zu | %s | %s%s |",
              static_cast<double>(c.count * runtime::commElementBytes(c.element)) / 1024.0, c.count,
              runtime::commElementName(c.element), c.gather ? "all-gather" : "all-reduce",
              c.note.c_str());
}

/// The NCCL comparison on devices 0 and 1: two tables, back to back and one call at a time.
Status measureNccl(const std::vector<Case> &cases, const Options &options, int ncclVersion) {
  constexpr size_t kOurs = 0, kBare = 1;
  Results results(cases.size(), std::vector<Measured>(2));
  std::vector<std::string> names(kWorld);
  runtime::LoopbackGroup control(kWorld); // NCCL's id travels through it
  GLM_RETURN_IF_ERROR(runRanks([&](int rank, SpinBarrier &barrier) -> Status {
    std::unique_ptr<runtime::LoopbackComm> controlComm = control.comm(rank);
    Expected<std::unique_ptr<runtime::NcclComm>> made =
        runtime::NcclComm::create(*controlComm, rank);
    if (!made.ok()) {
      control.end(strCat("rank ", rank, ": ", made.status().message()));
      return made.status();
    }
    runtime::NcclComm &nccl = **made;
    Status s = [&]() -> Status {
      GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaContext> ctx, cuda::CudaContext::create(rank));
      names[static_cast<size_t>(rank)] = ctx->info().name;
      GLM_ASSIGN_OR_RETURN(Buffers buffers, allocateBuffers(*ctx, cases));
      const std::vector<Path> paths = {ours(nccl, buffers), bare(nccl, buffers)};
      return timeCases(*ctx, nccl, paths, cases, options, barrier, results);
    }();
    if (!s.ok()) {
      nccl.abort(s); // the other rank's NCCL calls then fail instead of waiting for this one
    }
    return s;
  }));

  std::printf("glm-comm-bench: 2 ranks as threads of this process, rank r on device r (%s, %s), "
              "NCCL %d.%d.%d\n",
              names[0].c_str(), names[1].c_str(), ncclVersion / 10000, ncclVersion / 100 % 100,
              ncclVersion % 100);
  auto table = [&](bool single) {
    std::printf("| per rank | elements | dtype | op | ours µs | bare µs | ours / bare |\n"
                "|---|---|---|---|---|---|---|\n");
    for (size_t c = 0; c < cases.size(); ++c) {
      const Measured &o = results[c][kOurs], &b = results[c][kBare];
      const double oursUs = single ? combine(o.single) : combine(o.batch) / options.calls;
      const double bareUs = single ? combine(b.single) : combine(b.batch) / options.calls;
      printCaseColumns(cases[c]);
      std::printf(" %.2f | %.2f | %.2f |\n", oursUs, bareUs, oursUs / bareUs);
    }
  };
  std::printf("\nBack to back: µs per call, median over %d batches of %d calls, each batch timed "
              "with CUDA events on both ranks (the smaller of the two)\n\n",
              options.reps, options.calls);
  table(false);
  std::printf("\nOne call at a time: µs from one call's start event to its end event, median over "
              "%d calls, the ranks lined up before each (the smaller of the two ranks' times)\n\n",
              options.single);
  table(true);
  return Status::success();
}

/// LoopbackComm's device collectives, both ranks on device 0.
Status measureLoopback(const std::vector<Case> &cases, const Options &options) {
  Results results(cases.size(), std::vector<Measured>(1));
  std::string name;
  runtime::LoopbackGroup group(kWorld);
  GLM_RETURN_IF_ERROR(runRanks([&](int rank, SpinBarrier &barrier) -> Status {
    std::unique_ptr<runtime::LoopbackComm> comm = group.comm(rank);
    Status s = [&]() -> Status {
      GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaContext> ctx, cuda::CudaContext::create(0));
      if (rank == 0) {
        name = ctx->info().name;
      }
      GLM_ASSIGN_OR_RETURN(Buffers buffers, allocateBuffers(*ctx, cases));
      return timeCases(*ctx, *comm, {ours(*comm, buffers)}, cases, options, barrier, results);
    }();
    if (!s.ok()) {
      comm->abort(s);
    }
    return s;
  }));
  std::printf("\nLoopback (LoopbackComm, not comparable with NCCL): both ranks threads on device 0 "
              "(%s), sharing it; all-reduce through host memory, all-gather by device copies; "
              "back to back over %d batches of %d calls, one at a time over %d calls\n\n",
              name.c_str(), options.reps, options.calls, options.single);
  std::printf("| per rank | elements | dtype | op | back to back µs | one call µs |\n"
              "|---|---|---|---|---|---|\n");
  for (size_t c = 0; c < cases.size(); ++c) {
    printCaseColumns(cases[c]);
    std::printf(" %.2f | %.2f |\n", combine(results[c][0].batch) / options.calls,
                combine(results[c][0].single));
  }
  return Status::success();
}

} // namespace

int main(int argc, char **argv) {
  tools::CommandLine cl("glm-comm-bench", "--config DIR [options]",
                        "Times the device collectives of a TP 2 decode step on two GPUs of this "
                        "host: NcclComm's against\nbare NCCL's, at the sizes the config gives.");
  cl.option("config", "DIR", "a checkpoint directory or its config.json: the sizes")
      .option("calls", "N", "back-to-back calls per timed batch")
      .option("reps", "N", "timed batches per size")
      .option("single", "N", "calls timed one at a time")
      .flag("loopback", "also time LoopbackComm (both ranks on device 0)");
  if (std::optional<int> exit = cl.parseOrExit(std::vector<std::string>(argv + 1, argv + argc))) {
    return *exit == 0 ? kExitMeasured : kExitUsage;
  }
  if (!cl.get("config")) {
    std::fprintf(stderr, "comm-bench: --config DIR (a checkpoint directory or its config.json) "
                         "gives the sizes\n");
    return kExitUsage;
  }
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(*cl.get("config"));
  if (!config.ok()) {
    std::fprintf(stderr, "comm-bench: %s\n", config.status().message().c_str());
    return kExitUsage;
  }
  Options options;
  for (auto [name, value] :
       {std::pair{"calls", &options.calls}, {"reps", &options.reps}, {"single", &options.single}}) {
    Expected<std::optional<int64_t>> given = cl.getInt(name, 1, 100000);
    if (!given.ok()) {
      std::fprintf(stderr, "%s\n", given.status().message().c_str()); // names the command
      return kExitUsage;
    }
    *value = static_cast<int>(given->value_or(*value));
  }
  const std::vector<Case> cases = decodeCases(*config);

  // The comparison needs two devices and NCCL; say everything that is missing at once.
  Expected<int> devices = cuda::CudaContext::deviceCount();
  Expected<int> nccl = runtime::ncclVersion();
  std::string missing;
  if (!devices.ok()) {
    missing = devices.status().message();
  } else if (*devices < kWorld) {
    missing = strCat("this process sees ", *devices,
                     " CUDA device(s) and the comparison needs 2 (check CUDA_VISIBLE_DEVICES)");
  }
  if (!nccl.ok()) {
    missing += strCat(missing.empty() ? "" : "; ", nccl.status().message());
  }
  bool failed = false;
  if (missing.empty()) {
    if (Status s = measureNccl(cases, options, *nccl); !s.ok()) {
      std::fprintf(stderr, "glm-comm-bench: %s\n", s.toString().c_str());
      failed = true;
    }
  } else {
    std::fprintf(stderr, "glm-comm-bench: cannot time NCCL on two GPUs here: %s\n",
                 missing.c_str());
  }
  if (!missing.empty() || cl.has("loopback")) {
    if (devices.ok() && *devices >= 1) {
      if (Status s = measureLoopback(cases, options); !s.ok()) {
        std::fprintf(stderr, "glm-comm-bench: loopback: %s\n", s.toString().c_str());
        failed = true;
      }
    } else {
      std::fprintf(stderr, "glm-comm-bench: no CUDA device for the loopback table either\n");
    }
  }
  if (failed) {
    return kExitFailed;
  }
  return missing.empty() ? kExitMeasured : kExitMissing;
}
