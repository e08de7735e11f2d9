// moe_experts' CUDA kernels against the CPU reference: every path (decode, grouped f32 FMA,
// grouped tensor cores) at GLM-5.3-Flash's expert shape (hidden 4096, inter 2048, top 8), the tiny
// model's (128, 64, top 4) and a ragged one, in f32 and bf16, with experts shared between tokens
// and split over two ranks.
#include "kernels/moe_experts/moe_experts.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <map>
#include <numeric>

namespace glm::testing {
namespace {

using kernels::MoeExpertsPath;

const char *kSource = R"(#include "kernels/moe_experts/moe_experts.cuh")";

struct Dims {
  int64_t hidden, inter, experts, topK;
};
// Flash's expert shape with 12 experts held (the real 288 only change which ids occur; 12 make
// every step share experts between tokens), the tiny model, and a ragged shape (no 16-byte loads,
// tails in every tile).
const Dims kFlash{4096, 2048, 12, 8};
const Dims kTiny{128, 64, 16, 4};
const Dims kRagged{100, 72, 6, 3};

/// An expert layer's weights (bf16-representable, so the same values serve both weight types),
/// kept across tests: Flash's are 300M values.
struct Layer {
  std::vector<float> gate, up, down; // [E, I, H], [E, I, H], [E, H, I]
  std::vector<uint16_t> gateBf16, upBf16, downBf16;
};

const Layer &layerFor(const Dims &d) {
  static std::map<int64_t, Layer> layers;
  auto [it, inserted] = layers.try_emplace(d.hidden * 1000003 + d.inter * 31 + d.experts);
  Layer &l = it->second;
  if (inserted) {
    SplitMix64 rng(static_cast<uint64_t>(d.hidden * 7 + d.inter));
    const size_t n = static_cast<size_t>(d.experts * d.inter * d.hidden);
    // Unit-variance projections: x·w and h·w of spread ~1 (the gate saturates the limit of 10
    // rarely; 4x wider up values make the clamp bite).
    const float inScale = 1.0f / std::sqrt(static_cast<float>(d.hidden));
    const float outScale = 1.0f / std::sqrt(static_cast<float>(d.inter));
    l.gate.resize(n);
    l.up.resize(n);
    l.down.resize(n);
    for (size_t i = 0; i < n; ++i) {
      l.gate[i] = kernels::roundToBf16(rng.normal() * 3.0f * inScale);
      l.up[i] = kernels::roundToBf16(rng.normal() * 4.0f * inScale);
      l.down[i] = kernels::roundToBf16(rng.normal() * outScale);
    }
    l.gateBf16 = toBf16(l.gate);
    l.upBf16 = toBf16(l.up);
    l.downBf16 = toBf16(l.down);
  }
  return l;
}

/// The reference for rank `rank` of `shards`: selections of other ranks' experts weigh 0, as the
/// CPU engine feeds them.
std::vector<float> reference(const Layer &l, const Dims &d, const std::vector<float> &x,
                             const Routing &routing, int64_t tokens, int rank, float limit) {
  std::vector<int32_t> ids = routing.ids;
  std::vector<float> weights = routing.weights;
  const int64_t first = rank * d.experts;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t local = ids[i] - first;
    const bool mine = local >= 0 && local < d.experts;
    ids[i] = mine ? static_cast<int32_t>(local) : 0;
    weights[i] = mine ? weights[i] : 0.0f;
  }
  std::vector<kernels::ExpertWeights> views(d.experts);
  const size_t matrix = static_cast<size_t>(d.inter * d.hidden);
  for (int64_t e = 0; e < d.experts; ++e) {
    views[e] = {kernels::WeightView::f32(l.gate.data() + e * matrix, {d.inter, d.hidden}),
                kernels::WeightView::f32(l.up.data() + e * matrix, {d.inter, d.hidden}),
                kernels::WeightView::f32(l.down.data() + e * matrix, {d.hidden, d.inter})};
  }
  std::vector<float> out(tokens * d.hidden);
  const Status status = kernels::moeExpertsRef({.x = x.data(),
                                                .expertIds = ids.data(),
                                                .expertWeights = weights.data(),
                                                .experts = views.data(),
                                                .out = out.data(),
                                                .tokens = tokens,
                                                .hidden = d.hidden,
                                                .numExperts = d.experts,
                                                .topK = d.topK,
                                                .intermediate = d.inter,
                                                .swigluLimit = limit});
  EXPECT_TRUE(status.ok()) << status.toString();
  return out;
}

enum class Types { F32F32, F32Bf16, Bf16Bf16 };

class MoeExpertsGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
  }

  /// The module holding every launch of `path` for `types`, compiled once per test process.
  static cuda::Module *moduleFor(MoeExpertsPath path, Types types,
                                 std::vector<kernels::NamedLaunch> &launches, const Dims &d,
                                 int64_t tokens) {
    const std::string t = types == Types::Bf16Bf16 ? "glm::kernels::Bf16" : "float";
    const std::string w = types == Types::F32F32 ? "float" : "glm::kernels::Bf16";
    launches =
        kernels::moeExpertsLaunches(path, t, w, tokens, d.hidden, d.inter, d.experts, d.topK);
    return cachedModule(kSource, launches);
  }

  /// Runs one path on the device and returns `out` widened to f32.
  void run(MoeExpertsPath path, Types types, const Dims &d, const std::vector<float> &x,
           const Routing &routing, int64_t tokens, int32_t firstExpert, float limit,
           std::vector<float> &out) {
    std::vector<kernels::NamedLaunch> launches;
    cuda::Module *module = moduleFor(path, types, launches, d, tokens);
    ASSERT_NE(module, nullptr);
    const Layer &l = layerFor(d);
    const bool actBf16 = types == Types::Bf16Bf16, wBf16 = types != Types::F32F32;
    const int64_t tBytes = actBf16 ? 2 : 4;
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, actBf16 ? toDevice(toBf16(x)) : toDevice(x));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, toDevice(routing.ids));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dweights, actBf16
                                                              ? toDevice(toBf16(routing.weights))
                                                              : toDevice(routing.weights));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dg,
                             wBf16 ? toDevice(l.gateBf16) : toDevice(l.gate));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory du, wBf16 ? toDevice(l.upBf16) : toDevice(l.up));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dd,
                             wBf16 ? toDevice(l.downBf16) : toDevice(l.down));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(tokens * d.hidden * tBytes));
    const kernels::MoeExpertsScratch layout =
        kernels::moeExpertsScratch(path, tokens, d.topK, d.experts, d.hidden, d.inter, tBytes);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory scratch, poisoned(layout.bytes));
    kernels::MoeExpertsGpuArgs args{reinterpret_cast<const void *>(dx.ptr()),
                                    reinterpret_cast<const int32_t *>(dids.ptr()),
                                    reinterpret_cast<const void *>(dweights.ptr()),
                                    reinterpret_cast<const void *>(dg.ptr()),
                                    reinterpret_cast<const void *>(du.ptr()),
                                    reinterpret_cast<const void *>(dd.ptr()),
                                    reinterpret_cast<void *>(dout.ptr()),
                                    nullptr,
                                    nullptr,
                                    nullptr,
                                    nullptr,
                                    tokens,
                                    d.hidden,
                                    d.inter,
                                    d.experts,
                                    d.topK,
                                    firstExpert,
                                    limit};
    kernels::moeExpertsBindScratch(args, path, reinterpret_cast<void *>(scratch.ptr()), tBytes);
    GLM_ASSERT_OK(launchAllAndWait(*module, launches, args));
    if (actBf16) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> b,
                               fromDevice<uint16_t>(dout, tokens * d.hidden));
      out = widen(b);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<float>(dout, tokens * d.hidden));
    }
  }
};

std::vector<float> randomX(SplitMix64 &rng, int64_t tokens, int64_t hidden) {
  std::vector<float> x(tokens * hidden);
  for (float &v : x) {
    v = kernels::roundToBf16(rng.normal());
  }
  return x;
}

const char *pathName(MoeExpertsPath p) {
  return p == MoeExpertsPath::Decode ? "decode" : p == MoeExpertsPath::PrefillMma ? "mma" : "simt";
}

struct Case {
  Dims dims;
  int64_t tokens;
};
// Decode rows (1, 4, 8) and prefill rows for every shape; both paths run on every row count
// (each must be right for any), the tensor-core one where the shape tiles.
const Case kCases[] = {{kFlash, 1}, {kFlash, 4}, {kFlash, 40}, {kTiny, 1},   {kTiny, 3},
                       {kTiny, 8},  {kTiny, 64}, {kTiny, 300}, {kRagged, 2}, {kRagged, 70}};

// f32 activations, f32 or bf16 weights: every path to 1e-5 of the double reference.
TEST_F(MoeExpertsGpu, F32MatchesReference) {
  SplitMix64 rng(601);
  for (const Case &c : kCases) {
    const Dims &d = c.dims;
    const std::vector<float> x = randomX(rng, c.tokens, d.hidden);
    const Routing routing = randomRouting(rng, c.tokens, d.topK, d.experts);
    for (float limit : {10.0f, INFINITY}) {
      const std::vector<float> ref = reference(layerFor(d), d, x, routing, c.tokens, 0, limit);
      for (MoeExpertsPath path : {MoeExpertsPath::Decode, MoeExpertsPath::PrefillSimt}) {
        if (path == MoeExpertsPath::Decode && c.tokens > 64) {
          continue;
        }
        for (Types types : {Types::F32F32, Types::F32Bf16}) {
          std::vector<float> out;
          run(path, types, d, x, routing, c.tokens, 0, limit, out);
          EXPECT_LE(relativeError(out, ref), 1e-5)
              << c.tokens << "x" << d.hidden << " " << pathName(path) << " limit " << limit
              << (types == Types::F32F32 ? " f32 weights" : " bf16 weights");
        }
      }
    }
  }
}

// bf16 (inputs bf16-representable, compared with the double reference on the same values): the
// kernels round as HF's bf16 eager forward does, 7 roundings on the way to an output element:
// gate and up projections, silu, the product h (these four enter the down projection as
// independent per-term relative errors, so they survive its sum as their RMS), y, w·y, and the
// running sum after each of ≤ 8 experts. bf16's unit roundoff is u = 2^-8 and a rounding's RMS
// relative error is ~0.42u (uniform error over log-uniform mantissas). The running sum's
// roundings act on partial sums: with k random-sign terms, Σ_j E|S_j|² / E|S_k|² = (k + 1) / 2,
// i.e. 1.9u·0.42 RMS for k = 8. Summed in quadrature: 0.42u·sqrt(2 (gate, up; silu' ≤ 1.1) + 1 +
// 1 + 1 + 1 + 4.5) ≈ 1.5u ≈ 0.0058 L2. Bound: 2u = 2^-7 (+1e-5).
TEST_F(MoeExpertsGpu, Bf16RoundsAsHf) {
  SplitMix64 rng(602);
  for (const Case &c : kCases) {
    const Dims &d = c.dims;
    const std::vector<float> x = randomX(rng, c.tokens, d.hidden);
    const Routing routing = randomRouting(rng, c.tokens, d.topK, d.experts);
    const std::vector<float> ref = reference(layerFor(d), d, x, routing, c.tokens, 0, 10.0f);
    for (MoeExpertsPath path :
         {MoeExpertsPath::Decode, MoeExpertsPath::PrefillSimt, MoeExpertsPath::PrefillMma}) {
      if ((path == MoeExpertsPath::Decode && c.tokens > 64) ||
          (path == MoeExpertsPath::PrefillMma && (d.hidden % 32 != 0 || d.inter % 32 != 0))) {
        continue;
      }
      std::vector<float> out;
      run(path, Types::Bf16Bf16, d, x, routing, c.tokens, 0, 10.0f, out);
      EXPECT_LE(relativeError(out, ref), 1.0 / 128 + 1e-5)
          << c.tokens << "x" << d.hidden << " " << pathName(path);
    }
  }
}

// The three bf16 paths make the same roundings in the same order and differ only in the f32
// accumulation order inside each dot product (which can move a bf16 rounding by one ulp), so they
// agree far inside the bound against the reference.
TEST_F(MoeExpertsGpu, Bf16PathsAgree) {
  SplitMix64 rng(603);
  for (const Case &c : {Case{kFlash, 4}, Case{kTiny, 8}}) {
    const Dims &d = c.dims;
    const std::vector<float> x = randomX(rng, c.tokens, d.hidden);
    const Routing routing = randomRouting(rng, c.tokens, d.topK, d.experts);
    std::vector<float> decode, simt, mma;
    run(MoeExpertsPath::Decode, Types::Bf16Bf16, d, x, routing, c.tokens, 0, 10.0f, decode);
    run(MoeExpertsPath::PrefillSimt, Types::Bf16Bf16, d, x, routing, c.tokens, 0, 10.0f, simt);
    run(MoeExpertsPath::PrefillMma, Types::Bf16Bf16, d, x, routing, c.tokens, 0, 10.0f, mma);
    EXPECT_LE(relativeError(simt, decode), 1.0 / 128) << c.tokens << "x" << d.hidden;
    EXPECT_LE(relativeError(mma, decode), 1.0 / 128) << c.tokens << "x" << d.hidden;
  }
}

// expert_shards 2: rank 1 holds global ids [E, 2E); the routing draws from all 2E, and the rank's
// output is its partial sum (other ranks' selections contribute nothing).
TEST_F(MoeExpertsGpu, ExpertShardsGiveTheRanksPartialSum) {
  SplitMix64 rng(604);
  for (const Case &c : {Case{kFlash, 1}, Case{kFlash, 4}, Case{kTiny, 3}, Case{kTiny, 100}}) {
    const Dims &d = c.dims;
    const std::vector<float> x = randomX(rng, c.tokens, d.hidden);
    const Routing routing = randomRouting(rng, c.tokens, d.topK, 2 * d.experts);
    for (int rank : {0, 1}) {
      const std::vector<float> ref = reference(layerFor(d), d, x, routing, c.tokens, rank, 10.0f);
      for (MoeExpertsPath path : {MoeExpertsPath::Decode, MoeExpertsPath::PrefillSimt}) {
        std::vector<float> out;
        run(path, Types::F32Bf16, d, x, routing, c.tokens, static_cast<int32_t>(rank * d.experts),
            10.0f, out);
        EXPECT_LE(relativeError(out, ref), 1e-5)
            << c.tokens << "x" << d.hidden << " rank " << rank << " " << pathName(path);
      }
      std::vector<float> out;
      run(MoeExpertsPath::PrefillMma, Types::Bf16Bf16, d, x, routing, c.tokens,
          static_cast<int32_t>(rank * d.experts), 10.0f, out);
      EXPECT_LE(relativeError(out, ref), 1.0 / 128 + 1e-5)
          << c.tokens << "x" << d.hidden << " rank " << rank << " mma";
    }
  }
  // A token none of whose experts this rank holds gets an exact zero.
  const Dims &d = kTiny;
  Routing routing;
  routing.ids = {0, 1, 2, 3};
  routing.weights = {0.25f, 0.25f, 0.25f, 0.25f};
  const std::vector<float> x = randomX(rng, 1, d.hidden);
  for (MoeExpertsPath path : {MoeExpertsPath::Decode, MoeExpertsPath::PrefillSimt}) {
    std::vector<float> out;
    run(path, Types::F32F32, d, x, routing, 1, static_cast<int32_t>(d.experts), 10.0f, out);
    EXPECT_EQ(out, std::vector<float>(d.hidden, 0.0f)) << pathName(path);
  }
}

} // namespace
} // namespace glm::testing
