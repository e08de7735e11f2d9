// The moe family: the router, the routed experts and the sampler at the model's shapes
// (GLM-5.3-Flash: hidden 4096, 288 experts of inter 2048, top 8; vocabulary 154,880), at decode
// (1 and 4 tokens) and prefill (2048 rows).
#include "base/Random.h"
#include "kernels/common/DenseFormats.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "kernels/moe_router/moe_router_gpu.h"
#include "kernels/sample/sample_gpu.h"
#include "tools/kernel-bench/Bench.h"

#include <bit>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>

namespace glm::bench {

namespace {

const std::string kBf16 = "glm::kernels::Bf16";

size_t l2Bytes(Suite &suite) {
  return suite.ctx().info().l2Bytes > 0 ? suite.ctx().info().l2Bytes : (60u << 20);
}

/// Enough copies of `bytes` that together they are 4x the L2 (at most 64).
size_t copiesFor(Suite &suite, size_t bytes) {
  return std::clamp<size_t>((4 * l2Bytes(suite) + bytes - 1) / bytes, 1, 64);
}

std::string shapeOf(int64_t tokens, int64_t hidden, const std::string &rest) {
  std::string s = "[";
  s += std::to_string(tokens);
  s += "x";
  s += std::to_string(hidden);
  s += "]";
  s += rest;
  return s;
}

/// Random distinct experts per token: `topK` of `experts`.
std::vector<int32_t> routing(SplitMix64 &rng, int64_t tokens, int64_t experts, int64_t topK) {
  std::vector<int32_t> ids(tokens * topK), pool(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t k = 0; k < topK; ++k) {
      std::swap(pool[k], pool[k + rng.below(experts - k)]);
      ids[t * topK + k] = pool[k];
    }
  }
  return ids;
}

/// Which of the router's two launches a row times.
enum class RouterPart { Both, Scores, Select };

/// moe_router at `tokens` tokens with bf16 or fp8-block weights (the deployment's), each call on
/// the next of enough weight copies that they miss the L2: both launches eagerly (host gaps
/// included), or in a graph of 64 calls (`part`: both launches, or one of them alone).
Status benchRouter(Suite &suite, cuda::Module &m, kernels::MoeRouterScores scoresKernel, bool fp8,
                   int64_t tokens, bool graph, RouterPart part) {
  using kernels::MoeRouterScores;
  const glm53::Glm53Config &model = suite.model();
  const int64_t hidden = model.hiddenSize, experts = model.nRoutedExperts,
                topK = model.numExpertsPerTok;
  const int64_t scaleBytes = 4 * kernels::fp8BlocksOf(experts) * kernels::fp8BlocksOf(hidden);
  const size_t codeBytes = experts * hidden * (fp8 ? 1 : 2);
  const size_t weightBytes = codeBytes + (fp8 ? scaleBytes : 0);
  std::vector<cuda::DeviceMemory> weights;
  for (size_t c = 0; c < copiesFor(suite, weightBytes); ++c) {
    if (fp8) {
      // The values do not change the time: e4m3 0x30 (0.25) codes, scales of 1/64.
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.ctx().allocate(weightBytes));
      GLM_CU(&suite.ctx().driver(), cuMemsetD8(w.ptr(), 0x30, codeBytes));
      const std::vector<float> scales(scaleBytes / 4, 1.0f / 64);
      GLM_RETURN_IF_ERROR(suite.ctx().upload(w.ptr() + codeBytes, scales.data(), scaleBytes));
      weights.push_back(std::move(w));
    } else {
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.random(experts * hidden, true, 0.02f));
      weights.push_back(std::move(w));
    }
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory bias, suite.random(experts, false, 0.05f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(tokens * hidden, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory scores, suite.ctx().allocate(tokens * experts * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ids, suite.ctx().allocate(tokens * topK * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.ctx().allocate(tokens * topK * 2));
  const kernels::LaunchDims scoresDims =
      kernels::moeRouterScoresLaunch(scoresKernel, tokens, experts, hidden, 2);
  const kernels::LaunchDims selectDims = kernels::moeRouterSelectLaunch(tokens);
  Row row;
  const char *which = part == RouterPart::Both     ? "+select"
                      : part == RouterPart::Scores ? " alone"
                                                   : "";
  row.kernel = part == RouterPart::Select
                   ? std::string("moe_router<bf16> select")
                   : strCat("moe_router<bf16,", fp8 ? "fp8" : "bf16", "> ",
                            scoresKernel == MoeRouterScores::Gemv     ? "gemv"
                            : scoresKernel == MoeRouterScores::Decode ? "decode"
                                                                      : "tiled",
                            which);
  row.shape = shapeOf(tokens, hidden, strCat("·[", hidden, "x", experts, "] top ", topK));
  const double scoreBytes = tokens * experts * 4.0;
  row.bytes =
      part == RouterPart::Select
          ? scoreBytes + experts * 4 + tokens * topK * (4 + 2)
          : static_cast<double>(weightBytes + tokens * hidden * 2) + scoreBytes +
                (part == RouterPart::Both ? scoreBytes + experts * 4 + tokens * topK * (4 + 2)
                                          : 0.0);
  row.flops = part == RouterPart::Select ? 0.0 : 2.0 * tokens * hidden * experts;
  row.bound = "bw";
  // Module order: each scores kernel in MoeRouterScores order (bf16, fp8 weights), then select.
  const int scoresIndex = static_cast<int>(scoresKernel) * 2 + (fp8 ? 1 : 0);
  const auto launch = [&](size_t copy) -> Status {
    const cuda::DeviceMemory &weight = weights[copy % weights.size()];
    const kernels::MoeRouterGpuArgs args{
        reinterpret_cast<const void *>(x.ptr()),
        reinterpret_cast<const void *>(weight.ptr()),
        reinterpret_cast<const void *>(bias.ptr()),
        reinterpret_cast<float *>(scores.ptr()),
        reinterpret_cast<int32_t *>(ids.ptr()),
        reinterpret_cast<void *>(w.ptr()),
        tokens,
        hidden,
        experts,
        topK,
        model.nGroup,
        model.topkGroup,
        model.normTopkProb ? 1 : 0,
        0,
        static_cast<float>(model.routedScalingFactor),
        fp8 ? reinterpret_cast<const float *>(weight.ptr() + codeBytes) : nullptr};
    if (part != RouterPart::Select) {
      GLM_RETURN_IF_ERROR(
          suite.ctx().launch(m.function(scoresIndex), scoresDims.grid, scoresDims.block, 0, args));
    }
    if (part == RouterPart::Scores) {
      return Status::success();
    }
    return suite.ctx().launch(m.function(6), selectDims.grid, selectDims.block, 0, args);
  };
  if (graph) {
    constexpr int kCalls = 64;
    row.bytes *= kCalls;
    row.flops *= kCalls;
    row.note = strCat("graph of ", kCalls, " calls");
    GLM_RETURN_IF_ERROR(suite.timeGraph(kCalls, [&](int i) { return launch(i); }, row));
  } else {
    size_t next = 0;
    GLM_RETURN_IF_ERROR(suite.time([&] { return launch(next++); }, row));
  }
  suite.add(row);
  return Status::success();
}

Status addRouter(Suite &suite) {
  using kernels::MoeRouterScores;
  const std::string fp8 = "glm::kernels::Fp8E4m3";
  std::vector<std::string> names;
  for (MoeRouterScores k :
       {MoeRouterScores::Gemv, MoeRouterScores::Decode, MoeRouterScores::Tiled}) {
    for (const std::string &w : {kBf16, fp8}) {
      names.push_back(kernels::moeRouterScoresName(k, kBf16, w));
    }
  }
  names.push_back("glm::kernels::moeRouterSelectKernel<glm::kernels::Bf16>");
  GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Module> m,
                       suite.compile(R"(#include "kernels/moe_router/moe_router.cuh")", names));
  const int64_t hidden = suite.model().hiddenSize;
  for (int64_t tokens : {1, 4, 2048}) {
    GLM_RETURN_IF_ERROR(benchRouter(suite, *m, kernels::moeRouterScoresKernelFor(tokens, hidden, 2),
                                    false, tokens, false, RouterPart::Both));
  }
  // Decode as the deployment runs it (fp8 blocks, inside a graph): both launches, each alone, and
  // the decode scores kernel against the gemv kernel it replaced.
  for (int64_t tokens : {1, 4, 16}) {
    for (RouterPart part : {RouterPart::Both, RouterPart::Scores, RouterPart::Select}) {
      GLM_RETURN_IF_ERROR(
          benchRouter(suite, *m, MoeRouterScores::Decode, true, tokens, true, part));
    }
    GLM_RETURN_IF_ERROR(
        benchRouter(suite, *m, MoeRouterScores::Gemv, true, tokens, true, RouterPart::Scores));
  }
  for (MoeRouterScores k : {MoeRouterScores::Gemv, MoeRouterScores::Decode}) {
    GLM_RETURN_IF_ERROR(benchRouter(suite, *m, k, false, 1, true, RouterPart::Scores));
  }
  return Status::success();
}

Status addExperts(Suite &suite) {
  const glm53::Glm53Config &model = suite.model();
  const int64_t hidden = model.hiddenSize, inter = model.moeIntermediateSize,
                experts = model.nRoutedExperts, topK = model.numExpertsPerTok;
  // All routed experts, as the model holds them (Flash's 288: 14.5 GB of bf16): filled on the
  // device with one small value (0x3C3C, ~0.0115); the values do not change the time.
  const size_t matrix = static_cast<size_t>(inter * hidden) * 2;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory gate, suite.ctx().allocate(experts * matrix));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory up, suite.ctx().allocate(experts * matrix));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory down, suite.ctx().allocate(experts * matrix));
  for (const cuda::DeviceMemory *mem : {&gate, &up, &down}) {
    GLM_CU(&suite.ctx().driver(), cuMemsetD8(mem->ptr(), 0x3C, mem->bytes()));
  }
  SplitMix64 rng(42);
  struct Config {
    const char *t, *w;
    int64_t tokens;
  };
  for (const Config &c : {Config{"bf16", "bf16", 1}, Config{"bf16", "bf16", 4},
                          Config{"f32", "bf16", 1}, Config{"bf16", "bf16", 2048}}) {
    const bool actBf16 = std::string(c.t) == "bf16";
    const int64_t tBytes = actBf16 ? 2 : 4;
    const std::string t = actBf16 ? kBf16 : "float";
    const kernels::MoeExpertsPath path =
        kernels::moeExpertsPathFor(actBf16, c.tokens, hidden, inter);
    const std::vector<kernels::NamedLaunch> launches =
        kernels::moeExpertsLaunches(path, t, kBf16, c.tokens, hidden, inter, experts, topK);
    std::vector<std::string> names;
    for (const auto &l : launches) {
      names.push_back(l.name);
    }
    GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Module> m,
                         suite.compile(R"(#include "kernels/moe_experts/moe_experts.cuh")", names));
    const std::vector<int32_t> ids = routing(rng, c.tokens, experts, topK);
    const std::set<int32_t> touched(ids.begin(), ids.end());
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dids, suite.ctx().allocate(ids.size() * 4));
    GLM_RETURN_IF_ERROR(suite.ctx().upload(dids.ptr(), ids.data(), ids.size() * 4));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(c.tokens * hidden, actBf16));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory weights, suite.random(c.tokens * topK, actBf16, 0.1f));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(c.tokens * hidden * tBytes));
    const kernels::MoeExpertsScratch layout =
        kernels::moeExpertsScratch(path, c.tokens, topK, experts, hidden, inter, tBytes);
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory scratch, suite.ctx().allocate(layout.bytes));
    kernels::MoeExpertsGpuArgs args{reinterpret_cast<const void *>(x.ptr()),
                                    reinterpret_cast<const int32_t *>(dids.ptr()),
                                    reinterpret_cast<const void *>(weights.ptr()),
                                    reinterpret_cast<const void *>(gate.ptr()),
                                    reinterpret_cast<const void *>(up.ptr()),
                                    reinterpret_cast<const void *>(down.ptr()),
                                    reinterpret_cast<void *>(out.ptr()),
                                    nullptr,
                                    nullptr,
                                    nullptr,
                                    nullptr,
                                    c.tokens,
                                    hidden,
                                    inter,
                                    experts,
                                    topK,
                                    0,
                                    static_cast<float>(model.swigluLimit)};
    kernels::moeExpertsBindScratch(args, path, reinterpret_cast<void *>(scratch.ptr()), tBytes);
    Row row;
    row.kernel = std::string("moe_experts<") + c.t + "," + c.w + "> " +
                 (path == kernels::MoeExpertsPath::Decode       ? "decode"
                  : path == kernels::MoeExpertsPath::PrefillMma ? "prefill-mma"
                                                                : "prefill-simt");
    char rest[96];
    std::snprintf(rest, sizeof rest, " %zu of %lld experts", touched.size(),
                  static_cast<long long>(experts));
    row.shape = shapeOf(c.tokens, hidden, rest);
    // Every touched expert's three matrices once, x in, out back.
    row.bytes = static_cast<double>(touched.size() * 3 * matrix + 2 * c.tokens * hidden * tBytes +
                                    c.tokens * topK * (4 + tBytes));
    row.flops = 6.0 * c.tokens * topK * hidden * inter;
    row.bound = "bw";
    GLM_RETURN_IF_ERROR(suite.time(
        [&] {
          for (size_t i = 0; i < launches.size(); ++i) {
            const kernels::LaunchDims &d = launches[i].dims;
            GLM_RETURN_IF_ERROR(suite.ctx().launch(m->function(static_cast<int>(i)), d.grid,
                                                   d.block, d.sharedMemory, args));
          }
          return Status::success();
        },
        row, c.tokens > 64 ? 10 : 100));
    row.note = std::to_string(launches.size()) + " launches";
    suite.add(row);
    if (path == kernels::MoeExpertsPath::Decode) {
      // Each launch alone: gate+up reads two matrices per touched expert, down one.
      const char *parts[] = {"  gate+up", "  down", "  combine"};
      const double partBytes[] = {static_cast<double>(touched.size() * 2 * matrix),
                                  static_cast<double>(touched.size() * matrix),
                                  static_cast<double>(c.tokens * (topK + 1) * hidden * tBytes)};
      for (size_t i = 0; i < launches.size() && i < 3; ++i) {
        Row part;
        part.kernel = row.kernel + parts[i];
        part.shape = row.shape;
        part.bytes = partBytes[i];
        part.bound = "bw";
        GLM_RETURN_IF_ERROR(suite.time(
            [&] {
              const kernels::LaunchDims &d = launches[i].dims;
              return suite.ctx().launch(m->function(static_cast<int>(i)), d.grid, d.block,
                                        d.sharedMemory, args);
            },
            part));
        suite.add(part);
      }
    }
  }
  return Status::success();
}

Status addSampler(Suite &suite) {
  const int64_t vocab = suite.model().vocabSize;
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> m,
      suite.compile(R"(#include "kernels/sample/sample.cuh")",
                    {"glm::kernels::sampleProcessKernel", "glm::kernels::sampleKernel"}));
  struct Config {
    const char *label;
    float temperature, topP, minP;
    int32_t topK;
    bool processed; // penalties on 2000 seen tokens, 50 logit_bias entries, a mask
    int32_t logprobs;
  };
  const Config configs[] = {
      {"greedy", 0.0f, 1.0f, 0.0f, 0, false, -1},
      {"T0.7 top_k 50 top_p 0.9", 0.7f, 0.9f, 0.0f, 50, false, -1},
      {"T1 top_p 0.95", 1.0f, 0.95f, 0.0f, 0, false, -1},
      {"T1 min_p 0.05", 1.0f, 1.0f, 0.05f, 0, false, -1},
      {"T1 (all kept)", 1.0f, 1.0f, 0.0f, 0, false, -1},
      {"greedy + penalties, bias, mask", 0.0f, 1.0f, 0.0f, 0, true, -1},
      {"T1 top_p 0.95 + penalties, bias, mask", 1.0f, 0.95f, 0.0f, 0, true, -1},
      {"T1 top_p 0.95 + top_logprobs 20", 1.0f, 0.95f, 0.0f, 0, false, 20}};
  constexpr int64_t kOut = 1 + kernels::kSampleTopLogprobs;
  const int64_t maskWords = kernels::maskWords(vocab);
  for (int64_t rows : {1, 4, 16}) {
    const size_t bytes = rows * vocab * 4;
    std::vector<cuda::DeviceMemory> logits;
    for (size_t c = 0; c < copiesFor(suite, bytes); ++c) {
      // Logits of spread 3: a few hundred tokens hold most of the mass.
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory l, suite.random(rows * vocab, false, 3.0f));
      logits.push_back(std::move(l));
    }
    std::vector<int32_t> positions(rows), slots(rows);
    std::iota(positions.begin(), positions.end(), 1000);
    std::iota(slots.begin(), slots.end(), 0);
    // Each sequence has seen 2000 tokens (a quarter of them in its prompt), may sample 7 tokens
    // in 8, and biases 50.
    std::vector<uint32_t> counts(rows * vocab, 0), mask(rows * maskWords, 0);
    std::vector<int32_t> bias(rows * 2 * kernels::kSampleBiasEntries, 0);
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t k = 0; k < 2000; ++k) {
        const int64_t id = (k * 7919 + b * 31) % vocab;
        counts[b * vocab + id] = k < 500 ? kernels::kPromptSeenBit : 1u;
      }
      for (int64_t i = 0; i < vocab; ++i) {
        mask[b * maskWords + i / 32] |= i % 8 != 3 ? 1u << (i % 32) : 0u;
      }
      for (int64_t e = 0; e < 50; ++e) {
        bias[b * 2 * kernels::kSampleBiasEntries + 2 * e] = static_cast<int32_t>(e * 3001);
        bias[b * 2 * kernels::kSampleBiasEntries + 2 * e + 1] = std::bit_cast<int32_t>(-2.0f);
      }
    }
    auto upload = [&](const auto &v) -> Expected<cuda::DeviceMemory> {
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory d, suite.ctx().allocate(v.size() * 4));
      GLM_RETURN_IF_ERROR(suite.ctx().upload(d.ptr(), v.data(), v.size() * 4));
      return d;
    };
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dpos, upload(positions));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dslots, upload(slots));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dcounts, upload(counts));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dmask, upload(mask));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dbias, upload(bias));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dparams,
                         suite.ctx().allocate(rows * sizeof(kernels::SampleWords)));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory processed, suite.ctx().allocate(bytes));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ids, suite.ctx().allocate(rows * kOut * 4));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory logprobs, suite.ctx().allocate(rows * kOut * 4));
    for (const Config &c : configs) {
      std::vector<kernels::SampleWords> words(rows, kernels::SampleWords{});
      for (int64_t b = 0; b < rows; ++b) {
        kernels::SampleWords &w = words[b];
        w.temperature = c.temperature;
        w.topP = c.topP;
        w.minP = c.minP;
        w.topK = c.topK;
        w.seedLo = static_cast<uint32_t>(12345 + b);
        w.logprobs = c.logprobs;
        if (c.processed) {
          w.presence = 0.5f;
          w.frequency = 0.3f;
          w.repetition = 1.1f;
          w.biasCount = 50;
          w.hasMask = 1;
        }
      }
      GLM_RETURN_IF_ERROR(suite.ctx().upload(dparams.ptr(), words.data(),
                                             words.size() * sizeof(kernels::SampleWords)));
      kernels::StepContext ctx{};
      ctx.positions = reinterpret_cast<const int32_t *>(dpos.ptr());
      ctx.slots = reinterpret_cast<const int32_t *>(dslots.ptr());
      ctx.rowsPerSequence = 1;
      const kernels::LaunchDims dp = kernels::sampleProcessLaunch(rows, vocab);
      const kernels::LaunchDims d = kernels::sampleLaunch(rows);
      size_t next = 0;
      Row row;
      row.kernel = std::string("sample ") + c.label;
      char shape[64];
      std::snprintf(shape, sizeof shape, "[%lldx%lld] f32", static_cast<long long>(rows),
                    static_cast<long long>(vocab));
      row.shape = shape;
      // The logits once; processed rows also read their counts and mask and write and read the
      // processed row.
      row.bytes = static_cast<double>(bytes + rows * (sizeof(kernels::SampleWords) + 8 * kOut)) +
                  (c.processed ? static_cast<double>(bytes * 3 + rows * maskWords * 4) : 0.0);
      row.bound = "bw";
      GLM_RETURN_IF_ERROR(suite.time(
          [&]() -> Status {
            kernels::SampleGpuArgs args{};
            args.logits = reinterpret_cast<const float *>(logits[next++ % logits.size()].ptr());
            args.ctx = ctx;
            args.params = reinterpret_cast<const kernels::SampleWords *>(dparams.ptr());
            args.bias = reinterpret_cast<const int32_t *>(dbias.ptr());
            args.mask = reinterpret_cast<const uint32_t *>(dmask.ptr());
            args.counts = reinterpret_cast<const uint32_t *>(dcounts.ptr());
            args.processed = reinterpret_cast<float *>(processed.ptr());
            args.ids = reinterpret_cast<int32_t *>(ids.ptr());
            args.logprobs = reinterpret_cast<float *>(logprobs.ptr());
            args.vocab = vocab;
            GLM_RETURN_IF_ERROR(
                suite.ctx().launch(m->function(0), dp.grid, dp.block, dp.sharedMemory, args));
            return suite.ctx().launch(m->function(1), d.grid, d.block, d.sharedMemory, args);
          },
          row));
      suite.add(row);
    }
  }
  return Status::success();
}

} // namespace

Status addMoeBenches(Suite &suite) {
  GLM_RETURN_IF_ERROR(addRouter(suite));
  GLM_RETURN_IF_ERROR(addExperts(suite));
  return addSampler(suite);
}

} // namespace glm::bench
