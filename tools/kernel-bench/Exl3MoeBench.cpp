// The exl3_moe family: the routed experts of one MoE layer of the model (GLM-5.3-Flash: hidden
// 4096, 288 experts of inter 2048, top 8) in EXL3 at K = 4 with the MCG codebook (the TR3
// checkpoint's format), at decode: batch 1 with all experts on this rank (TP 1) or half of them
// with half of a token's selections among them (TP 2; Flash: 144 experts, 4 of 8 selections), and
// batch 4 (Flash: 32 distinct experts).
//
// Each row times a CUDA graph of 16 consecutive steps (as the runtime replays them), each step
// routed to other experts so that no step finds its trellises in L2, and reports the time of one
// step: the launches, the gaps between them and the trellis bytes, against the copy bandwidth.
// "bytes" are the selected experts' trellises, suh and svh, x and out; the f32 partials the two
// launches exchange (256 KB per selection, L2-resident) are not counted.
//
// Prefill (exl3_moe_prefill_gpu.h): 2048 tokens × top-k of all experts (TP 1) and of half (TP 2,
// half of a token's selections local), one step timed with events, judged by FLOP/s (2 · 3 ·
// selections · hidden · inter) against the bf16 cuBLAS rate the suite measured (measured here
// when the linear family did not run); rows for its GEMM launches alone follow.
#include "base/Random.h"
#include "kernels/moe_experts/exl3_moe_gpu.h"
#include "kernels/moe_experts/exl3_moe_prefill_gpu.h"
#include "runtime/cuda/Ceilings.h"
#include "runtime/weights/KernelViews.h"
#include "tools/kernel-bench/Bench.h"

#include <cstdio>
#include <numeric>
#include <set>
#include <string>

namespace glm::bench {

namespace {

constexpr int kBits = 4;
constexpr int kSteps = 16; // steps per timed graph

/// Sets every matrix of a binding to K = `bits`, MCG (the trellis stride stays K = 4's).
Status setBits(Suite &suite, const cuda::DeviceMemory &m, const Exl3ArenaLayout &l, int bits) {
  std::vector<uint32_t> meta(2 * l.matrices);
  for (int64_t i = 0; i < l.matrices; ++i) {
    meta[2 * i] = static_cast<uint32_t>(bits);
    meta[2 * i + 1] = 1;
  }
  return suite.ctx().upload(m.ptr() + l.metaOffset(), meta.data(), meta.size() * 4);
}

/// One binding of all the routed experts: trellis bytes of one pattern (the decode does not depend
/// on the values), scales near 1/64 and 1.
Expected<cuda::DeviceMemory> binding(Suite &suite, const Exl3ArenaLayout &l) {
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, suite.ctx().allocate(l.bytes()));
  GLM_CU(&suite.ctx().driver(), cuMemsetD8(m.ptr(), 0x5A, l.suhOffset()));
  std::vector<uint8_t> tail(l.bytes() - l.suhOffset());
  auto *suh = reinterpret_cast<uint16_t *>(tail.data());
  for (int64_t i = 0; i < l.matrices * l.k; ++i) {
    suh[i] = (i & 1) ? 0x2400 : 0xA400; // ±1/64
  }
  auto *svh = reinterpret_cast<uint16_t *>(tail.data() + (l.svhOffset() - l.suhOffset()));
  for (int64_t i = 0; i < l.matrices * l.n; ++i) {
    svh[i] = (i & 1) ? 0x3C00 : 0xBC00; // ±1
  }
  GLM_RETURN_IF_ERROR(suite.ctx().upload(m.ptr() + l.suhOffset(), tail.data(), tail.size()));
  return m;
}

/// Routing of one step: each token's `topK` distinct experts of `experts`, `local` of them in
/// [0, experts / 2) when `local` >= 0 (TP 2), else anywhere.
std::vector<int32_t> routing(SplitMix64 &rng, int64_t tokens, int local, int64_t experts,
                             int64_t topK) {
  std::vector<int32_t> ids(tokens * topK);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> low(experts / 2), high(experts / 2), all(experts);
    std::iota(low.begin(), low.end(), 0);
    std::iota(high.begin(), high.end(), static_cast<int32_t>(experts / 2));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t k = 0; k < topK; ++k) {
      std::vector<int32_t> &pool = local < 0 ? all : (k < local ? low : high);
      const int64_t taken = local < 0 ? k : (k < local ? k : k - local);
      std::swap(pool[taken], pool[taken + rng.below(pool.size() - taken)]);
      ids[t * topK + k] = pool[taken];
    }
  }
  return ids;
}

struct Config {
  const char *label;
  int64_t tokens;
  int64_t localExperts;
  int localSelections; // per token, -1: all selections are local
  int bits;
};

/// The prefill rows: a step of 2048 tokens at TP 1 and TP 2 over the bindings (all K = 4, MCG).
Status addPrefillBenches(Suite &suite, const cuda::DeviceMemory &gate, const cuda::DeviceMemory &up,
                         const cuda::DeviceMemory &down, const Exl3ArenaLayout &gateLayout,
                         const Exl3ArenaLayout &downLayout, SplitMix64 &rng) {
  constexpr int64_t kTokens = 2048;
  const glm53::Glm53Config &model = suite.model();
  const int64_t hidden = model.hiddenSize, inter = model.moeIntermediateSize,
                experts = model.nRoutedExperts, topK = model.numExpertsPerTok;
  if (suite.matrixFlopsPerS == 0) {
    GLM_ASSIGN_OR_RETURN(suite.matrixFlopsPerS, cuda::measureMatrixRate(suite.ctx()));
  }
  struct Prefill {
    const char *label;
    int64_t localExperts;
    int localSelections; // per token, -1: all
  };
  for (const Prefill &c :
       {Prefill{"TP1", experts, -1}, Prefill{"TP2", experts / 2, static_cast<int>(topK / 2)}}) {
    const std::vector<kernels::NamedLaunch> launches =
        kernels::exl3MoePrefillLaunches(kBits, 1, kTokens, hidden, inter, c.localExperts, topK);
    std::vector<std::string> names;
    for (const auto &l : launches) {
      names.push_back(l.name);
    }
    GLM_ASSIGN_OR_RETURN(
        std::unique_ptr<cuda::Module> m,
        suite.compile(R"(#include "kernels/moe_experts/exl3_moe_prefill.cuh")", names));
    const std::vector<int32_t> step = routing(rng, kTokens, c.localSelections, experts, topK);
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ids, suite.ctx().allocate(step.size() * 4));
    GLM_RETURN_IF_ERROR(suite.ctx().upload(ids.ptr(), step.data(), step.size() * 4));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(kTokens * hidden, true));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory weights, suite.random(kTokens * topK, true, 0.1f));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(kTokens * hidden * 2));
    GLM_ASSIGN_OR_RETURN(
        cuda::DeviceMemory scratch,
        suite.ctx().allocate(static_cast<size_t>(
            kernels::exl3MoePrefillScratchBytes(kTokens, topK, c.localExperts, hidden, inter))));
    const kernels::Exl3MoeGpuArgs decodeArgs{
        reinterpret_cast<const kernels::Bf16 *>(x.ptr()),
        reinterpret_cast<const int32_t *>(ids.ptr()),
        reinterpret_cast<const kernels::Bf16 *>(weights.ptr()),
        exl3GpuWeights(reinterpret_cast<const void *>(gate.ptr()), gateLayout),
        exl3GpuWeights(reinterpret_cast<const void *>(up.ptr()), gateLayout),
        exl3GpuWeights(reinterpret_cast<const void *>(down.ptr()), downLayout),
        reinterpret_cast<kernels::Bf16 *>(out.ptr()),
        nullptr,
        kTokens,
        hidden,
        inter,
        c.localExperts,
        topK,
        0,
        static_cast<float>(model.swigluLimit)};
    const kernels::Exl3MoePrefillGpuArgs a =
        kernels::exl3MoePrefillBindScratch(decodeArgs, reinterpret_cast<void *>(scratch.ptr()));
    auto launch = [&](const std::vector<size_t> &which) {
      for (size_t i : which) {
        const kernels::LaunchDims &dims = launches[i].dims;
        GLM_RETURN_IF_ERROR(suite.ctx().launch(m->function(static_cast<int>(i)), dims.grid,
                                               dims.block, dims.sharedMemory, a));
      }
      return Status::success();
    };
    int64_t local = 0;
    for (int32_t id : step) {
      local += id < c.localExperts;
    }
    const double selectionFlops = 2.0 * local * hidden * inter; // one matrix, every selection
    Row row;
    row.kernel = std::string("exl3_moe_prefill<K4,mcg> ") + c.label;
    char shape[96];
    std::snprintf(shape, sizeof shape, "[%lldx%lld] top %lld of %lld",
                  static_cast<long long>(kTokens), static_cast<long long>(hidden),
                  static_cast<long long>(topK), static_cast<long long>(c.localExperts));
    row.shape = shape;
    row.bytes = 3.0 * c.localExperts * (hidden * inter * kBits / 8.0);
    row.flops = 3 * selectionFlops;
    row.bound = "mma";
    row.note = "6 launches, one step";
    GLM_RETURN_IF_ERROR(suite.time([&] { return launch({0, 1, 2, 3, 4, 5}); }, row, 10));
    suite.add(row);
    // The launches alone (the routing's counts and lists stay from the runs above).
    const struct {
      const char *name;
      std::vector<size_t> which;
      double flops;
    } parts[] = {{"  gate+up gemm", {2}, 2 * selectionFlops},
                 {"  down gemm", {4}, selectionFlops},
                 {"  route+rotate+swiglu+combine", {0, 1, 3, 5}, 0}};
    for (const auto &p : parts) {
      Row part = row;
      part.kernel = row.kernel + p.name;
      part.flops = p.flops;
      part.bytes = 0;
      part.note = "alone";
      GLM_RETURN_IF_ERROR(suite.time([&] { return launch(p.which); }, part, 10));
      suite.add(part);
    }
  }
  return Status::success();
}

} // namespace

Status addExl3MoeBenches(Suite &suite) {
  const glm53::Glm53Config &model = suite.model();
  const int64_t hidden = model.hiddenSize, inter = model.moeIntermediateSize,
                experts = model.nRoutedExperts, topK = model.numExpertsPerTok;
  const Exl3ArenaLayout gateLayout{experts,           hidden, inter, exl3Padded(hidden),
                                   exl3Padded(inter), kBits};
  const Exl3ArenaLayout downLayout{experts, inter, hidden, exl3Padded(inter), exl3Padded(hidden),
                                   kBits};
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory gate, binding(suite, gateLayout));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory up, binding(suite, gateLayout));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory down, binding(suite, downLayout));
  SplitMix64 rng(43);
  const cuda::CudaDriver &d = suite.ctx().driver();
  // TP 2: half the experts on this rank, half of a token's selections among them.
  const int tp2Selections = static_cast<int>(topK / 2);
  // K = 2 and 3 (same decode work per weight, fewer bytes) tell a decode bound from a bandwidth
  // bound.
  for (const Config &c :
       {Config{"TP1 batch 1", 1, experts, -1, kBits},
        Config{"TP2 batch 1", 1, experts / 2, tp2Selections, kBits},
        Config{"TP1 batch 4", 4, experts, -1, kBits}, Config{"TP1 batch 1", 1, experts, -1, 3},
        Config{"TP1 batch 1", 1, experts, -1, 2}}) {
    for (const auto &[mem, layout] : {std::pair{&gate, &gateLayout}, std::pair{&up, &gateLayout},
                                      std::pair{&down, &downLayout}}) {
      GLM_RETURN_IF_ERROR(setBits(suite, *mem, *layout, c.bits));
    }
    const double matrixBytes =
        static_cast<double>(hidden * inter * c.bits / 8 + 2 * hidden + 2 * inter);
    const std::vector<kernels::NamedLaunch> launches =
        kernels::exl3MoeLaunches(c.bits, 1, c.tokens, hidden, inter, c.localExperts, topK);
    std::vector<std::string> names;
    for (const auto &l : launches) {
      names.push_back(l.name);
    }
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Module> m,
                         suite.compile(R"(#include "kernels/moe_experts/exl3_moe.cuh")", names));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(c.tokens * hidden, true));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory weights, suite.random(c.tokens * topK, true, 0.1f));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(c.tokens * hidden * 2));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory scratch,
                         suite.ctx().allocate(static_cast<size_t>(
                             kernels::exl3MoeScratchBytes(c.tokens, topK, hidden, inter))));
    // kSteps routings (and their ids buffers), and the bytes their selected experts hold.
    std::vector<cuda::DeviceMemory> ids;
    double selected = 0;
    for (int s = 0; s < kSteps; ++s) {
      const std::vector<int32_t> step = routing(rng, c.tokens, c.localSelections, experts, topK);
      std::set<int32_t> mine;
      for (int32_t id : step) {
        if (id < c.localExperts) {
          mine.insert(id);
        }
      }
      selected += static_cast<double>(mine.size()) / kSteps;
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory di, suite.ctx().allocate(step.size() * 4));
      GLM_RETURN_IF_ERROR(suite.ctx().upload(di.ptr(), step.data(), step.size() * 4));
      ids.push_back(std::move(di));
    }
    // Rows of the resident path (the kernel's capacity; `main chunked` times it with none).
    int32_t residentRows = kernels::kExl3MoeResidentRows;
    auto argsFor = [&](int s) {
      kernels::Exl3MoeGpuArgs a{
          reinterpret_cast<const kernels::Bf16 *>(x.ptr()),
          reinterpret_cast<const int32_t *>(ids[s].ptr()),
          reinterpret_cast<const kernels::Bf16 *>(weights.ptr()),
          exl3GpuWeights(reinterpret_cast<const void *>(gate.ptr()), gateLayout),
          exl3GpuWeights(reinterpret_cast<const void *>(up.ptr()), gateLayout),
          exl3GpuWeights(reinterpret_cast<const void *>(down.ptr()), downLayout),
          reinterpret_cast<kernels::Bf16 *>(out.ptr()),
          nullptr,
          c.tokens,
          hidden,
          inter,
          c.localExperts,
          topK,
          0,
          static_cast<float>(model.swigluLimit)};
      a.residentRows = residentRows;
      kernels::exl3MoeBindScratch(a, reinterpret_cast<void *>(scratch.ptr()));
      return a;
    };
    // A graph of kSteps steps of the chosen launches (all, or one of them alone).
    auto timeGraph = [&](const std::vector<size_t> &which, Row &row) -> Status {
      GLM_CU(&d, cuStreamBeginCapture(suite.ctx().stream(), cuda::kCaptureModeThreadLocal));
      Status captured = Status::success();
      for (int s = 0; s < kSteps && captured.ok(); ++s) {
        const kernels::Exl3MoeGpuArgs a = argsFor(s);
        for (size_t i : which) {
          const kernels::LaunchDims &dims = launches[i].dims;
          captured = suite.ctx().launch(m->function(static_cast<int>(i)), dims.grid, dims.block,
                                        dims.sharedMemory, a);
          if (!captured.ok()) {
            break;
          }
        }
      }
      cuda::CUgraph graph = nullptr;
      GLM_CU(&d, cuStreamEndCapture(suite.ctx().stream(), &graph));
      GLM_RETURN_IF_ERROR(captured);
      cuda::CUgraphExec exec = nullptr;
      GLM_CU(&d, cuGraphInstantiateWithFlags(&exec, graph, 0));
      const Status timed = suite.time(
          [&] {
            GLM_CU(&d, cuGraphLaunch(exec, suite.ctx().stream()));
            return Status::success();
          },
          row, 30);
      d.cuGraphExecDestroy(exec);
      d.cuGraphDestroy(graph);
      row.medianUs /= kSteps;
      row.spreadUs /= kSteps;
      return timed;
    };
    Row row;
    row.kernel = "exl3_moe<K" + std::to_string(c.bits) + ",mcg> " + c.label;
    char shape[96];
    std::snprintf(shape, sizeof shape, "[%lldx%lld] %.1f of %lld experts",
                  static_cast<long long>(c.tokens), static_cast<long long>(hidden), selected,
                  static_cast<long long>(c.localExperts));
    row.shape = shape;
    row.bytes = selected * 3 * matrixBytes + 2.0 * c.tokens * hidden * 2 + c.tokens * topK * 6;
    row.flops = 6.0 * c.tokens * topK * hidden * inter;
    row.bound = "bw";
    GLM_RETURN_IF_ERROR(timeGraph({0, 1}, row));
    row.note = "2 launches, per step of a 16-step graph (the resident path on)";
    suite.add(row);
    if (c.bits != kBits) {
      continue;
    }
    Row main = row;
    main.kernel = row.kernel + "  main";
    GLM_RETURN_IF_ERROR(timeGraph({0}, main));
    main.note = "exl3MoeKernel alone";
    suite.add(main);
    Row chunked = row;
    chunked.kernel = row.kernel + "  main chunked";
    residentRows = 0;
    GLM_RETURN_IF_ERROR(timeGraph({0}, chunked));
    residentRows = kernels::kExl3MoeResidentRows;
    chunked.note = "exl3MoeKernel alone, every item chunked (the plans' default for now)";
    suite.add(chunked);
    Row combine = row;
    combine.kernel = row.kernel + "  combine";
    combine.bytes = c.tokens * topK * (inter / 128) * hidden * 4.0 + c.tokens * hidden * 2.0;
    combine.flops = 0;
    GLM_RETURN_IF_ERROR(timeGraph({1}, combine));
    combine.note = "exl3MoeCombineKernel alone (bytes: the partials)";
    suite.add(combine);
  }
  for (const auto &[mem, layout] : {std::pair{&gate, &gateLayout}, std::pair{&up, &gateLayout},
                                    std::pair{&down, &downLayout}}) {
    GLM_RETURN_IF_ERROR(setBits(suite, *mem, *layout, kBits));
  }
  GLM_RETURN_IF_ERROR(addPrefillBenches(suite, gate, up, down, gateLayout, downLayout, rng));
  // The decode's instruction budget, for reading the rows above: at the copy bandwidth an SM must
  // consume ~32 K = 4 weights per clock, i.e. ~4 warp instructions per lane and weight over its
  // 4 schedulers (integer ALU ops at half that rate).
  std::printf("exl3_moe decode at K = 4, MCG, per lane and tile (8 weights; sm_90a SASS): 2 LDS "
              "(trellis words), 11 extraction (3 SHF.W funnel shifts, LOP3 masks, PRMT, SHF), 8 "
              "IMAD (hash), 8 LOP3 (mask/xor), 4 HMMA per 16 tokens, 1 LDS.128 (A) = ~33 issue "
              "slots, ~4.1 per weight against a budget of ~4 at the copy bandwidth; rows whose "
              "time does not change with K (2, 3, 4) are latency-bound, not decode-bound.\n");
  return Status::success();
}

} // namespace glm::bench
