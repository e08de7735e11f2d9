// `glmc bench`: each program of a GPU plan replayed as its CUDA graph, against the device's
// measured ceilings: latency (median and spread), tokens/s, a per-step breakdown, the roofline
// time of the bytes the plan moves, and a labelled GB10 projection; optionally JSON and an SVG
// of where the time goes.
#include "runtime/common/Progress.h"
#include "runtime/cuda/Ceilings.h"
#include "runtime/cuda/CudaEngine.h"
#include "runtime/plan/StepView.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

namespace glm::tools {
namespace {

using OrderedJson = nlohmann::ordered_json;

// GB10 (DGX Spark): LPDDR5x at 273 GB/s per rank. Each collective of a decode step is a small
// all-reduce or all-gather over CX7; 20 µs is an assumed one-shot latency, not a measurement.
constexpr double kGb10BytesPerS = 273e9;
constexpr double kGb10CollectiveUs = 20.0;

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
        << static_cast<int>(p["graph_median_us"].get<double>()) << " µs)</text>\n";
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

} // namespace

int runBench(const std::vector<std::string> &args) {
  CommandLine cl("bench");
  cl.option("model").option("context").option("reps").option("json").option("plot").positional(1,
                                                                                               1);
  if (!cl.parseOrReport(args)) {
    return 2;
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
  Expected<std::unique_ptr<cuda::CudaEngine>> engine =
      cuda::CudaEngine::create(std::move(plan).value(), **checkpoint);
  if (!engine.ok()) {
    return cl.fail(engine.status());
  }
  cuda::CudaEngine &e = **engine;
  const plan::Plan &p = e.plan();
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
  const int64_t maxContext =
      p.state_pool() ? static_cast<int64_t>(p.state_pool()->max_context()) : 0;
  OrderedJson report;
  report["device"] = {{"name", dev.name},
                      {"arch", dev.arch},
                      {"copy_bytes_per_s", *copy},
                      {"matrix_flops_per_s", matrix.ok() ? *matrix : 0.0}};
  OrderedJson programs = OrderedJson::array();
  for (const plan::Program *program : *p.programs()) {
    const int64_t rows = static_cast<int64_t>(program->batch()) * program->rows();
    // The pool holds max_context tokens for all sequences together: each of the batch's gets an
    // equal share.
    const int64_t ctx =
        std::min<int64_t>(context->value_or(4096), maxContext / program->batch() - program->rows());
    Expected<cuda::CudaEngine::ProgramTiming> t =
        e.timeProgram(*program, std::max<int64_t>(ctx, 0), static_cast<int>(reps->value_or(100)));
    if (!t.ok()) {
      return cl.fail(t.status().withContext(program->name()->str()));
    }
    double bytes = 0, flops = 0, eagerUs = 0;
    int collectives = 0;
    std::map<std::string, OpTotals> byOp;
    OrderedJson steps = OrderedJson::array();
    for (uint32_t i = 0; i < program->steps()->size(); ++i) {
      const plan::Step *s = program->steps()->Get(i);
      const double stepBytes = static_cast<double>(s->bytes_read() + s->bytes_written());
      bytes += stepBytes;
      flops += static_cast<double>(s->flops());
      eagerUs += t->stepUs[i];
      collectives += s->collective() != nullptr;
      OpTotals &o = byOp[plan::EnumNameOpKind(s->op())];
      ++o.steps;
      o.us += t->stepUs[i];
      o.bytes += stepBytes;
      o.flops += static_cast<double>(s->flops());
      std::string kernel;
      if (s->launches() != nullptr) {
        for (const plan::KernelLaunch *l : *s->launches()) {
          kernel += (kernel.empty() ? "" : " + ") +
                    runtime::shortKernelName(p.kernels()->Get(l->kernel())->name()->str());
        }
      }
      steps.push_back({{"name", s->name()->str()},
                       {"op", plan::EnumNameOpKind(s->op())},
                       {"kernel", kernel},
                       {"us", t->stepUs[i]},
                       {"bytes", stepBytes},
                       {"flops", s->flops()},
                       {"gb_per_s", stepBytes / (t->stepUs[i] * 1e-6) / 1e9}});
    }
    const double seconds = t->medianUs * 1e-6;
    const double rooflineUs = bytes / *copy * 1e6;
    const double efficiency = rooflineUs / t->medianUs;
    const double gb10Us = bytes / (kGb10BytesPerS * std::min(efficiency, 1.0)) * 1e6 +
                          collectives * kGb10CollectiveUs;
    std::printf("\nprogram %s (%u x %u rows, context %lld): %.1f us median [p10 %.1f, p90 %.1f], "
                "%.0f tokens/s\n",
                program->name()->c_str(), program->batch(), program->rows(),
                static_cast<long long>(ctx), t->medianUs, t->p10Us, t->p90Us, rows / seconds);
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
    std::printf("\n  GB10 projection (not a measurement: bytes / (273 GB/s x %.0f%%) + %d "
                "collectives x %.0f us): %.0f us\n",
                100.0 * std::min(efficiency, 1.0), collectives, kGb10CollectiveUs, gb10Us);
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
    programs.push_back({{"name", program->name()->str()},
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
                        {"gb10_projection_us", gb10Us},
                        {"collectives", collectives},
                        {"by_op", byOpJson},
                        {"steps", steps}});
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
