// `glmc bench`: each program of a GPU plan replayed as its CUDA graph, against the device's
// measured ceilings: latency (median and spread), tokens/s, a per-step breakdown, the roofline
// time of the bytes the plan moves, and a labelled GB10 projection; optionally JSON and an SVG
// of where the time goes. A tensor-parallel plan's ranks run as threads of this process, placed
// as `glmc generate` places them (openEngine), and every program is timed on all of them at once.
#include "base/Progress.h"
#include "kernels/common/Launch.h"
#include "runtime/comm/LoopbackComm.h"
#include "runtime/comm/NcclComm.h"
#include "runtime/cuda/Ceilings.h"
#include "runtime/engine/CudaEngine.h"
#include "runtime/plan/Collectives.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"
#include "tools/glmc/OpenEngine.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

namespace glm::tools {
namespace {

using OrderedJson = nlohmann::ordered_json;

// GB10 (DGX Spark): LPDDR5x at 273 GB/s per rank, of which a kernel reads ~235 GB/s (the peers'
// measurements, ../shared/reference/peers.md). Each collective of a decode step is a small
// all-reduce or all-gather over CX7; 20 µs is an assumed one-shot latency, not a measurement.
constexpr double kGb10BytesPerS = 273e9;
constexpr double kGb10KernelBytesPerS = 235e9;
constexpr double kGb10CollectiveUs = 20.0;

/// The GB10 projection of a program, rebuilt per step from what this device measured: a step's
/// eager time is the time its bytes take at this device's copy bandwidth plus a fixed part (the
/// launch, dependent latencies, a tail: whatever the bytes do not explain), and on a GB10 the
/// bytes take their time at ~235 GB/s while the fixed part stays. The fixed parts are scaled by
/// the graph's share of the eager time (a graph replay drops most of each eager launch's gap).
/// Collectives are modelled apart (kGb10CollectiveUs each). Not a measurement: a GB10 kernel may
/// stream at another fraction of its bandwidth than this device's does.
struct Gb10Projection {
  double us = 0;      // the program
  double bytesUs = 0; // of which the bytes at kGb10KernelBytesPerS
  double fixedUs = 0; // and the scaled fixed parts
};

Gb10Projection projectGb10(const std::vector<double> &stepBytes, const std::vector<double> &stepUs,
                           const std::vector<bool> &collective, double copyBytesPerS,
                           double graphUs) {
  double streamHere = 0, fixedHere = 0, gb10Bytes = 0;
  int collectives = 0;
  for (size_t i = 0; i < stepBytes.size(); ++i) {
    if (collective[i]) {
      ++collectives;
      continue;
    }
    const double streamUs = stepBytes[i] / copyBytesPerS * 1e6;
    streamHere += std::min(streamUs, stepUs[i]);
    fixedHere += std::max(stepUs[i] - streamUs, 0.0);
    gb10Bytes += stepBytes[i];
  }
  // The graph's own fixed part: its median less the streaming time, shared out over the steps'.
  const double graphFixed = std::max(graphUs - streamHere, 0.0);
  const double scale = fixedHere > 0 ? std::min(graphFixed / fixedHere, 1.0) : 0.0;
  Gb10Projection g;
  g.bytesUs = gb10Bytes / kGb10KernelBytesPerS * 1e6;
  g.fixedUs = fixedHere * scale;
  g.us = g.bytesUs + g.fixedUs + collectives * kGb10CollectiveUs;
  return g;
}

struct OpTotals {
  int steps = 0;
  double us = 0, bytes = 0, flops = 0;
};

/// The plot: one stacked bar per program, its steps' eager time by op kind.
void writeSvg(const std::string &path, const OrderedJson &programs) {
  const char *colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                          "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#d62728"};
  std::map<std::string, int> colorOf;
  const int width = 900, left = 170, bar = 26, gap = 18;
  const int height = 60 + static_cast<int>(programs.size()) * (bar + gap) + 200;
  std::ofstream out(path);
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='12'>\n"
      << "<text x='10' y='20' font-size='15'>Where each program's time goes (eager step times, "
         "share of the step)</text>\n";
  int y = 40;
  for (const OrderedJson &p : programs) {
    out << "<text x='10' y='" << y + bar * 0.7 << "'>" << p["name"].get<std::string>() << " ("
        << static_cast<int>(p["graph_median_us"].get<double>()) << " µs";
    if (p.contains("slowest_rank_median_us")) {
      // A TP plan's bars are rank 0's; the step takes as long as its slowest rank.
      out << "; slowest rank " << static_cast<int>(p["slowest_rank_median_us"].get<double>())
          << " µs";
    }
    out << ")</text>\n";
    double total = 0;
    for (const auto &[op, t] : p["by_op"].items()) {
      total += t["us"].get<double>();
    }
    double x = left;
    for (const auto &[op, t] : p["by_op"].items()) {
      const int color = colorOf.try_emplace(op, static_cast<int>(colorOf.size())).first->second;
      const double w = (width - left - 20) * t["us"].get<double>() / std::max(total, 1e-9);
      out << "<rect x='" << x << "' y='" << y << "' width='" << w << "' height='" << bar
          << "' fill='" << colors[color % 12] << "'><title>" << op << ": " << t["us"].get<double>()
          << " µs</title></rect>\n";
      x += w;
    }
    y += bar + gap;
  }
  int lx = 10;
  for (const auto &[op, color] : colorOf) {
    out << "<rect x='" << lx << "' y='" << y << "' width='12' height='12' fill='"
        << colors[color % 12] << "'/><text x='" << lx + 16 << "' y='" << y + 10 << "'>" << op
        << "</text>\n";
    lx += 150;
    if (lx > width - 150) {
      lx = 10;
      y += 20;
    }
  }
  out << "</svg>\n";
}

/// The engines `glmc bench` times: one for a TP 1 plan; for a TP N plan one per rank, rank r at
/// [r], each with its own copy of the plan.
struct BenchRanks {
  std::unique_ptr<runtime::LoopbackGroup> group; // ranks on one device meet here
  std::vector<std::unique_ptr<runtime::LoopbackComm>> loopback;
  std::vector<std::unique_ptr<cuda::CudaEngine>> engines; // last: destroyed before the comms
  std::string placement; // where a TP plan's ranks run, for the report
};

/// A TP N plan's ranks go where openEngine puts them (rankPerDevice): one per GPU over NCCL where
/// this process sees N GPUs and NCCL loads, else all on device 0 over a loopback group.
Expected<BenchRanks> openRanks(std::unique_ptr<runtime::PlanFile> plan,
                               const Checkpoint &checkpoint) {
  BenchRanks ranks;
  const int world = static_cast<int>(plan->root().tp());
  if (world == 1) {
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaEngine> engine,
                         cuda::CudaEngine::create(std::move(plan), checkpoint));
    ranks.engines.push_back(std::move(engine));
    return ranks;
  }
  GLM_ASSIGN_OR_RETURN(bool perDevice, rankPerDevice(world));
  std::vector<std::shared_ptr<runtime::NcclComm>> nccl;
  if (perDevice) {
    GLM_ASSIGN_OR_RETURN(nccl, ncclGroup(world));
    Expected<int> version = runtime::ncclVersion();
    // ncclGetVersion's code is major * 10000 + minor * 100 + patch (NCCL 2.9 and later).
    ranks.placement = strCat(
        "one rank per GPU (devices 0-", world - 1, ") over NCCL",
        version.ok() ? strCat(" ", *version / 10000, ".", *version / 100 % 100, ".", *version % 100)
                     : "");
  } else {
    ranks.group = std::make_unique<runtime::LoopbackGroup>(world);
    ranks.placement = "every rank on device 0 over the loopback (the ranks share the GPU, so "
                      "each rank's times include the others' kernels; collectives are host "
                      "copies)";
  }
  const std::vector<uint8_t> bytes(plan->bytes().begin(), plan->bytes().end());
  const std::string source = plan->source();
  for (int r = 0; r < world; ++r) {
    std::unique_ptr<runtime::PlanFile> rankPlan;
    if (r == 0) {
      rankPlan = std::move(plan);
    } else {
      GLM_ASSIGN_OR_RETURN(rankPlan, runtime::PlanFile::fromBytes(bytes, source));
    }
    cuda::CudaEngineOptions options;
    if (perDevice) {
      options.device = nccl[r]->rank();
      options.comm = nccl[r].get();
      options.keepAlive = nccl[r];
    } else {
      ranks.loopback.push_back(ranks.group->comm(r));
      options.comm = ranks.loopback.back().get();
    }
    Expected<std::unique_ptr<cuda::CudaEngine>> engine =
        cuda::CudaEngine::create(std::move(rankPlan), checkpoint, options);
    if (!engine.ok()) {
      return engine.status().withContext(strCat("tensor-parallel rank ", r, " of ", world));
    }
    ranks.engines.push_back(std::move(engine).value());
  }
  return ranks;
}

/// Program `index` timed on every rank, rank r's timing at [r]. A TP plan's ranks time it at the
/// same time from threads of their own, since each rank's collectives wait for the others; the
/// error names every rank that failed.
Expected<std::vector<cuda::CudaEngine::ProgramTiming>>
timeOnRanks(BenchRanks &ranks, uint32_t index, int64_t context, int reps) {
  auto time = [&](size_t r) {
    cuda::CudaEngine &e = *ranks.engines[r];
    return e.timeProgram(*e.plan().programs()->Get(index), context, reps);
  };
  const size_t world = ranks.engines.size();
  if (world == 1) {
    GLM_ASSIGN_OR_RETURN(cuda::CudaEngine::ProgramTiming t, time(0));
    return std::vector<cuda::CudaEngine::ProgramTiming>{std::move(t)};
  }
  std::vector<std::optional<Expected<cuda::CudaEngine::ProgramTiming>>> results(world);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { results[r].emplace(time(r)); });
  }
  for (std::thread &t : threads) {
    t.join();
  }
  std::vector<cuda::CudaEngine::ProgramTiming> timings;
  std::optional<Status> failed;
  std::string why;
  for (size_t r = 0; r < world; ++r) {
    if (results[r]->ok()) {
      timings.push_back(std::move(*results[r]).value());
      continue;
    }
    const Status &s = results[r]->status();
    failed = failed.value_or(s);
    why += strCat(why.empty() ? "" : "; ", "tensor-parallel rank ", r, " of ", world, ": ",
                  s.message());
  }
  if (failed) {
    return Status(failed->code(), why);
  }
  return timings;
}

} // namespace

int runBench(const std::vector<std::string> &args) {
  CommandLine cl(
      "glmc bench", "PLAN.glmp --model DIR [options]",
      "Replays each program of a plan as CUDA graphs and reports its latency, a per-step "
      "breakdown and\nits fraction of the device's roofline.");
  cl.option("model", "DIR", "the checkpoint the plan was compiled from")
      .option("context", "N", "tokens of context the decode programs attend over")
      .option("reps", "N", "replays per program (at least 5)")
      .option("json", "OUT", "also write the results as JSON")
      .option("plot", "OUT.svg", "also plot the per-step breakdown")
      .positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  const std::optional<std::string> modelDir = cl.get("model");
  if (std::optional<std::string> plot = cl.get("plot");
      plot && (plot->size() < 4 || plot->substr(plot->size() - 4) != ".svg")) {
    return cl.fail(invalidArgument("--plot writes SVG: give a path ending in .svg, got ", *plot));
  }
  if (!modelDir) {
    return cl.fail(invalidArgument("--model DIR is required (the checkpoint the plan binds)"));
  }
  Expected<std::optional<int64_t>> context = cl.getInt("context", 0, int64_t{1} << 24);
  Expected<std::optional<int64_t>> reps = cl.getInt("reps", 5, 100000);
  for (const Status &s : {context.status(), reps.status()}) {
    if (!s.ok()) {
      return cl.fail(s);
    }
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  if ((*plan)->root().target()->arch() == plan::Arch::Cpu) {
    return cl.fail(invalidArgument(cl.positionals()[0],
                                   ": glmc bench measures GPU plans (compile with --target "
                                   "sm_90a or sm_121a)"));
  }
  Expected<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::open(*modelDir);
  if (!checkpoint.ok()) {
    return cl.fail(checkpoint.status());
  }
  Expected<BenchRanks> ranks = openRanks(std::move(plan).value(), **checkpoint);
  if (!ranks.ok()) {
    return cl.fail(ranks.status());
  }
  cuda::CudaEngine &e = *ranks->engines[0];
  const plan::Plan &p = e.plan();
  const bool tp = p.tp() > 1;
  // Rank 0's device measures the ceilings: creating the other ranks' engines made theirs current.
  if (Status s = e.context().makeCurrent(); !s.ok()) {
    return cl.fail(s);
  }
  Expected<double> copy = cuda::measureCopyBandwidth(e.context());
  if (!copy.ok()) {
    return cl.fail(copy.status());
  }
  Expected<double> matrix = cuda::measureMatrixRate(e.context());
  const cuda::DeviceInfo &dev = e.device();
  std::printf("%s (%s, %d SMs): copy %.0f GB/s (read + write)", dev.name.c_str(), dev.arch.c_str(),
              dev.smCount, *copy / 1e9);
  if (matrix.ok()) {
    std::printf(", bf16 matrix %.0f TFLOP/s (cuBLAS 8192^3)\n", *matrix / 1e12);
  } else {
    std::printf(", matrix rate not measured: %s\n", matrix.status().message().c_str());
  }
  if (tp) {
    std::printf("TP %u: %s; each program is timed on every rank at once, and the figures below "
                "are rank 0's\n",
                p.tp(), ranks->placement.c_str());
  }
  const int64_t maxContext =
      p.state_pool() ? static_cast<int64_t>(p.state_pool()->max_context()) : 0;
  OrderedJson report;
  report["device"] = {{"name", dev.name},
                      {"arch", dev.arch},
                      {"copy_bytes_per_s", *copy},
                      {"matrix_flops_per_s", matrix.ok() ? *matrix : 0.0}};
  if (tp) {
    report["tp"] = p.tp();
    report["placement"] = ranks->placement;
  }
  OrderedJson programs = OrderedJson::array();
  for (uint32_t index = 0; index < p.programs()->size(); ++index) {
    const plan::Program *program = p.programs()->Get(index);
    const int64_t rows = static_cast<int64_t>(program->batch()) * program->rows();
    // The pool holds max_context tokens for all sequences together: each of the batch's gets an
    // equal share.
    const int64_t ctx =
        std::min<int64_t>(context->value_or(4096), maxContext / program->batch() - program->rows());
    Expected<std::vector<cuda::CudaEngine::ProgramTiming>> timings = timeOnRanks(
        *ranks, index, std::max<int64_t>(ctx, 0), static_cast<int>(reps->value_or(100)));
    if (!timings.ok()) {
      return cl.fail(timings.status().withContext(program->name()->str()));
    }
    const cuda::CudaEngine::ProgramTiming *t = &timings->front();
    double bytes = 0, flops = 0, eagerUs = 0;
    int collectives = 0;
    // Per rank: the eager time of its collective steps, each waiting for the other ranks.
    std::vector<double> collectiveUs(timings->size(), 0.0);
    std::map<std::string, OpTotals> byOp;
    std::vector<double> stepBytesOf, stepUsOf;
    std::vector<bool> collectiveOf;
    OrderedJson steps = OrderedJson::array();
    for (uint32_t i = 0; i < program->steps()->size(); ++i) {
      const plan::Step *s = program->steps()->Get(i);
      const double stepBytes = static_cast<double>(s->bytes_read() + s->bytes_written());
      bytes += stepBytes;
      flops += static_cast<double>(s->flops());
      eagerUs += t->stepUs[i];
      const bool collective = runtime::isCollective(*s);
      collectives += collective;
      stepBytesOf.push_back(stepBytes);
      stepUsOf.push_back(t->stepUs[i]);
      collectiveOf.push_back(collective);
      for (size_t r = 0; r < timings->size() && collective; ++r) {
        collectiveUs[r] += (*timings)[r].stepUs[i];
      }
      OpTotals &o = byOp[s->op()->c_str()];
      ++o.steps;
      o.us += t->stepUs[i];
      o.bytes += stepBytes;
      o.flops += static_cast<double>(s->flops());
      std::string kernel;
      if (s->launches() != nullptr) {
        for (const plan::KernelLaunch *l : *s->launches()) {
          kernel += (kernel.empty() ? "" : " + ") +
                    kernels::shortKernelName(p.kernels()->Get(l->kernel())->name()->str());
        }
      }
      steps.push_back({{"name", s->name()->str()},
                       {"op", s->op()->c_str()},
                       {"kernel", kernel},
                       {"us", t->stepUs[i]},
                       {"bytes", stepBytes},
                       {"flops", s->flops()},
                       {"gb_per_s", stepBytes / (t->stepUs[i] * 1e-6) / 1e9}});
    }
    const double seconds = t->medianUs * 1e-6;
    const double rooflineUs = bytes / *copy * 1e6;
    const double efficiency = rooflineUs / t->medianUs;
    // The earlier whole-step projection (this device's efficiency applied to a GB10's bandwidth),
    // kept beside the per-step one for comparison: it scales fixed costs with the bytes, so it is
    // the pessimistic bound.
    const double gb10ScaledUs = bytes / (kGb10BytesPerS * std::min(efficiency, 1.0)) * 1e6 +
                                collectives * kGb10CollectiveUs;
    const Gb10Projection gb10 =
        projectGb10(stepBytesOf, stepUsOf, collectiveOf, *copy, t->medianUs);
    std::printf("\nprogram %s (%u x %u rows, context %lld): %.1f us median [p10 %.1f, p90 %.1f], "
                "%.0f tokens/s\n",
                program->name()->c_str(), program->batch(), program->rows(),
                static_cast<long long>(ctx), t->medianUs, t->p10Us, t->p90Us, rows / seconds);
    size_t slowest = 0;
    for (size_t r = 1; r < timings->size(); ++r) {
      slowest = (*timings)[r].medianUs > (*timings)[slowest].medianUs ? r : slowest;
    }
    if (tp) {
      std::printf("  ranks' graph medians:");
      for (size_t r = 0; r < timings->size(); ++r) {
        std::printf("%s rank %zu %.1f us", r == 0 ? "" : ",", r, (*timings)[r].medianUs);
      }
      std::printf("; the slowest is rank %zu\n", slowest);
      std::printf("  time in collectives per step: %.1f us in %d collective steps (%.1f%% of the "
                  "eager sum; eager, each step's time includes waiting for the other ranks)",
                  collectiveUs[0], collectives, 100.0 * collectiveUs[0] / eagerUs);
      for (size_t r = 1; r < timings->size(); ++r) {
        std::printf("%s rank %zu: %.1f us", r == 1 ? ";" : ",", r, collectiveUs[r]);
      }
      std::printf("\n");
    }
    std::printf(
        "  moves %s per step: roofline %.1f us at the copy bandwidth; the step runs at "
        "%.1f%% of it",
        ProgressReporter::formatAmount(static_cast<uint64_t>(bytes), ProgressReporter::Unit::Bytes)
            .c_str(),
        rooflineUs, 100.0 * efficiency);
    if (matrix.ok() && flops > 0) {
      std::printf("; %.2f TFLOP/s = %.1f%% of the matrix rate", flops / seconds / 1e12,
                  100.0 * flops / seconds / *matrix);
    }
    std::printf("\n  GB10 projection (not a measurement): %.0f us = bytes at 235 GB/s %.0f + the "
                "steps' fixed parts measured here %.0f + %d collectives x %.0f us; %.0f tokens/s "
                "(scaling this step's efficiency instead: %.0f us)\n",
                gb10.us, gb10.bytesUs, gb10.fixedUs, collectives, kGb10CollectiveUs,
                rows / (gb10.us * 1e-6), gb10ScaledUs);
    std::printf("  steps run eagerly: %.1f us in all (launch gaps included)\n", eagerUs);
    std::printf("  %-20s %6s %10s %7s %12s %9s %8s\n", "op", "steps", "us", "share", "bytes",
                "GB/s", "of copy");
    std::vector<std::pair<std::string, OpTotals>> ops(byOp.begin(), byOp.end());
    std::sort(ops.begin(), ops.end(),
              [](const auto &a, const auto &b) { return a.second.us > b.second.us; });
    OrderedJson byOpJson = OrderedJson::object();
    for (const auto &[op, o] : ops) {
      const double gbs = o.bytes / (o.us * 1e-6);
      std::printf("  %-20s %6d %10.1f %6.1f%% %12s %9.0f %7.1f%%\n", op.c_str(), o.steps, o.us,
                  100.0 * o.us / eagerUs,
                  ProgressReporter::formatAmount(static_cast<uint64_t>(o.bytes),
                                                 ProgressReporter::Unit::Bytes)
                      .c_str(),
                  gbs / 1e9, 100.0 * gbs / *copy);
      byOpJson[op] = {{"steps", o.steps}, {"us", o.us}, {"bytes", o.bytes}, {"flops", o.flops}};
    }
    OrderedJson programJson = {{"name", program->name()->str()},
                               {"batch", program->batch()},
                               {"rows", program->rows()},
                               {"context", ctx},
                               {"graph_median_us", t->medianUs},
                               {"graph_p10_us", t->p10Us},
                               {"graph_p90_us", t->p90Us},
                               {"tokens_per_s", rows / seconds},
                               {"bytes", bytes},
                               {"flops", flops},
                               {"roofline_us", rooflineUs},
                               {"fraction_of_roofline", efficiency},
                               {"gb10_projection_us", gb10.us},
                               {"gb10_projection_bytes_us", gb10.bytesUs},
                               {"gb10_projection_fixed_us", gb10.fixedUs},
                               {"gb10_scaled_projection_us", gb10ScaledUs},
                               {"collectives", collectives}};
    if (tp) {
      // The keys above and the steps are rank 0's.
      OrderedJson rankMedians = OrderedJson::array();
      for (const cuda::CudaEngine::ProgramTiming &rank : *timings) {
        rankMedians.push_back(rank.medianUs);
      }
      programJson["rank_graph_median_us"] = rankMedians;
      programJson["slowest_rank"] = slowest;
      programJson["slowest_rank_median_us"] = (*timings)[slowest].medianUs;
      programJson["collective_us"] = collectiveUs[0];
      programJson["rank_collective_us"] = collectiveUs;
    }
    programJson["by_op"] = byOpJson;
    programJson["steps"] = steps;
    programs.push_back(std::move(programJson));
  }
  report["programs"] = programs;
  if (std::optional<std::string> json = cl.get("json")) {
    std::ofstream(*json) << report.dump(2) << "\n";
  }
  if (std::optional<std::string> plot = cl.get("plot")) {
    writeSvg(*plot, programs);
  }
  return 0;
}

} // namespace glm::tools
