// `glmc inspect`: what a plan holds: target, programs, arenas, kernels, collectives, segments and
// why each ends where it does, bytes per step.
#include "base/Progress.h"
#include "kernels/common/Launch.h"
#include "runtime/engine/PlanContracts.h"
#include "runtime/plan/PlanFile.h"
#include "tools/glmc/CommandLine.h"
#include "tools/glmc/Commands.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

namespace glm::tools {
namespace {

/// A rank's weight bindings by how the arena holds them: count and bytes of each kind.
struct WeightKinds {
  struct Kind {
    uint32_t count = 0;
    uint64_t bytes = 0;
  };
  Kind plain, q4, fp8, exl3;
};

WeightKinds weightKinds(const plan::Plan &p) {
  WeightKinds k;
  if (p.weights() != nullptr) {
    for (const plan::WeightBinding *w : *p.weights()) {
      WeightKinds::Kind &kind = w->format() == plan::WeightFormat::EXL3     ? k.exl3
                                : w->encoding() == plan::DenseEncoding::Q4  ? k.q4
                                : w->encoding() == plan::DenseEncoding::Fp8 ? k.fp8
                                                                            : k.plain;
      ++kind.count;
      kind.bytes += w->slice()->size();
    }
  }
  return k;
}

using OrderedJson = nlohmann::ordered_json;

std::string str(const flatbuffers::String *s) { return s ? s->str() : ""; }

/// Tokens the page pool holds for all sequences together, less the partly filled page each
/// sequence may hold (what the compiler was asked for, plan-size-state-pool).
uint64_t poolTokens(const plan::StatePool &pool) {
  const uint64_t pages =
      pool.page_count() > pool.max_sequences() ? pool.page_count() - pool.max_sequences() : 0;
  return pages * pool.page_tokens();
}

std::string bytesText(uint64_t bytes) {
  return ProgressReporter::formatAmount(bytes, ProgressReporter::Unit::Bytes);
}

/// Bytes a collective step moves per rank: its output (all-gather) or its buffer (all-reduce).
uint64_t collectiveBytes(const plan::Step &step) {
  uint64_t bytes = 0;
  if (step.results()) {
    for (const plan::TensorRef *t : *step.results()) {
      bytes += t->slice()->size();
    }
  }
  return bytes;
}

/// The workspace arena's bytes (0 for a plan without one: the CPU's).
uint64_t workspaceBytes(const plan::Plan &p) {
  for (const plan::Arena *a : *p.arenas()) {
    if (a->kind() == plan::ArenaKind::Workspace) {
      return a->size();
    }
  }
  return 0;
}

const char *segmentEndName(plan::SegmentEnd end) {
  return end == plan::SegmentEnd::Collective ? "collective" : "program_end";
}

OrderedJson toJson(const plan::Plan &p) {
  OrderedJson j;
  j["format_version"] = p.format_version();
  j["model"] = str(p.model());
  j["target"] = str(p.target()->name());
  j["tp"] = p.tp();
  j["precision"] = plan::EnumNamePrecision(p.precision());
  OrderedJson arenas = OrderedJson::array();
  uint64_t total = 0;
  for (const plan::Arena *a : *p.arenas()) {
    arenas.push_back({{"name", str(a->name())}, {"size", a->size()}});
    total += a->size();
  }
  j["arenas"] = arenas;
  j["workspace"] = workspaceBytes(p);
  j["bytes_per_rank"] = total;
  j["weights"] = p.weights() ? p.weights()->size() : 0;
  const WeightKinds kinds = weightKinds(p);
  OrderedJson byKind = OrderedJson::object();
  for (auto [name, kind] : {std::pair{"plain", kinds.plain}, std::pair{"q4", kinds.q4},
                            std::pair{"fp8", kinds.fp8}, std::pair{"exl3", kinds.exl3}}) {
    byKind[name] = {{"bindings", kind.count}, {"bytes", kind.bytes}};
  }
  j["weight_encodings"] = byKind;
  j["states"] = p.states() ? p.states()->size() : 0;
  if (const plan::StatePool *pool = p.state_pool()) {
    j["max_sequences"] = pool->max_sequences();
    j["window_tokens"] = pool->max_context();
    j["pool_tokens"] = poolTokens(*pool);
  }
  OrderedJson kernels = OrderedJson::array();
  if (p.kernels()) {
    for (const plan::Kernel *k : *p.kernels()) {
      OrderedJson cubins = OrderedJson::object();
      if (k->cubins()) {
        for (const plan::Cubin *c : *k->cubins()) {
          cubins[plan::EnumNameArch(c->arch())] = c->image() ? c->image()->size() : 0;
        }
      }
      kernels.push_back({{"name", str(k->name())}, {"cubins", cubins}});
    }
  }
  j["kernels"] = kernels;
  OrderedJson programs = OrderedJson::array();
  for (const plan::Program *program : *p.programs()) {
    OrderedJson pj;
    pj["name"] = str(program->name());
    pj["kind"] = plan::EnumNameProgramKind(program->kind());
    pj["batch"] = program->batch();
    pj["rows"] = program->rows();
    pj["segments"] = program->segments() ? program->segments()->size() : 0;
    OrderedJson segments = OrderedJson::array();
    if (program->segments()) {
      for (const plan::Segment *seg : *program->segments()) {
        segments.push_back({{"first_step", seg->first_step()},
                            {"step_count", seg->step_count()},
                            {"end", segmentEndName(seg->end())},
                            {"reason", str(seg->reason())}});
      }
    }
    pj["segment_list"] = segments;
    uint64_t read = 0, written = 0, flops = 0, collectives = 0, collectiveBytesTotal = 0;
    OrderedJson steps = OrderedJson::array();
    if (program->steps()) {
      for (const plan::Step *s : *program->steps()) {
        read += s->bytes_read();
        written += s->bytes_written();
        flops += s->flops();
        OrderedJson sj = {{"name", str(s->name())},
                          {"op", s->op()->c_str()},
                          {"bytes_read", s->bytes_read()},
                          {"bytes_written", s->bytes_written()},
                          {"flops", s->flops()}};
        if (s->launches() && p.kernels()) {
          OrderedJson kernels = OrderedJson::array();
          for (const plan::KernelLaunch *l : *s->launches()) {
            kernels.push_back(str(p.kernels()->Get(l->kernel())->name()));
          }
          sj["kernels"] = kernels;
        }
        if (s->no_kernel()) {
          sj["no_kernel"] = str(s->no_kernel());
        }
        if (s->collective()) {
          ++collectives;
          collectiveBytesTotal += collectiveBytes(*s);
          sj["collective_bytes"] = collectiveBytes(*s);
        }
        steps.push_back(sj);
      }
    }
    pj["steps"] = steps.size();
    pj["bytes_read"] = read;
    pj["bytes_written"] = written;
    pj["flops"] = flops;
    pj["collectives"] = collectives;
    pj["collective_bytes"] = collectiveBytesTotal;
    pj["step_list"] = steps;
    programs.push_back(pj);
  }
  j["programs"] = programs;
  return j;
}

void printText(const plan::Plan &p, bool allSteps) {
  std::printf("plan: %s\n", str(p.model()).c_str());
  std::printf("  target %s, TP %u, %s activations, format %u\n", str(p.target()->name()).c_str(),
              p.tp(), plan::EnumNamePrecision(p.precision()), p.format_version());
  uint64_t total = 0;
  std::printf("arenas (per rank)\n");
  for (const plan::Arena *a : *p.arenas()) {
    std::printf("  %-12s %14s%s\n", str(a->name()).c_str(), bytesText(a->size()).c_str(),
                a->kind() == plan::ArenaKind::Workspace ? "  (kernel scratch)" : "");
    total += a->size();
  }
  std::printf("  %-12s %14s", "total", bytesText(total).c_str());
  if (p.target()->memory_bytes() > 0) {
    std::printf("  of %s on %s", bytesText(p.target()->memory_bytes()).c_str(),
                str(p.target()->name()).c_str());
  }
  std::printf("\n");
  if (const plan::StatePool *pool = p.state_pool()) {
    std::printf("state: %u sequences, a window of %llu tokens each, a pool of %llu tokens (%u "
                "pages of %u tokens, %s each)\n",
                pool->max_sequences(), static_cast<unsigned long long>(pool->max_context()),
                static_cast<unsigned long long>(poolTokens(*pool)), pool->page_count(),
                pool->page_tokens(), bytesText(pool->page_bytes()).c_str());
  }
  std::printf("weights: %u bindings; states: %u layouts\n", p.weights() ? p.weights()->size() : 0,
              p.states() ? p.states()->size() : 0);
  const WeightKinds kinds = weightKinds(p);
  std::printf("  as stored %u (%s), q4 %u (%s), fp8 %u (%s), EXL3 %u (%s)\n", kinds.plain.count,
              bytesText(kinds.plain.bytes).c_str(), kinds.q4.count,
              bytesText(kinds.q4.bytes).c_str(), kinds.fp8.count,
              bytesText(kinds.fp8.bytes).c_str(), kinds.exl3.count,
              bytesText(kinds.exl3.bytes).c_str());
  if (p.kernels() && p.kernels()->size() > 0) {
    std::printf("kernels: %u\n", p.kernels()->size());
    for (const plan::Kernel *k : *p.kernels()) {
      std::string cubins;
      if (k->cubins()) {
        for (const plan::Cubin *c : *k->cubins()) {
          cubins += std::string(" ") + plan::EnumNameArch(c->arch()) + " " +
                    bytesText(c->image() ? c->image()->size() : 0);
        }
      }
      std::printf("  %-52s %s\n", kernels::shortKernelName(str(k->name())).c_str(),
                  cubins.empty() ? "no cubin" : cubins.c_str());
    }
  } else if (p.target()->arch() == plan::Arch::Cpu) {
    std::printf("kernels: CPU reference (by op)\n");
  }
  if (p.target()->arch() != plan::Arch::Cpu) {
    // Steps compiled without a kernel (an op or shape whose CUDA kernel is not written yet).
    std::map<std::string, std::pair<int, std::string>> missing; // op -> steps, the first reason
    for (const plan::Program *program : *p.programs()) {
      for (const plan::Step *s : *program->steps()) {
        if (!s->collective() && (!s->launches() || s->launches()->size() == 0)) {
          auto &[n, reason] = missing[str(s->op())];
          if (n++ == 0) {
            reason = str(s->no_kernel());
          }
        }
      }
    }
    for (const auto &[op, entry] : missing) {
      std::printf("  %d %s steps have no CUDA kernel yet: the plan cannot run on a GPU (%s)\n",
                  entry.first, op.c_str(), entry.second.c_str());
    }
  }
  for (const plan::Program *program : *p.programs()) {
    uint64_t read = 0, written = 0, flops = 0, collectiveBytesTotal = 0;
    std::map<std::string, int> collectives;
    const uint32_t stepCount = program->steps() ? program->steps()->size() : 0;
    for (uint32_t i = 0; i < stepCount; ++i) {
      const plan::Step *s = program->steps()->Get(i);
      read += s->bytes_read();
      written += s->bytes_written();
      flops += s->flops();
      if (s->collective()) {
        collectives[plan::EnumNameCollectiveKind(s->collective()->kind())]++;
        collectiveBytesTotal += collectiveBytes(*s);
      }
    }
    std::printf("program %s (%s, batch %u, rows %u): %u steps in %u segment(s)\n",
                str(program->name()).c_str(), plan::EnumNameProgramKind(program->kind()),
                program->batch(), program->rows(), stepCount,
                program->segments() ? program->segments()->size() : 0);
    std::printf("  reads %s, writes %s, %.3g GFLOP per step\n", bytesText(read).c_str(),
                bytesText(written).c_str(), static_cast<double>(flops) / 1e9);
    std::printf("  collectives:");
    if (collectives.empty()) {
      std::printf(" none");
    }
    for (auto [kind, n] : collectives) {
      std::printf(" %d %s", n, kind.c_str());
    }
    if (!collectives.empty()) {
      std::printf(", %s per rank per step", bytesText(collectiveBytesTotal).c_str());
    }
    std::printf("\n");
    // Each CUDA graph of the program and why it ends where it does.
    if (program->segments()) {
      for (uint32_t i = 0; i < program->segments()->size(); ++i) {
        const plan::Segment *seg = program->segments()->Get(i);
        std::printf("  segment %u: steps %u-%u, ends at %s\n", i, seg->first_step(),
                    seg->first_step() + seg->step_count() - 1, str(seg->reason()).c_str());
      }
    }
    if (!allSteps) {
      continue;
    }
    for (uint32_t i = 0; i < stepCount; ++i) {
      const plan::Step *s = program->steps()->Get(i);
      std::string kernel = s->collective() ? plan::EnumNameCollectiveKind(s->collective()->kind())
                           : p.target()->arch() == plan::Arch::Cpu ? "cpu reference"
                                                                   : "no CUDA kernel yet";
      if (s->launches() && s->launches()->size() > 0 && p.kernels()) {
        kernel.clear();
        for (const plan::KernelLaunch *l : *s->launches()) {
          kernel += (kernel.empty() ? "" : " + ") +
                    kernels::shortKernelName(str(p.kernels()->Get(l->kernel())->name())) + " [" +
                    std::to_string(l->grid()->Get(0)) + "x" + std::to_string(l->grid()->Get(1)) +
                    "x" + std::to_string(l->grid()->Get(2)) + "]";
        }
      }
      std::printf("  %5u %-40s %-20s %-34s %12s\n", i, str(s->name()).c_str(), s->op()->c_str(),
                  kernel.c_str(), bytesText(s->bytes_read() + s->bytes_written()).c_str());
    }
  }
}

} // namespace

int runInspect(const std::vector<std::string> &args) {
  CommandLine cl("glmc inspect", "PLAN.glmp [--json] [--steps]",
                 "Describes a plan: its programs, arenas, kernels, collectives and weight bytes.");
  cl.flag("json", "print JSON").flag("steps", "list every step").positional(1, 1);
  if (std::optional<int> exit = cl.parseOrExit(args)) {
    return *exit;
  }
  Expected<std::unique_ptr<runtime::PlanFile>> plan = runtime::PlanFile::open(cl.positionals()[0]);
  if (!plan.ok()) {
    return cl.fail(plan.status());
  }
  // What the engines check before they run it: a plan inspect describes is one they accept.
  if (Status steps = runtime::validatePlanSteps(**plan); !steps.ok()) {
    return cl.fail(steps);
  }
  if (cl.has("json")) {
    // Names are the file's bytes: any that are not UTF-8 print with replacement characters.
    std::printf("%s\n", toJson((*plan)->root())
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else {
    printText((*plan)->root(), cl.has("steps"));
  }
  return 0;
}

} // namespace glm::tools
